package integration

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The webhook (docs/operating.md) against the real Gitea: the system webhook that install
// registers ends a lease when its issue is closed, its pull request merged,
// the issue deleted or the repository deleted; a forged delivery changes
// nothing; a missed delivery is repaired by the reconcile.

// webhookDeadline bounds every wait for Gitea's asynchronous delivery
// (150–550 ms here, once 1.3 s) or for a reconcile sweep.
const webhookDeadline = 15 * time.Second

// reconcileEvery is the test sidecar's --reconcile-interval (the least
// allowed), so a sweep comes within about 11 s.
const reconcileEvery = "10s"

type hookWorld struct {
	t    *testing.T
	ctx  context.Context
	g    *Gitea
	s    *Sidecar
	repo Repo
	u    *User
}

func newHookWorld(t *testing.T) *hookWorld {
	t.Helper()
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Fatal("the sqlite3 command-line shell is required (apt-get install sqlite3)")
	}
	g, w, bin := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	s, err := StartInstalled(ctx, SidecarOptions{Binary: bin, Gitea: g, DataDir: filepath.Join(t.TempDir(), "data"),
		Args: []string{"--reconcile-interval", reconcileEvery}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, s)
	repo := identityRepo(t, ctx, g, w)
	return &hookWorld{t: t, ctx: ctx, g: g, s: s, repo: repo, u: identityUser(t, ctx, g, w, "hook", repo)}
}

func (h *hookWorld) acquire(r Repo, n int64) {
	h.t.Helper()
	expect(h.t, run(h.t, h.s, h.u, lease("acquire", r, n, "--ttl", "30m")), 0, fmt.Sprintf("acquire %s#%d", r.FullName(), n))
}

// live says whether the ledger has a live lease on r#n (read straight
// from the file, read-only, so it works for a deleted repository too).
func (h *hookWorld) live(r Repo, n int64) bool {
	h.t.Helper()
	return h.query(fmt.Sprintf("SELECT count(*) FROM leases WHERE repo_id = %d AND issue = %d AND holder IS NOT NULL", r.ID, n)) != "0"
}

// lastAction is the newest action of r#n's history.
func (h *hookWorld) lastAction(r Repo, n int64) string {
	h.t.Helper()
	return h.query(fmt.Sprintf("SELECT action FROM lease_events WHERE repo_id = %d AND issue = %d ORDER BY id DESC LIMIT 1", r.ID, n))
}

func (h *hookWorld) query(sql string) string {
	h.t.Helper()
	out, err := exec.CommandContext(h.ctx, "sqlite3", "-readonly", h.s.DB, sql).CombinedOutput()
	if err != nil {
		h.t.Fatalf("sqlite3 %q: %v: %s", sql, err, out)
	}
	return strings.TrimSpace(string(out))
}

// waitEnded waits for r#n's lease to end with action why, and says how
// long after since it did.
func (h *hookWorld) waitEnded(r Repo, n int64, why string, since time.Time, deadline time.Duration) time.Duration {
	h.t.Helper()
	for end := time.Now().Add(deadline); h.live(r, n); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			h.t.Fatalf("%s#%d still leased %s after it was %s in Gitea\n%s", r.FullName(), n, deadline, why, h.s.Logs())
		}
	}
	took := time.Since(since)
	if got := h.lastAction(r, n); got != why {
		h.t.Fatalf("%s#%d's history ends with %q, want %q", r.FullName(), n, got, why)
	}
	return took
}

func (h *hookWorld) api(method, path string, in any) {
	h.t.Helper()
	if err := h.g.Admin().Do(h.ctx, method, path, in, nil); err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
}

func TestWebhookEndsLeasesAgainstGitea(t *testing.T) {
	h := newHookWorld(t)
	r := h.repo

	t.Run("closed, then reopened", func(t *testing.T) {
		n := identityIssue(t, h.ctx, h.g, r)
		h.acquire(r, n)
		at := time.Now()
		h.api("PATCH", fmt.Sprintf("/repos/%s/issues/%d", r.FullName(), n), map[string]any{"state": "closed"})
		t.Logf("closed: the lease ended %s after the API call", h.waitEnded(r, n, "closed", at, webhookDeadline).Round(time.Millisecond))
		res := run(t, h.s, h.u, lease("acquire", r, n))
		if res.Code != 1 || res.Stderr != "error: issue is closed\n" {
			t.Fatalf("acquire of the closed issue: %s", show(res))
		}
		h.api("PATCH", fmt.Sprintf("/repos/%s/issues/%d", r.FullName(), n), map[string]any{"state": "open"})
		if res, ok := pollUntil(webhookDeadline, func() (SSHResult, bool) {
			res := run(t, h.s, h.u, lease("acquire", r, n))
			return res, res.Code == 0
		}); !ok {
			t.Fatalf("acquire after the reopen: %s", show(res))
		}
	})

	t.Run("pull request merged", func(t *testing.T) {
		branch := "merge-" + randomHex(3)
		h.api("POST", "/repos/"+r.FullName()+"/contents/"+branch+".txt", map[string]any{
			"content": base64.StdEncoding.EncodeToString([]byte("a change\n")), "message": "A change",
			"branch": "main", "new_branch": branch,
		})
		var pr struct{ Number int64 }
		if err := h.g.Admin().Do(h.ctx, "POST", "/repos/"+r.FullName()+"/pulls", map[string]any{
			"head": branch, "base": "main", "title": "A change"}, &pr); err != nil {
			t.Fatal(err)
		}
		h.acquire(r, pr.Number)
		// Right after creation Gitea answers "try again later" until its
		// own mergeability check is done.
		var at time.Time
		for end := time.Now().Add(webhookDeadline); ; time.Sleep(200 * time.Millisecond) {
			at = time.Now()
			err := h.g.Admin().Do(h.ctx, "POST", fmt.Sprintf("/repos/%s/pulls/%d/merge", r.FullName(), pr.Number), map[string]any{"Do": "merge"}, nil)
			if err == nil {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("merge %s#%d: %v", r.FullName(), pr.Number, err)
			}
		}
		t.Logf("merged: the lease ended %s after the API call", h.waitEnded(r, pr.Number, "merged", at, webhookDeadline).Round(time.Millisecond))
	})

	t.Run("issue deleted", func(t *testing.T) {
		n := identityIssue(t, h.ctx, h.g, r)
		h.acquire(r, n)
		at := time.Now()
		h.api("DELETE", fmt.Sprintf("/repos/%s/issues/%d", r.FullName(), n), nil)
		t.Logf("deleted: the lease ended %s after the API call", h.waitEnded(r, n, "deleted", at, webhookDeadline).Round(time.Millisecond))
	})

	t.Run("forged deliveries change nothing", func(t *testing.T) {
		n := identityIssue(t, h.ctx, h.g, r)
		h.acquire(r, n)
		body := fmt.Sprintf(`{"action":"closed","number":%d,"issue":{"number":%d,"state":"closed","updated_at":"%s"},"repository":{"id":%d}}`,
			n, n, time.Now().UTC().Add(time.Hour).Format(time.RFC3339), r.ID)
		for _, sig := range []string{"", strings.Repeat("ab", 32)} {
			req, _ := http.NewRequestWithContext(h.ctx, "POST", h.s.HTTPURL+"/hooks/gitea", strings.NewReader(body))
			req.Header.Set("X-Gitea-Event", "issues")
			req.Header.Set("X-Gitea-Delivery", "forged-"+randomHex(4))
			if sig != "" {
				req.Header.Set("X-Gitea-Signature", sig)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("forged delivery (signature %q): HTTP %d, want 403", sig, resp.StatusCode)
			}
		}
		if !h.live(r, n) {
			t.Fatal("a forged delivery ended the lease")
		}
	})

	t.Run("repository deleted", func(t *testing.T) {
		_, w, _ := shared(t)
		r2 := identityRepo(t, h.ctx, h.g, w)
		h.api("PUT", "/repos/"+r2.FullName()+"/collaborators/"+h.u.Login, map[string]any{"permission": "write"})
		n1, n2 := identityIssue(t, h.ctx, h.g, r2), identityIssue(t, h.ctx, h.g, r2)
		h.acquire(r2, n1)
		h.acquire(r2, n2)
		at := time.Now()
		h.api("DELETE", "/repos/"+r2.FullName(), nil)
		h.waitEnded(r2, n1, "deleted", at, webhookDeadline)
		t.Logf("repository deleted: both leases ended %s after the API call", h.waitEnded(r2, n2, "deleted", at, webhookDeadline).Round(time.Millisecond))
	})
}

// A delivery that never came (the webhook switched off in Gitea while the
// issue was closed) is repaired by the next reconcile.
func TestReconcileRepairsAMissedDeliveryAgainstGitea(t *testing.T) {
	h := newHookWorld(t)
	r := h.repo
	n := identityIssue(t, h.ctx, h.g, r)
	h.acquire(r, n)

	hook := h.ourHook()
	h.api("PATCH", fmt.Sprintf("/admin/hooks/%d", hook), map[string]any{"active": false})
	t.Cleanup(func() {
		_ = h.g.Admin().Do(context.Background(), "PATCH", fmt.Sprintf("/admin/hooks/%d", hook), map[string]any{"active": true}, nil)
	})
	at := time.Now()
	h.api("PATCH", fmt.Sprintf("/repos/%s/issues/%d", r.FullName(), n), map[string]any{"state": "closed"})
	t.Logf("missed delivery: the reconcile ended the lease %s after the close",
		h.waitEnded(r, n, "closed", at, 3*webhookDeadline).Round(time.Millisecond))
	if !strings.Contains(h.s.Logs(), "reconcile ended leases") {
		t.Fatalf("no reconcile in the log:\n%s", h.s.Logs())
	}
}

// ourHook is the ID of the system webhook pointing at h's sidecar.
func (h *hookWorld) ourHook() int64 {
	h.t.Helper()
	var hooks []struct {
		ID     int64             `json:"id"`
		Config map[string]string `json:"config"`
	}
	if err := h.g.Admin().Do(h.ctx, "GET", "/admin/hooks?limit=50", nil, &hooks); err != nil {
		h.t.Fatal(err)
	}
	for _, hk := range hooks {
		if hk.Config["url"] == h.s.HTTPURL+"/hooks/gitea" {
			return hk.ID
		}
	}
	h.t.Fatalf("no system webhook points at %s/hooks/gitea among %+v", h.s.HTTPURL, hooks)
	return 0
}
