package models

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"gorm.io/gorm"

	"github.com/collab-lease/collab-lease/models/leasemodel"
)

// Linearizability of agent sessions: agents of one account each hold a
// session and claim, release and list through it, keep it alive by
// heartbeats (or, at random, stop for a while: a lost connection),
// resume it, end it and open a new one, while accounts without sessions
// fight them for the same issues, on two Stores of one ledger, as the
// clock moves. Each session write is projected onto every issue it may
// touch (leasemodel: Beat, Resume, EndSession), and porcupine checks the
// whole history against the model: a claim kept alive exactly as long as
// its session's heartbeats say, never past its cap, one live holder at a
// time, tokens kept across a resume and growing by one per new tenure.
//
// What the projection cannot see (a session is one row of the ledger
// across issues: which connection holds it, whether it is alive) is in
// TestResumeSession and TestSessionKeepsItsClaimAlive.
func TestLinearizabilityOfSessions(t *testing.T) { forEachEngine(t, testLinearizabilityOfSessions) }

// linGrace is the sessions' grace, in seconds.
const linGrace = 5

func testLinearizabilityOfSessions(t *testing.T, e engine) {
	scale := leasemodel.Scale(t)
	seed := linSeed(t)
	t.Logf("seed %d (COLLAB_LIN_SEED), scale %d (COLLAB_STRESS_SCALE)", seed, scale)
	clock := &linClock{}
	start := time.Date(2026, 9, 5, 12, 0, 0, 0, time.UTC).Unix()
	clock.sec.Store(start)
	path := e.newDB(t)
	var stores []*Store
	var ledgers []sessionLedger
	for range 2 {
		s, err := Open(path, WithClock(clock), WithBusyTimeout(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores = append(stores, s)
		ledgers = append(ledgers, s)
	}
	run := runSessionLinearizability(t, clock, ledgers, 12, 400*scale, seed)
	if t.Failed() {
		return
	}
	t.Logf("%d operations recorded (%d session writes refused); the clock moved %d s", len(run.history), run.busy, clock.sec.Load()-start)
	mustExercise(t, stores[0], 5, ActionAcquire, ActionTakeover, ActionReacquire, ActionRelease, ActionSessionLost)
	if res := leasemodel.Check(t, linModel, run.history, time.Duration(scale)*2*time.Minute, true); res != porcupine.Ok {
		t.Fatalf("the ledger's history is %s, want Ok", res)
	}
}

// runSessionLinearizability: half the clients are agents of bot, each in
// a session of its own; the others are accounts (and bot itself) without.
func runSessionLinearizability(t *testing.T, clock *linClock, stores []sessionLedger, clients, opsPerClient int, seed int64) linRun {
	t.Helper()
	var (
		seq     atomic.Int64
		mu      sync.Mutex
		run     linRun
		wg      sync.WaitGroup
		failed  atomic.Bool
		started = make(chan struct{})
	)
	plain := []struct{ login, agent string }{{"alice", ""}, {"bob", ""}, {"bot", ""}}
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewSource(seed + int64(c)))
			st := stores[c%len(stores)]
			sessioned := c%2 == 0
			h := who("bot")
			if sessioned {
				h.Agent = "s" + string(rune('a'+c))
			} else {
				p := plain[(c/2)%len(plain)]
				h = who(p.login)
				h.Agent = p.agent
			}
			var ref SessionRef
			var refused error // the last session write's refusal, if any
			open := func() bool {
				r, err := st.OpenSession(bg, h, linGrace*time.Second, 0)
				if err != nil {
					if failed.CompareAndSwap(false, true) {
						t.Errorf("client %d: open session: %v", c, err)
					}
					return false
				}
				ref = r
				return true
			}
			if sessioned && !open() {
				return
			}
			lc := &linClient{id: c}
			<-started
			for range opsPerClient {
				k := linKeys[rng.Intn(len(linKeys))]
				in := leasemodel.Input{Key: leasemodel.Key(k), Holder: h.Login, Agent: h.Agent}
				var do func() ([]linKeyedOutput, error)
				r := rng.Intn(20)
				switch {
				case !sessioned || r < 4: // a plain operation (sessions' agents list, too)
					led := linLedger(st)
					switch q := rng.Intn(10); {
					case sessioned:
						in.Kind = leasemodel.List
					case q < 4:
						in.Kind = leasemodel.Acquire
						if rng.Intn(8) > 0 {
							in.TTL = int64(1 + rng.Intn(4))
						}
					case q < 7:
						in.Kind = leasemodel.Release
					default:
						in.Kind = leasemodel.List
					}
					do = func() ([]linKeyedOutput, error) { return linCall(led, in) }
				case r < 10:
					in.Kind, in.Session, in.Left = leasemodel.Acquire, ref.ID, linGrace
					if rng.Intn(4) == 0 {
						in.TTL = int64(1 + rng.Intn(6)) // a cap on its whole life
					}
					do = func() ([]linKeyedOutput, error) {
						outs, err := sessionAcquire(st, k, h, ref, in)
						refused = err
						if outs == nil {
							return nil, err
						}
						return outs, nil
					}
				case r < 12:
					in.Kind = leasemodel.Release
					hs := h
					hs.Session = &ref
					do = func() ([]linKeyedOutput, error) { return linCall(sessionReleaser{st, hs}, in) }
				case r < 18: // a heartbeat, unless the connection is "lost" for now
					in.Kind, in.Session, in.Left = leasemodel.Beat, ref.ID, linGrace
					do = func() ([]linKeyedOutput, error) {
						_, err := st.Heartbeat(bg, ref, h, linGrace*time.Second)
						refused = err
						return sessionOutcome(err, leasemodel.Output{Result: leasemodel.OK}, nil)
					}
				case r < 19:
					in.Kind, in.Session, in.Left = leasemodel.Resume, ref.ID, linGrace
					do = func() ([]linKeyedOutput, error) {
						next, leases, err := st.ResumeSession(bg, ref.ID, h)
						refused = err
						if err == nil {
							ref = next
						}
						return sessionOutcome(err, leasemodel.Output{Result: leasemodel.OK}, leases)
					}
				default:
					in.Kind, in.Session = leasemodel.EndSession, ref.ID
					do = func() ([]linKeyedOutput, error) {
						ended, err := st.EndSession(bg, ref, h)
						outs, oerr := sessionOutcome(err, leasemodel.Output{Result: leasemodel.OK}, nil)
						for i := range outs {
							for _, l := range ended {
								if l.Key == outs[i].key {
									outs[i].out.Freed = true
								}
							}
						}
						return outs, oerr
					}
				}
				in.Lo = clock.sec.Load()
				call := seq.Add(1)
				outs, err := do()
				ret := seq.Add(1)
				in.Hi = clock.sec.Load()
				if err != nil {
					if failed.CompareAndSwap(false, true) {
						t.Errorf("client %d: %s %v by %+v: %v", c, in.Kind, k, h, err)
					}
					return
				}
				lc.record(in, call, ret, outs)
				if sessioned && (in.Kind == leasemodel.EndSession || errors.Is(refused, ErrSessionGone)) {
					refused = nil
					if !open() {
						return
					}
				}
				if rng.Intn(6) == 0 {
					clock.sec.Add(int64(1 + rng.Intn(3)))
				}
			}
			run.add(&mu, lc, opsPerClient)
		})
	}
	close(started)
	wg.Wait()
	return run
}

// sessionLedger is what the sessions' clients call: the Store, or a
// broken variant of it.
type sessionLedger interface {
	linLedger
	OpenSession(ctx context.Context, h Holder, grace time.Duration, max int) (SessionRef, error)
	ResumeSession(ctx context.Context, id string, h Holder) (SessionRef, []Lease, error)
	Heartbeat(ctx context.Context, ref SessionRef, h Holder, left time.Duration) (int, error)
	EndSession(ctx context.Context, ref SessionRef, h Holder) ([]Lease, error)
}

// sessionReleaser releases as the session's holder.
type sessionReleaser struct {
	sessionLedger
	h Holder
}

func (r sessionReleaser) Release(ctx context.Context, k Key, _ Holder) (*Lease, error) {
	return r.sessionLedger.Release(ctx, k, r.h)
}

// The checker must call a broken session ledger's history Illegal.
func TestLinearizabilityCheckerCatchesBrokenSessions(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(*Store) sessionLedger
	}{
		// A heartbeat keeps alive the session's claims that lapsed.
		{"heartbeat revives lapsed claims", func(s *Store) sessionLedger { return reviving{s} }},
		// A heartbeat keeps claims alive past the cap their --ttl set.
		{"heartbeat ignores the cap", func(s *Store) sessionLedger { return uncapped{s} }},
		// A clean end leaves the session's claims live.
		{"end releases nothing", func(s *Store) sessionLedger { return endKeeps{s} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mustCatch(t, func(clock *linClock, s *Store, seed int64) linRun {
				return runSessionLinearizability(t, clock, []sessionLedger{tc.wrap(s)}, 12, 200, seed)
			})
		})
	}
}

// heartbeatBy moves the expiry of every held lease of session ref that
// where selects to left from now, as a broken heartbeat would.
func (s *Store) heartbeatBy(ctx context.Context, ref SessionRef, left time.Duration, where string) (int, error) {
	err := s.write(ctx, scope{}, func(tx *gorm.DB, now int64) error {
		return tx.Exec("UPDATE leases SET expires_at = ? WHERE session = ? AND holder IS NOT NULL"+where, now+int64(left/time.Second), ref.ID).Error
	})
	return 0, err
}

type reviving struct{ *Store }

func (r reviving) Heartbeat(ctx context.Context, ref SessionRef, h Holder, left time.Duration) (int, error) {
	return r.heartbeatBy(ctx, ref, left, "")
}

type uncapped struct{ *Store }

func (u uncapped) Heartbeat(ctx context.Context, ref SessionRef, h Holder, left time.Duration) (int, error) {
	return u.heartbeatBy(ctx, ref, left, fmt.Sprintf(" AND expires_at > %d", u.now()))
}

type endKeeps struct{ *Store }

func (e endKeeps) EndSession(ctx context.Context, ref SessionRef, h Holder) ([]Lease, error) {
	return nil, nil
}

// sessionAcquire is an acquire in session ref, answered as the model
// answers: a session refusal (gone, moved) changes nothing, and is
// returned as the error (nil outputs: an answer the contract forbids).
func sessionAcquire(st sessionLedger, k Key, h Holder, ref SessionRef, in leasemodel.Input) ([]linKeyedOutput, error) {
	h.Session = &ref
	l, err := st.Acquire(bg, k, h, time.Duration(in.TTL)*time.Second, Observed{Kind: KindIssue})
	var held *HeldError
	switch {
	case err == nil:
		if l.Holder.ID != h.ID || l.Holder.Agent != h.Agent || l.Key != k || l.Session != ref.ID {
			return nil, errors.New("granted to the wrong caller, issue or session")
		}
		return []linKeyedOutput{{key: k, out: leasemodel.Output{Result: leasemodel.OK, Holder: l.Holder.Login, Agent: l.Holder.Agent, Token: l.Token,
			AcquiredAt: l.AcquiredAt.Unix(), ExpiresAt: unixOr0(l.ExpiresAt), Session: l.Session}}}, nil
	case errors.As(err, &held):
		return []linKeyedOutput{{key: k, out: leasemodel.Output{Result: leasemodel.Held, Holder: held.Holder, Agent: held.Agent, ExpiresAt: unixOr0(held.ExpiresAt)}}}, nil
	case errors.Is(err, ErrSessionGone), errors.Is(err, ErrSessionMoved), errors.Is(err, ErrBusy):
		return []linKeyedOutput{{key: k, out: leasemodel.Output{Result: leasemodel.Unavailable}}}, err
	}
	return nil, err
}

// sessionOutcome projects a session write onto every issue: ok (with
// each issue's place among leases, for a resume), or, refused, nothing
// done anywhere.
func sessionOutcome(err error, ok leasemodel.Output, leases []Lease) ([]linKeyedOutput, error) {
	out := ok
	switch {
	case err == nil:
	case errors.Is(err, ErrSessionGone), errors.Is(err, ErrSessionMoved), errors.Is(err, ErrBusy):
		out = leasemodel.Output{Result: leasemodel.Unavailable}
	default:
		return nil, err
	}
	outs := make([]linKeyedOutput, 0, len(linKeys))
	for _, k := range linKeys {
		o := out
		for _, l := range leases {
			if l.Key == k {
				o = leasemodel.Output{Result: leasemodel.OK, Present: true, Holder: l.Holder.Login, Agent: l.Holder.Agent, Token: l.Token,
					AcquiredAt: l.AcquiredAt.Unix(), ExpiresAt: unixOr0(l.ExpiresAt), Session: l.Session}
			}
		}
		outs = append(outs, linKeyedOutput{key: k, out: o})
	}
	return outs, nil
}
