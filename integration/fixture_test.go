package integration

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// One Gitea, seeded once, serves every end-to-end test of this package that
// does not need a Gitea of its own; each test gets a fresh sidecar (its own
// ledger). Tests that stop Gitea start it again before they return.
var fixture struct {
	once sync.Once
	dir  string
	g    *Gitea
	w    *World
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// Every test here needs a real Gitea (and some need Chromium).
		fmt.Println("integration: skipped with -short: every test here needs a real Gitea")
		os.Exit(0)
	}
	code := m.Run()
	if fixture.g != nil {
		_ = fixture.g.Close()
	}
	if fixture.dir != "" {
		_ = os.RemoveAll(fixture.dir)
	}
	os.Exit(code)
}

// shared returns the shared Gitea, its World and a built collab-sidecar.
func shared(t *testing.T) (*Gitea, *World, string) {
	t.Helper()
	fixtureInit()
	if fixture.err != nil {
		t.Fatalf("shared fixture: %v", fixture.err)
	}
	if !fixture.g.Running() {
		t.Fatal("the shared Gitea is stopped: an earlier test did not restart it")
	}
	return fixture.g, fixture.w, fixture.bin
}

func fixtureInit() {
	fixture.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		if fixture.dir, fixture.err = os.MkdirTemp("", "collab-e2e-"); fixture.err != nil {
			return
		}
		// Under -race (make test) the sidecar is built with it too; the
		// benchmarks (make bench) run a plain one.
		build := BuildSidecar
		if raceEnabled {
			build = BuildRaceSidecar
		}
		if fixture.bin, fixture.err = build(ctx, fixture.dir); fixture.err != nil {
			return
		}
		if fixture.g, fixture.err = StartGitea(ctx, Options{Dir: filepath.Join(fixture.dir, "gitea")}); fixture.err != nil {
			return
		}
		fixture.w, fixture.err = Seed(ctx, fixture.g)
	})
}

// newSidecar starts a sidecar with a fresh data directory against the
// shared Gitea, stopped at the end of the test.
func newSidecar(t *testing.T, args ...string) (*Sidecar, *World) {
	t.Helper()
	g, w, bin := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := StartSidecar(ctx, SidecarOptions{Binary: bin, Gitea: g, DataDir: filepath.Join(t.TempDir(), "data"), Args: args})
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, s)
	return s, w
}

// stopGitea stops the shared Gitea for an outage; however the test ends,
// Gitea runs again after it.
func stopGitea(t *testing.T, g *Gitea) {
	t.Helper()
	t.Cleanup(func() {
		if !g.Running() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := g.Start(ctx); err != nil {
				t.Errorf("start the shared Gitea again: %v", err)
			}
		}
	})
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
}

// startGitea ends the outage stopGitea began.
func startGitea(t *testing.T, g *Gitea) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
}

// clientConfig is the x/crypto/ssh client configuration of u against the
// sidecar s, checking s's host key.
func clientConfig(s *Sidecar, u *User) (*ssh.ClientConfig, error) {
	signer, err := loadSigner(u.Key.Path)
	if err != nil {
		return nil, err
	}
	host, err := loadSigner(s.HostKeyFile())
	if err != nil {
		return nil, err
	}
	return &ssh.ClientConfig{
		User:            "git",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(host.PublicKey()),
		Timeout:         30 * time.Second,
	}, nil
}

// loadSigner reads an OpenSSH private key file.
func loadSigner(path string) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ssh.ParsePrivateKey(b)
}

// stopAtEnd stops s (SIGTERM, bounded) when the test ends, and shows the
// tail of its log if the test failed.
func stopAtEnd(t *testing.T, s *Sidecar) {
	t.Cleanup(func() {
		if err := s.Stop(20 * time.Second); err != nil {
			t.Errorf("sidecar stop: %v", err)
		}
		// A sidecar built with -race (under make test) reports a data
		// race in its log, and exits 66 at the end.
		if strings.Contains(s.Logs(), "WARNING: DATA RACE") {
			t.Errorf("the sidecar found a data race:\n%s", tail(s.Logs(), 80))
		}
		if t.Failed() {
			t.Logf("sidecar log:\n%s", tail(s.Logs(), 60))
		}
	})
}

func run(t *testing.T, s *Sidecar, u *User, words ...string) SSHResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return s.SSH(ctx, u.Key.Path, words...)
}

func lease(verb string, r Repo, n int64, extra ...string) string {
	s := fmt.Sprintf("collab-lease %s %s %d", verb, r.FullName(), n)
	for _, e := range extra {
		s += " " + e
	}
	return s
}
