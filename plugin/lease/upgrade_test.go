package lease_test

import (
	"context"
	"errors"
	"testing"

	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// memResolver is a ledger fresh from schema 1 (models' own test covers
// the upgrade of a real file): it records what ResolveHolders decided.
type memResolver struct {
	logins   []string
	resolved map[string]int64
}

func (m *memResolver) UnresolvedHolders(context.Context) ([]string, error) { return m.logins, nil }

func (m *memResolver) ResolveHolder(_ context.Context, login string, id int64) (int64, error) {
	m.resolved[login] = id
	return 1, nil
}

func TestResolveHoldersOnce(t *testing.T) {
	w := leasetest.New(t, leasetest.Options{})
	f, store := w.Forge, w.Ledger
	// Nothing to resolve on a ledger that was never schema 1.
	if n, err := w.Service.ResolveHolders(bg, store); err != nil || n != 0 {
		t.Fatalf("ResolveHolders on a new ledger = %d %v", n, err)
	}
	if f.Calls("UserByLogin") != 0 {
		t.Fatal("asked the forge with nothing to resolve")
	}
}

// A forge outage stops the resolution without resolving anyone to nobody.
func TestResolveHoldersStopsOnOutage(t *testing.T) {
	w := leasetest.New(t, leasetest.Options{})
	f := w.Forge
	f.SetDown(true)
	l := &memResolver{logins: []string{"alice"}, resolved: map[string]int64{}}
	if _, err := w.Service.ResolveHolders(bg, l); !errors.Is(err, forge.ErrUnavailable) {
		t.Fatalf("ResolveHolders with the forge down: %v", err)
	}
	if len(l.resolved) != 0 {
		t.Fatalf("resolved %v while the forge was down", l.resolved)
	}
	f.SetDown(false)
	alice := f.AddUser("alice")
	l.logins = []string{"alice", "gone"}
	heard := 0
	w.Bus.Subscribe(func(s changes.Set) { heard += len(s.Changes) })
	if n, err := w.Service.ResolveHolders(bg, l); err != nil || n != 2 {
		t.Fatalf("ResolveHolders = %d %v", n, err)
	}
	if l.resolved["alice"] != alice.ID || l.resolved["gone"] != 0 {
		t.Fatalf("resolved %v, want alice→%d and gone→0", l.resolved, alice.ID)
	}
	if heard != 2 {
		t.Fatalf("%d changes published for 2 resolutions", heard)
	}
}
