package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The identity holes of issue 11, each against the real Gitea
// with the real OpenSSH client. The sidecar caches a resolved key for 2 s,
// so a change made in Gitea must reach it within that plus a margin.

const (
	identityKeyCacheTTL = "2s"
	// identityDeadline bounds every wait for a cache to lapse.
	identityDeadline = 20 * time.Second
	revokedKey       = "error: this key no longer belongs to an active Gitea account\n"
)

// A key deleted in Gitea, or an account that may no longer log in, is
// refused on a connection that was opened before (an OpenSSH ControlMaster):
// every command re-checks the key, not only the handshake.
func TestRevokedKeyIsRefusedOnOpenConnectionAgainstGitea(t *testing.T) {
	s, w := newSidecar(t, "--key-cache-ttl", identityKeyCacheTTL)
	g, _, _ := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	repo := identityRepo(t, ctx, g, w)
	for _, tc := range []struct {
		name   string
		revoke func(u *User) error
		check  func(u *User) error // Gitea really made the change
	}{
		{"deleted key", func(u *User) error {
			return g.Admin().Do(ctx, "DELETE", fmt.Sprintf("/admin/users/%s/keys/%d", u.Login, u.Key.ID), nil, nil)
		}, func(u *User) error {
			var keys []struct{ ID int64 }
			if err := g.Admin().Do(ctx, "GET", "/user/keys?fingerprint="+u.Key.Fingerprint, nil, &keys); err != nil {
				return err
			}
			if len(keys) != 0 {
				return fmt.Errorf("Gitea still finds %d keys with fingerprint %s", len(keys), u.Key.Fingerprint)
			}
			return nil
		}},
		{"prohibit login", func(u *User) error {
			return editUser(ctx, g, u, map[string]any{"prohibit_login": true})
		}, func(u *User) error {
			return checkAccount(ctx, g, u, true, true)
		}},
		{"deactivated", func(u *User) error {
			return editUser(ctx, g, u, map[string]any{"active": false})
		}, func(u *User) error {
			return checkAccount(ctx, g, u, false, false)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := identityUser(t, ctx, g, w, "revoked", repo)
			n := identityIssue(t, ctx, g, repo)
			m := startMaster(t, s, u)

			acquire := lease("acquire", repo, n, "--ttl", "10m")
			r := m.run(ctx, acquire)
			if r.Code != 0 || parse(t, r).Status != "acquired" {
				t.Fatalf("%s over the master: %s", acquire, show(r))
			}
			renew := lease("renew", repo, n, "--ttl", "10m")
			if r = m.run(ctx, renew); r.Code != 0 {
				t.Fatalf("%s before the revocation: %s", renew, show(r))
			}

			if err := tc.revoke(u); err != nil {
				t.Fatalf("revoke in Gitea: %v", err)
			}
			revoked := time.Now()
			if err := tc.check(u); err != nil {
				t.Fatalf("the revocation did not take in Gitea: %v", err)
			}
			// Until the key cache lapses the old answer may stand; after
			// that, the same open connection must be refused.
			r, ok := pollUntil(identityDeadline, func() (SSHResult, bool) {
				r := m.run(ctx, renew)
				return r, r.Code != 0
			})
			if !ok {
				t.Fatalf("%s over the connection opened before the revocation still succeeds %s after it (key cache %s): %s",
					renew, identityDeadline, identityKeyCacheTTL, show(r))
			}
			if r.Code != 1 || r.Stdout != "" || r.Stderr != revokedKey {
				t.Fatalf("%s after the revocation: %s; want exit 1, stderr %q", renew, show(r), revokedKey)
			}
			t.Logf("refused %s after the revocation", time.Since(revoked).Round(10*time.Millisecond))
		})
	}
}

// A user who may read only the Issues unit of a private repository cannot
// learn, through renew or release, who holds one of its pull requests: the
// answer is the one for a number that does not exist, and the lease stays.
func TestRenewReleaseHideHoldersOfUnreadableUnitsAgainstGitea(t *testing.T) {
	s, w := newSidecar(t, "--key-cache-ttl", identityKeyCacheTTL)
	acquire := lease("acquire", w.Secret, w.SecretPull, "--ttl", "10m")
	if r := run(t, s, w.Alice, acquire); r.Code != 0 {
		t.Fatalf("alice: %s: %s", acquire, show(r))
	}
	listCmd := "collab-lease list " + w.Secret.FullName()
	before := run(t, s, w.Alice, listCmd)
	if before.Code != 0 || !strings.Contains(before.Stdout, fmt.Sprintf(`"issue":%d,"holder":"alice"`, w.SecretPull)) {
		t.Fatalf("alice: %s: %s", listCmd, show(before))
	}
	if r := run(t, s, w.Dave, listCmd); r.Code != 0 || strings.Contains(r.Stdout, `"alice"`) {
		t.Fatalf("dave (Issues unit only) is shown the pull request's lease: %s: %s", listCmd, show(r))
	}

	const missing = 99999 // no issue or pull request has this number
	for _, c := range []struct{ onPull, onMissing string }{
		{lease("release", w.Secret, w.SecretPull), lease("release", w.Secret, missing)},
		{lease("renew", w.Secret, w.SecretPull, "--ttl", "5m"), lease("renew", w.Secret, missing, "--ttl", "5m")},
	} {
		r := run(t, s, w.Dave, c.onPull)
		if r.Code != 1 || r.Stdout != "" || r.Stderr != "error: issue not found\n" {
			t.Errorf("dave: %s: %s; want exit 1, stderr %q", c.onPull, show(r), "error: issue not found\n")
		}
		if m := run(t, s, w.Dave, c.onMissing); m != r {
			t.Errorf("dave's replies differ:\n%s: %s\n%s: %s", c.onPull, show(r), c.onMissing, show(m))
		}
	}
	if after := run(t, s, w.Alice, listCmd); after != before {
		t.Errorf("alice's lease changed:\nbefore: %s\nafter: %s", show(before), show(after))
	}
}

// The ledger holds accounts, not logins: a renamed holder keeps the claim
// (and is shown under the new login), and a new account that registers the
// freed login inherits neither the claim nor its fencing token.
func TestRenamedLoginReusedInheritsNothingAgainstGitea(t *testing.T) {
	s, w := newSidecar(t, "--key-cache-ttl", identityKeyCacheTTL)
	g, _, _ := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	repo := identityRepo(t, ctx, g, w)
	n := identityIssue(t, ctx, g, repo)
	a := identityUser(t, ctx, g, w, "renamed", repo)
	oldLogin, newLogin := a.Login, a.Login+"-new"

	acquire := lease("acquire", repo, n, "--ttl", "10m")
	r := run(t, s, a, acquire)
	if r.Code != 0 {
		t.Fatalf("%s (as %s): %s", acquire, oldLogin, show(r))
	}
	first := parse(t, r)
	if first.Status != "acquired" || deref(first.Holder) != oldLogin {
		t.Fatalf("%s (as %s): %s", acquire, oldLogin, show(r))
	}

	if err := g.Admin().Do(ctx, "POST", "/admin/users/"+oldLogin+"/rename", map[string]any{"new_username": newLogin}, nil); err != nil {
		t.Fatalf("rename %s to %s: %v", oldLogin, newLogin, err)
	}
	a.Login = newLogin
	b := &User{Login: oldLogin, Password: randomHex(8) + "Aa1!"}
	addIdentityUser(t, ctx, g, w, b, oldLogin+"-second", repo)
	if b.ID == a.ID {
		t.Fatalf("Gitea gave the new %s the renamed account's ID %d", oldLogin, a.ID)
	}

	// B, with A's old login and its own key, must not be handed A's tenure.
	r = run(t, s, b, acquire)
	if v := parseMaybe(r); r.Code != 4 || v.Status != "held" {
		t.Errorf("%s (new account %s, ID %d, after %s ID %d was renamed to %s): %s; want exit 4, status held (not token %d)",
			acquire, oldLogin, b.ID, oldLogin, a.ID, newLogin, show(r), first.Token)
	}

	// A keeps the claim under the new login: its renew succeeds and, once
	// the sidecar has seen the rename, shows the new login.
	renew := lease("renew", repo, n, "--ttl", "10m")
	r, ok := pollUntil(identityDeadline, func() (SSHResult, bool) {
		r := run(t, s, a, renew)
		return r, r.Code != 0 || deref(parseMaybe(r).Holder) == newLogin
	})
	if !ok || r.Code != 0 {
		t.Fatalf("%s (renamed account %s, formerly %s): %s; want exit 0 with holder %q within %s",
			renew, newLogin, oldLogin, show(r), newLogin, identityDeadline)
	}
	if v := parse(t, r); v.Status != "renewed" || v.Token != first.Token {
		t.Fatalf("%s (renamed account %s): %s; want status renewed, token %d", renew, newLogin, show(r), first.Token)
	}

	r = run(t, s, b, acquire)
	if v := parseMaybe(r); r.Code != 4 || v.Status != "held" || deref(v.Holder) != newLogin {
		t.Errorf("%s (new account %s) after %s renewed: %s; want exit 4, held by %q", acquire, oldLogin, newLogin, show(r), newLogin)
	}

	release := lease("release", repo, n)
	if r = run(t, s, a, release); r.Code != 0 || parseMaybe(r).Status != "released" {
		t.Fatalf("%s (renamed account %s): %s", release, newLogin, show(r))
	}
	r = run(t, s, b, acquire)
	if v := parseMaybe(r); r.Code != 0 || v.Status != "acquired" || deref(v.Holder) != oldLogin || v.Token <= first.Token {
		t.Fatalf("%s (new account %s) after the release: %s; want acquired by %q with a token above %d",
			acquire, oldLogin, show(r), oldLogin, first.Token)
	}
}

// show renders one ssh run for a failure message.
func show(r SSHResult) string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
}

// parseMaybe decodes a JSON reply, or returns the zero reply.
func parseMaybe(r SSHResult) leaseReply {
	var v leaseReply
	if strings.Count(r.Stdout, "\n") == 1 {
		_ = json.Unmarshal([]byte(r.Stdout), &v)
	}
	return v
}

// pollUntil runs f until it reports done or the deadline passes, and
// returns its last result.
func pollUntil(deadline time.Duration, f func() (SSHResult, bool)) (SSHResult, bool) {
	end := time.Now().Add(deadline)
	for {
		r, done := f()
		if done || time.Now().After(end) {
			return r, done
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// identityRepo creates a public repository of w.Org for one test, so the
// accounts it changes touch nothing the shared fixture's tests use.
func identityRepo(t testing.TB, ctx context.Context, g *Gitea, w *World) Repo {
	t.Helper()
	r := Repo{Owner: w.Org, Name: "identity-" + randomHex(4)}
	var out struct{ ID int64 }
	if err := g.Admin().Do(ctx, "POST", "/orgs/"+w.Org+"/repos", map[string]any{
		"name": r.Name, "auto_init": true, "default_branch": "main",
	}, &out); err != nil {
		t.Fatalf("create %s: %v", r.FullName(), err)
	}
	r.ID = out.ID
	return r
}

// identityIssue opens an issue in r.
func identityIssue(t testing.TB, ctx context.Context, g *Gitea, r Repo) int64 {
	t.Helper()
	var out struct{ Number int64 }
	if err := g.Admin().Do(ctx, "POST", "/repos/"+r.FullName()+"/issues", map[string]any{"title": "An identity test"}, &out); err != nil {
		t.Fatalf("open an issue in %s: %v", r.FullName(), err)
	}
	return out.Number
}

// identityUser creates a fresh account (login prefix-<random>) with its own
// key, a write collaborator on r.
func identityUser(t testing.TB, ctx context.Context, g *Gitea, w *World, prefix string, r Repo) *User {
	t.Helper()
	u := &User{Login: prefix + "-" + randomHex(3), Password: randomHex(8) + "Aa1!"}
	addIdentityUser(t, ctx, g, w, u, u.Login, r)
	return u
}

// addIdentityUser creates u in Gitea with a new key and the e-mail address
// <email>@example.com (a new account cannot reuse a renamed one's), and
// makes it a write collaborator on r.
func addIdentityUser(t testing.TB, ctx context.Context, g *Gitea, w *World, u *User, email string, r Repo) {
	t.Helper()
	k, err := newKey(w.KeyDir, u.Login+"-"+randomHex(3))
	if err != nil {
		t.Fatal(err)
	}
	u.Key = k
	var out struct{ ID int64 }
	if err := g.Admin().Do(ctx, "POST", "/admin/users", map[string]any{
		"username": u.Login, "email": email + "@example.com", "password": u.Password, "must_change_password": false,
	}, &out); err != nil {
		t.Fatalf("create user %s: %v", u.Login, err)
	}
	u.ID = out.ID
	if err := addKey(ctx, g, u); err != nil {
		t.Fatalf("add a key to %s: %v", u.Login, err)
	}
	if err := g.Admin().Do(ctx, "PUT", "/repos/"+r.FullName()+"/collaborators/"+u.Login, map[string]any{"permission": "write"}, nil); err != nil {
		t.Fatalf("make %s a write collaborator on %s: %v", u.Login, r.FullName(), err)
	}
}

// checkAccount says whether Gitea shows u as active and prohibited from
// logging in as wanted.
func checkAccount(ctx context.Context, g *Gitea, u *User, active, prohibited bool) error {
	var out struct {
		Active        bool `json:"active"`
		ProhibitLogin bool `json:"prohibit_login"`
	}
	if err := g.Admin().Do(ctx, "GET", "/users/"+u.Login, nil, &out); err != nil {
		return err
	}
	if out.Active != active || out.ProhibitLogin != prohibited {
		return fmt.Errorf("%s: active %v, prohibit_login %v; want %v, %v", u.Login, out.Active, out.ProhibitLogin, active, prohibited)
	}
	return nil
}

// master is an OpenSSH ControlMaster connection of one user to the
// sidecar, which other ssh runs share.
type master struct {
	s      *Sidecar
	sock   string
	detour string // a key Gitea does not know, for runs through the master
}

// startMaster opens u's master connection (ssh -M -N in the foreground, a
// child of the test) and waits until it accepts multiplexed sessions. It
// is closed with ssh -O exit when the test ends, and killed if that fails.
func startMaster(t *testing.T, s *Sidecar, u *User) *master {
	t.Helper()
	// A short directory: a Unix socket's path is limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "cm")
	if err != nil {
		t.Fatal(err)
	}
	// Runs through the master offer this unknown key, so one that fell back
	// to a connection of its own would be refused (exit 255), not answered.
	stranger, err := newKey(dir, "stranger")
	if err != nil {
		t.Fatal(err)
	}
	m := &master{s: s, sock: filepath.Join(dir, "m"), detour: stranger.Path}
	ctx, kill := context.WithCancel(context.Background())
	exited := make(chan SSHResult, 1)
	go func() { exited <- s.SSH(ctx, u.Key.Path, "-M", "-S", m.sock, "-N", "--") }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if r := s.SSH(ctx, m.detour, "-S", m.sock, "-O", "exit", "--"); r.Code != 0 {
			t.Logf("ssh -O exit: %s", show(r))
		}
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			kill() // exec.CommandContext kills the master's process
			<-exited
		}
		kill()
		_ = os.RemoveAll(dir)
	})
	end := time.Now().Add(identityDeadline)
	for {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r := s.SSH(cctx, m.detour, "-S", m.sock, "-O", "check", "--")
		cancel()
		if r.Code == 0 {
			return m
		}
		select {
		case r := <-exited:
			exited <- r
			t.Fatalf("the ControlMaster of %s exited: %s", u.Login, show(r))
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("the ControlMaster of %s did not come up within %s: ssh -O check: %s", u.Login, identityDeadline, show(r))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// run runs one command through the master connection.
func (m *master) run(ctx context.Context, cmd string) SSHResult {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return m.s.SSH(ctx, m.detour, "-S", m.sock, "-o", "ControlMaster=no", "--", cmd)
}
