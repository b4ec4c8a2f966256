package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

type leaseReply struct {
	Status     string  `json:"status"`
	Repo       string  `json:"repo"`
	Issue      int64   `json:"issue"`
	Holder     *string `json:"holder"`
	Token      int64   `json:"token"`
	AcquiredAt string  `json:"acquired_at"`
	ExpiresAt  *string `json:"expires_at"`
}

func parse(t *testing.T, r SSHResult) leaseReply {
	t.Helper()
	var v leaseReply
	if err := json.Unmarshal([]byte(r.Stdout), &v); err != nil || strings.Count(r.Stdout, "\n") != 1 {
		t.Fatalf("stdout is not one JSON line: %+v (%v)", r, err)
	}
	return v
}

func expect(t *testing.T, r SSHResult, code int, what string) {
	t.Helper()
	if r.Code != code {
		t.Fatalf("%s: exit %d, want %d: stdout %q stderr %q", what, r.Code, code, r.Stdout, r.Stderr)
	}
}

func TestSSHClaimCycleAgainstGitea(t *testing.T) {
	s, w := newSidecar(t)
	n := w.OpenIssue

	r := run(t, s, w.Alice, lease("acquire", w.Widgets, n))
	expect(t, r, 0, "acquire")
	v := parse(t, r)
	if v.Status != "acquired" || *v.Holder != "alice" || v.Token != 1 || v.ExpiresAt != nil || v.Repo != "acme/widgets" || v.Issue != n {
		t.Fatalf("acquire: %+v", v)
	}
	if _, err := time.Parse(time.RFC3339, v.AcquiredAt); err != nil || !strings.HasSuffix(v.AcquiredAt, "Z") {
		t.Fatalf("acquired_at %q", v.AcquiredAt)
	}

	// Idempotent re-acquire with a ttl, in seconds and as a duration.
	for _, ttl := range []string{"300", "5m"} {
		r = run(t, s, w.Alice, lease("acquire", w.Widgets, n, "--ttl", ttl))
		expect(t, r, 0, "re-acquire --ttl "+ttl)
		v = parse(t, r)
		exp, err := time.Parse(time.RFC3339, deref(v.ExpiresAt))
		if v.Token != 1 || err != nil || time.Until(exp) < 4*time.Minute || time.Until(exp) > 6*time.Minute {
			t.Fatalf("re-acquire --ttl %s: %+v", ttl, v)
		}
	}

	r = run(t, s, w.Bob, lease("acquire", w.Widgets, n))
	expect(t, r, 4, "conflict")
	if v = parse(t, r); v.Status != "held" || deref(v.Holder) != "alice" || v.ExpiresAt == nil {
		t.Fatalf("conflict: %+v", v)
	}

	r = run(t, s, w.Alice, lease("renew", w.Widgets, n, "--ttl", "2h"))
	expect(t, r, 0, "renew")
	exp, _ := time.Parse(time.RFC3339, deref(parse(t, r).ExpiresAt))
	if time.Until(exp) < 110*time.Minute {
		t.Fatalf("renew did not extend: %s", r.Stdout)
	}
	r = run(t, s, w.Bob, lease("renew", w.Widgets, n, "--ttl", "2h"))
	expect(t, r, 4, "renew by bob")
	if v = parse(t, r); v.Status != "not_holder" || deref(v.Holder) != "alice" {
		t.Fatalf("renew by bob: %+v", v)
	}

	r = run(t, s, w.Alice, lease("release", w.Widgets, n))
	expect(t, r, 0, "release")
	if r.Stdout != fmt.Sprintf(`{"status":"released","repo":"acme/widgets","issue":%d}`+"\n", n) {
		t.Fatalf("release: %q", r.Stdout)
	}
	r = run(t, s, w.Bob, lease("acquire", w.Widgets, n))
	expect(t, r, 0, "acquire after release")
	if v = parse(t, r); v.Token != 2 || deref(v.Holder) != "bob" {
		t.Fatalf("token after release: %+v", v)
	}

	// The forms of the arguments: #N, quoted words, /owner/repo.git.
	for _, cmd := range []string{
		fmt.Sprintf("collab-lease acquire acme/widgets '#%d'", n),
		fmt.Sprintf(`collab-lease acquire "acme/widgets" %d`, n),
		fmt.Sprintf("collab-lease acquire /acme/widgets.git %d", n),
		fmt.Sprintf("collab-lease acquire '/acme/widgets.git' '%d'", n),
	} {
		r = run(t, s, w.Bob, cmd)
		expect(t, r, 0, cmd)
		if v = parse(t, r); v.Token != 2 || v.Repo != "acme/widgets" {
			t.Fatalf("%s: %+v", cmd, v)
		}
	}
}

func deref(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

func TestSSHRefusalsAgainstGitea(t *testing.T) {
	s, w := newSidecar(t)

	r := run(t, s, w.Alice, lease("acquire", w.Widgets, 99999))
	if r.Code != 1 || r.Stderr != "error: issue not found\n" || r.Stdout != "" {
		t.Fatalf("unknown issue: %+v", r)
	}
	r = run(t, s, w.Alice, lease("acquire", w.Widgets, w.ClosedIssue))
	if r.Code != 1 || r.Stderr != "error: issue is closed\n" {
		t.Fatalf("closed issue: %+v", r)
	}

	// Erin cannot see acme/secret: her reply equals the one for a
	// repository that does not exist, for every verb.
	missing := Repo{Owner: "acme", Name: "no-such-repo"}
	for _, verb := range []string{"acquire", "release", "list"} {
		cmd := func(r Repo) string {
			if verb == "list" {
				return "collab-lease list " + r.FullName()
			}
			return lease(verb, r, w.SecretIssue)
		}
		secret := run(t, s, w.Erin, cmd(w.Secret))
		unknown := run(t, s, w.Erin, cmd(missing))
		if secret != unknown || secret.Code != 1 || secret.Stderr != "error: repository not found\n" {
			t.Fatalf("%s: private %+v vs unknown %+v", verb, secret, unknown)
		}
	}

	// Carol reads but may not write: she can list, not acquire.
	r = run(t, s, w.Alice, lease("acquire", w.Widgets, w.OpenIssue))
	expect(t, r, 0, "alice acquires")
	r = run(t, s, w.Carol, "collab-lease list acme/widgets")
	expect(t, r, 0, "carol lists")
	r = run(t, s, w.Carol, lease("acquire", w.Widgets, w.OpenIssue))
	if r.Code != 1 || r.Stderr != "error: write access to acme/widgets issues is required\n" {
		t.Fatalf("carol acquires: %+v", r)
	}
	r = run(t, s, w.Carol, lease("release", w.Widgets, w.OpenIssue))
	if r.Code != 1 || !strings.Contains(r.Stderr, "write access") {
		t.Fatalf("carol releases: %+v", r)
	}

	// A key Gitea does not know is refused at authentication.
	stranger, err := newKey(t.TempDir(), "stranger")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r = s.SSH(ctx, stranger.Path, "collab-lease help")
	if r.Code != 255 || !strings.Contains(r.Stderr, "Permission denied") {
		t.Fatalf("unknown key: %+v", r)
	}
	// So is a deploy key: it belongs to no user.
	r = s.SSH(ctx, w.DeployKey.Path, "collab-lease help")
	if r.Code != 255 {
		t.Fatalf("deploy key: %+v", r)
	}
}

func TestSSHListAndPullRequestAgainstGitea(t *testing.T) {
	s, w := newSidecar(t)
	expect(t, run(t, s, w.Alice, lease("acquire", w.Widgets, w.OpenIssue, "--ttl", "1h")), 0, "acquire issue")
	// Dave may write issues only, Grace pull requests only.
	r := run(t, s, w.Dave, lease("acquire", w.Widgets, w.PullRequest))
	if r.Code != 1 || !strings.Contains(r.Stderr, "write access to acme/widgets pulls is required") {
		t.Fatalf("dave on a PR: %+v", r)
	}
	r = run(t, s, w.Grace, lease("acquire", w.Widgets, w.PullRequest))
	expect(t, r, 0, "grace acquires the pull request")

	r = run(t, s, w.Erin, "collab-lease list acme/widgets") // anyone may read a public repo
	expect(t, r, 0, "list")
	var list contract.List
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil {
		t.Fatal(err)
	}
	if list.Repo != "acme/widgets" || len(list.Leases) != 2 || list.Leases[0].Issue != w.OpenIssue ||
		list.Leases[1].Issue != w.PullRequest || list.Leases[1].Holder != "grace" {
		t.Fatalf("list: %s", r.Stdout)
	}
}

// Gitea goes away mid-test: commands fail with exit 75 and the ledger does
// not change; when Gitea is back, so is the service, without a restart.
func TestSSHGiteaOutageAgainstGitea(t *testing.T) {
	s, w := newSidecar(t, "--key-cache-ttl", "0", "--perm-cache-ttl", "0", "--forge-timeout", "2s")
	g, _, _ := shared(t)
	expect(t, run(t, s, w.Alice, lease("acquire", w.Widgets, w.OpenIssue)), 0, "acquire before the outage")

	stopGitea(t, g)
	for _, cmd := range []string{
		lease("acquire", w.Widgets, w.ClosedIssue+1000),
		lease("release", w.Widgets, w.OpenIssue),
		lease("acquire", w.Widgets, w.PullRequest),
	} {
		r := run(t, s, w.Bob, cmd)
		if r.Code != 75 || r.Stderr != "error: forge unavailable, try again\n" || r.Stdout != "" {
			t.Fatalf("%s during the outage: %+v", cmd, r)
		}
	}
	startGitea(t, g)
	r := run(t, s, w.Bob, "collab-lease list acme/widgets")
	expect(t, r, 0, "list after the outage")
	var list contract.List
	_ = json.Unmarshal([]byte(r.Stdout), &list)
	if len(list.Leases) != 1 || list.Leases[0].Holder != "alice" || list.Leases[0].Token != 1 {
		t.Fatalf("the ledger changed during the outage: %s", r.Stdout)
	}
}

// Fifty real ssh processes, each a different Gitea user, race for one
// issue: exactly one wins, 49 are told who holds it.
func TestSSHFiftyAgentsRaceAgainstGitea(t *testing.T) {
	s, w := newSidecar(t)
	g, _, _ := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	racers := racerUsers(t, ctx, g, w, 50)
	results := make([]SSHResult, len(racers))
	var wg sync.WaitGroup
	for i, u := range racers {
		wg.Add(1)
		go func(i int, u *User) {
			defer wg.Done()
			results[i] = s.SSH(ctx, u.Key.Path, lease("acquire", w.Widgets, w.PullRequest, "--ttl", "10m"))
		}(i, u)
	}
	wg.Wait()
	oneWinner(t, racers, results, func(i int) string { return "" })
}

// oneWinner checks a race for one issue: exactly one of racers was told
// it acquired (exit 0), every other was told held (exit 4) naming that
// one; it returns the winner's index. where(i) says where racer i raced
// (a replica), for the messages.
func oneWinner(t *testing.T, racers []*User, results []SSHResult, where func(i int) string) int {
	t.Helper()
	won, held, winner, at := 0, 0, "", -1
	for i, r := range results {
		switch r.Code {
		case 0:
			won++
			winner, at = racers[i].Login, i
		case 4:
			held++
		default:
			t.Errorf("%s%s: %s", racers[i].Login, where(i), show(r))
		}
	}
	if won != 1 || held != len(racers)-1 {
		t.Fatalf("%d won, %d held; want 1 and %d", won, held, len(racers)-1)
	}
	for i, r := range results {
		if r.Code == 4 && deref(parse(t, r).Holder) != winner {
			t.Fatalf("%s was told the holder is %s, not %s", racers[i].Login, r.Stdout, winner)
		}
	}
	return at
}

var racers struct {
	once  sync.Once
	users []*User
	err   error
}

// racerUsers creates (once per run) n Gitea users with keys, each a write
// collaborator on Widgets.
func racerUsers(t *testing.T, ctx context.Context, g *Gitea, w *World, n int) []*User {
	t.Helper()
	racers.once.Do(func() {
		var p parallel
		for i := 0; i < n; i++ {
			u := &User{Login: fmt.Sprintf("racer%02d", i), Password: "racer-password-1"}
			racers.users = append(racers.users, u)
			p.Go(func() error {
				k, err := newKey(w.KeyDir, u.Login)
				if err != nil {
					return err
				}
				u.Key = k
				if err := createUser(ctx, g, u, false); err != nil {
					return err
				}
				return g.Admin().Do(ctx, "PUT", "/repos/acme/widgets/collaborators/"+u.Login, map[string]any{"permission": "write"}, nil)
			})
		}
		racers.err = p.Wait()
	})
	if racers.err != nil {
		t.Fatal(racers.err)
	}
	return racers.users
}

func TestSSHShellPtyAndForwardingAreRefusedAgainstGitea(t *testing.T) {
	s, w := newSidecar(t)
	r := run(t, s, w.Alice)
	// The usage's verbs are padded to one width: compare its words.
	if r.Code != 1 || !strings.Contains(r.Stderr, "Hi alice!") || !strings.Contains(strings.Join(strings.Fields(r.Stderr), " "), "collab-lease acquire <owner>/<repo>") {
		t.Fatalf("interactive login: %+v", r)
	}
	r = run(t, s, w.Alice, "-tt", "--", "collab-lease help")
	if r.Code != 255 || !strings.Contains(r.Stderr, "PTY allocation request failed") {
		t.Fatalf("pty: %+v", r)
	}
	r = run(t, s, w.Alice, "-o", "ExitOnForwardFailure=yes", "-R", "127.0.0.1:0:127.0.0.1:9", "--", "collab-lease help")
	if r.Code != 255 || !strings.Contains(r.Stderr, "forwarding failed") {
		t.Fatalf("port forward: %+v", r)
	}

}

// Restarting the sidecar keeps its host key (known_hosts still matches
// under StrictHostKeyChecking) and its leases.
func TestSSHRestartKeepsHostKeyAndLeasesAgainstGitea(t *testing.T) {
	s, w := newSidecar(t)
	expect(t, run(t, s, w.Alice, lease("acquire", w.Widgets, w.OpenIssue)), 0, "acquire")
	if err := s.Stop(20 * time.Second); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s2, err := s.Restart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Stop(20 * time.Second)
	s2.KnownHosts = s.KnownHosts // the old known_hosts must still match
	r := s2.SSH(ctx, w.Bob.Key.Path, lease("acquire", w.Widgets, w.OpenIssue))
	expect(t, r, 4, "bob after restart")
	if v := parse(t, r); deref(v.Holder) != "alice" {
		t.Fatalf("lease lost across restart: %+v", v)
	}
}

// Dave's team grants only the Issues unit of acme/secret: Gitea hides its
// pull requests from him, and so does list, over SSH and HTTP.
func TestListHidesPullRequestsFromIssuesOnlyReadersAgainstGitea(t *testing.T) {
	s, w := newSidecar(t)
	expect(t, run(t, s, w.Alice, lease("acquire", w.Secret, w.SecretIssue)), 0, "alice claims the issue")
	expect(t, run(t, s, w.Alice, lease("acquire", w.Secret, w.SecretPull)), 0, "alice claims the pull request")
	issues := func(body string) []int64 {
		var v contract.List
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		var out []int64
		for _, l := range v.Leases {
			out = append(out, l.Issue)
		}
		return out
	}
	r := run(t, s, w.Heidi, "collab-lease list acme/secret")
	if got := issues(r.Stdout); len(got) != 2 {
		t.Fatalf("heidi (admin collaborator) sees %v", got)
	}
	r = run(t, s, w.Dave, "collab-lease list acme/secret")
	if got := issues(r.Stdout); len(got) != 1 || got[0] != w.SecretIssue {
		t.Fatalf("dave (issues only) sees %v over SSH, want only #%d", got, w.SecretIssue)
	}
	code, _, body := apiGet(t, http.DefaultClient, s.HTTPURL+"/api/v1/repos/acme/secret/leases", "Authorization: token "+w.Dave.Token)
	if got := issues(body); code != 200 || len(got) != 1 || got[0] != w.SecretIssue {
		t.Fatalf("dave (issues only) sees %d %v over HTTP", code, got)
	}
	code, _, body = apiGet(t, http.DefaultClient, fmt.Sprintf("%s/api/v1/repos/acme/secret/issues/%d/lease", s.HTTPURL, w.SecretPull), "Authorization: token "+w.Dave.Token)
	if code != 200 || body != `{"lease":null}` {
		t.Fatalf("dave asks for the pull request's lease: %d %s", code, body)
	}
}
