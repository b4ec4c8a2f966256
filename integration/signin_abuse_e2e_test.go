package integration

import (
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models/leasemodel"
)

// The sign-in flood: an outsider starts sign-ins and burns them with
// error callbacks (/oauth/login, then /oauth/callback?state=…&error=…),
// which costs Gitea nothing, 20,000 times at CI size, from the address a
// real user shares. The sidecar keeps no state per sign-in, so its memory
// stays flat, and the real user's sign-in through Gitea works during and
// after the flood.
func TestSignInFloodAbuseEndToEnd(t *testing.T) {
	scale := leasemodel.Scale(t)
	flood := 20000 * scale
	s, w := signInSidecar(t)
	g := fixture.g
	pid := s.PID()
	baseRSS, _, err := procStatus(pid)
	if err != nil {
		t.Fatal(err)
	}

	noRedirect := &http.Client{Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var (
		wg     sync.WaitGroup
		next   atomic.Int64
		burned atomic.Int64
		odd    atomic.Value
	)
	start := time.Now()
	for range 16 {
		wg.Go(func() {
			for next.Add(1) <= int64(flood) {
				resp, err := noRedirect.Get(s.HTTPURL + "/oauth/login?return_to=" + url.QueryEscape(s.HTTPURL+"/"))
				if err != nil {
					odd.CompareAndSwap(nil, err.Error())
					return
				}
				resp.Body.Close()
				loc, err := url.Parse(resp.Header.Get("Location"))
				if resp.StatusCode != http.StatusFound || err != nil || loc.Query().Get("state") == "" {
					odd.CompareAndSwap(nil, "login answered "+resp.Status)
					continue
				}
				cb := s.HTTPURL + "/oauth/callback?error=access_denied&state=" + url.QueryEscape(loc.Query().Get("state"))
				if resp, err = noRedirect.Get(cb); err != nil {
					odd.CompareAndSwap(nil, err.Error())
					return
				}
				resp.Body.Close()
				burned.Add(1)
			}
		})
	}
	// A real sign-in in the middle of the flood.
	alice := newSignInBrowser(t)
	alice.signInToGitea(g, w.Alice)
	alice.signInToSidecar(s, g, g.URL+"/")
	if login := alice.sessionLogin(s); login != w.Alice.Login {
		t.Fatalf("a sign-in during the flood: session is %q, want %s", login, w.Alice.Login)
	}
	wg.Wait()
	took := time.Since(start)
	if v := odd.Load(); v != nil {
		t.Fatalf("the flood met an unexpected answer: %v", v)
	}
	endRSS, _, err := procStatus(pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d sign-ins started and burned in %v; sidecar RSS %d MiB before, %d MiB after", burned.Load(), took.Round(time.Millisecond), baseRSS>>10, endRSS>>10)
	if burned.Load() != int64(flood) {
		t.Fatalf("%d of %d sign-ins burned", burned.Load(), flood)
	}
	// And after it: another user signs in.
	bob := newSignInBrowser(t)
	bob.signInToGitea(g, w.Bob)
	bob.signInToSidecar(s, g, g.URL+"/")
	if login := bob.sessionLogin(s); login != w.Bob.Login {
		t.Fatalf("a sign-in after the flood: session is %q, want %s", login, w.Bob.Login)
	}
	// Nothing is kept per sign-in: the flood leaves the RSS where normal
	// work does (a generous bound for the Go heap's own growth; twice that
	// for a sidecar built with the race detector, whose shadow memory
	// grows with the heap).
	bound := 64
	if raceEnabled {
		bound *= 2
	}
	if grew := (endRSS - baseRSS) >> 10; grew > bound {
		t.Errorf("the sidecar's RSS grew by %d MiB over the flood, over %d MiB", grew, bound)
	}
}
