package integration

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/gitea/branchglob"
)

// Fenced pushes (serve --fence-pushes): after a takeover, how long until
// Gitea refuses the old holder's push, and what one takeover costs in
// requests to Gitea.

// pushFenceTakeovers is how many takeovers BenchmarkPushFence times.
const pushFenceTakeovers = 20

// BenchmarkPushFence hands a claimed pull request back and forth between
// two accounts (`collab-lease handoff`, one ledger transaction ending one
// tenure and starting the next), 20 times. After each handoff is
// answered, the old holder pushes a new commit to the branch over HTTP
// (the real git client), again and again, until Gitea refuses one: the
// time from the answer to that refusal is the sample (pushes Gitea took
// before it are counted: the window a zombie still had). Meanwhile it asks
// Gitea for the branch's rule every 5 ms: the time from the answer until
// the rule lets only the new holder push is when Gitea begins to refuse
// the old holder (a push takes its own time on top). Then, with no
// pushes, 5 more handoffs count the requests the sidecar sends Gitea for
// one (from its own metrics: the handoff, the merge fence's status, the
// push fence's look at the branch's rules and its edit).
func BenchmarkPushFence(b *testing.B) {
	g, w, bin := sharedB(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	repo := identityRepo(b, ctx, g, w)
	users := []*User{identityUser(b, ctx, g, w, "fence-a", repo), identityUser(b, ctx, g, w, "fence-b", repo)}
	s, err := StartInstalled(ctx, SidecarOptions{Binary: bin, Gitea: g, DataDir: filepath.Join(b.TempDir(), "data"), Args: []string{"--fence-pushes"}}, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Stop(20 * time.Second) })
	const branch = "bench-fence"
	pr, _ := openPullAs(b, ctx, g, repo, users[0], branch, "Work under a fenced branch")
	ssh := func(u *User, cmd string) {
		b.Helper()
		if r := s.SSH(ctx, u.Key.Path, cmd); r.Code != 0 {
			b.Fatalf("%s as %s: %+v\n%s", cmd, u.Login, r, tail(s.Logs(), 30))
		}
	}
	ssh(users[0], fmt.Sprintf("collab-lease acquire %s %d --ttl 1h", repo.FullName(), pr))
	waitAllowlist(b, ctx, g, s, repo, branch, users[0].Login)
	clones := []*clone{cloneAs(b, ctx, g, repo, users[0]), cloneAs(b, ctx, g, repo, users[1])}
	handoff := func(from, to int) time.Time {
		ssh(users[from], fmt.Sprintf("collab-lease handoff %s %d --to %s", repo.FullName(), pr, users[to].Login))
		return time.Now()
	}

	var fenced, refused, pushes []time.Duration
	accepted := 0
	var perTakeover map[string]float64
	holder := 0
	for b.Loop() {
		fenced, refused, pushes, accepted = nil, nil, nil, 0
		for range pushFenceTakeovers {
			old := clones[holder]
			old.sync(branch)
			answered := handoff(holder, 1-holder)
			holder = 1 - holder
			moved := watchAllowlist(ctx, g, repo, branch, users[holder].Login, answered)
			for {
				old.commit()
				start := time.Now()
				out, err := old.push(branch, false)
				pushes = append(pushes, time.Since(start))
				if err == nil {
					accepted++
					if time.Since(answered) > webhookDeadline {
						b.Fatalf("Gitea still took %s's pushes %s after the handoff", old.u.Login, time.Since(answered))
					}
					continue
				}
				if !strings.Contains(out, refusedPush) {
					b.Fatalf("%s's push after the handoff: %v\n%s", old.u.Login, err, out)
				}
				refused = append(refused, time.Since(answered))
				break
			}
			d, ok := <-moved
			if !ok {
				b.Fatalf("the rule never came to let only %s push\n%s", users[holder].Login, tail(s.Logs(), 30))
			}
			fenced = append(fenced, d)
		}
		// The requests of one takeover, with nothing else going on.
		const quiet = 5
		before := giteaRequestsByMethod(b, s)
		for range quiet {
			updated := pushRulesUpdated(b, s)
			handoff(holder, 1-holder)
			holder = 1 - holder
			for end := time.Now().Add(webhookDeadline); pushRulesUpdated(b, s) == updated; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(end) {
					b.Fatalf("the rule was not updated after a handoff\n%s", tail(s.Logs(), 30))
				}
			}
		}
		after := giteaRequestsByMethod(b, s)
		perTakeover = map[string]float64{}
		for m, n := range after {
			if d := n - before[m]; d > 0 {
				perTakeover[m] = d / quiet
			}
		}
	}
	reportMs(b, "fenced-p50-ms", median(fenced))
	reportMs(b, "fenced-p99-ms", percentile(fenced, 99))
	reportMs(b, "refused-p50-ms", median(refused))
	reportMs(b, "refused-p99-ms", percentile(refused, 99))
	reportMs(b, "refused-max-ms", percentile(refused, 100))
	reportMs(b, "push-p50-ms", median(pushes))
	b.ReportMetric(float64(len(refused)), "takeovers")
	b.ReportMetric(float64(accepted), "pushes-taken-after-handoff")
	total := 0.0
	for m, n := range perTakeover {
		total += n
		b.ReportMetric(n, "gitea-"+m+"/takeover")
	}
	b.ReportMetric(total, "gitea-requests/takeover")
	b.Logf("push fence: over %d takeovers, Gitea's rule let only the new holder push p50 %s, p99 %s after the handoff was answered; the old holder's first push begun after the answer was refused at p50 %s, p99 %s (one push takes p50 %s; %d pushes went in before a refusal); one takeover cost %.1f requests to Gitea %v",
		len(refused), median(fenced).Round(time.Millisecond), percentile(fenced, 99).Round(time.Millisecond),
		median(refused).Round(time.Millisecond), percentile(refused, 99).Round(time.Millisecond), median(pushes).Round(time.Millisecond), accepted, total, perTakeover)
}

// watchAllowlist asks Gitea, every 5 ms, for the rule of branch until it
// lets only login push, and then sends how long after since that answer
// came (the instant from which Gitea refuses everyone else's push). The
// channel is closed without a value if that does not happen in time.
func watchAllowlist(ctx context.Context, g *Gitea, r Repo, branch, login string, since time.Time) <-chan time.Duration {
	out := make(chan time.Duration, 1)
	name, _ := branchglob.RuleName(branch)
	go func() {
		defer close(out)
		for end := since.Add(webhookDeadline); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			var rule struct {
				Users []string `json:"push_whitelist_usernames"`
			}
			err := g.Admin().Do(ctx, "GET", "/repos/"+r.FullName()+"/branch_protections/"+url.PathEscape(name), nil, &rule)
			if err == nil && len(rule.Users) == 1 && rule.Users[0] == login {
				out <- time.Since(since)
				return
			}
		}
	}()
	return out
}

// giteaRequestsByMethod is how many requests the sidecar has sent Gitea so
// far, by HTTP method, from its own metrics.
func giteaRequestsByMethod(tb testing.TB, s *Sidecar) map[string]float64 {
	tb.Helper()
	out := map[string]float64{}
	for _, line := range scrape(tb, s) {
		rest, ok := strings.CutPrefix(line, "collab_lease_gitea_requests_total{")
		if !ok {
			continue
		}
		_, m, _ := strings.Cut(rest, `method="`)
		m, _, _ = strings.Cut(m, `"`)
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			tb.Fatalf("%s: %v", line, err)
		}
		out[m] += v
	}
	return out
}

// pushRulesUpdated is how many times the push fence has edited a rule.
func pushRulesUpdated(tb testing.TB, s *Sidecar) float64 {
	tb.Helper()
	for _, line := range scrape(tb, s) {
		if v, ok := strings.CutPrefix(line, `collab_lease_fence_push_rules_total{outcome="updated"} `); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return f
		}
	}
	return 0
}
