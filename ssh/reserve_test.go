package ssh

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// reserveLeases is a lease service whose reservation verbs answer out or
// err, as the test says; it keeps what it was asked. Its every other
// call is not expected.
type reserveLeases struct {
	Leases
	out contract.Reservations
	err error

	viewer lease.Viewer
	asked  string
}

func (f *reserveLeases) Recheck(_ context.Context, _ string, was forge.User) (lease.Viewer, error) {
	return lease.Viewer{User: was}, nil
}

func (f *reserveLeases) Reserve(_ context.Context, v lease.Viewer, owner, name string, r lease.ReserveRequest) (contract.Reservations, error) {
	f.viewer, f.asked = v, fmt.Sprintf("reserve %s/%s %+v", owner, name, r)
	return f.out, f.err
}

func (f *reserveLeases) Unreserve(_ context.Context, v lease.Viewer, owner, name string, globs []string, issue int64, force bool) (contract.Reservations, error) {
	f.viewer, f.asked = v, fmt.Sprintf("unreserve %s/%s %q %d %v", owner, name, globs, issue, force)
	return f.out, f.err
}

func (f *reserveLeases) Reservations(_ context.Context, v lease.Viewer, owner, name, path string) (contract.Reservations, error) {
	f.viewer, f.asked = v, fmt.Sprintf("reservations %s/%s %q", owner, name, path)
	return f.out, f.err
}

// The reservation verbs' answers, as the verb gives them: the replies
// exit 0, the refusals the service answers with the contract's JSON
// (conflict, not_holder, limit) exit 4 with that JSON, the rest their
// error line; each asks the service exactly what its command line says.
func TestReservationVerbsAnswerByTheirReply(t *testing.T) {
	alice := ConnInfo{Fingerprint: "SHA256:a", UserID: 7, Login: "alice"}
	agent, issue := "a1", int64(42)
	mine := contract.Reservation{Glob: "src/auth/**", Holder: "alice", Agent: &agent, Issue: &issue}
	theirs := contract.Reservation{Glob: "src/**", Holder: "bob"}
	for _, c := range []struct {
		name, line string
		out        contract.Reservations
		err        error
		asked      string
		code       int
		stdout     string
		stderr     string
		outcome    string
	}{
		{name: "reserved", line: "collab-lease reserve acme/widgets src/auth/** 'docs/a b.md' src/auth/** --issue 42 --shared --agent a1",
			out:   contract.Reservations{Status: contract.StatusReserved, Repo: "acme/widgets", Reservations: []contract.Reservation{mine}},
			asked: `reserve acme/widgets {Globs:[src/auth/** docs/a b.md] Shared:true Issue:42 TTL:0s}`, code: contract.ExitOK,
			stdout:  `{"status":"reserved","repo":"acme/widgets","reservations":[{"glob":"src/auth/**","shared":false,"holder":"alice","agent":"a1","issue":42,"expires_at":null}]}` + "\n",
			outcome: contract.StatusReserved},
		{name: "for a ttl", line: "collab-lease reserve acme/widgets docs/ --ttl 30m",
			out:   contract.Reservations{Status: contract.StatusReserved, Repo: "acme/widgets"},
			asked: `reserve acme/widgets {Globs:[docs/] Shared:false Issue:0 TTL:30m0s}`, code: contract.ExitOK,
			stdout: `{"status":"reserved","repo":"acme/widgets","reservations":[]}` + "\n", outcome: contract.StatusReserved},
		{name: "conflict", line: "collab-lease reserve acme/widgets src/auth/** --ttl 1h",
			err:   &lease.ConflictError{Reply: contract.ReserveConflict{Status: contract.StatusConflict, Repo: "acme/widgets", With: []contract.Reservation{theirs}}},
			asked: `reserve acme/widgets {Globs:[src/auth/**] Shared:false Issue:0 TTL:1h0m0s}`, code: contract.ExitConflict,
			stdout:  `{"status":"conflict","repo":"acme/widgets","with":[{"glob":"src/**","shared":false,"holder":"bob","agent":null,"issue":null,"expires_at":null}]}` + "\n",
			outcome: contract.StatusConflict},
		{name: "not the holder", line: "collab-lease reserve acme/widgets src/ --issue 42",
			err:   &lease.ConflictError{Reply: contract.Conflict{Status: contract.StatusNotHolder, Repo: "acme/widgets", Issue: 42}},
			asked: `reserve acme/widgets {Globs:[src/] Shared:false Issue:42 TTL:0s}`, code: contract.ExitConflict,
			stdout:  `{"status":"not_holder","repo":"acme/widgets","issue":42,"holder":null,"agent":null,"expires_at":null}` + "\n",
			outcome: contract.StatusNotHolder},
		{name: "past the cap", line: "collab-lease reserve acme/widgets src/ --ttl 5m",
			err: &lease.ConflictError{Reply: contract.Limit{Status: contract.StatusLimit, Repo: "acme/widgets", Holder: "alice",
				Scope: "reservations", Limit: 2, Live: 2}},
			asked: `reserve acme/widgets {Globs:[src/] Shared:false Issue:0 TTL:5m0s}`, code: contract.ExitConflict,
			stdout:  `{"status":"limit","repo":"acme/widgets","issue":null,"holder":"alice","agent":null,"scope":"reservations","limit":2,"live":2}` + "\n",
			outcome: contract.StatusLimit},
		{name: "no write access", line: "collab-lease reserve acme/widgets src/ --ttl 5m",
			err:   &lease.WriteRequiredError{Repo: "acme/widgets", Unit: "issues"},
			asked: `reserve acme/widgets {Globs:[src/] Shared:false Issue:0 TTL:5m0s}`, code: contract.ExitError,
			stderr: "error: write access to acme/widgets issues is required\n", outcome: "forbidden"},
		{name: "Gitea unreachable", line: "collab-lease reservations acme/widgets",
			err: fmt.Errorf("reservations: %w", forge.ErrUnavailable), asked: `reservations acme/widgets ""`,
			code: contract.ExitTempFail, stderr: contract.LineForgeUnavailable + "\n", outcome: "forge_unavailable"},
		{name: "unreserved", line: "collab-lease unreserve acme/widgets src/auth/** --issue 42 --agent a1",
			out:   contract.Reservations{Status: contract.StatusUnreserved, Repo: "acme/widgets", Reservations: []contract.Reservation{mine}},
			asked: `unreserve acme/widgets ["src/auth/**"] 42 false`, code: contract.ExitOK,
			stdout:  `{"status":"unreserved","repo":"acme/widgets","reservations":[{"glob":"src/auth/**","shared":false,"holder":"alice","agent":"a1","issue":42,"expires_at":null}]}` + "\n",
			outcome: contract.StatusUnreserved},
		{name: "unreserved by force", line: "collab-lease unreserve acme/widgets --force",
			out:   contract.Reservations{Status: contract.StatusUnreserved, Repo: "acme/widgets"},
			asked: `unreserve acme/widgets [] 0 true`, code: contract.ExitOK,
			stdout: `{"status":"unreserved","repo":"acme/widgets","reservations":[]}` + "\n", outcome: "force_unreserved"},
		{name: "listed", line: "collab-lease reservations acme/widgets --path src/auth/login.go",
			out:   contract.Reservations{Status: contract.StatusReservations, Repo: "acme/widgets", Reservations: []contract.Reservation{theirs}},
			asked: `reservations acme/widgets "src/auth/login.go"`, code: contract.ExitOK,
			stdout:  `{"status":"reservations","repo":"acme/widgets","reservations":[{"glob":"src/**","shared":false,"holder":"bob","agent":null,"issue":null,"expires_at":null}]}` + "\n",
			outcome: "listed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &reserveLeases{out: c.out, err: c.err}
			v := &LeaseVerb{Leases: f, Logger: slog.New(slog.DiscardHandler)}
			got := v.Exec(context.Background(), alice, c.line)
			if got.Code != c.code || string(got.Stdout) != c.stdout || got.Stderr != c.stderr || got.Outcome != c.outcome {
				t.Errorf("got exit %d %q %q (%s), want exit %d %q %q (%s)", got.Code, got.Stdout, got.Stderr, got.Outcome, c.code, c.stdout, c.stderr, c.outcome)
			}
			if f.asked != c.asked {
				t.Errorf("asked %s, want %s", f.asked, c.asked)
			}
			if want := map[bool]string{true: "a1", false: ""}[strings.Contains(c.line, "--agent a1")]; f.viewer.Login != "alice" || f.viewer.Agent != want {
				t.Errorf("asked as %+v", f.viewer)
			}
		})
	}
}

// What the grammar refuses never reaches the service: an --issue with a
// --ttl, a reserve of no glob, a glob that starts with "-" (a flag), and
// one that leaves the repository.
func TestReservationVerbsRefuseBadLines(t *testing.T) {
	f := &reserveLeases{}
	v := &LeaseVerb{Leases: f, Logger: slog.New(slog.DiscardHandler)}
	for _, line := range []string{
		"collab-lease reserve acme/widgets src/ --issue 42 --ttl 5m",
		"collab-lease reserve acme/widgets --ttl 5m",
		"collab-lease reserve acme/widgets -src/ --ttl 5m",
		"collab-lease reserve acme/widgets ../x --ttl 5m",
		"collab-lease reserve acme/widgets /src --ttl 5m",
		"collab-lease unreserve acme/widgets --shared",
		"collab-lease reservations acme/widgets src/",
		"collab-lease reservations acme/widgets --path src/",
	} {
		r := v.Exec(context.Background(), ConnInfo{Fingerprint: "SHA256:a", UserID: 7, Login: "alice"}, line)
		if r.Code != contract.ExitError || !strings.HasPrefix(r.Stderr, "error: usage: ") || r.Outcome != "usage" {
			t.Errorf("%s: %+v", line, r)
		}
	}
	if f.asked != "" {
		t.Errorf("the service was asked %s", f.asked)
	}
}

// Path reservations through the real OpenSSH client: a reserve for a
// TTL and one with a claim, a conflict naming what stands in the way,
// not_holder, a reserve with no anchor, the listing (for a reader too),
// unreserve of one's own and, by a repository admin, of another's.
func TestReservationsOverSSH(t *testing.T) {
	w := newWorld(t)
	expires := w.clock.Now().Add(30 * time.Minute).UTC().Format(time.RFC3339)
	aliceAuth := `{"glob":"src/auth/**","shared":false,"holder":"alice","agent":null,"issue":null,"expires_at":"` + expires + `"}`
	r := w.ssh("alice", "collab-lease reserve acme/widgets 'src/auth/**' --ttl 30m")
	if r.code != 0 || r.stdout != `{"status":"reserved","repo":"acme/widgets","reservations":[`+aliceAuth+`]}`+"\n" {
		t.Fatalf("reserve: %+v", r)
	}
	r = w.ssh("alice", "collab-lease reserve acme/widgets docs/")
	if r.code != 1 || !strings.HasPrefix(r.stderr, "error: usage: ") || !strings.Contains(r.stderr, "--ttl") {
		t.Fatalf("a reserve with no anchor outside a session: %+v", r)
	}
	r = w.ssh("bob", "collab-lease reserve acme/widgets src/auth/login.go docs/ --ttl 10m")
	if r.code != 4 || r.stdout != `{"status":"conflict","repo":"acme/widgets","with":[`+aliceAuth+`]}`+"\n" {
		t.Fatalf("bob's reserve of a path under alice's: %+v", r)
	}
	r = w.ssh("bob", "collab-lease reserve acme/widgets docs/ --issue 42")
	if m := decode(t, r.stdout); r.code != 4 || m["status"] != "not_holder" {
		t.Fatalf("bob's reserve with a claim he does not hold: %+v", r)
	}
	if r := w.ssh("bob", "collab-lease acquire acme/widgets 43 --ttl 1h --agent b1"); r.code != 0 {
		t.Fatalf("acquire: %+v", r)
	}
	claimEnds := w.clock.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	bobDocs := `{"glob":"docs/","shared":true,"holder":"bob","agent":"b1","issue":43,"expires_at":"` + claimEnds + `"}`
	r = w.ssh("bob", "collab-lease reserve acme/widgets docs/ --issue 43 --shared")
	if m := decode(t, r.stdout); r.code != 4 || m["status"] != "not_holder" {
		t.Fatalf("the account's reserve with its agent's claim: %+v", r)
	}
	r = w.ssh("bob", "collab-lease reserve acme/widgets docs/ --issue 43 --shared --agent b1")
	if r.code != 0 || r.stdout != `{"status":"reserved","repo":"acme/widgets","reservations":[`+bobDocs+`]}`+"\n" {
		t.Fatalf("b1's shared reserve with its claim: %+v", r)
	}
	r = w.ssh("carol", "collab-lease reserve acme/widgets lib/ --ttl 5m")
	if r.code != 1 || r.stderr != "error: write access to acme/widgets issues is required\n" {
		t.Fatalf("a reader's reserve: %+v", r)
	}
	r = w.ssh("carol", "collab-lease reservations acme/widgets")
	if r.code != 0 || r.stdout != `{"status":"reservations","repo":"acme/widgets","reservations":[`+aliceAuth+`,`+bobDocs+`]}`+"\n" {
		t.Fatalf("a reader's listing: %+v", r)
	}
	r = w.ssh("carol", "collab-lease reservations acme/widgets --path docs/index.md")
	if r.code != 0 || r.stdout != `{"status":"reservations","repo":"acme/widgets","reservations":[`+bobDocs+`]}`+"\n" {
		t.Fatalf("the listing of one path: %+v", r)
	}
	r = w.ssh("carol", "collab-lease reservations acme/secret")
	if r.code != 1 || r.stderr != contract.LineRepoNotFound+"\n" {
		t.Fatalf("the listing of an invisible repository: %+v", r)
	}
	r = w.ssh("carol", "collab-lease check acme/widgets 43 --token 1")
	if m := decode(t, r.stdout); r.code != 0 || !strings.Contains(r.stdout, `"reservations":[`+bobDocs+`]`) {
		t.Fatalf("check lists the claim's reservations: %+v %v", r, m)
	}

	r = w.ssh("bob", "collab-lease unreserve acme/widgets 'src/auth/**'")
	if r.code != 0 || r.stdout != `{"status":"unreserved","repo":"acme/widgets","reservations":[]}`+"\n" {
		t.Fatalf("bob's unreserve of alice's: %+v", r)
	}
	r = w.ssh("bob", "collab-lease unreserve acme/widgets --force")
	if r.code != 1 || r.stderr != "error: admin access to acme/widgets is required\n" {
		t.Fatalf("a writer's unreserve --force: %+v", r)
	}
	w.forge.Grant("acme/widgets", "alice", forgetest.Admin)
	r = w.ssh("alice", "collab-lease unreserve acme/widgets docs/ --force")
	if r.code != 0 || r.stdout != `{"status":"unreserved","repo":"acme/widgets","reservations":[`+bobDocs+`]}`+"\n" {
		t.Fatalf("an admin's unreserve --force: %+v", r)
	}
	r = w.ssh("alice", "collab-lease unreserve acme/widgets")
	if r.code != 0 || r.stdout != `{"status":"unreserved","repo":"acme/widgets","reservations":[`+aliceAuth+`]}`+"\n" {
		t.Fatalf("alice's unreserve of all hers: %+v", r)
	}
	r = w.ssh("carol", "collab-lease reservations acme/widgets")
	if r.code != 0 || r.stdout != `{"status":"reservations","repo":"acme/widgets","reservations":[]}`+"\n" {
		t.Fatalf("the listing at the end: %+v", r)
	}
}

// In a session, a reserve with neither --issue nor --ttl lives with the
// session: it shows the session's expiry, and goes when the session
// ends cleanly. One with --issue lives with that claim instead, one
// with --ttl for its ttl.
func TestReserveInASessionLivesWithIt(t *testing.T) {
	w := newWorld(t)
	s := w.openSession("bob", "--agent b1 --grace 10s")
	m := s.do("reserve acme/widgets lib/")
	res, _ := m["reservations"].([]any)
	if m["status"] != "reserved" || m["exit"] != 0.0 || len(res) != 1 {
		t.Fatalf("reserve in a session: %v", m)
	}
	if x := res[0].(map[string]any); x["holder"] != "bob" || x["agent"] != "b1" || x["issue"] != nil || x["expires_at"] == nil {
		t.Fatalf("the session's reservation: %v", x)
	}
	if m := s.do("acquire acme/widgets 42"); m["status"] != "acquired" {
		t.Fatalf("acquire in the session: %v", m)
	}
	m = s.do("reserve acme/widgets src/ --issue 42")
	if res, _ := m["reservations"].([]any); m["exit"] != 0.0 || len(res) != 1 || res[0].(map[string]any)["issue"] != 42.0 {
		t.Fatalf("reserve with the session's claim: %v", m)
	}
	// A --ttl given in the session is the anchor: it outlives the session.
	m = s.do("reserve acme/widgets tools/ --ttl 1h")
	if res, _ := m["reservations"].([]any); m["exit"] != 0.0 || len(res) != 1 || res[0].(map[string]any)["issue"] != nil {
		t.Fatalf("reserve with a ttl in the session: %v", m)
	}
	if m := s.do("reserve acme/widgets src/ --agent b2"); m["status"] != "error" || m["exit"] != 1.0 {
		t.Fatalf("--agent in a session: %v", m)
	}
	r := w.ssh("alice", "collab-lease reserve acme/widgets lib/x.go --ttl 5m")
	if m := decode(t, r.stdout); r.code != 4 || m["status"] != "conflict" {
		t.Fatalf("alice's reserve under the session's: %+v", r)
	}
	if err := s.in.Close(); err != nil {
		t.Fatal(err)
	}
	if code := s.exit(); code != 0 {
		t.Fatalf("the session's exit: %d", code)
	}
	r = w.ssh("carol", "collab-lease reservations acme/widgets")
	var left struct{ Reservations []struct{ Glob string } }
	if err := json.Unmarshal([]byte(r.stdout), &left); r.code != 0 || err != nil || len(left.Reservations) != 1 || left.Reservations[0].Glob != "tools/" {
		t.Fatalf("the listing once the session ended, want tools/ alone: %+v", r)
	}
}
