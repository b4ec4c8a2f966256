package integration

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// scrape returns the lines of the sidecar's /metrics (on its admin
// address).
func scrape(t testing.TB, s *Sidecar) []string {
	t.Helper()
	resp, err := http.Get(s.AdminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(b), "\n")
}

// giteaRequests is how many requests the sidecar has sent to Gitea so far,
// answered or not, from its own metrics.
func giteaRequests(t testing.TB, s *Sidecar) float64 {
	t.Helper()
	total := 0.0
	for _, line := range scrape(t, s) {
		if strings.HasPrefix(line, "collab_lease_gitea_requests_total{") || strings.HasPrefix(line, "collab_lease_gitea_request_errors_total ") {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			total += v
		}
	}
	return total
}

// The hot path (docs/ARCHITECTURE.md): with the key, the permission and the issue's state
// known, acquire, renew and release send no request to Gitea — counted by
// the sidecar's own metrics of its requests to the real Gitea. A new
// connection costs none either (the key is cached).
func TestHotPathAgainstGitea(t *testing.T) {
	s, w := newSidecar(t)
	cmd := func(verb string, extra ...string) string { return lease(verb, w.Widgets, w.OpenIssue, extra...) }
	// Warm up: the key, alice's permission on the repository and the
	// issue's state become known.
	expect(t, run(t, s, w.Alice, cmd("acquire", "--ttl", "10m")), 0, "the first acquire")
	before := giteaRequests(t, s)
	if before < 1 {
		t.Fatalf("the first acquire sent %v requests to Gitea; is the metric counted?", before)
	}
	for i := range 3 {
		expect(t, run(t, s, w.Alice, cmd("acquire", "--ttl", "10m")), 0, "re-acquire "+strconv.Itoa(i))
		expect(t, run(t, s, w.Alice, cmd("renew", "--ttl", "20m")), 0, "renew")
		expect(t, run(t, s, w.Alice, cmd("release")), 0, "release")
		expect(t, run(t, s, w.Alice, cmd("acquire", "--ttl", "10m")), 0, "acquire again")
	}
	if after := giteaRequests(t, s); after != before {
		t.Fatalf("12 commands on a known issue sent %v requests to Gitea, want none", after-before)
	}
	expect(t, run(t, s, w.Alice, cmd("release")), 0, "release at the end")
}
