package models

import (
	"errors"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
)

// Holders are accounts: a renamed account keeps its lease (and the next
// write shows the new login); a new account that takes the freed login
// inherits nothing.
func TestHoldersAreAccountsNotLogins(t *testing.T) { forEachEngine(t, testHoldersAreAccountsNotLogins) }

func testHoldersAreAccountsNotLogins(t *testing.T, e engine) {
	s, _, _ := e.open(t)
	alice := Holder{ID: 11, Login: "alice"}
	first := mustAcquireAs(t, s, k42, alice, time.Hour)

	renamed := Holder{ID: 11, Login: "alice-old"}
	if cur, _ := s.Current(bg, k42); cur.Holder != alice {
		t.Fatalf("before any write by the renamed account the lease shows %+v, want %+v", cur.Holder, alice)
	}
	l, err := s.Renew(bg, k42, renamed, time.Hour)
	if err != nil || l.Token != first.Token || l.Holder != renamed {
		t.Fatalf("renamed account renews: %+v %v, want token %d held by %+v", l, err, first.Token, renamed)
	}

	impostor := Holder{ID: 12, Login: "alice"} // registered the freed login
	_, err = s.Acquire(bg, k42, impostor, time.Hour, Observed{Kind: KindIssue})
	var held *HeldError
	if !errors.As(err, &held) || held.Holder != "alice-old" {
		t.Fatalf("new account with the old login: %v, want held by alice-old", err)
	}
	if _, err := s.Renew(bg, k42, impostor, time.Hour); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("new account with the old login renews: %v, want not the holder", err)
	}
	if _, err := s.Release(bg, k42, impostor); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("new account with the old login releases: %v, want not the holder", err)
	}

	if freed, err := s.Release(bg, k42, renamed); err != nil || freed == nil || freed.Token != first.Token {
		t.Fatalf("renamed account releases: %+v %v", freed, err)
	}
	if l := mustAcquireAs(t, s, k42, impostor, time.Hour); l.Token != first.Token+1 {
		t.Fatalf("next tenure has token %d, want %d", l.Token, first.Token+1)
	}
	evs, err := s.History(bg, k42)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.HolderID != 11 && e.HolderID != 12 {
			t.Errorf("event %+v has no account ID", e)
		}
	}
}

// The kind of a number is recorded at acquire and read back by List and
// Current; a lease written before kinds were kept is KindUnknown.
func TestAcquireRecordsTheKind(t *testing.T) { forEachEngine(t, testAcquireRecordsTheKind) }

func testAcquireRecordsTheKind(t *testing.T, e engine) {
	s, _, _ := e.open(t)
	mustAcquireAs(t, s, Key{7, 1}, who("alice"), 0)
	if _, err := s.Acquire(bg, Key{7, 2}, who("alice"), 0, Observed{Kind: KindPull}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(bg, Key{7, 3}, who("alice"), 0, Observed{Kind: KindUnknown}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("acquire of an unknown kind: %v, want ErrInvalid", err)
	}
	ls, err := s.List(bg, 7)
	if err != nil || len(ls) != 2 || ls[0].Kind != KindIssue || ls[1].Kind != KindPull {
		t.Fatalf("List = %+v %v, want #1 an issue and #2 a pull request", ls, err)
	}
	if cur, _ := s.Current(bg, Key{7, 2}); cur == nil || cur.Kind != KindPull || cur.Holder != who("alice") {
		t.Fatalf("Current = %+v", cur)
	}
}

// A ledger of schema 1 (holders by login) upgrades in place: rows, tokens
// and history are kept; its holders match nobody until resolved, once, to
// the account that has the login; a login that names no account any more
// is resolved to nobody for good.
func TestUpgradeFromLoginHolders(t *testing.T) {
	path := oldLedger(t,
		`CREATE TABLE lease_events (id integer PRIMARY KEY AUTOINCREMENT, repo_id integer NOT NULL, issue integer NOT NULL, action text NOT NULL, holder text NOT NULL, previous text, token integer NOT NULL, at integer NOT NULL, expires_at integer, acquired_at integer NOT NULL)`,
		"INSERT INTO leases VALUES (7, 42, 'alice', 5, 1000, NULL)",
		"INSERT INTO leases VALUES (7, 43, 'gone', 2, 1000, NULL)",
		"INSERT INTO leases VALUES (7, 44, NULL, 9, 1000, NULL)",
		"INSERT INTO leases VALUES (7, 45, 'alice', 1, 1000, NULL)",
		"INSERT INTO lease_events (repo_id, issue, action, holder, token, at, acquired_at) VALUES (7, 42, 'acquire', 'alice', 5, 1000, 1000)",
		"PRAGMA user_version = 1",
	)
	s, err := Open(path, WithClock(clocktest.New()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var version int
	if err := s.db.Raw("PRAGMA user_version").Scan(&version).Error; err != nil || version != schemaVersion {
		t.Fatalf("user_version = %d (%v), want %d", version, err, schemaVersion)
	}
	unresolved, err := s.UnresolvedHolders(bg)
	if err != nil || len(unresolved) != 2 || unresolved[0] != "alice" || unresolved[1] != "gone" {
		t.Fatalf("UnresolvedHolders = %q %v, want [alice gone]", unresolved, err)
	}
	alice := Holder{ID: 11, Login: "alice"}
	// Unresolved: still live and shown, but nobody's to renew.
	cur, err := s.Current(bg, k42)
	if err != nil || cur == nil || cur.Holder.Login != "alice" || cur.Holder.ID != 0 || cur.Token != 5 || cur.Kind != KindUnknown {
		t.Fatalf("old lease after the upgrade: %+v %v", cur, err)
	}
	if _, err := s.Renew(bg, k42, alice, time.Hour); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("renew of an unresolved lease: %v, want not the holder", err)
	}

	if n, err := s.ResolveHolder(bg, "alice", 11); err != nil || n != 2 {
		t.Fatalf("ResolveHolder(alice) = %d %v, want 2 leases", n, err)
	}
	if n, err := s.ResolveHolder(bg, "gone", 0); err != nil || n != 1 {
		t.Fatalf("ResolveHolder(gone) = %d %v, want 1 lease", n, err)
	}
	if unresolved, err := s.UnresolvedHolders(bg); err != nil || len(unresolved) != 0 {
		t.Fatalf("UnresolvedHolders after resolving = %q %v", unresolved, err)
	}
	// Resolving again changes nothing: a login taken later by another
	// account must not capture the lease.
	if n, err := s.ResolveHolder(bg, "alice", 99); err != nil || n != 0 {
		t.Fatalf("second ResolveHolder(alice) = %d %v, want nothing changed", n, err)
	}
	if l, err := s.Renew(bg, k42, alice, time.Hour); err != nil || l.Token != 5 {
		t.Fatalf("resolved holder renews: %+v %v, want token 5 kept", l, err)
	}
	if _, err := s.Acquire(bg, Key{7, 43}, Holder{ID: 12, Login: "gone"}, 0, Observed{Kind: KindIssue}); !errors.Is(err, ErrHeld) {
		t.Fatalf("acquire of a lease whose holder is gone: %v, want held (until it is freed)", err)
	}
	if l := mustAcquireAs(t, s, Key{7, 44}, alice, 0); l.Token != 10 {
		t.Fatalf("old free row's token did not carry on: %+v", l)
	}
	if h, err := s.History(bg, k42); err != nil || len(h) != 2 || h[0].Holder != "alice" || h[0].HolderID != 0 {
		t.Fatalf("history kept across the upgrade: %+v %v", h, err)
	}
	if _, err := s.ResolveHolder(bg, "", 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ResolveHolder with an empty login: %v, want ErrInvalid", err)
	}
}

func mustAcquireAs(t testing.TB, s *Store, k Key, h Holder, ttl time.Duration) Lease {
	t.Helper()
	l, err := s.Acquire(bg, k, h, ttl, Observed{Kind: KindIssue})
	if err != nil {
		t.Fatalf("Acquire(%v, %+v, %s): %v", k, h, ttl, err)
	}
	return l
}
