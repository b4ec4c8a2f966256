package integration

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func get(t *testing.T, url, token string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "token "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return resp, err
}

func TestGiteaStartsStopsAndRestarts(t *testing.T) {
	start := time.Now()
	g := NewGitea(t)
	t.Logf("Gitea ready at %s in %v", g.URL, time.Since(start))
	if !strings.HasPrefix(g.URL, "http://127.0.0.1:") {
		t.Fatalf("URL %q is not on loopback", g.URL)
	}

	resp, err := get(t, g.URL+"/api/v1/user", g.AdminToken)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/user with the admin token: %v %v", resp, err)
	}
	for _, asset := range []string{"/assets/js/index.js", "/assets/js/iife.js", "/assets/css/index.css"} {
		resp, err := get(t, g.URL+asset, "")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %v %v", asset, resp, err)
		}
	}
	if st, err := os.Stat(g.AppIni); err != nil || st.Mode().Perm()&0o200 == 0 {
		t.Errorf("app.ini %s is not writable: %v", g.AppIni, err)
	}

	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
	if g.Running() {
		t.Fatal("Running after Stop")
	}
	if _, err := get(t, g.URL+"/api/v1/version", ""); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("GET while stopped: err = %v, want connection refused", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start = time.Now()
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Gitea restarted in %v", time.Since(start))
	resp, err = get(t, g.URL+"/api/v1/user", g.AdminToken)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/user after restart: %v %v", resp, err)
	}
	if _, err := os.Stat(filepath.Join(g.Dir, "data", "gitea.db")); err != nil {
		t.Fatal(err)
	}
}

// A restart whose port is taken for a while retries until the port is free.
func TestGiteaRestartWaitsForItsPort(t *testing.T) {
	g := NewGitea(t)
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
	squatter, err := net.Listen("tcp", strings.TrimPrefix(g.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		defer close(released)
		defer squatter.Close()
		// Let go of the port once Gitea has tried and failed to take it.
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if b, _ := os.ReadFile(g.LogFile); strings.Contains(string(b), "address already in use") {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-released
	b, _ := os.ReadFile(g.LogFile)
	if !strings.Contains(string(b), "address already in use") {
		t.Fatal("Gitea never found its port taken; the test proved nothing")
	}
	if resp, err := get(t, g.URL+"/api/v1/version", ""); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("after the port came free: %v %v", resp, err)
	}
}
