package models

import (
	"context"
	"errors"
	"testing"
)

// Of two replicas on one database, one runs a chore while the other is
// turned away; once it is done, the other may run it. A failing chore
// still lets it go, and a chore runs always on SQLite.
func TestExclusiveChores(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		a, _, db := e.open(t)
		b, err := Open(db)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		var inner bool
		ran, err := a.Exclusive(bg, ChoreReconcile, func(context.Context) error {
			var err error
			inner, err = b.Exclusive(bg, ChoreReconcile, func(context.Context) error { return nil })
			return err
		})
		if !ran || err != nil {
			t.Fatalf("a: ran %v, %v", ran, err)
		}
		if want := e.name == "sqlite"; inner != want {
			t.Fatalf("b ran the chore while a ran it: %v, want %v", inner, want)
		}
		boom := errors.New("boom")
		if ran, err := b.Exclusive(bg, ChoreReconcile, func(context.Context) error { return boom }); !ran || !errors.Is(err, boom) {
			t.Fatalf("b after a: ran %v, %v", ran, err)
		}
		if ran, err := a.Exclusive(bg, ChoreReconcile, func(context.Context) error { return nil }); !ran || err != nil {
			t.Fatalf("a after b failed: ran %v, %v", ran, err)
		}
	})
}

// A branch's push-fence chore is its own: never a numbered chore, the
// same for the same branch, and apart for two others (these two do not
// fold alike).
func TestChoreOfBranch(t *testing.T) {
	a, b := ChoreOfBranch(3, "work/42"), ChoreOfBranch(3, "work/43")
	if a == ChoreReconcile || b == ChoreReconcile || a&(1<<30) == 0 {
		t.Fatalf("branch chores %d, %d among the numbered chores", a, b)
	}
	if a != ChoreOfBranch(3, "work/42") || a == b || a == ChoreOfBranch(4, "work/42") {
		t.Fatalf("branch chores %d, %d, %d", a, b, ChoreOfBranch(4, "work/42"))
	}
}

// On SQLite, two workers of one process take turns at a chore too.
func TestExclusiveTakesTurnsWithinAProcess(t *testing.T) {
	s, _, _ := openTestStore(t)
	inside, leave := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.Exclusive(bg, ChoreReconcile, func(context.Context) error { close(inside); <-leave; return nil })
		done <- err
	}()
	<-inside
	ran, err := s.Exclusive(bg, ChoreReconcile, func(context.Context) error { return nil })
	if err != nil || ran {
		t.Fatalf("a second run of the chore while the first runs: ran %v, %v", ran, err)
	}
	if ran, err := s.Exclusive(bg, ChoreOfBranch(1, "work"), func(context.Context) error { return nil }); err != nil || !ran {
		t.Fatalf("another chore meanwhile: ran %v, %v", ran, err)
	}
	close(leave)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ran, err := s.Exclusive(bg, ChoreReconcile, func(context.Context) error { return nil }); err != nil || !ran {
		t.Fatalf("the chore once the first run ended: ran %v, %v", ran, err)
	}
}
