package main

import (
	"fmt"
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

// The report's merge row adds up: answers other than merged, main moved
// and not yet are shown as their own part.
func TestMergeRowShowsEveryAnswer(t *testing.T) {
	var cell func(ModeResult) string
	for _, r := range (summary{}).rows3() {
		if strings.HasPrefix(r.label, "Gitea merge API calls per closed issue") {
			cell = r.cell
		}
	}
	if cell == nil {
		t.Fatal("no merge row in round three's table")
	}
	r := ModeResult{Report: Report{Closed: 10}, Traffic: traffic{Merges: map[int]*CallStat{
		http.StatusOK: {N: 10}, http.StatusConflict: {N: 5}, http.StatusMethodNotAllowed: {N: 20}}}}
	if got, want := cell(r), "3.5 (1.0 + 0.5 + 2.0)"; got != want {
		t.Errorf("merge row %q, want %q", got, want)
	}
	r.Traffic.Merges[http.StatusInternalServerError] = &CallStat{N: 3}
	if got, want := cell(r), "3.8 (1.0 + 0.5 + 2.0 + 0.3 other)"; got != want {
		t.Errorf("merge row with 5xx answers %q, want %q", got, want)
	}
}

// The note of replaced pull requests names the first ten and counts the
// rest: a baseline whose agents replace each other's makes hundreds.
func TestReplacedNoteNamesTenAndCountsTheRest(t *testing.T) {
	var replaced []string
	for i := range 12 {
		replaced = append(replaced, fmt.Sprintf("#%d by #%d", i+1, i+100))
	}
	s := summary{results: []ModeResult{{Spec: modeSpec{Title: "t"}, Report: Report{Replaced: replaced}}}}
	var got []string
	for _, n := range s.notes() {
		if strings.Contains(n, "replaced") {
			got = append(got, n)
		}
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "t: 12 pull requests replaced") ||
		!strings.Contains(got[0], "#10 by #109 and 2 more.") || strings.Contains(got[0], "#11 by") {
		t.Fatalf("notes %q", got)
	}
}
