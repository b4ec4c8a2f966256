package integration

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Fenced merges against the real Gitea: with a protected main that
// requires the collab-lease/claim status, only the current tenure merges.

// fencePull opens a pull request by u from a new branch whose body closes
// issue n, and returns its number and head commit.
func (a *agentWorld) fencePull(u *User, branch string, n int64) (int64, string) {
	a.t.Helper()
	return a.openPull(u, branch, fmt.Sprintf("Fixes #%d", n))
}

// openPull opens a pull request by u from a new branch with a first
// commit, with body as its description, and returns its number and head
// commit.
func (a *agentWorld) openPull(u *User, branch, body string) (int64, string) {
	a.t.Helper()
	return openPullAs(a.t, a.ctx, a.g, a.repo, u, branch, body)
}

// openPullAs is openPull in repository r, for a benchmark too.
func openPullAs(tb testing.TB, ctx context.Context, g *Gitea, r Repo, u *User, branch, body string) (int64, string) {
	tb.Helper()
	as := g.As(u.Login)
	content := base64.StdEncoding.EncodeToString([]byte("work on " + branch + "\n"))
	if err := as.Do(ctx, "POST", "/repos/"+r.FullName()+"/contents/"+branch+".txt", map[string]any{
		"content": content, "message": "Work on " + branch, "branch": "main", "new_branch": branch,
	}, nil); err != nil {
		tb.Fatalf("commit on %s: %v", branch, err)
	}
	var pr struct {
		Number int64
		Head   struct{ SHA string }
	}
	if err := as.Do(ctx, "POST", "/repos/"+r.FullName()+"/pulls", map[string]any{
		"head": branch, "base": "main", "title": "Work on " + branch, "body": body,
	}, &pr); err != nil {
		tb.Fatalf("open a pull request from %s: %v", branch, err)
	}
	return pr.Number, pr.Head.SHA
}

// claimStatus returns the collab-lease/claim status of sha ("" none).
func (a *agentWorld) claimStatus(sha string) (state, description string) {
	a.t.Helper()
	var out struct {
		Statuses []struct {
			Context     string
			Status      string
			Description string
		}
	}
	if err := a.g.Admin().Do(a.ctx, "GET", "/repos/"+a.repo.FullName()+"/commits/"+sha+"/status", nil, &out); err != nil {
		a.t.Fatalf("status of %s: %v", sha, err)
	}
	for _, s := range out.Statuses {
		if s.Context == "collab-lease/claim" {
			return s.Status, s.Description
		}
	}
	return "", ""
}

// waitStatus polls until sha's claim status is state with a description
// starting with prefix, and returns how long that took.
func (a *agentWorld) waitStatus(sha, state, prefix string) time.Duration {
	a.t.Helper()
	start := time.Now()
	var st, desc string
	for end := start.Add(webhookDeadline); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if st, desc = a.claimStatus(sha); st == state && strings.HasPrefix(desc, prefix) {
			return time.Since(start)
		}
	}
	a.t.Fatalf("claim status of %s is %s %q, want %s %q…\n%s", sha[:8], st, desc, state, prefix, tail(a.s.Logs(), 30))
	return 0
}

// merge asks Gitea to merge pull request n as u, waiting out Gitea's own
// mergeability check; it returns Gitea's refusal, if any.
func (a *agentWorld) merge(u *User, n int64) error {
	a.t.Helper()
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		err := a.g.As(u.Login).Do(a.ctx, "POST", fmt.Sprintf("/repos/%s/pulls/%d/merge", a.repo.FullName(), n), map[string]any{"Do": "merge"}, nil)
		var api *APIError
		if errors.As(err, &api) && strings.Contains(api.Body, "try again later") && time.Now().Before(end) {
			continue
		}
		return err
	}
}

// screenshotPull opens pull request pr's page in Chromium, checks that
// Gitea shows the claim status there with want in its description, and
// takes a screenshot (docs/fenced-merge.png with COLLAB_UPDATE_SCREENSHOT
// set; run it after make gitea-frontend, so the page is styled).
func (a *agentWorld) screenshotPull(pr int64, want string) {
	a.t.Helper()
	b := newBrowser(a.t, a.g)
	b.run(a.t, "open the pull request", chromedp.Navigate(fmt.Sprintf("%s/%s/pulls/%d", a.g.URL, a.repo.FullName(), pr)))
	var text string
	for end := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		b.run(a.t, "read the page", chromedp.Text("body", &text, chromedp.ByQuery))
		if strings.Contains(text, "collab-lease/claim") && strings.Contains(text, want) {
			break
		}
		if time.Now().After(end) {
			a.t.Fatalf("the pull request page does not show the claim status %q:\n%s", want, text)
		}
		b.run(a.t, "reload", chromedp.Reload())
	}
	var png []byte
	b.run(a.t, "screenshot", chromedp.FullScreenshot(&png, 100))
	shot := filepath.Join(a.t.TempDir(), "fenced-merge.png")
	if os.Getenv("COLLAB_UPDATE_SCREENSHOT") != "" {
		root, _ := moduleRoot(context.Background())
		shot = filepath.Join(root, "docs", "fenced-merge.png")
	}
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		a.t.Fatal(err)
	}
}

func TestFencedMergeAgainstGitea(t *testing.T) {
	a := newAgentWorld(t, 2)
	alice, bob := a.agents[0], a.agents[1]
	a.api("POST", "/repos/"+a.repo.FullName()+"/branch_protections", map[string]any{
		"rule_name": "main", "enable_status_check": true, "status_check_contexts": []string{"collab-lease/claim"},
	}, nil)

	// Round one: alice claims, opens "Fixes #n", and may merge.
	n := a.issues(1)[0]
	expect(t, run(t, a.s, alice, lease("acquire", a.repo, n, "--ttl", "30m")), 0, "alice claims")
	pr, sha := a.fencePull(alice, "round-one", n)
	a.waitStatus(sha, "success", "claimed by "+alice.Login)
	if err := a.merge(alice, pr); err != nil {
		t.Fatalf("alice's merge of her claimed work: %v", err)
	}

	// Round two: alice's claim lapses and bob takes the issue over.
	n = a.issues(1)[0]
	expect(t, run(t, a.s, alice, lease("acquire", a.repo, n, "--ttl", "30m")), 0, "alice claims")
	pr, sha = a.fencePull(alice, "round-two", n)
	a.waitStatus(sha, "success", "claimed by "+alice.Login)
	// Her claim is about to lapse: one second left.
	expect(t, run(t, a.s, alice, lease("renew", a.repo, n, "--ttl", "1s")), 0, "alice renews for a second")
	res, ok := pollUntil(webhookDeadline, func() (SSHResult, bool) {
		r := run(t, a.s, bob, lease("acquire", a.repo, n, "--ttl", "30m"))
		return r, r.Code == 0
	})
	if !ok {
		t.Fatalf("bob never took over: %s", show(res))
	}
	took := a.waitStatus(sha, "failure", fmt.Sprintf("issue #%d is claimed by %s", n, bob.Login))
	t.Logf("the status said failure %s after bob's takeover was answered", took.Round(time.Millisecond))
	if took > time.Second {
		t.Errorf("the status flipped %s after the takeover, want within 1 s", took)
	}
	a.screenshotPull(pr, fmt.Sprintf("issue #%d is claimed by %s", n, bob.Login))
	err := a.merge(alice, pr)
	var api *APIError
	if !errors.As(err, &api) || !strings.Contains(api.Body, "Not all required status checks successful") {
		t.Fatalf("alice's merge after losing the claim: %v, want Gitea's refusal", err)
	}
	res = run(t, a.s, alice, lease("check", a.repo, n, "--token", "1"))
	if res.Code != 4 || !strings.Contains(res.Stdout, `"status":"stale"`) {
		t.Fatalf("alice's check of her old token: %s", show(res))
	}

	// bob lets go; alice claims again and may merge.
	expect(t, run(t, a.s, bob, lease("release", a.repo, n)), 0, "bob releases")
	a.waitStatus(sha, "failure", fmt.Sprintf("claim #%d before merging", n))
	expect(t, run(t, a.s, alice, lease("acquire", a.repo, n, "--ttl", "30m")), 0, "alice claims again")
	a.waitStatus(sha, "success", "claimed by "+alice.Login)
	if err := a.merge(alice, pr); err != nil {
		t.Fatalf("alice's merge with the claim back: %v", err)
	}
}

// A handoff moves the merge fence at once: alice's pull request that
// fixes the issue is mergeable while she holds it, and its status says
// failure within a second of her handing the issue to bob. A handoff to
// a reader of the repository is refused.
func TestHandoffMovesTheMergeFenceAgainstGitea(t *testing.T) {
	a := newAgentWorld(t, 2)
	alice, bob := a.agents[0], a.agents[1]
	a.api("POST", "/repos/"+a.repo.FullName()+"/branch_protections", map[string]any{
		"rule_name": "main", "enable_status_check": true, "status_check_contexts": []string{"collab-lease/claim"},
	}, nil)
	_, w, _ := shared(t)
	reader := identityUser(t, a.ctx, a.g, w, "reader", a.repo) // a writer, made a reader below
	a.api("PUT", fmt.Sprintf("/repos/%s/collaborators/%s", a.repo.FullName(), reader.Login), map[string]any{"permission": "read"}, nil)
	n := a.issues(1)[0]
	expect(t, run(t, a.s, alice, lease("acquire", a.repo, n, "--ttl", "30m")), 0, "alice claims")
	_, sha := a.fencePull(alice, "handoff", n)
	a.waitStatus(sha, "success", "claimed by "+alice.Login)
	r := run(t, a.s, alice, lease("handoff", a.repo, n, "--to", reader.Login))
	if r.Code != 1 || !strings.Contains(r.Stderr, reader.Login+" may not claim in") {
		t.Fatalf("a handoff to a reader: %s", show(r))
	}
	expect(t, run(t, a.s, alice, lease("handoff", a.repo, n, "--to", bob.Login)), 0, "alice hands off to bob")
	took := a.waitStatus(sha, "failure", fmt.Sprintf("issue #%d is claimed by %s", n, bob.Login))
	t.Logf("the status said failure %s after the handoff was answered", took.Round(time.Millisecond))
	if took > time.Second {
		t.Errorf("the status flipped %s after the handoff, want within 1 s", took)
	}
	expect(t, run(t, a.s, alice, lease("check", a.repo, n, "--token", "1")), 4, "alice's token is stale")
}
