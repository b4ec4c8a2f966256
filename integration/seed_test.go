package integration

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

func TestSeed(t *testing.T) {
	g := NewGitea(t)
	start := time.Now()
	w := SeedWorld(t, g)
	t.Logf("seeded in %v", time.Since(start))

	for _, u := range w.Users() {
		if u.ID == 0 || u.Key.ID == 0 || u.Key.Fingerprint == "" {
			t.Errorf("user %+v not fully seeded", u)
		}
		st, err := os.Stat(u.Key.Path)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("private key of %s: %v %v", u.Login, st, err)
		}
	}
	for _, r := range []Repo{w.Widgets, w.Secret, w.Notes} {
		if r.ID == 0 {
			t.Errorf("repository %s has no ID", r.FullName())
		}
	}
	nums := map[int64]bool{w.OpenIssue: true, w.ClosedIssue: true, w.PullRequest: true}
	if len(nums) != 3 || nums[0] {
		t.Errorf("issue numbers open=%d closed=%d pull=%d", w.OpenIssue, w.ClosedIssue, w.PullRequest)
	}

	ctx := context.Background()
	var issue struct {
		State       string
		PullRequest *struct{} `json:"pull_request"`
	}
	if err := g.Admin().Do(ctx, "GET", "/repos/acme/widgets/issues/"+itoa(w.ClosedIssue), nil, &issue); err != nil || issue.State != "closed" {
		t.Errorf("closed issue: %+v %v", issue, err)
	}
	issue.PullRequest = nil
	if err := g.Admin().Do(ctx, "GET", "/repos/acme/widgets/issues/"+itoa(w.PullRequest), nil, &issue); err != nil || issue.PullRequest == nil || issue.State != "open" {
		t.Errorf("pull request: %+v %v", issue, err)
	}
	var me struct{ Login string }
	if err := (&API{URL: g.URL, Token: w.Alice.Token}).Do(ctx, "GET", "/user", nil, &me); err != nil || me.Login != "alice" {
		t.Errorf("alice's token: %+v %v", me, err)
	}
	if err := g.As(w.Erin.Login).Do(ctx, "GET", "/repos/acme/secret", nil, nil); err == nil {
		t.Error("erin sees acme/secret")
	}
}

func itoa(n int64) string { return fmt.Sprint(n) }
