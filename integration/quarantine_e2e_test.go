package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Quarantine end to end (docs/operating.md, Quarantine): with
// --quarantine-after 2, two claims of one issue whose sessions are killed
// quarantine it: next hands out another issue, acquire answers
// quarantined, and Gitea has the label and one comment; removing the
// label in Gitea (its webhook tells the sidecar) lets next hand the issue
// out again.
func TestQuarantineAgainstGitea(t *testing.T) {
	g, w, bin := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	s, err := StartInstalled(ctx, SidecarOptions{Binary: bin, Gitea: g, DataDir: filepath.Join(t.TempDir(), "data"),
		Args: []string{"--quarantine-after", "2"}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, s)
	repo := identityRepo(t, ctx, g, w)
	bot := identityUser(t, ctx, g, w, "quarantine", repo)
	n, m := identityIssue(t, ctx, g, repo), identityIssue(t, ctx, g, repo)

	// Two claims of n, each in a session that is killed: each lapses a
	// grace after its last heartbeat, session_lost.
	var lapsed time.Time
	for i, agent := range []string{"doomed-1", "doomed-2"} {
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		p, err := s.OpenSession(sctx, bot.Key.Path, "--agent", agent, "--grace", "5s")
		if err != nil {
			scancel()
			t.Fatal(err)
		}
		r, err := p.Do(sctx, strings.TrimPrefix(lease("acquire", repo, n), "collab-lease "))
		scancel()
		if err != nil || r["status"] != "acquired" || r["token"] != float64(i+1) {
			p.Kill()
			t.Fatalf("%s's acquire of #%d: %v %v", agent, n, r, err)
		}
		p.Kill()
		res, ok := pollUntil(15*time.Second, func() (SSHResult, bool) {
			r := run(t, s, bot, lease("check", repo, n, "--token", fmt.Sprint(i+1)))
			return r, r.Code == 4
		})
		if !ok {
			t.Fatalf("the claim of %s's killed session did not lapse: %s", agent, show(res))
		}
		lapsed = time.Now()
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		_, _, _ = p.Wait(wctx)
		wcancel()
	}

	// next skips n for m; acquire of n answers quarantined.
	r := run(t, s, bot, "collab-lease next "+repo.FullName())
	var got struct {
		Status string
		Issue  int64
		Since  time.Time
	}
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &got) != nil || got.Issue != m {
		t.Fatalf("next after two lapses of #%d: %s, want #%d", n, show(r), m)
	}
	r = run(t, s, bot, lease("acquire", repo, n))
	if r.Code != 4 || json.Unmarshal([]byte(r.Stdout), &got) != nil || got.Status != "quarantined" || got.Since.IsZero() {
		t.Fatalf("acquire of the quarantined #%d: %s", n, show(r))
	}

	// Gitea: the label and one comment, naming the two tenures.
	issuePath := fmt.Sprintf("/repos/%s/issues/%d", repo.FullName(), n)
	type label struct {
		ID   int64
		Name string
	}
	labelOf := func() *label {
		var ls []label
		if err := g.Admin().Do(ctx, "GET", issuePath+"/labels", nil, &ls); err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.Name == "collab-lease/quarantined" {
				return &l
			}
		}
		return nil
	}
	comments := func() []string {
		var cs []struct{ Body string }
		if err := g.Admin().Do(ctx, "GET", issuePath+"/comments", nil, &cs); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range cs {
			if strings.Contains(c.Body, "collab-lease quarantined this issue") {
				out = append(out, c.Body)
			}
		}
		return out
	}
	deadline := time.Now().Add(10 * time.Second)
	for labelOf() == nil || len(comments()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no label or comment on #%d: label %v, comments %q", n, labelOf(), comments())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the label and the comment were in Gitea %s after the second lapse was seen", time.Since(lapsed).Round(10*time.Millisecond))
	cs := comments()
	if len(cs) != 1 || !strings.Contains(cs[0], "| 2 | "+bot.Login+" · doomed-2 | session_lost at ") ||
		!strings.Contains(cs[0], "| 1 | "+bot.Login+" · doomed-1 | session_lost at ") {
		t.Fatalf("the comments on #%d: %q, want one naming both tenures", n, cs)
	}

	// Removing the label in Gitea lifts the quarantine: next hands n out.
	l := labelOf()
	if err := g.Admin().Do(ctx, "DELETE", fmt.Sprintf("%s/labels/%d", issuePath, l.ID), nil, nil); err != nil {
		t.Fatal(err)
	}
	res, ok := pollUntil(15*time.Second, func() (SSHResult, bool) {
		r := run(t, s, bot, "collab-lease next "+repo.FullName())
		return r, r.Code == 0 && json.Unmarshal([]byte(r.Stdout), &got) == nil && got.Issue == n
	})
	if !ok {
		t.Fatalf("next once the label was removed: %s, want #%d", show(res), n)
	}
	if cs := comments(); len(cs) != 1 {
		t.Fatalf("%d quarantine comments on #%d, want still one", len(cs), n)
	}
}
