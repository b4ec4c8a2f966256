package forgetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/fence"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

var bg = context.Background()

// perms is what a Repo says the viewer may do, in one comparable value.
type perms struct{ read, readIssues, readPulls, writeIssues, writePulls bool }

func permsOf(r forge.Repo) perms {
	return perms{r.CanRead, r.CanReadIssues, r.CanReadPulls, r.CanWriteIssues, r.CanWritePulls}
}

// Each access level, on a public and a private repository, as Gitea
// grants it: a unit-limited member of a private repository sees only its
// unit; on a public one everybody reads everything.
func TestAccessLevels(t *testing.T) {
	f := forgetest.New()
	f.AddUser("u")
	f.AddRepo("acme/public", 1, false)
	f.AddRepo("acme/private", 2, true)
	all := perms{true, true, true, true, true}
	readAll := perms{true, true, true, false, false}
	for _, tc := range []struct {
		level   forgetest.Access
		private bool
		want    perms // the zero perms: ErrNotFound
	}{
		{forgetest.None, false, readAll},
		{forgetest.None, true, perms{}},
		{forgetest.Read, false, readAll},
		{forgetest.Read, true, readAll},
		{forgetest.Write, true, all},
		{forgetest.IssuesOnly, true, perms{read: true, readIssues: true, writeIssues: true}},
		{forgetest.IssuesOnly, false, perms{read: true, readIssues: true, readPulls: true, writeIssues: true}},
		{forgetest.PullsOnly, true, perms{read: true, readPulls: true, writePulls: true}},
		{forgetest.PullsOnly, false, perms{read: true, readIssues: true, readPulls: true, writePulls: true}},
	} {
		name := "public"
		if tc.private {
			name = "private"
		}
		f.Grant("acme/"+name, "u", tc.level)
		r, err := f.Repo(bg, "u", "acme", name)
		if tc.want == (perms{}) {
			if !errors.Is(err, forge.ErrNotFound) {
				t.Errorf("level %d on %s: %+v %v, want ErrNotFound", tc.level, name, r, err)
			}
			continue
		}
		if err != nil || permsOf(r) != tc.want {
			t.Errorf("level %d on %s: %+v %v, want %+v", tc.level, name, permsOf(r), err, tc.want)
		}
	}
	// The anonymous viewer is nobody's grant, whatever "" was given.
	f.Grant("acme/private", "", forgetest.Write)
	if _, err := f.Repo(bg, "", "acme", "private"); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("anonymous on a private repository: %v", err)
	}
}

// Issues and pull requests are seen only through a unit the viewer may
// read; names are matched without regard to case, and an alias leads to
// the repository under its current name.
func TestIssuesNamesAndAliases(t *testing.T) {
	f := forgetest.New()
	f.AddUser("u")
	f.AddRepo("Acme/Widgets", 1, true)
	f.Alias("acme/gadgets", "acme/widgets")
	f.Grant("acme/widgets", "u", forgetest.IssuesOnly)
	f.AddIssue("acme/widgets", 1, false, false)
	f.AddIssue("acme/widgets", 2, true, false)
	if r, err := f.Repo(bg, "u", "ACME", "gadgets"); err != nil || r.ID != 1 || r.FullName != "Acme/Widgets" {
		t.Errorf("by an alias: %+v %v", r, err)
	}
	if is, err := f.Issue(bg, "u", "acme", "gadgets", 1); err != nil || is.Number != 1 || is.IsPull {
		t.Errorf("issue through an alias: %+v %v", is, err)
	}
	if _, err := f.Issue(bg, "u", "acme", "widgets", 2); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("a pull request seen by an issues-only member: %v", err)
	}
}

// A token sees its owner's repository cut to its scopes; it writes only
// with write:issue.
func TestTokenRepoScopes(t *testing.T) {
	f := forgetest.New()
	alice, bob := f.AddUser("alice"), f.AddUser("bob")
	f.AddRepo("acme/private", 1, true)
	f.AddRepo("acme/public", 2, false)
	f.Grant("acme/private", "alice", forgetest.Write)
	f.AddToken("alice", "all", forgetest.AllScopes)
	f.AddToken("alice", "read", forgetest.ReadScopes)
	f.AddToken("alice", "none", forgetest.Scopes{})
	f.AddToken("alice", "repo", forgetest.Scopes{Repository: true})
	f.AddToken("alice", "public", forgetest.Scopes{Repository: true, Issue: true, PublicOnly: true})
	readAll := perms{true, true, true, false, false}
	for _, tc := range []struct {
		u     forge.User
		token string
		repo  string
		want  perms // the zero perms: ErrNotFound
	}{
		{alice, "all", "private", perms{true, true, true, true, true}},
		{alice, "read", "private", readAll},
		{alice, "all", "public", readAll}, // no more than alice may
		{alice, "none", "private", perms{}},
		{alice, "repo", "private", perms{read: true}},
		{alice, "public", "private", perms{}},
		{alice, "public", "public", readAll},
		{bob, "all", "public", perms{}}, // someone else's token
		{alice, "unknown", "public", perms{}},
	} {
		r, err := f.TokenRepo(bg, tc.u, tc.token, "acme", tc.repo)
		if tc.want == (perms{}) {
			if !errors.Is(err, forge.ErrNotFound) {
				t.Errorf("%s's token %s on %s: %+v %v, want ErrNotFound", tc.u.Login, tc.token, tc.repo, r, err)
			}
			continue
		}
		if err != nil || permsOf(r) != tc.want {
			t.Errorf("%s's token %s on %s: %+v %v, want %+v", tc.u.Login, tc.token, tc.repo, permsOf(r), err, tc.want)
		}
	}
	if u, err := f.UserByToken(bg, "repo"); err != nil || u != alice {
		t.Errorf("UserByToken = %+v %v, want %+v", u, err, alice)
	}
}

// A renamed account keeps its ID, keys and grants; a disabled one keeps
// existing but its keys and tokens no longer identify it.
func TestRenameAndDisable(t *testing.T) {
	f := forgetest.New()
	alice := f.AddUser("alice")
	f.AddKey("alice", "SHA256:a")
	f.AddToken("alice", "t", forgetest.AllScopes)
	f.AddRepo("acme/private", 1, true)
	f.Grant("acme/private", "alice", forgetest.Read)

	f.Rename("alice", "alice2")
	if u, err := f.UserByKey(bg, "SHA256:a"); err != nil || u.ID != alice.ID || u.Login != "alice2" {
		t.Errorf("key after a rename: %+v %v", u, err)
	}
	if _, err := f.Repo(bg, "alice2", "acme", "private"); err != nil {
		t.Errorf("grant after a rename: %v", err)
	}
	if _, err := f.UserByLogin(bg, "alice"); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("old login after a rename: %v", err)
	}
	if other := f.AddUser("alice"); other.ID == alice.ID {
		t.Errorf("a new account with the freed login has the old ID %d", other.ID)
	}

	f.Disable("alice2")
	if _, err := f.UserByKey(bg, "SHA256:a"); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("key of a disabled account: %v", err)
	}
	if _, err := f.UserByToken(bg, "t"); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("token of a disabled account: %v", err)
	}
	if u, err := f.UserByLogin(bg, "alice2"); err != nil || u.ID != alice.ID {
		t.Errorf("a disabled account by login: %+v %v, want it found", u, err)
	}
}

// The hook sees every call with its context and method before the
// outage switches, and its error fails the call; calls are counted and
// the logins they were asked as recorded.
func TestHookCallsAndAsked(t *testing.T) {
	f := forgetest.New()
	f.AddRepo("acme/widgets", 1, false)
	var seen []string
	noDeadline := 0
	f.SetHook(func(ctx context.Context, method string) error {
		seen = append(seen, method)
		if _, ok := ctx.Deadline(); !ok {
			noDeadline++
		}
		if method == "Issue" {
			return forge.ErrUnavailable
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	_, _ = f.Repo(ctx, "alice", "acme", "widgets")
	_, _ = f.Repo(bg, "", "acme", "widgets")
	if _, err := f.Issue(ctx, "bob", "acme", "widgets", 1); !errors.Is(err, forge.ErrUnavailable) {
		t.Errorf("Issue with a failing hook: %v", err)
	}
	if len(seen) != 3 || seen[2] != "Issue" || noDeadline != 1 {
		t.Errorf("hook saw %q, %d without a deadline", seen, noDeadline)
	}
	if got := f.Asked("Repo"); len(got) != 2 || got[0] != "alice" || got[1] != "" {
		t.Errorf("Asked(Repo) = %q", got)
	}
	if f.Calls("Repo") != 2 || f.Calls("Issue") != 1 || f.Calls("") != 3 {
		t.Errorf("calls: Repo %d, Issue %d, all %d", f.Calls("Repo"), f.Calls("Issue"), f.Calls(""))
	}

	// The hook runs before the outage switches: it sees calls to a forge
	// that is down, and a hung forge answers at the caller's deadline.
	f.SetDown(true)
	if _, err := f.UserByKey(ctx, "SHA256:x"); !errors.Is(err, forge.ErrUnavailable) || seen[len(seen)-1] != "UserByKey" {
		t.Errorf("down: %v, hook saw %q", err, seen)
	}
	f.SetHook(nil)
	f.SetDown(false)
	f.SetHang(true)
	short, cancel2 := context.WithTimeout(bg, 10*time.Millisecond)
	defer cancel2()
	if _, err := f.UserByLogin(short, "alice"); !errors.Is(err, forge.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hung forge: %v", err)
	}
}

// The fake serves every consumer's interface, as plugin/gitea's Forge does.
var (
	_ lease.Forge = (*forgetest.Forge)(nil)
	_ fence.Forge = (*forgetest.Forge)(nil)
)
