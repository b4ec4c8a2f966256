package lease_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/clocktest"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
	"github.com/collab-lease/collab-lease/plugin/live"
)

var bg = context.Background()

// world is the forge and ledger every rule below is checked against
// (leasetest.Acme).
type world struct {
	forge  *forgetest.Forge
	clock  *clocktest.Clock
	svc    *lease.Service
	ledger *models.Store
	bus    *changes.Bus // the service's
	hub    *live.Hub    // the service's
}

func newWorld(t *testing.T, opts ...lease.Option) *world {
	t.Helper()
	return worldOf(leasetest.New(t, leasetest.Options{Forge: leasetest.Acme(), Service: opts}))
}

func worldOf(lw *leasetest.World) *world {
	return &world{forge: lw.Forge, clock: lw.Clock, svc: lw.Service, ledger: lw.Ledger, bus: lw.Bus, hub: lw.Hub}
}

func (w *world) as(login string) lease.Viewer { return lease.Viewer{User: w.forge.User(login)} }

// The rules of who may do what, one row each: the verb, who asks, on
// what, and the outcome (a status of the contract, or the error).
func TestServiceRules(t *testing.T) {
	type step struct {
		verb   string // acquire, renew, release, list, lease
		who    string
		repo   string
		n      int64
		status string // the reply's status ("" for list and lease)
		err    error  // or the error it must be
		holder string // held/not_holder: the holder named ("" = null)
		count  int    // list: the leases shown
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"acquire and re-acquire", []step{
			{verb: "acquire", who: "alice", repo: "acme/widgets", n: 1, status: "acquired"},
			{verb: "acquire", who: "alice", repo: "acme/widgets", n: 1, status: "acquired"},
			{verb: "acquire", who: "bob", repo: "acme/widgets", n: 1, status: "held", holder: "alice"},
			{verb: "renew", who: "bob", repo: "acme/widgets", n: 1, status: "not_holder", holder: "alice"},
			{verb: "release", who: "bob", repo: "acme/widgets", n: 1, status: "not_holder", holder: "alice"},
			{verb: "release", who: "alice", repo: "acme/widgets", n: 1, status: "released"},
			{verb: "renew", who: "alice", repo: "acme/widgets", n: 1, status: "not_holder"},
		}},
		{"unknown and invisible repositories are one answer", []step{
			{verb: "acquire", who: "alice", repo: "acme/nothing", n: 1, err: lease.ErrRepoNotFound},
			{verb: "acquire", who: "bob", repo: "acme/secret", n: 1, err: lease.ErrRepoNotFound},
			{verb: "release", who: "bob", repo: "acme/secret", n: 1, err: lease.ErrRepoNotFound},
			{verb: "list", who: "bob", repo: "acme/secret", err: lease.ErrRepoNotFound},
			{verb: "list", who: "", repo: "acme/secret", err: lease.ErrRepoNotFound},
			{verb: "lease", who: "", repo: "acme/secret", n: 1, err: lease.ErrRepoNotFound},
		}},
		{"acquire needs write access to the unit and an open issue", []step{
			{verb: "acquire", who: "reader", repo: "acme/widgets", n: 1, err: &lease.WriteRequiredError{Repo: "acme/widgets", Unit: "issues"}},
			{verb: "acquire", who: "reader", repo: "acme/widgets", n: 2, err: &lease.WriteRequiredError{Repo: "acme/widgets", Unit: "pulls"}},
			{verb: "release", who: "reader", repo: "acme/widgets", n: 1, err: &lease.WriteRequiredError{Repo: "acme/widgets", Unit: "issues"}},
			{verb: "acquire", who: "alice", repo: "acme/widgets", n: 3, err: lease.ErrIssueClosed},
			{verb: "acquire", who: "alice", repo: "acme/widgets", n: 99, err: lease.ErrIssueNotFound},
			{verb: "acquire", who: "alice", repo: "acme/widgets", n: 2, status: "acquired"},
		}},
		{"renew and release of nothing keep the contract of a full reader", []step{
			{verb: "release", who: "alice", repo: "acme/widgets", n: 99, status: "released"},
			{verb: "renew", who: "alice", repo: "acme/widgets", n: 99, status: "not_holder"},
		}},
		{"a reader limited to issues learns nothing of pull requests", []step{
			{verb: "acquire", who: "alice", repo: "acme/tools", n: 2, status: "acquired"},
			{verb: "acquire", who: "alice", repo: "acme/tools", n: 1, status: "acquired"},
			{verb: "acquire", who: "dave", repo: "acme/tools", n: 2, err: lease.ErrIssueNotFound},
			{verb: "release", who: "dave", repo: "acme/tools", n: 2, err: lease.ErrIssueNotFound},
			{verb: "renew", who: "dave", repo: "acme/tools", n: 2, err: lease.ErrIssueNotFound},
			{verb: "release", who: "dave", repo: "acme/tools", n: 99, err: lease.ErrIssueNotFound},
			{verb: "lease", who: "dave", repo: "acme/tools", n: 2, count: 0},
			{verb: "list", who: "dave", repo: "acme/tools", count: 1},
			{verb: "list", who: "alice", repo: "acme/tools", count: 2},
			{verb: "release", who: "dave", repo: "acme/tools", n: 1, status: "not_holder", holder: "alice"},
			{verb: "acquire", who: "dave", repo: "acme/tools", n: 4, status: "acquired"},
			{verb: "release", who: "dave", repo: "acme/tools", n: 4, status: "released"},
		}},
		{"anonymous viewers read public leases only", []step{
			{verb: "acquire", who: "alice", repo: "acme/widgets", n: 1, status: "acquired"},
			{verb: "list", who: "", repo: "acme/widgets", count: 1},
			{verb: "lease", who: "", repo: "acme/widgets", n: 1, count: 1},
			{verb: "acquire", who: "", repo: "acme/widgets", n: 4, err: lease.ErrInvalid},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			for i, s := range tc.steps {
				owner, name, _ := cut(s.repo)
				v := w.as(s.who)
				var (
					status, holder string
					count          int
					err            error
				)
				switch s.verb {
				case "acquire":
					var r contract.Tenure
					r, err = w.svc.Acquire(bg, v, owner, name, s.n, 10*time.Minute)
					status, holder = r.Status, r.Holder
				case "renew":
					var r contract.Tenure
					r, err = w.svc.Renew(bg, v, owner, name, s.n, 10*time.Minute)
					status, holder = r.Status, r.Holder
				case "release":
					var r contract.Released
					r, err = w.svc.Release(bg, v, owner, name, s.n)
					status = r.Status
				case "list":
					var r contract.List
					r, err = w.svc.List(bg, v, owner, name)
					count = len(r.Leases)
				case "lease":
					var r contract.IssueLease
					r, err = w.svc.Lease(bg, v, owner, name, s.n)
					if r.Lease != nil {
						count = 1
					}
				}
				var c *lease.ConflictError
				if errors.As(err, &c) {
					reply := c.Reply.(contract.Conflict)
					status, holder, err = reply.Status, "", nil
					if reply.Holder != nil {
						holder = *reply.Holder
					}
				}
				if (status == "acquired" || status == "renewed") && s.holder == "" {
					holder = ""
				}
				if !sameErr(err, s.err) || status != s.status || holder != s.holder || count != s.count {
					t.Fatalf("step %d: %s %s %s#%d = status %q holder %q count %d err %v; want status %q holder %q count %d err %v",
						i, s.who, s.verb, s.repo, s.n, status, holder, count, err, s.status, s.holder, s.count, s.err)
				}
			}
		})
	}
}

func sameErr(got, want error) bool {
	var w *lease.WriteRequiredError
	if errors.As(want, &w) {
		var g *lease.WriteRequiredError
		return errors.As(got, &g) && *g == *w
	}
	if want == nil {
		return got == nil
	}
	return errors.Is(got, want)
}

func cut(full string) (string, string, bool) {
	for i := range full {
		if full[i] == '/' {
			return full[:i], full[i+1:], true
		}
	}
	return full, "", false
}

// Kinds are recorded at acquire: listing for a reader limited to one unit
// asks the forge nothing per lease.
func TestListAsksNothingPerLease(t *testing.T) {
	w := newWorld(t)
	for _, n := range []int64{1, 2, 4} {
		if _, err := w.svc.Acquire(bg, w.as("alice"), "acme", "tools", n, 0); err != nil {
			t.Fatal(err)
		}
	}
	before := w.forge.Calls("Issue")
	l, err := w.svc.List(bg, w.as("dave"), "acme", "tools")
	if err != nil || len(l.Leases) != 2 {
		t.Fatalf("list as dave = %+v %v, want #1 and #4", l, err)
	}
	if got := w.forge.Calls("Issue") - before; got != 0 {
		t.Fatalf("list asked the forge about %d issues, want none", got)
	}
}

// A renamed account keeps its lease and shows its new login at its next
// write; an account that takes the freed login inherits nothing.
func TestRenamedAccountKeepsItsLease(t *testing.T) {
	w := newWorld(t)
	first, err := w.svc.Acquire(bg, w.as("alice"), "acme", "widgets", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	w.forge.Rename("alice", "alice2")
	w.forge.AddUser("alice")
	w.forge.Grant("acme/widgets", "alice", forgetest.Write)

	_, err = w.svc.Acquire(bg, w.as("alice"), "acme", "widgets", 1, time.Hour)
	var c *lease.ConflictError
	if !errors.As(err, &c) || c.Status() != contract.StatusHeld {
		t.Fatalf("new account with the old login: %v, want held", err)
	}
	r, err := w.svc.Renew(bg, w.as("alice2"), "acme", "widgets", 1, time.Hour)
	if err != nil || r.Holder != "alice2" || r.Token != first.Token {
		t.Fatalf("renamed account renews: %+v %v", r, err)
	}
	if _, err := w.svc.Release(bg, w.as("alice2"), "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	if r, err := w.svc.Acquire(bg, w.as("alice"), "acme", "widgets", 1, time.Hour); err != nil || r.Token != first.Token+1 {
		t.Fatalf("new account's first tenure: %+v %v, want token %d", r, err, first.Token+1)
	}
}

// Every command re-resolves the connection's key: deleted keys and
// accounts that may no longer log in are refused; a renamed account goes
// on under its new login; an unreachable forge is retryable.
func TestRecheck(t *testing.T) {
	w := newWorld(t)
	alice, bob := w.forge.User("alice"), w.forge.User("bob")
	if v, err := w.svc.Recheck(bg, "SHA256:alice", alice); err != nil || v.User != alice {
		t.Fatalf("Recheck of a valid key = %+v %v", v, err)
	}
	w.forge.Rename("alice", "alice2")
	if v, err := w.svc.Recheck(bg, "SHA256:alice", alice); err != nil || v.Login != "alice2" || v.ID != alice.ID {
		t.Fatalf("Recheck after a rename = %+v %v, want alice2", v, err)
	}
	w.forge.DeleteKey("SHA256:alice")
	if _, err := w.svc.Recheck(bg, "SHA256:alice", alice); !errors.Is(err, lease.ErrRevoked) {
		t.Fatalf("Recheck of a deleted key: %v, want ErrRevoked", err)
	}
	w.forge.AddKey("bob", "SHA256:alice") // the same key, now someone else's
	if _, err := w.svc.Recheck(bg, "SHA256:alice", alice); !errors.Is(err, lease.ErrRevoked) {
		t.Fatalf("Recheck of a key moved to another account: %v, want ErrRevoked", err)
	}
	w.forge.Disable("bob")
	if _, err := w.svc.Recheck(bg, "SHA256:bob", bob); !errors.Is(err, lease.ErrRevoked) {
		t.Fatalf("Recheck of a disabled account's key: %v, want ErrRevoked", err)
	}
	w.forge.SetDown(true)
	if _, err := w.svc.Recheck(bg, "SHA256:reader", w.forge.User("reader")); !errors.Is(err, forge.ErrUnavailable) {
		t.Fatalf("Recheck with the forge down: %v, want ErrUnavailable", err)
	}
}

// API tokens are honoured within their scopes.
func TestTokenScopes(t *testing.T) {
	w := newWorld(t)
	if _, err := w.svc.Acquire(bg, w.as("alice"), "acme", "secret", 1, 0); err != nil {
		t.Fatal(err)
	}
	w.forge.AddToken("alice", "full", forgetest.AllScopes)
	w.forge.AddToken("alice", "user-only", forgetest.Scopes{})
	w.forge.AddToken("alice", "public-only", forgetest.Scopes{Repository: true, Issue: true, PublicOnly: true})
	w.forge.AddToken("alice", "repo-only", forgetest.Scopes{Repository: true})
	alice := w.forge.User("alice")
	for _, tc := range []struct {
		token, repo string
		count       int
		err         error
	}{
		{"full", "acme/secret", 1, nil},
		{"user-only", "acme/secret", 0, lease.ErrRepoNotFound},
		{"public-only", "acme/secret", 0, lease.ErrRepoNotFound},
		{"public-only", "acme/widgets", 0, nil},
		{"repo-only", "acme/secret", 0, nil},
	} {
		owner, name, _ := cut(tc.repo)
		l, err := w.svc.List(bg, lease.Viewer{User: alice, Token: tc.token}, owner, name)
		if !sameErr(err, tc.err) || len(l.Leases) != tc.count {
			t.Errorf("token %s lists %s: %d leases, %v; want %d, %v", tc.token, tc.repo, len(l.Leases), err, tc.count, tc.err)
		}
	}
}

// ListPage pages in the ledger, and a viewer of one unit sees a page of
// that unit only, counted without the other's.
func TestListPage(t *testing.T) {
	w := newWorld(t)
	for _, n := range []int64{1, 2, 4} {
		if _, err := w.svc.Acquire(bg, w.as("alice"), "acme", "tools", n, 0); err != nil {
			t.Fatal(err)
		}
	}
	issues := func(l contract.List) (out []int64) {
		for _, v := range l.Leases {
			out = append(out, v.Issue)
		}
		return out
	}
	for _, c := range []struct {
		who   string
		q     lease.ListQuery
		want  string
		total int
	}{
		{"alice", lease.ListQuery{Limit: 50}, "[1 2 4]", 3},
		{"alice", lease.ListQuery{Limit: 2, Offset: 2}, "[4]", 3},
		{"alice", lease.ListQuery{Issues: []int64{2, 4}, Limit: 50}, "[2 4]", 2},
		{"dave", lease.ListQuery{Limit: 50}, "[1 4]", 2}, // issues only
		{"dave", lease.ListQuery{Issues: []int64{2}, Limit: 50}, "[]", 0},
	} {
		l, total, err := w.svc.ListPage(bg, w.as(c.who), "acme", "tools", c.q)
		if got := fmt.Sprint(issues(l)); err != nil || got != c.want || total != c.total {
			t.Errorf("%s %+v: %s of %d, %v; want %s of %d", c.who, c.q, got, total, err, c.want, c.total)
		}
	}
	if _, _, err := w.svc.ListPage(bg, w.as("eve"), "acme", "tools", lease.ListQuery{Limit: 50}); !errors.Is(err, lease.ErrRepoNotFound) {
		t.Errorf("a stranger: %v, want ErrRepoNotFound", err)
	}
}
