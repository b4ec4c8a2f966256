package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// runSession runs ss with a keepalive the test answers (answering true) or
// leaves unanswered; it returns what Run returned, once it has.
func runSession(t *testing.T, ss *lease.Session, answering *atomic.Bool) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	ran := make(chan error, 1)
	go func() {
		ran <- ss.Run(ctx, time.Hour, func() error {
			if answering.Load() {
				return nil
			}
			<-block
			return errors.New("gone")
		})
	}()
	return ran
}

// expiresAfter says whether k's live lease expires after at.
func expiresAfter(t *testing.T, w *leasetest.World, k models.Key, at time.Time) bool {
	cur, err := w.Ledger.Current(t.Context(), k)
	return err == nil && cur != nil && cur.ExpiresAt != nil && cur.ExpiresAt.After(at)
}

// A session with a 5 s grace holds its claim for 60 s with no renew, one
// heartbeat per keepalive answered; once the keepalives go unanswered it
// is lost a grace after the last answer, and its claim lapses then.
//
// The test is the session's loop (what Run does, step by step), so the
// fake clock moves only while the keeper has nothing left to do: an
// answer never waits for its step while the clock runs on.
func TestSessionHoldsItsClaimWithoutRenew(t *testing.T) {
	w := leasetest.New(t, leasetest.Options{Forge: leasetest.Acme()})
	v := w.As("alice")
	v.Agent = "a1"
	ss, opened, err := w.Service.OpenSession(t.Context(), v, 5*time.Second, "")
	if err != nil || opened.Status != contract.StatusSession || opened.GraceSeconds != 5 || *opened.Agent != "a1" {
		t.Fatalf("open: %+v %v", opened, err)
	}
	ctx := t.Context()
	// Each keepalive asks the test, which answers it or leaves it be.
	asked := make(chan chan struct{})
	k := ss.Keeper(time.Hour, func() error {
		answer := make(chan struct{})
		select {
		case asked <- answer:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case <-answer:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	t.Cleanup(k.Stop)
	// steps takes every step the keeper has ready, as Run would.
	steps := func() error {
		for {
			select {
			case <-k.Due():
				if err := k.Step(ctx, ctx, false); err != nil {
					return err
				}
			case <-k.Tick():
				if err := k.Step(ctx, ctx, true); err != nil {
					return err
				}
			default:
				return nil
			}
		}
	}
	got, err := w.Service.Acquire(ctx, ss.Viewer(), "acme", "widgets", 1, 0)
	if err != nil || got.Agent == nil || *got.Agent != "a1" {
		t.Fatalf("acquire in the session: %+v %v", got, err)
	}
	if err := steps(); err != nil {
		t.Fatal(err)
	}
	k1 := models.Key{RepoID: 1, Issue: 1}
	var last time.Time // the last answer
	start := w.Clock.Now()
	for w.Clock.Now().Sub(start) < 60*time.Second {
		w.Clock.Advance(5 * time.Second / 3)
		if err := steps(); err != nil { // the tick: a keepalive is sent
			t.Fatal(err)
		}
		var answer chan struct{}
		select {
		case answer = <-asked:
		case <-time.After(time.Minute):
			t.Fatal("no keepalive at the tick")
		}
		if err := steps(); err != nil {
			t.Fatal(err)
		}
		last = w.Clock.Now()
		close(answer)
		// The answer's own step, which writes a heartbeat of a whole
		// grace (the one before kept the claim until at most 3.4 s
		// from now): the keeper is told once the answer is recorded.
		deadline := time.After(time.Minute)
		for !expiresAfter(t, w, k1, last.Add(4*time.Second)) {
			select {
			case <-k.Due():
				if err := k.Step(ctx, ctx, false); err != nil {
					t.Fatal(err)
				}
			case <-deadline:
				cur, _ := w.Ledger.Current(ctx, k1)
				t.Fatalf("no heartbeat after the answer at %s: %+v", last, cur)
			}
		}
		if err := steps(); err != nil {
			t.Fatal(err)
		}
	}
	cur, _ := w.Ledger.Current(ctx, k1)
	if cur == nil || cur.Token != got.Token {
		t.Fatalf("after 60 s: %+v, want the same tenure", cur)
	}
	// From now on the keepalives go unanswered.
	for {
		w.Clock.Advance(time.Second)
		err := steps()
		if err == nil {
			if w.Clock.Now().Sub(last) > time.Minute {
				t.Fatal("never lost")
			}
			continue
		}
		if !errors.Is(err, lease.ErrSessionLost) {
			t.Fatalf("the keeper: %v, want lost", err)
		}
		if since := w.Clock.Now().Sub(last); since < 5*time.Second || since > 6*time.Second {
			t.Fatalf("lost %s after the last answer, want a grace", since)
		}
		break
	}
	ss.Lose(ctx)
	// The ledger keeps whole seconds.
	cur, _ = w.Ledger.Current(ctx, k1)
	if cur != nil && (cur.ExpiresAt.Before(last.Add(4*time.Second)) || cur.ExpiresAt.After(last.Add(7*time.Second))) {
		t.Fatalf("the lost session's claim expires %s, want a grace after the last answer (%s)", cur.ExpiresAt, last)
	}
	if cur != nil {
		w.Clock.Set(*cur.ExpiresAt)
	}
	if cur, _ := w.Ledger.Current(ctx, k1); cur != nil {
		t.Fatalf("a grace after the last answer: %+v, want lapsed", cur)
	}
	ts, _ := w.Ledger.Tenures(ctx, k1, 1)
	if ts[0].EndedBy != models.EndSessionLost {
		t.Fatalf("tenure %+v, want session_lost", ts[0])
	}
}

// The claims of a session resumed elsewhere are the new connection's:
// the old one's Run ends moved, its End releases nothing; a claim of the
// new one ended by a handoff is a lost line.
func TestResumedSessionMovesAndTellsLosses(t *testing.T) {
	w := leasetest.New(t, leasetest.Options{Forge: leasetest.Acme()})
	v := w.As("alice")
	v.Agent = "a1"
	old, opened, err := w.Service.OpenSession(t.Context(), v, 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	var answering atomic.Bool
	answering.Store(true)
	ran := runSession(t, old, &answering)
	if _, err := w.Service.Acquire(t.Context(), old.Viewer(), "acme", "widgets", 1, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Service.OpenSession(t.Context(), w.As("bob"), 0, opened.Session); !errors.As(err, new(*lease.ConflictError)) {
		t.Fatalf("bob resumes alice's session: %v, want session_gone", err)
	}
	now, resumed, err := w.Service.OpenSession(t.Context(), v, 0, opened.Session)
	if err != nil || resumed.Session != opened.Session || resumed.Leases == nil || len(*resumed.Leases) != 1 || (*resumed.Leases)[0].Repo != "acme/widgets" || resumed.GraceSeconds != 10 {
		t.Fatalf("resume: %+v %v", resumed, err)
	}
	leasetest.WaitFor(t, "the old connection's keepalive timer", func() bool { return w.Clock.Timers() > 0 })
	w.Clock.Advance(4 * time.Second)
	select {
	case err := <-ran:
		if !errors.Is(err, lease.ErrSessionMoved) {
			t.Fatalf("the old connection's Run: %v, want moved", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the old connection's Run did not end")
	}
	if err := old.End(t.Context()); !errors.Is(err, lease.ErrSessionMoved) {
		t.Fatalf("the old connection's End: %v, want moved", err)
	}
	ran2 := runSession(t, now, &answering)
	if _, err := w.Service.Handoff(t.Context(), v, "acme", "widgets", 1, "bob", ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-now.Told():
		l := now.TakeLost()[0]
		if l.Issue != 1 || l.Repo != "acme/widgets" || l.EndedBy != contract.EndHandedOff {
			t.Fatalf("lost line %+v", l)
		}
	case err := <-ran2:
		t.Fatalf("Run ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no lost line for the handed-off claim")
	}
}

// heldCurrent is a ledger whose next Current, once armed, is held: it
// says it entered, reads the ledger when told to, and returns what it
// read when told to again, as a read overtaken by later commits would.
type heldCurrent struct {
	*models.Store
	armed         atomic.Bool
	entered, read chan struct{}
	release       chan struct{}
	calls         atomic.Int64
}

func (l *heldCurrent) Current(ctx context.Context, k models.Key) (*models.Lease, error) {
	defer l.calls.Add(1)
	if !l.armed.CompareAndSwap(true, false) {
		return l.Store.Current(ctx, k)
	}
	l.entered <- struct{}{}
	<-l.read
	cur, err := l.Store.Current(ctx, k)
	<-l.release
	return cur, err
}

// A session that releases its claim and claims the issue again while a
// look at its claims is reading the ledger is told of no loss: the read
// saw the issue free between the two, but the new claim is newer than
// that read.
func TestSessionReclaimDuringALookIsNoLoss(t *testing.T) {
	w := leasetest.New(t, leasetest.Options{Forge: leasetest.Acme()})
	l := &heldCurrent{Store: w.Ledger, entered: make(chan struct{}), read: make(chan struct{}), release: make(chan struct{})}
	svc := leasetest.NewService(t, w.Forge, l, w.Clock)
	v := w.As("alice")
	v.Agent = "a1"
	ss, _, err := svc.OpenSession(t.Context(), v, 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	var answering atomic.Bool
	answering.Store(true)
	ran := runSession(t, ss, &answering)
	l.armed.Store(true)
	first, err := svc.Acquire(t.Context(), ss.Viewer(), "acme", "widgets", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	k := models.Key{RepoID: 1, Issue: 1}
	look := func() { svc.Bus.Publish(changes.Set{Origin: changes.Remote, Changes: []changes.Change{{Key: k}}}) }
	look()
	<-l.entered // a look at the claim, at tenure 1
	if _, err := svc.Release(t.Context(), ss.Viewer(), "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	l.read <- struct{}{} // it reads the issue free
	again, err := svc.Acquire(t.Context(), ss.Viewer(), "acme", "widgets", 1, 0)
	if err != nil || again.Token != first.Token+1 {
		t.Fatalf("acquire again: %+v %v", again, err)
	}
	calls := l.calls.Load()
	l.release <- struct{}{}
	// Once a second look has read the ledger, the first one has told all
	// it would (a session looks one look at a time).
	leasetest.WaitFor(t, "the held look", func() bool { return l.calls.Load() >= calls+1 })
	look()
	leasetest.WaitFor(t, "another look at the claim", func() bool { return l.calls.Load() >= calls+2 })
	select {
	case <-ss.Told():
		t.Fatalf("told %+v, while the session holds tenure %d", ss.TakeLost(), again.Token)
	case err := <-ran:
		t.Fatalf("Run ended: %v", err)
	default:
	}
	if cur, _ := w.Ledger.Current(t.Context(), models.Key{RepoID: 1, Issue: 1}); cur == nil || cur.Token != again.Token || cur.Session != ss.Ref().ID {
		t.Fatalf("the ledger: %+v", cur)
	}
}
