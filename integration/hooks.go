package integration

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// HookListener receives webhook deliveries on 127.0.0.1 (which the test
// Gitea's [webhook] ALLOWED_HOST_LIST = loopback lets it reach) and keeps
// every one, for tests of what Gitea sends. It answers 200 to everything.
type HookListener struct {
	URL string // its base URL, "http://127.0.0.1:<port>"

	mu  sync.Mutex
	got []Delivery
}

// Delivery is one request Gitea made to a HookListener.
type Delivery struct {
	Path   string
	Header http.Header
	Body   []byte // raw, as signed
}

// SignedWith says whether X-Gitea-Signature is the hex HMAC-SHA256 of the
// raw body keyed with secret.
func (d Delivery) SignedWith(secret string) bool {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(d.Body)
	got, err := hex.DecodeString(d.Header.Get("X-Gitea-Signature"))
	return err == nil && hmac.Equal(got, m.Sum(nil))
}

// NewHookListener starts a listener, closed at the end of the test.
func NewHookListener(t testing.TB) *HookListener {
	l := &HookListener{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		l.mu.Lock()
		l.got = append(l.got, Delivery{Path: r.URL.Path, Header: r.Header.Clone(), Body: b})
		l.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	l.URL = srv.URL
	return l
}

// Wait polls for a delivery that match accepts (among all received so
// far) until timeout, and fails the test without one. Gitea delivers
// asynchronously, usually within a second.
func (l *HookListener) Wait(t testing.TB, timeout time.Duration, match func(Delivery) bool) Delivery {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		l.mu.Lock()
		got := append([]Delivery(nil), l.got...)
		l.mu.Unlock()
		for _, d := range got {
			if match(d) {
				return d
			}
		}
		if time.Now().After(deadline) {
			var seen []string
			for _, d := range got {
				seen = append(seen, d.Path+" "+d.Header.Get("X-Gitea-Event"))
			}
			t.Fatalf("no matching webhook delivery within %s; received %d: %v", timeout, len(got), seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
