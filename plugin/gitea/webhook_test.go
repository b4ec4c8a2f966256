package gitea

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/collab-lease/collab-lease/plugin/forge"
)

// fakeHooks is Gitea 1.26's /api/v1/admin/hooks as webhook.go describes
// it: the system flag only from config.is_system_webhook, lists by kind,
// pages of at most two (as if MAX_RESPONSE_ITEMS were 2), a PATCH that
// ignores the secret and replaces the events (500 for a missing hook).
type fakeHooks struct {
	mu       sync.Mutex
	hooks    map[int64]*fakeHook
	next     int64
	status   int // if set, every request fails with it
	requests []fakeHookRequest
}

type fakeHook struct {
	hook
	secret string
	system bool
}

type fakeHookRequest struct {
	Method, Path, Query string
	Body                map[string]any
}

func newFakeHooks(t *testing.T) (*fakeHooks, *Forge) {
	f := &fakeHooks{hooks: map[int64]*fakeHook{}, next: 1}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	fg, err := New(Options{URL: srv.URL, Token: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	return f, fg
}

// add puts a hook into Gitea as an administrator might have made it.
func (f *fakeHooks) add(h fakeHook) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	h.ID = f.next
	f.next++
	f.hooks[h.ID] = &h
	return h.ID
}

func (f *fakeHooks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.requests = append(f.requests, fakeHookRequest{r.Method, r.URL.Path, r.URL.RawQuery, body})
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	if f.status != 0 {
		reply(f.status, map[string]string{"message": "token does not have at least one of required scope(s), required=[write:admin]"})
		return
	}
	if r.Header.Get("Authorization") != "token "+adminToken {
		reply(401, map[string]string{"message": "unauthorized"})
		return
	}
	config := map[string]string{}
	if c, ok := body["config"].(map[string]any); ok {
		for k, v := range c {
			if s, ok := v.(string); ok {
				config[k] = s
			}
		}
	}
	var events []string
	if es, ok := body["events"].([]any); ok {
		for _, e := range es {
			events = append(events, e.(string))
		}
	}
	// Gitea adds the sub-events of issues and pull_request.
	expand := func(in []string) []string {
		if len(in) == 0 {
			return []string{"push"}
		}
		out := slices.Clone(in)
		if slices.Contains(in, "issues") {
			out = append(out, "issue_assign", "issue_label", "issue_comment")
		}
		if slices.Contains(in, "pull_request") {
			out = append(out, "pull_request_sync", "pull_request_review")
		}
		return out
	}
	const prefix = "/api/v1/admin/hooks"
	switch {
	case r.Method == "GET" && r.URL.Path == prefix:
		system := r.URL.Query().Get("type") != "default"
		page, _ := strconv.Atoi(r.URL.Query().Get("page"))
		var ids []int64
		for id, h := range f.hooks {
			if h.system == system {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		out := []hook{}
		for i, id := range ids {
			if i >= (page-1)*2 && i < page*2 {
				out = append(out, f.hooks[id].hook)
			}
		}
		reply(200, out)
	case r.Method == "POST" && r.URL.Path == prefix:
		if config["url"] == "" || config["content_type"] == "" {
			reply(422, map[string]string{"message": "Missing config option: url"})
			return
		}
		h := &fakeHook{hook: hook{ID: f.next, Name: fmt.Sprint(body["name"]), Type: fmt.Sprint(body["type"]),
			Config: map[string]string{"url": config["url"], "content_type": config["content_type"]},
			Events: expand(events), Active: body["active"] == true},
			secret: config["secret"], system: config["is_system_webhook"] == "true"}
		f.next++
		f.hooks[h.ID] = h
		reply(201, h.hook)
	case strings.HasPrefix(r.URL.Path, prefix+"/"):
		id, _ := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, prefix+"/"), 10, 64)
		h, ok := f.hooks[id]
		switch {
		case r.Method == "PATCH" && !ok:
			reply(500, map[string]string{"message": fmt.Sprintf("webhook does not exist [id: %d]", id)})
		case !ok:
			reply(404, map[string]string{"message": "not found"})
		case r.Method == "PATCH":
			if u, ok := config["url"]; ok {
				h.Config["url"] = u
			}
			if ct, ok := config["content_type"]; ok {
				h.Config["content_type"] = ct
			}
			h.Events = expand(events)
			if a, ok := body["active"].(bool); ok {
				h.Active = a
			}
			if n, ok := body["name"].(string); ok {
				h.Name = n
			}
			reply(200, h.hook)
		case r.Method == "DELETE":
			delete(f.hooks, id)
			w.WriteHeader(204)
		default:
			reply(200, h.hook)
		}
	default:
		reply(404, map[string]string{"message": "not found"})
	}
}

// do runs fn with the fake locked, to change or read its state between
// requests.
func (f *fakeHooks) do(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

// sidecars are the hooks in the fake that deliver to url or carry the
// sidecar's name.
func (f *fakeHooks) sidecars(url string) []fakeHook {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeHook
	for _, h := range f.hooks {
		if h.ours(url) {
			out = append(out, *h)
		}
	}
	return out
}

// since returns the requests made from index n on, as "METHOD path".
func (f *fakeHooks) since(n int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, r := range f.requests[n:] {
		out = append(out, r.Method+" "+r.Path)
	}
	return out
}

func (f *fakeHooks) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func writes(reqs []string) []string {
	var out []string
	for _, r := range reqs {
		if !strings.HasPrefix(r, "GET ") {
			out = append(out, r)
		}
	}
	return out
}

const (
	hookURL    = "http://sidecar.internal:8787/hooks/gitea"
	hookSecret = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

func TestRegisterWebhook(t *testing.T) {
	f, fg := newFakeHooks(t)
	ctx := context.Background()
	// Hooks of others, which the sidecar leaves alone: system and default,
	// enough of them to take several pages.
	for i := range 5 {
		f.add(fakeHook{hook: hook{Name: "ci", Type: "gitea", Config: map[string]string{"url": fmt.Sprintf("http://ci/%d", i), "content_type": "json"}, Active: true, Events: []string{"push"}}, system: i%2 == 0})
	}
	others := f.count()

	id, how, err := fg.RegisterWebhook(ctx, hookURL, hookSecret)
	if err != nil || how != Registered || id <= 0 {
		t.Fatalf("first: %d %s %v", id, how, err)
	}
	// The request Gitea needs for a system hook: the flag a string inside
	// config, never at the top level.
	var post *fakeHookRequest
	f.do(func() {
		for i := range f.requests {
			if f.requests[i].Method == "POST" {
				post = &f.requests[i]
			}
		}
	})
	if post == nil {
		t.Fatal("no POST")
	}
	config, _ := post.Body["config"].(map[string]any)
	if _, top := post.Body["is_system_webhook"]; top || config["is_system_webhook"] != "true" {
		t.Fatalf("is_system_webhook not the string \"true\" inside config: %v", post.Body)
	}
	if post.Body["type"] != "gitea" || post.Body["active"] != true || config["url"] != hookURL || config["content_type"] != "json" || config["secret"] != hookSecret {
		t.Fatalf("POST body: %v", post.Body)
	}
	if ev, _ := json.Marshal(post.Body["events"]); string(ev) != `["issues","pull_request","repository"]` {
		t.Fatalf("events: %s", ev)
	}
	if name := fmt.Sprint(post.Body["name"]); !strings.HasPrefix(name, "collab-lease secret:") || strings.Contains(name, hookSecret[:16]) {
		t.Fatalf("name %q", name)
	}
	f.do(func() {
		for _, r := range f.requests[others:] {
			if r.Method == "GET" && !strings.Contains(r.Query, "type=system") && !strings.Contains(r.Query, "type=default") {
				t.Errorf("listing without a kind: %+v", r)
			}
		}
	})
	mine := f.sidecars(hookURL)
	if len(mine) != 1 || !mine[0].system || mine[0].secret != hookSecret || mine[0].ID != id {
		t.Fatalf("in Gitea: %+v", mine)
	}

	// Again: reused, nothing written.
	n := f.count()
	if id2, how, err := fg.RegisterWebhook(ctx, hookURL, hookSecret); err != nil || how != Reused || id2 != id || len(writes(f.since(n))) != 0 {
		t.Fatalf("second: %d %s %v %v", id2, how, err, f.since(n))
	}

	// The webhook URL moved: the same hook follows, by PATCH, with every
	// event (PATCH replaces the list).
	const moved = "https://collab.example/hooks/gitea"
	n = f.count()
	if id2, how, err := fg.RegisterWebhook(ctx, moved, hookSecret); err != nil || how != Updated || id2 != id {
		t.Fatalf("moved: %d %s %v", id2, how, err)
	}
	if w := writes(f.since(n)); len(w) != 1 || w[0] != fmt.Sprintf("PATCH /api/v1/admin/hooks/%d", id) {
		t.Fatalf("moved: %v", w)
	}
	var h fakeHook
	f.do(func() { h = *f.hooks[id] })
	if h.Config["url"] != moved || !eventsFit(h.Events) || h.secret != hookSecret {
		t.Fatalf("after the move: %+v", h)
	}

	// Switched off, or narrowed to pushes, by hand: switched back on.
	f.do(func() { f.hooks[id].Active = false })
	if _, how, err := fg.RegisterWebhook(ctx, moved, hookSecret); err != nil || how != Updated || !f.sidecars(moved)[0].Active {
		t.Fatalf("inactive: %s %v", how, err)
	}
	f.do(func() { f.hooks[id].Events = []string{"push"} })
	if _, how, err := fg.RegisterWebhook(ctx, moved, hookSecret); err != nil || how != Updated || !eventsFit(f.sidecars(moved)[0].Events) {
		t.Fatalf("push only: %s %v", how, err)
	}

	// A new secret: Gitea cannot patch it, so the hook is made anew first
	// and the old one deleted after.
	const newSecret = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	n = f.count()
	id3, how, err := fg.RegisterWebhook(ctx, moved, newSecret)
	if err != nil || how != Replaced || id3 == id {
		t.Fatalf("new secret: %d %s %v", id3, how, err)
	}
	if w := writes(f.since(n)); len(w) != 2 || w[0] != "POST /api/v1/admin/hooks" || w[1] != fmt.Sprintf("DELETE /api/v1/admin/hooks/%d", id) {
		t.Fatalf("new secret: %v", w)
	}
	if mine := f.sidecars(moved); len(mine) != 1 || mine[0].secret != newSecret {
		t.Fatalf("after the new secret: %+v", mine)
	}

	// Extras: one made by hand at the URL (no name), and a default
	// (template) one named as the sidecar's, which a top-level
	// is_system_webhook would have made. Both go; the kept one stays.
	f.add(fakeHook{hook: hook{Type: "gitea", Config: map[string]string{"url": moved, "content_type": "json"}, Active: true, Events: []string{"issues"}}, system: true})
	f.add(fakeHook{hook: hook{Name: "collab-lease", Type: "gitea", Config: map[string]string{"url": moved, "content_type": "json"}, Active: true, Events: []string{"issues"}}})
	if id4, how, err := fg.RegisterWebhook(ctx, moved, newSecret); err != nil || how != Updated || id4 != id3 {
		t.Fatalf("duplicates: %d %s %v", id4, how, err)
	}
	if mine := f.sidecars(moved); len(mine) != 1 || mine[0].ID != id3 {
		t.Fatalf("after the duplicates: %+v", mine)
	}

	// Made by hand at the URL without a name: its secret is unknown, so it
	// is replaced.
	f.do(func() { f.hooks = map[int64]*fakeHook{} })
	hand := f.add(fakeHook{hook: hook{Type: "gitea", Config: map[string]string{"url": moved, "content_type": "json"}, Active: true, Events: []string{"issues", "pull_request", "repository"}}, secret: "guess", system: true})
	if id5, how, err := fg.RegisterWebhook(ctx, moved, newSecret); err != nil || how != Replaced || id5 == hand {
		t.Fatalf("by hand: %d %s %v", id5, how, err)
	}
	if mine := f.sidecars(moved); len(mine) != 1 || mine[0].secret != newSecret {
		t.Fatalf("by hand, after: %+v", mine)
	}
}

func TestRegisterWebhookFailures(t *testing.T) {
	f, fg := newFakeHooks(t)
	ctx := context.Background()
	f.do(func() { f.status = 403 })
	if _, _, err := fg.RegisterWebhook(ctx, hookURL, hookSecret); !errors.Is(err, forge.ErrConfig) || !strings.Contains(err.Error(), "write:admin") {
		t.Fatalf("token without the scope: %v", err)
	}
	f.do(func() { f.status = 502 })
	if _, _, err := fg.RegisterWebhook(ctx, hookURL, hookSecret); !errors.Is(err, forge.ErrUnavailable) {
		t.Fatalf("Gitea failing: %v", err)
	}
	f.do(func() { f.status = 0 })
	if _, _, err := fg.RegisterWebhook(ctx, hookURL, ""); err == nil {
		t.Fatal("registered without a secret")
	}
	if w := writes(f.since(0)); len(w) != 0 {
		t.Fatalf("wrote during a failure: %v", w)
	}

	// A hook deleted between the listing and the PATCH: Gitea answers
	// 500, which is reported (running install again mends it).
	id, _, err := fg.RegisterWebhook(ctx, hookURL, hookSecret)
	if err != nil {
		t.Fatal(err)
	}
	f.do(func() { f.hooks[id].Active = false })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "PATCH" {
			f.mu.Lock()
			delete(f.hooks, id)
			f.mu.Unlock()
		}
		f.ServeHTTP(w, r)
	}))
	defer srv.Close()
	racy, _ := New(Options{URL: srv.URL, Token: adminToken})
	if _, _, err := racy.RegisterWebhook(ctx, hookURL, hookSecret); !errors.Is(err, forge.ErrUnavailable) {
		t.Fatalf("hook gone before PATCH: %v", err)
	}

	srv.Close()
	if _, _, err := racy.RegisterWebhook(ctx, hookURL, hookSecret); !errors.Is(err, forge.ErrUnavailable) {
		t.Fatalf("Gitea down: %v", err)
	}
}

func TestRemoveWebhook(t *testing.T) {
	f, fg := newFakeHooks(t)
	ctx := context.Background()
	ci := f.add(fakeHook{hook: hook{Name: "ci", Type: "gitea", Config: map[string]string{"url": "http://ci/hook"}}, system: true})
	if _, _, err := fg.RegisterWebhook(ctx, hookURL, hookSecret); err != nil {
		t.Fatal(err)
	}
	f.add(fakeHook{hook: hook{Name: "collab-lease", Type: "gitea", Config: map[string]string{"url": "http://old/hooks/gitea"}}})
	if n, err := fg.RemoveWebhook(ctx, hookURL); err != nil || n != 2 {
		t.Fatalf("remove: %d %v", n, err)
	}
	f.do(func() {
		if len(f.hooks) != 1 || f.hooks[ci] == nil {
			t.Errorf("left: %+v", f.hooks)
		}
	})
	if n, err := fg.RemoveWebhook(ctx, hookURL); err != nil || n != 0 {
		t.Fatalf("remove again: %d %v", n, err)
	}
	f.do(func() { f.status = 403 })
	if _, err := fg.RemoveWebhook(ctx, hookURL); !errors.Is(err, forge.ErrConfig) {
		t.Fatalf("token without the scope: %v", err)
	}
}

func TestCheckWebhook(t *testing.T) {
	good := func() fakeHook {
		return fakeHook{hook: hook{Name: webhookName(hookSecret), Type: "gitea", Active: true,
			Config: map[string]string{"url": hookURL, "content_type": "json"},
			Events: []string{"issues", "issue_label", "pull_request", "pull_request_sync", "repository"}}, system: true}
	}
	tests := []struct {
		name    string
		hooks   func() []fakeHook
		status  int
		wantErr error
		words   string
	}{
		{"as registered", func() []fakeHook { return []fakeHook{good()} }, 0, nil, ""},
		{"none", func() []fakeHook { return nil }, 0, forge.ErrNotFound, "no system webhook"},
		{"a default hook only", func() []fakeHook { h := good(); h.system = false; return []fakeHook{h} }, 0, forge.ErrNotFound, "no system webhook"},
		{"another URL", func() []fakeHook {
			h := good()
			h.Config = map[string]string{"url": "http://old/hooks/gitea", "content_type": "json"}
			return []fakeHook{h}
		}, 0, forge.ErrNotFound, "http://old/hooks/gitea"},
		{"inactive", func() []fakeHook { h := good(); h.Active = false; return []fakeHook{h} }, 0, forge.ErrNotFound, "not active"},
		{"form content", func() []fakeHook {
			h := good()
			h.Config = map[string]string{"url": hookURL, "content_type": "form"}
			return []fakeHook{h}
		}, 0, forge.ErrNotFound, "JSON"},
		{"pushes too", func() []fakeHook { h := good(); h.Events = append(h.Events, "push"); return []fakeHook{h} }, 0, forge.ErrNotFound, "push"},
		{"another secret", func() []fakeHook { h := good(); h.Name = webhookName("other"); return []fakeHook{h} }, 0, forge.ErrNotFound, "secret"},
		{"twice", func() []fakeHook { return []fakeHook{good(), good()} }, 0, forge.ErrNotFound, "more than once"},
		{"token without read:admin", func() []fakeHook { return nil }, 403, forge.ErrConfig, "read:admin"},
		{"Gitea failing", func() []fakeHook { return nil }, 500, forge.ErrUnavailable, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, fg := newFakeHooks(t)
			f.add(fakeHook{hook: hook{Name: "ci", Type: "gitea", Config: map[string]string{"url": "http://ci/hook"}, Active: true}, system: true})
			for _, h := range tt.hooks() {
				f.add(h)
			}
			f.do(func() { f.status = tt.status })
			_, err := fg.CheckWebhook(context.Background(), hookURL, hookSecret)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) || (err != nil && !strings.Contains(err.Error(), tt.words)) {
				t.Fatalf("CheckWebhook = %v, want %v with %q", err, tt.wantErr, tt.words)
			}
			if w := writes(f.since(0)); len(w) != 0 {
				t.Fatalf("a check wrote: %v", w)
			}
		})
	}
}

func TestSecretID(t *testing.T) {
	a, b := secretID(hookSecret), secretID(hookSecret[:63]+"0")
	if len(a) != 16 || a == b || a != secretID(hookSecret) || strings.Contains(hookSecret, a) {
		t.Fatalf("secretID: %s %s", a, b)
	}
}
