package routes

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/collab-lease/collab-lease/plugin/forge"
)

// Every request carries its address's share of forge requests; a request
// the forge refuses for it is answered 429 with Retry-After, and other
// addresses are served meanwhile.
func TestForgeBudgetPerAddress(t *testing.T) {
	// The budgets run on the real clock: at one a second, only the burst
	// of 3 matters within this test.
	f := newFixture(t, func(o *Options) { o.ForgeBudgets = forge.NewAddrBudgets(1, 3, nil) })
	// The fake forge spends the budget the way the Gitea client does: one
	// unit per question it would send.
	f.forge.SetHook(func(ctx context.Context, method string) error {
		if b := forge.BudgetFrom(ctx); b == nil {
			t.Errorf("%s asked without a budget", method)
		} else if !b.Allow() {
			return forge.ErrRateLimited
		}
		return nil
	})
	get := func(addr string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/repos/acme/widgets/leases", nil)
		req.RemoteAddr = addr + ":40000"
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, req)
		return rec
	}
	limited := 0
	for i := 0; i < 20; i++ {
		rec := get("198.51.100.9")
		switch rec.Code {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			limited++
			if rec.Header().Get("Retry-After") == "" || rec.Body.String() != `{"error":"too many requests, try again"}` {
				t.Fatalf("429 answer: %v %q", rec.Header(), rec.Body.String())
			}
		default:
			t.Fatalf("request %d: %d %s", i, rec.Code, rec.Body.String())
		}
	}
	if limited == 0 {
		t.Fatal("20 uncached requests from one address were never limited")
	}
	if rec := get("198.51.100.10"); rec.Code != http.StatusOK {
		t.Fatalf("another address while the first is limited: %d %s", rec.Code, rec.Body.String())
	}
}
