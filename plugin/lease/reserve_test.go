package lease_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// agentOf is the viewer login as its agent.
func (w *world) agentOf(login, agent string) lease.Viewer {
	v := w.as(login)
	v.Agent = agent
	return v
}

// answer is what the caller reads of a reply: the JSON of a success,
// or of a *ConflictError's reply (exit 4); err is any other error.
func answer[T any](reply T, err error) (string, error) {
	var c *lease.ConflictError
	var v any = reply
	switch {
	case errors.As(err, &c):
		if info := lease.Classify(err); info.Class != lease.Conflict {
			return "", fmt.Errorf("%v is classified %v, want a conflict (exit 4)", err, info.Class)
		}
		v = c.Reply
	case err != nil:
		return "", err
	}
	b, err := json.Marshal(v)
	return string(b), err
}

// mustAnswer returns answer's string, failing t on its error.
func mustAnswer(t *testing.T) func(string, error) string {
	return func(got string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
}

// Who may reserve, unreserve and list: an account with write access
// reserves and unreserves (acquire's rule), a reader only lists, an
// anonymous viewer lists a public repository only, only an admin
// removes another's reservation, and a repository the viewer may not see
// is one that does not exist, for every verb.
func TestReserveAccess(t *testing.T) {
	f := leasetest.Acme()
	f.AddUser("root")
	f.Grant("acme/widgets", "root", forgetest.Admin)
	w := worldOf(leasetest.New(t, leasetest.Options{Forge: f}))
	ttl := lease.ReserveRequest{Globs: []string{"src/**"}, TTL: time.Minute}
	if _, err := w.svc.Reserve(bg, w.as(""), "acme", "widgets", ttl); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("anonymous reserve: %v, want invalid (no account)", err)
	}
	if _, err := w.svc.Unreserve(bg, w.as(""), "acme", "widgets", nil, 0, false); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("anonymous unreserve: %v, want invalid (no account)", err)
	}
	readOnly := &lease.WriteRequiredError{Repo: "acme/widgets", Unit: "issues"}
	if _, err := w.svc.Reserve(bg, w.as("reader"), "acme", "widgets", ttl); !sameErr(err, readOnly) {
		t.Errorf("a reader's reserve: %v, want %v", err, readOnly)
	}
	if _, err := w.svc.Unreserve(bg, w.as("reader"), "acme", "widgets", nil, 0, false); !sameErr(err, readOnly) {
		t.Errorf("a reader's unreserve: %v, want %v", err, readOnly)
	}
	got, err := w.svc.Reserve(bg, w.as("alice"), "acme", "widgets", ttl)
	if err != nil || got.Status != contract.StatusReserved || len(got.Reservations) != 1 {
		t.Fatalf("alice's reserve: %+v %v", got, err)
	}
	for _, who := range []string{"reader", ""} {
		if l, err := w.svc.Reservations(bg, w.as(who), "acme", "widgets", ""); err != nil || l.Status != contract.StatusReservations || len(l.Reservations) != 1 {
			t.Errorf("%q lists: %+v %v, want alice's reservation", who, l, err)
		}
	}
	notAdmin := &lease.WriteRequiredError{Repo: "acme/widgets", Admin: true}
	if _, err := w.svc.Unreserve(bg, w.as("bob"), "acme", "widgets", []string{"src/**"}, 0, true); !sameErr(err, notAdmin) {
		t.Errorf("bob's forced unreserve: %v, want %v", err, notAdmin)
	}
	if u, err := w.svc.Unreserve(bg, w.as("bob"), "acme", "widgets", []string{"src/**"}, 0, false); err != nil || u.Status != contract.StatusUnreserved || len(u.Reservations) != 0 {
		t.Errorf("bob's unreserve of alice's glob: %+v %v, want nothing removed", u, err)
	}
	u, err := w.svc.Unreserve(bg, w.as("root"), "acme", "widgets", []string{"src/**"}, 0, true)
	if err != nil || len(u.Reservations) != 1 || u.Reservations[0].Holder != "alice" {
		t.Fatalf("the admin's forced unreserve: %+v %v, want alice's removed", u, err)
	}
	// Not found, whether it does not exist or may not be seen.
	for _, c := range []struct{ who, repo string }{{"bob", "secret"}, {"", "secret"}, {"alice", "nothing"}} {
		if _, err := w.svc.Reserve(bg, w.as(c.who), "acme", c.repo, ttl); c.who != "" && !errors.Is(err, lease.ErrRepoNotFound) {
			t.Errorf("%q reserves in acme/%s: %v, want not found", c.who, c.repo, err)
		}
		if _, err := w.svc.Unreserve(bg, w.as(c.who), "acme", c.repo, nil, 0, false); c.who != "" && !errors.Is(err, lease.ErrRepoNotFound) {
			t.Errorf("%q unreserves in acme/%s: %v, want not found", c.who, c.repo, err)
		}
		if _, err := w.svc.Reservations(bg, w.as(c.who), "acme", c.repo, ""); !errors.Is(err, lease.ErrRepoNotFound) {
			t.Errorf("%q lists acme/%s: %v, want not found", c.who, c.repo, err)
		}
	}
	// --issue of a number whose unit the caller may not read is an issue
	// that does not exist: not_holder would name its claim's holder.
	if _, err := w.svc.Acquire(bg, w.as("alice"), "acme", "tools", 2, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Reserve(bg, w.as("dave"), "acme", "tools", lease.ReserveRequest{Globs: []string{"x"}, Issue: 2}); !errors.Is(err, lease.ErrIssueNotFound) {
		t.Errorf("dave's reserve with pull request 2 of private acme/tools, which he may not see: %v, want not found", err)
	}
	// What a caller gives wrong is invalid before anything is asked.
	for _, bad := range []lease.ReserveRequest{
		{Globs: []string{"src/**"}},                             // no claim, session or ttl
		{Globs: []string{"src/**"}, Issue: 1, TTL: time.Minute}, // both
		{Globs: []string{"/src"}, TTL: time.Minute},
		{Globs: nil, TTL: time.Minute},
	} {
		if _, err := w.svc.Reserve(bg, w.as("alice"), "acme", "widgets", bad); !errors.Is(err, lease.ErrInvalid) && !errors.Is(err, contract.ErrUsage) {
			t.Errorf("reserve %+v: %v, want invalid", bad, err)
		}
	}
}

// A reserve's replies: the caller's reservations; a conflict naming
// who is in the way (holder, agent, claim, glob, expiry), with nothing
// reserved; not_holder for a claim the caller does not hold; the cap as
// a limit of scope reservations. A reader of one unit sees no claim's
// number.
func TestReserveReplies(t *testing.T) {
	must := mustAnswer(t)
	w := worldOf(leasetest.New(t, leasetest.Options{Forge: leasetest.Acme(), Ledger: []models.Option{models.WithReservationCap(3)}}))
	a1, a2 := w.agentOf("alice", "a1"), w.agentOf("alice", "a2")
	if _, err := w.svc.Acquire(bg, a1, "acme", "widgets", 1, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Acquire(bg, a2, "acme", "widgets", 4, 0); err != nil {
		t.Fatal(err)
	}
	until := w.clock.Now().Add(10 * time.Minute).UTC().Format(time.RFC3339)
	got := must(answer(w.svc.Reserve(bg, a1, "acme", "widgets", lease.ReserveRequest{Globs: []string{"src/auth/**"}, Issue: 1})))
	want := `{"status":"reserved","repo":"acme/widgets","reservations":[{"glob":"src/auth/**","shared":false,"holder":"alice","agent":"a1","issue":1,"expires_at":"` + until + `"}]}`
	if got != want {
		t.Fatalf("a1's reserve:\n%s\nwant\n%s", got, want)
	}
	got = must(answer(w.svc.Reserve(bg, a2, "acme", "widgets", lease.ReserveRequest{Globs: []string{"docs/x.md", "src/auth/login.go"}, Issue: 4})))
	want = `{"status":"conflict","repo":"acme/widgets","with":[{"glob":"src/auth/**","shared":false,"holder":"alice","agent":"a1","issue":1,"expires_at":"` + until + `"}]}`
	if got != want {
		t.Fatalf("a2's reserve over a1's:\n%s\nwant\n%s", got, want)
	}
	if l, err := w.svc.Reservations(bg, a2, "acme", "widgets", "docs/x.md"); err != nil || len(l.Reservations) != 0 {
		t.Fatalf("after a refused reserve, docs/x.md: %+v %v, want nothing reserved", l, err)
	}
	// A claim the caller does not hold: not_holder, naming who does.
	got = must(answer(w.svc.Reserve(bg, a2, "acme", "widgets", lease.ReserveRequest{Globs: []string{"lib/**"}, Issue: 1})))
	want = `{"status":"not_holder","repo":"acme/widgets","issue":1,"holder":"alice","agent":"a1","expires_at":"` + until + `"}`
	if got != want {
		t.Fatalf("a2's reserve for a1's claim:\n%s\nwant\n%s", got, want)
	}
	got = must(answer(w.svc.Reserve(bg, w.as("bob"), "acme", "widgets", lease.ReserveRequest{Globs: []string{"lib/**"}, Issue: 3})))
	want = `{"status":"not_holder","repo":"acme/widgets","issue":3,"holder":null,"agent":null,"expires_at":null}`
	if got != want {
		t.Fatalf("bob's reserve for a claim nobody holds:\n%s\nwant\n%s", got, want)
	}
	// The cap (three): a1 holds one; three more are one too many.
	got = must(answer(w.svc.Reserve(bg, a1, "acme", "widgets", lease.ReserveRequest{Globs: []string{"a", "b", "c"}, Issue: 1})))
	want = `{"status":"limit","repo":"acme/widgets","issue":1,"holder":"alice","agent":"a1","scope":"reservations","limit":3,"live":1}`
	if got != want {
		t.Fatalf("a1's reserve past the cap:\n%s\nwant\n%s", got, want)
	}
	got = must(answer(w.svc.Reserve(bg, a2, "acme", "widgets", lease.ReserveRequest{Globs: []string{"a", "b", "c", "d"}, TTL: time.Minute})))
	want = `{"status":"limit","repo":"acme/widgets","issue":null,"holder":"alice","agent":"a2","scope":"reservations","limit":3,"live":0}`
	if got != want {
		t.Fatalf("a2's reserve of a ttl past the cap:\n%s\nwant\n%s", got, want)
	}
	// dave writes the issues of acme/tools but may not read its pull
	// requests: the claim's number is null to him.
	if _, err := w.svc.Acquire(bg, w.as("alice"), "acme", "tools", 1, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Reserve(bg, w.as("alice"), "acme", "tools", lease.ReserveRequest{Globs: []string{"x/"}, Issue: 1}); err != nil {
		t.Fatal(err)
	}
	got = must(answer(w.svc.Reserve(bg, w.as("dave"), "acme", "tools", lease.ReserveRequest{Globs: []string{"x/y"}, TTL: time.Minute})))
	want = `{"status":"conflict","repo":"acme/tools","with":[{"glob":"x/","shared":false,"holder":"alice","agent":null,"issue":null,"expires_at":null}]}`
	if got != want {
		t.Fatalf("dave's reserve:\n%s\nwant\n%s", got, want)
	}
}

// A reserve made in a session with neither --issue nor --ttl lives as
// long as the session: its expiry is the session's, and it ends with
// the session, cleanly or when it lapses, to the second. With --issue
// it lives with the claim instead.
func TestReserveInASessionLivesWithIt(t *testing.T) {
	for _, end := range []string{"clean", "lapse"} {
		t.Run(end, func(t *testing.T) {
			must := mustAnswer(t)
			w := newWorld(t)
			ss, _, err := w.svc.OpenSession(bg, w.agentOf("alice", "a1"), 10*time.Second, "")
			if err != nil {
				t.Fatal(err)
			}
			defer ss.Close()
			v := ss.Viewer()
			got, err := w.svc.Reserve(bg, v, "acme", "widgets", lease.ReserveRequest{Globs: []string{"src/**"}})
			if err != nil || len(got.Reservations) != 1 || got.Reservations[0].Issue != nil || got.Reservations[0].ExpiresAt == nil ||
				!time.Time(*got.Reservations[0].ExpiresAt).Equal(w.clock.Now().Add(10*time.Second)) {
				t.Fatalf("a reserve in the session: %s %v, want one expiring with the session's grace", must(answer(got, nil)), err)
			}
			if _, err := w.svc.Acquire(bg, v, "acme", "widgets", 1, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := w.svc.Reserve(bg, v, "acme", "widgets", lease.ReserveRequest{Globs: []string{"docs/**"}, Issue: 1}); err != nil {
				t.Fatal(err)
			}
			listed := func() int {
				l, err := w.svc.Reservations(bg, w.as("bob"), "acme", "widgets", "")
				if err != nil {
					t.Fatal(err)
				}
				return len(l.Reservations)
			}
			if end == "clean" {
				if err := ss.End(bg); err != nil {
					t.Fatal(err)
				}
			} else {
				w.clock.Advance(10*time.Second - time.Nanosecond)
				if n := listed(); n != 2 {
					t.Fatalf("before the grace is over: %d reservations listed, want both", n)
				}
				w.clock.Advance(time.Nanosecond)
			}
			// The session's end ends its reservation, and its claim
			// (which it kept alive), so the claim's too.
			if n := listed(); n != 0 {
				t.Fatalf("after the session's end: %d reservations listed, want none", n)
			}
			if _, err := w.svc.Reserve(bg, w.as("bob"), "acme", "widgets", lease.ReserveRequest{Globs: []string{"src/x.go", "docs/x"}, TTL: time.Minute}); err != nil {
				t.Fatalf("bob's reserve after the session's end: %v", err)
			}
		})
	}
}

// check of a claim's current token lists the claim's reservations, and
// only those: not its holder's others, nor another claim's.
func TestCheckListsTheClaimsReservations(t *testing.T) {
	must := mustAnswer(t)
	w := newWorld(t)
	a1 := w.agentOf("alice", "a1")
	l, err := w.svc.Acquire(bg, a1, "acme", "widgets", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Acquire(bg, a1, "acme", "widgets", 4, 0); err != nil {
		t.Fatal(err)
	}
	for _, r := range []lease.ReserveRequest{
		{Globs: []string{"src/auth/**", "docs/auth.md"}, Issue: 1},
		{Globs: []string{"lib/**"}, Shared: true, Issue: 1},
		{Globs: []string{"src/other/**"}, Issue: 4},
		{Globs: []string{"tmp/"}, TTL: time.Minute},
	} {
		if _, err := w.svc.Reserve(bg, a1, "acme", "widgets", r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := w.svc.Check(bg, w.as("reader"), "acme", "widgets", 1, l.Token)
	if err != nil || got.Reservations == nil {
		t.Fatalf("check: %+v %v", got, err)
	}
	var globs []string
	for _, r := range *got.Reservations {
		if r.Issue == nil || *r.Issue != 1 || r.Holder != "alice" || *r.Agent != "a1" || r.ExpiresAt != nil {
			t.Errorf("check lists %s", must(answer(r, nil)))
		}
		globs = append(globs, r.Glob)
	}
	if strings.Join(globs, " ") != "src/auth/** docs/auth.md lib/**" {
		t.Errorf("check lists %q, want the claim's three, oldest first", globs)
	}
	// A claim without reservations: [] (never null, never absent).
	if _, err := w.svc.Unreserve(bg, a1, "acme", "widgets", nil, 1, false); err != nil {
		t.Fatal(err)
	}
	if got := must(answer(w.svc.Check(bg, a1, "acme", "widgets", 1, l.Token))); !strings.HasSuffix(got, `"reservations":[]}`) {
		t.Errorf("check of a claim without reservations: %s", got)
	}
}
