package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The proxy counts the agents' merge requests by Gitea's answer, and
// passes every answer on as it came.
func TestProxyCountsMergesByAnswer(t *testing.T) {
	answers := map[string]int{"/api/v1/repos/o/r/pulls/1/merge": 200, "/api/v1/repos/o/r/pulls/2/merge": 409, "/api/v1/repos/o/r/pulls/3/merge": 405}
	gitea := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if code, ok := answers[r.URL.Path]; ok {
			w.WriteHeader(code)
			return
		}
		_, _ = w.Write([]byte("ok")) // no WriteHeader: 200
	}))
	defer gitea.Close()
	p, err := startProxy(gitea.URL, srcAgents)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	for _, path := range []string{"/api/v1/repos/o/r/pulls/1/merge", "/api/v1/repos/o/r/pulls/2/merge", "/api/v1/repos/o/r/pulls/2/merge",
		"/api/v1/repos/o/r/pulls/3/merge", "/api/v1/repos/o/r/issues/4"} {
		resp, err := http.Post(p.urls[srcAgents]+path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want, ok := answers[path]; ok && resp.StatusCode != want {
			t.Errorf("POST %s: %d through the proxy, want %d", path, resp.StatusCode, want)
		}
	}
	tr := p.take()
	got := map[int]int{}
	for code, s := range tr.Merges {
		got[code] = s.N
	}
	if want := map[int]int{200: 1, 409: 2, 405: 1}; len(got) != len(want) || got[200] != 1 || got[409] != 2 || got[405] != 1 {
		t.Errorf("merges by answer %v, want %v (the POST to an issue is no merge)", got, want)
	}
	if n := tr.Routes[srcAgents+" POST /repos/{o}/{r}/issues/{n}"].N; n != 1 {
		t.Errorf("POST /repos/{o}/{r}/issues/{n} counted %d times, want 1", n)
	}
}
