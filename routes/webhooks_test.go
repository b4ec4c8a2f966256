package routes

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/gitea"
)

var hookSecret = []byte("0123456789abcdef0123456789abcdef")

type outcomes struct {
	mu   sync.Mutex
	seen []string
}

func (o *outcomes) observe(s string) { o.mu.Lock(); o.seen = append(o.seen, s); o.mu.Unlock() }

func (o *outcomes) all() string { o.mu.Lock(); defer o.mu.Unlock(); return strings.Join(o.seen, ",") }

func withWebhook(seen *outcomes) func(o *Options) {
	return func(o *Options) {
		o.Webhook = &Webhook{Secret: hookSecret, Parse: gitea.ParseDelivery, Observe: seen.observe}
	}
}

// deliver posts body as Gitea would, signed with secret (nil: unsigned).
func (f *fixture) deliver(event, delivery, body string, secret []byte) reply {
	f.t.Helper()
	req := httptest.NewRequest(http.MethodPost, WebhookPath, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Gitea-Event", event)
	req.Header.Set("X-Gitea-Delivery", delivery)
	if secret != nil {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(body))
		req.Header.Set("X-Gitea-Signature", hex.EncodeToString(m.Sum(nil)))
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Result().Body)
	return reply{Code: rec.Code, Header: rec.Result().Header, Body: string(b)}
}

const closed42 = `{"action":"closed","number":42,"issue":{"number":42,"state":"closed","updated_at":"2026-09-05T12:00:30Z"},"repository":{"id":1}}`

// Only a delivery signed with the secret has an effect; a signed close
// ends the lease once, however often it is delivered.
func TestWebhookDeliveries(t *testing.T) {
	seen := &outcomes{}
	f := newFixture(t, withWebhook(seen))
	f.acquire(1, 42, "alice", time.Hour)
	leases := func() string { return f.do("GET", "/api/v1/repos/acme/widgets/leases").Body }
	before := leases()

	expectReply(t, "unsigned", f.deliver("issues", "d-1", closed42, nil), 403, `{"error":"bad signature"}`)
	expectReply(t, "signed with another secret", f.deliver("issues", "d-1", closed42, []byte("another secret, just as long...")), 403, `{"error":"bad signature"}`)
	tampered := f.deliver("issues", "d-1", strings.Replace(closed42, `"number":42`, `"number":43`, 1), nil)
	expectReply(t, "tampered and unsigned", tampered, 403, `{"error":"bad signature"}`)
	if got := leases(); got != before {
		t.Fatalf("refused deliveries changed the leases: %s, was %s", got, before)
	}

	expectReply(t, "signed close", f.deliver("issues", "d-1", closed42, hookSecret), 200, `{"outcome":"applied","ended":1}`)
	expectReply(t, "leases after the close", f.do("GET", "/api/v1/repos/acme/widgets/leases"), 200, `{"repo":"acme/widgets","leases":[]}`)
	expectReply(t, "repeated delivery", f.deliver("issues", "d-1", closed42, hookSecret), 200, `{"outcome":"duplicate","ended":0}`)
	expectReply(t, "an assignment", f.deliver("issues", "d-2", `{"action":"assigned","number":42}`, hookSecret), 200, `{"outcome":"ignored","ended":0}`)
	expectReply(t, "malformed", f.deliver("issues", "d-3", `{"action":"closed"}`, hookSecret), 400, `{"error":"delivery not understood"}`)
	big := `{"pad":"` + strings.Repeat("x", maxDeliveryBytes) + `"}`
	expectReply(t, "too large", f.deliver("issues", "d-4", big, hookSecret), 413, `{"error":"delivery too large"}`)

	if got, want := seen.all(), "bad_signature,bad_signature,bad_signature,applied,duplicate,ignored,malformed,too_large"; got != want {
		t.Fatalf("observed %s, want %s", got, want)
	}
}

// Without a registered webhook the path does not exist.
func TestWebhookOffWithoutSecret(t *testing.T) {
	f := newFixture(t)
	expectReply(t, "no webhook", f.deliver("issues", "d-1", closed42, hookSecret), 404, `{"error":"not found"}`)
	if _, err := New(Options{Webhook: &Webhook{Secret: []byte("short"), Parse: gitea.ParseDelivery}}); err == nil {
		t.Fatal("a short webhook secret was accepted")
	}
}

// A repository created is told at once (serve --gate puts its hook into
// it), and changes no lease.
func TestWebhookTellsOfARepositoryCreated(t *testing.T) {
	var created []string
	seen := &outcomes{}
	f := newFixture(t, withWebhook(seen), func(o *Options) { o.Webhook.RepoCreated = func(repo string) { created = append(created, repo) } })
	body := `{"action":"created","repository":{"id":9,"full_name":"acme/new"}}`
	expectReply(t, "unsigned", f.deliver("repository", "d-1", body, nil), 403, `{"error":"bad signature"}`)
	expectReply(t, "signed", f.deliver("repository", "d-2", body, hookSecret), 200, `{"outcome":"applied","ended":0}`)
	if len(created) != 1 || created[0] != "acme/new" {
		t.Fatalf("told of %v, want acme/new once", created)
	}
	if got, want := seen.all(), "bad_signature,applied"; got != want {
		t.Fatalf("observed %s, want %s", got, want)
	}
}
