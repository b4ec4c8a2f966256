package assets

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The issue page's sidebar in headless Chromium, on a page shaped like
// Gitea's issue page and a stand-in sidecar: the reservations of the
// issue's claim are listed (their globs as text, never as markup), and
// kept current by the reserved and unreserved events; they go with the
// claim. The real Gitea's pages are the integration tests'.
func TestSidebarListsTheClaimsReservations(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("no Chromium")
	}
	b, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	send := make(chan string, 8)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /assets/collab-lease.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		_, _ = w.Write(b["collab-lease.js"].Body)
	})
	mux.HandleFunc("GET /acme/widgets/issues/1", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><html><body>
<div id="issue-page-info" data-issue-index="1" data-issue-repo-link="/acme/widgets"></div>
<div id="issue-title-display"><h1>A title <span class="index">#1</span></h1></div>
<div class="issue-content-right"></div>
<script src="/assets/collab-lease.js"></script></body></html>`)
	})
	json := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, body)
		}
	}
	mux.HandleFunc("GET /api/v1/repos/acme/widgets/leases", json(`{"leases":[{"issue":1,"holder":"alice","agent":"a1","token":3,"acquired_at":"2026-09-05T12:00:00Z","expires_at":null}]}`))
	mux.HandleFunc("GET /api/v1/repos/acme/widgets/reservations", json(`{"status":"reservations","repo":"acme/widgets","reservations":[`+
		`{"glob":"<img src=x onerror=window.pwned=1>/**","shared":false,"holder":"alice","agent":"a1","issue":1,"expires_at":null},`+
		`{"glob":"elsewhere/","shared":false,"holder":"bob","agent":null,"issue":2,"expires_at":null},`+
		`{"glob":"ttl/","shared":true,"holder":"bob","agent":null,"issue":null,"expires_at":"2026-09-05T13:00:00Z"}]}`))
	mux.HandleFunc("GET /api/v1/session", json(`{"login":"alice","sign_in_url":null}`))
	mux.HandleFunc("GET /api/v1/repos/acme/widgets/leases/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "id: e-0\n\n")
		w.(http.Flusher).Flush()
		for {
			select {
			case m := <-send:
				fmt.Fprint(w, m)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	profile, err := os.MkdirTemp("", "collab-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(chromium), chromedp.UserDataDir(profile),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.Flag("disable-dev-shm-usage", true))
	ctx, cancelCtx := chromedp.NewContext(actx)
	defer func() {
		cancelCtx()
		cancelAlloc()
		for i := 0; i < 50 && os.RemoveAll(profile) != nil; i++ {
			time.Sleep(20 * time.Millisecond) // Chromium's helpers may still write to it
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/acme/widgets/issues/1")); err != nil {
		t.Fatal(err)
	}
	// listed waits until the sidebar lists want (each glob, then
	// " shared" for a shared one).
	listed := func(what string, want []string) {
		t.Helper()
		var got []string
		for deadline := time.Now().Add(20 * time.Second); ; {
			err := chromedp.Run(ctx, chromedp.Evaluate(`Array.from(document.querySelectorAll('.issue-content-right .collab-lease-paths li')).map(li =>
				li.querySelector('code').textContent + (li.querySelector('.collab-lease-shared') ? ' shared' : ''))`, &got))
			if err != nil {
				t.Fatal(err)
			}
			if slices.Equal(got, want) || (len(got) == 0 && len(want) == 0) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the sidebar lists %q, want %q", what, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	listed("the claim's reservations", []string{"<img src=x onerror=window.pwned=1>/**"})
	var markup bool
	if err := chromedp.Run(ctx, chromedp.Evaluate(`!!window.pwned || !!document.querySelector('.collab-lease-paths img')`, &markup)); err != nil || markup {
		t.Fatalf("a glob was taken for markup (%v)", err)
	}

	send <- "id: e-1\nevent: reserved\ndata: {\"glob\":\"docs/\",\"shared\":true,\"holder\":\"alice\",\"agent\":\"a1\",\"issue\":1,\"expires_at\":null}\n\n"
	listed("after a reserve", []string{"<img src=x onerror=window.pwned=1>/**", "docs/ shared"})
	send <- "id: e-2\nevent: unreserved\ndata: {\"glob\":\"<img src=x onerror=window.pwned=1>/**\",\"shared\":false,\"holder\":\"alice\",\"agent\":\"a1\",\"issue\":1,\"expires_at\":null}\n\n"
	listed("after an unreserve", []string{"docs/ shared"})
	send <- "id: e-3\nevent: released\ndata: {\"issue\":1}\n\n"
	listed("after the claim's release", nil)
}
