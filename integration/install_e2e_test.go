package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// adminHook is a hook as GET /api/v1/admin/hooks shows it.
type adminHook struct {
	ID     int64             `json:"id"`
	Name   string            `json:"name"`
	Type   string            `json:"type"`
	Active bool              `json:"active"`
	Config map[string]string `json:"config"`
	Events []string          `json:"events"`
}

// adminHooks lists Gitea's admin hooks of one kind ("system" or
// "default"): the API tells the kinds apart only by this filter.
func adminHooks(t *testing.T, g *Gitea, kind string) []adminHook {
	t.Helper()
	var hs []adminHook
	if err := g.Admin().Do(context.Background(), "GET", "/admin/hooks?limit=50&type="+kind, nil, &hs); err != nil {
		t.Fatal(err)
	}
	return hs
}

// collabHooks are the hooks of one kind that deliver to url or carry the
// sidecar's name.
func collabHooks(t *testing.T, g *Gitea, kind, url string) []adminHook {
	t.Helper()
	var out []adminHook
	for _, h := range adminHooks(t, g, kind) {
		if h.Config["url"] == url || strings.HasPrefix(h.Name, "collab-lease") {
			out = append(out, h)
		}
	}
	return out
}

// install registers one system webhook that really fires, signed with the
// secret it keeps in the data directory; install again changes nothing;
// uninstall takes the webhook and the OAuth2 application out of Gitea and
// their files out of the data directory, and succeeds again when all is
// gone.
func TestInstallWebhookAgainstGitea(t *testing.T) {
	g, w, bin := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	listener := NewHookListener(t)
	o := SidecarOptions{Binary: bin, Gitea: g, DataDir: filepath.Join(t.TempDir(), "data")}
	public, custom := "http://127.0.0.1:18790", t.TempDir()
	delivery := listener.URL + "/hooks/gitea"
	appFile, secretFile := filepath.Join(o.DataDir, "oauth2.json"), filepath.Join(o.DataDir, "webhook.secret")

	// The first install registers the webhook, or takes over the one an
	// earlier test's install left in the shared Gitea (one sidecar per
	// Gitea); the second reuses it.
	for i, want := range []string{"(registered|updated|replaced)", "reused"} {
		out, err := Install(ctx, o, public, custom, "--webhook-url", listener.URL)
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`to ` + regexp.QuoteMeta(delivery) + `: ` + want + `;`).MatchString(out) {
			t.Fatalf("install %d: want the webhook %s:\n%s", i+1, want, out)
		}
	}
	hooks := collabHooks(t, g, "system", delivery)
	if len(hooks) != 1 {
		t.Fatalf("%d system hooks of the sidecar, want 1: %+v", len(hooks), hooks)
	}
	h := hooks[0]
	if h.Config["url"] != delivery || h.Type != "gitea" || !h.Active || h.Config["content_type"] != "json" || !strings.HasPrefix(h.Name, "collab-lease") {
		t.Fatalf("system hook: %+v", h)
	}
	for _, e := range []string{"issues", "pull_request", "repository"} {
		if !strings.Contains(","+strings.Join(h.Events, ",")+",", ","+e+",") {
			t.Errorf("the hook lacks the event %s: %v", e, h.Events)
		}
	}
	if d := collabHooks(t, g, "default", delivery); len(d) != 0 {
		t.Fatalf("default (template) hooks of the sidecar: %+v", d)
	}
	b, err := os.ReadFile(secretFile)
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(string(b))
	var app struct {
		ID       int64  `json:"id"`
		ClientID string `json:"client_id"`
	}
	if b, err := os.ReadFile(appFile); err != nil || json.Unmarshal(b, &app) != nil || app.ID == 0 {
		t.Fatalf("oauth2.json: %s %v", b, err)
	}

	// Gitea delivers a close, signed with the secret, as a system hook.
	var is struct{ Number int64 }
	if err := g.Admin().Do(ctx, "POST", "/repos/"+w.Widgets.FullName()+"/issues", map[string]any{"title": "closed for install's webhook"}, &is); err != nil {
		t.Fatal(err)
	}
	if err := g.Admin().Do(ctx, "PATCH", fmt.Sprintf("/repos/%s/issues/%d", w.Widgets.FullName(), is.Number), map[string]any{"state": "closed"}, nil); err != nil {
		t.Fatal(err)
	}
	d := listener.Wait(t, 10*time.Second, func(d Delivery) bool {
		var p struct {
			Action string `json:"action"`
			Number int64  `json:"number"`
		}
		return d.Header.Get("X-Gitea-Event") == "issues" && json.Unmarshal(d.Body, &p) == nil && p.Action == "closed" && p.Number == is.Number
	})
	if d.Path != "/hooks/gitea" || !d.SignedWith(secret) || d.SignedWith(secret+"0") || d.Header.Get("X-Gitea-Hook-Installation-Target-Type") != "system" {
		t.Fatalf("delivery to %s, signed with the secret: %v; headers %v", d.Path, d.SignedWith(secret), d.Header)
	}

	// Uninstall: nothing of the sidecar's is left, in Gitea or on disk.
	out, err := Install(ctx, o, public, custom, "--webhook-url", listener.URL, "--uninstall")
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"system", "default"} {
		if hs := collabHooks(t, g, kind, delivery); len(hs) != 0 {
			t.Fatalf("%s hooks of the sidecar after uninstall: %+v\n%s", kind, hs, out)
		}
	}
	var apiErr *APIError
	if err := g.Admin().Do(ctx, "GET", fmt.Sprintf("/user/applications/oauth2/%d", app.ID), nil, nil); !errors.As(err, &apiErr) || apiErr.Status != 404 {
		t.Fatalf("the OAuth2 application after uninstall: %v\n%s", err, out)
	}
	for _, p := range []string{appFile, secretFile} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s after uninstall: %v", p, err)
		}
	}
	out, err = Install(ctx, o, public, custom, "--webhook-url", listener.URL, "--uninstall")
	if err != nil || strings.Count(out, "nothing to do") != 3 {
		t.Fatalf("uninstall again: %v\n%s", err, out)
	}
}
