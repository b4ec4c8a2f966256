package gitea

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/integration"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// The system webhook against the real Gitea 1.26 (a subtest of
// TestForgeAgainstGitea): the facts webhook.go relies on, and that the
// hook it registers fires, signed with the secret, wherever it was moved.
func testWebhook(t *testing.T, g *integration.Gitea, f *Forge, w *integration.World) {
	ctx := context.Background()
	admin, err := New(Options{URL: g.URL, Token: g.AdminToken})
	if err != nil {
		t.Fatal(err)
	}
	const s1 = "1111111111111111111111111111111111111111111111111111111111111111"
	const s2 = "2222222222222222222222222222222222222222222222222222222222222222"
	l1, l2 := integration.NewHookListener(t), integration.NewHookListener(t)
	url1, url2 := l1.URL+"/hooks/gitea", l2.URL+"/hooks/gitea"

	// Gitea's pitfall: is_system_webhook at the top level is ignored and
	// makes a default (template) hook. One named as the sidecar's is
	// deleted by RegisterWebhook.
	var stray hook
	if err := g.Admin().Do(ctx, "POST", "/admin/hooks", map[string]any{
		"type": "gitea", "name": WebhookName, "active": true, "is_system_webhook": true, "events": WebhookEvents,
		"config": map[string]string{"url": "http://127.0.0.1:1/hooks/gitea", "content_type": "json"},
	}, &stray); err != nil {
		t.Fatal(err)
	}
	if kinds := hookKinds(t, g, stray.ID); kinds != "default" {
		t.Fatalf("a top-level is_system_webhook made a %s hook", kinds)
	}

	id, how, err := admin.RegisterWebhook(ctx, url1, s1)
	if err != nil || how != Registered {
		t.Fatalf("register: %d %s %v", id, how, err)
	}
	if again, how, err := admin.RegisterWebhook(ctx, url1, s1); err != nil || how != Reused || again != id {
		t.Fatalf("register again: %d %s %v", again, how, err)
	}
	// A system hook, told only by the list it is in: the hook's own JSON
	// names neither its kind nor its secret.
	if kinds := hookKinds(t, g, id); kinds != "system" {
		t.Fatalf("registered a %q hook", kinds)
	}
	if kinds := hookKinds(t, g, stray.ID); kinds != "" {
		t.Fatalf("the stray default hook is still there (%s)", kinds)
	}
	var raw map[string]any
	if err := g.Admin().Do(ctx, "GET", fmt.Sprintf("/admin/hooks/%d", id), nil, &raw); err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(raw); strings.Contains(string(b), "is_system_webhook") || strings.Contains(string(b), s1) {
		t.Errorf("Gitea now shows the kind or the secret: %s", b)
	}
	if _, err := admin.CheckWebhook(ctx, url1, s1); err != nil {
		t.Fatalf("check: %v", err)
	}
	if _, err := admin.CheckWebhook(ctx, url1, s2); !errors.Is(err, forge.ErrNotFound) {
		t.Fatalf("check with another secret: %v", err)
	}

	// It fires, signed with the secret.
	closeIssue := func() int64 {
		t.Helper()
		var is struct{ Number int64 }
		if err := g.Admin().Do(ctx, "POST", "/repos/"+w.Widgets.FullName()+"/issues", map[string]any{"title": "closed for the webhook"}, &is); err != nil {
			t.Fatal(err)
		}
		if err := g.Admin().Do(ctx, "PATCH", fmt.Sprintf("/repos/%s/issues/%d", w.Widgets.FullName(), is.Number), map[string]any{"state": "closed"}, nil); err != nil {
			t.Fatal(err)
		}
		return is.Number
	}
	closed := func(n int64) func(integration.Delivery) bool {
		return func(d integration.Delivery) bool {
			var p struct {
				Action string `json:"action"`
				Number int64  `json:"number"`
			}
			return d.Header.Get("X-Gitea-Event") == "issues" && json.Unmarshal(d.Body, &p) == nil && p.Action == "closed" && p.Number == n
		}
	}
	d := l1.Wait(t, 10*time.Second, closed(closeIssue()))
	if d.Path != "/hooks/gitea" || !d.SignedWith(s1) || d.SignedWith(s2) || d.Header.Get("X-Gitea-Hook-Installation-Target-Type") != "system" {
		t.Fatalf("delivery: %s %v", d.Path, d.Header)
	}

	// Moved by PATCH, which keeps the secret.
	if moved, how, err := admin.RegisterWebhook(ctx, url2, s1); err != nil || how != Updated || moved != id {
		t.Fatalf("move: %d %s %v", moved, how, err)
	}
	if d := l2.Wait(t, 10*time.Second, closed(closeIssue())); !d.SignedWith(s1) {
		t.Fatalf("after the move, not signed with the secret: %v", d.Header)
	}

	// A new secret: PATCH cannot set it, so the hook is replaced.
	id2, how, err := admin.RegisterWebhook(ctx, url2, s2)
	if err != nil || how != Replaced || id2 == id {
		t.Fatalf("new secret: %d %s %v", id2, how, err)
	}
	if kinds := hookKinds(t, g, id); kinds != "" {
		t.Fatalf("the replaced hook is still there (%s)", kinds)
	}
	if d := l2.Wait(t, 10*time.Second, closed(closeIssue())); !d.SignedWith(s2) {
		t.Fatalf("after the new secret, not signed with it: %v", d.Header)
	}

	// Scopes: reading needs read:admin, changing write:admin.
	reader, err := New(Options{URL: g.URL, Token: newToken(t, g, w.Admin, "hooks-read", "read:admin")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reader.CheckWebhook(ctx, url2, s2); err != nil {
		t.Errorf("check with read:admin: %v", err)
	}
	if _, _, err := reader.RegisterWebhook(ctx, url1, s2); !errors.Is(err, forge.ErrConfig) || !strings.Contains(err.Error(), "write:admin") {
		t.Errorf("register with read:admin: %v", err)
	}
	if _, err := f.CheckWebhook(ctx, url2, s2); !errors.Is(err, forge.ErrConfig) {
		t.Errorf("check without an admin scope: %v", err)
	}

	if n, err := admin.RemoveWebhook(ctx, url2); err != nil || n != 1 {
		t.Fatalf("remove: %d %v", n, err)
	}
	if _, err := admin.CheckWebhook(ctx, url2, s2); !errors.Is(err, forge.ErrNotFound) {
		t.Fatalf("check after remove: %v", err)
	}
	if n, err := admin.RemoveWebhook(ctx, url2); err != nil || n != 0 {
		t.Fatalf("remove again: %d %v", n, err)
	}
}

// hookKinds says in which of Gitea's admin hook lists the hook is:
// "system", "default", both or "".
func hookKinds(t *testing.T, g *integration.Gitea, id int64) string {
	t.Helper()
	var in []string
	for _, kind := range []string{"system", "default"} {
		var hs []hook
		if err := g.Admin().Do(context.Background(), "GET", "/admin/hooks?limit=50&type="+kind, nil, &hs); err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if h.ID == id {
				in = append(in, kind)
			}
		}
	}
	return strings.Join(in, ",")
}
