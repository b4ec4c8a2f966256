package models

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"gorm.io/gorm"

	"github.com/collab-lease/collab-lease/models/leasemodel"
)

// Linearizability of the ledger against the lease rules: sixteen clients run
// acquire, renew, release and list concurrently on a few issues with
// short ttls while the clock moves, every call and answer is recorded, and
// porcupine searches for one sequential order of the whole history that
// the sequential model (package leasemodel) would have answered
// identically. Linearizable means: at most one live holder at any instant,
// tokens that only grow and grow by exactly one per new tenure, re-acquire
// keeps the token, and a lease is not live at its exact expiry instant —
// for every interleaving the run happened to produce, not just for
// hand-picked ones.
//
// The clock is a shared logical clock in whole seconds that the clients
// themselves move forward, at random, between their operations; nothing
// sleeps. Each operation records the clock just before its call and just
// after its return: that is the window of `now` values the model tries
// (leasemodel's doc says why reads and writes are judged as they are).

// linModel is the model as the store answers: a release says whether it
// freed a live lease.
var linModel = leasemodel.New(leasemodel.Options{})

// linKeys are the issues the clients fight over, in two repositories so
// that a list sees more than one of them.
var linKeys = []Key{{RepoID: 1, Issue: 1}, {RepoID: 1, Issue: 2}, {RepoID: 1, Issue: 3}, {RepoID: 2, Issue: 1}, {RepoID: 2, Issue: 2}}

// linHolders are who the clients are: accounts, and agents of one
// account (bot), which are holders of their own that may release each
// other's claims.
var linHolders = []struct{ login, agent string }{{"alice", ""}, {"bob", ""}, {"bot", "a1"}, {"bot", "a2"}}

// linLedger is what the clients call: the Store, or a broken variant of it.
type linLedger interface {
	Acquire(ctx context.Context, k Key, h Holder, ttl time.Duration, obs Observed) (Lease, error)
	Renew(ctx context.Context, k Key, h Holder, ttl time.Duration) (Lease, error)
	Release(ctx context.Context, k Key, h Holder) (*Lease, error)
	AcquireFirst(ctx context.Context, repoID int64, cands []Candidate, h Holder, ttl time.Duration) (Lease, error)
	EndIssue(ctx context.Context, k Key, why Reason, version int64, delivery string) (Ended, error)
	ReopenIssue(ctx context.Context, k Key, version int64, delivery string) (Ended, error)
	List(ctx context.Context, repoID int64) ([]Lease, error)
	Handoff(ctx context.Context, k Key, by, to Holder, force bool) (Lease, Lease, error)
}

// linClock is the shared logical clock, in whole seconds.
type linClock struct{ sec atomic.Int64 }

func (c *linClock) Now() time.Time { return time.Unix(c.sec.Load(), 0) }

// linRun is one recorded run.
type linRun struct {
	history []porcupine.Operation
	ops     int // calls made (a list counts once)
	busy    int
}

// runLinearizability has clients clients make opsPerClient calls each on
// ledgers[i%len(ledgers)], and returns the history.
func runLinearizability(t *testing.T, clock *linClock, ledgers []linLedger, clients, opsPerClient int, seed int64) linRun {
	t.Helper()
	var version atomic.Int64 // the forge's versions of close and reopen events
	return goClients(t, clients, opsPerClient, seed, func(cs *linClients, c int, rng *rand.Rand, lc *linClient) {
		led := ledgers[c%len(ledgers)]
		holder := linHolders[c%len(linHolders)] // four clients per holder: concurrent re-acquires
		cs.start()
		for range opsPerClient {
			k := linKeys[rng.Intn(len(linKeys))]
			in := leasemodel.Input{Key: leasemodel.Key(k), Holder: holder.login, Agent: holder.agent}
			switch r := rng.Intn(26); {
			case r < 8:
				in.Kind = leasemodel.Acquire
				if rng.Intn(8) > 0 { // one in eight open-ended
					in.TTL = int64(1 + rng.Intn(4))
				}
			case r < 11:
				in.Kind, in.TTL = leasemodel.Renew, int64(1+rng.Intn(4))
			case r < 16:
				in.Kind = leasemodel.Release
			case r < 20:
				in.Kind = leasemodel.List
			case r < 22:
				// The forge's events, with versions in the order they
				// were issued; applied concurrently, some arrive late.
				in.Kind, in.Holder, in.Agent = leasemodel.Close+leasemodel.Kind(r-20), "", ""
				in.Version = version.Add(1)
			case r < 24:
				// next over the repository's issues.
				in.Kind = leasemodel.NextTake
				if rng.Intn(8) > 0 {
					in.TTL = int64(1 + rng.Intn(4))
				}
			default:
				// A handoff to another holder (or, now and then, to
				// whoever holds it: refused as invalid).
				to := linHolders[rng.Intn(len(linHolders))]
				in.Kind, in.To, in.ToAgent = leasemodel.Handoff, to.login, to.agent
			}
			in.Lo = clock.sec.Load()
			call := cs.seq.Add(1)
			outs, err := linCall(led, in)
			ret := cs.seq.Add(1)
			in.Hi = clock.sec.Load()
			if err != nil {
				cs.fail("client %d: %s %v by %s: %v", c, in.Kind, k, holder, err)
				return
			}
			lc.record(in, call, ret, outs)
			// Time moves on by itself, as far as the clients can tell.
			if rng.Intn(12) == 0 {
				clock.sec.Add(int64(1 + rng.Intn(2)*rng.Intn(3)))
			}
		}
	})
}

// linClients is what the clients of one run share.
type linClients struct {
	t       *testing.T
	seq     atomic.Int64 // porcupine's call/return order: a linearizable counter
	failed  atomic.Bool
	started chan struct{}
}

// start waits until every client of the run may start.
func (cs *linClients) start() { <-cs.started }

// fail fails the run; only its first failure is told.
func (cs *linClients) fail(format string, args ...any) {
	if cs.failed.CompareAndSwap(false, true) {
		cs.t.Errorf(format, args...)
	}
}

// goClients runs clients clients of ops calls each at once: client c,
// with a random source of its own (seed+c), gets ready, calls start,
// and records its calls in lc. It returns the run when all are done.
func goClients(t *testing.T, clients, ops int, seed int64, client func(cs *linClients, c int, rng *rand.Rand, lc *linClient)) linRun {
	t.Helper()
	cs := &linClients{t: t, started: make(chan struct{})}
	var (
		mu  sync.Mutex
		run linRun
		wg  sync.WaitGroup
	)
	for c := range clients {
		wg.Go(func() {
			lc := &linClient{id: c}
			client(cs, c, rand.New(rand.NewSource(seed+int64(c))), lc)
			run.add(&mu, lc, ops)
		})
	}
	close(cs.started)
	wg.Wait()
	return run
}

// linClient is what one client of a run records.
type linClient struct {
	id    int
	local []porcupine.Operation
	busy  int // answers that did nothing (busy, or a session's refusal)
}

// record adds the answers of one call, made at call and answered at ret:
// an operation for each output, on its own issue (a list, a next and a
// session's write answer for several).
func (lc *linClient) record(in leasemodel.Input, call, ret int64, outs []linKeyedOutput) {
	for _, o := range outs {
		in := in
		in.Key = leasemodel.Key(o.key)
		if o.kind != 0 {
			in.Kind = o.kind
		}
		if o.out.Result == leasemodel.Unavailable {
			lc.busy++
		}
		lc.local = append(lc.local, porcupine.Operation{ClientId: lc.id, Input: in, Call: call, Output: o.out, Return: ret})
	}
}

// add merges what client lc recorded of its ops calls into run.
func (run *linRun) add(mu *sync.Mutex, lc *linClient, ops int) {
	mu.Lock()
	defer mu.Unlock()
	run.history = append(run.history, lc.local...)
	run.ops += ops
	run.busy += lc.busy
}

type linKeyedOutput struct {
	key  Key
	out  leasemodel.Output
	kind leasemodel.Kind // the operation this output checks, when not the call's own (next)
}

// linCall makes one call and translates its answer; a list answers once
// per issue of its repository. An error is returned only for answers the
// contract does not allow at all.
func linCall(led linLedger, in leasemodel.Input) ([]linKeyedOutput, error) {
	ctx := context.Background()
	k := Key(in.Key)
	ttl := time.Duration(in.TTL) * time.Second
	one := func(out leasemodel.Output) ([]linKeyedOutput, error) {
		return []linKeyedOutput{{key: k, out: out}}, nil
	}
	granted := func(l Lease, err error) ([]linKeyedOutput, error) {
		var held *HeldError
		var nh *NotHolderError
		var cooling *CoolingError
		switch {
		case err == nil:
			if l.Holder != whoIn(in) || l.Key != k {
				return nil, fmt.Errorf("granted %+v to the wrong caller or issue", l)
			}
			return one(leasemodel.Output{Result: leasemodel.OK, Holder: l.Holder.Login, Agent: l.Holder.Agent, Token: l.Token, AcquiredAt: l.AcquiredAt.Unix(), ExpiresAt: unixOr0(l.ExpiresAt), Session: l.Session})
		case errors.Is(err, ErrClosed) && in.Kind == leasemodel.Acquire:
			return one(leasemodel.Output{Result: leasemodel.Closed})
		case errors.As(err, &held) && in.Kind == leasemodel.Acquire:
			return one(leasemodel.Output{Result: leasemodel.Held, Holder: held.Holder, Agent: held.Agent, ExpiresAt: unixOr0(held.ExpiresAt)})
		case errors.As(err, &cooling) && in.Kind == leasemodel.Acquire:
			return one(leasemodel.Output{Result: leasemodel.Cooling, ExpiresAt: cooling.Until.Unix()})
		case errors.As(err, &nh) && in.Kind == leasemodel.Renew:
			return one(leasemodel.Output{Result: leasemodel.NotHolder, Holder: nh.Holder, Agent: nh.Agent, ExpiresAt: unixOr0(nh.ExpiresAt)})
		case errors.Is(err, ErrBusy):
			return one(leasemodel.Output{Result: leasemodel.Unavailable})
		}
		return nil, err
	}
	switch in.Kind {
	case leasemodel.Acquire:
		return granted(led.Acquire(ctx, k, whoIn(in), ttl, Observed{Kind: KindIssue}))
	case leasemodel.NextTake:
		var cands []Candidate
		for _, lk := range linKeys {
			if lk.RepoID == k.RepoID {
				cands = append(cands, Candidate{Issue: lk.Issue, Observed: Observed{Kind: KindIssue}, Verified: true})
			}
		}
		l, err := led.AcquireFirst(ctx, k.RepoID, cands, whoIn(in), ttl)
		switch {
		case errors.Is(err, ErrBusy):
			return nil, nil // nothing was done, and nothing is said
		case err != nil && !errors.Is(err, ErrNoneFree):
			return nil, err
		case err == nil && l.Holder != whoIn(in):
			return nil, fmt.Errorf("next granted %+v to the wrong caller", l)
		}
		var outs []linKeyedOutput
		for _, c := range cands {
			ck := Key{RepoID: k.RepoID, Issue: c.Issue}
			if err == nil && c.Issue == l.Issue {
				return append(outs, linKeyedOutput{key: ck, out: leasemodel.Output{Result: leasemodel.OK, Holder: l.Holder.Login, Agent: l.Holder.Agent,
					Token: l.Token, AcquiredAt: l.AcquiredAt.Unix(), ExpiresAt: unixOr0(l.ExpiresAt), Session: l.Session}}), nil
			}
			outs = append(outs, linKeyedOutput{key: ck, out: leasemodel.Output{Result: leasemodel.Held}, kind: leasemodel.NextSkip})
		}
		if err == nil {
			return nil, fmt.Errorf("next took %d, not a candidate", l.Issue)
		}
		return outs, nil
	case leasemodel.Renew:
		return granted(led.Renew(ctx, k, whoIn(in), ttl))
	case leasemodel.Handoff:
		to := who(in.To)
		to.Agent = in.ToAgent
		l, _, err := led.Handoff(ctx, k, whoIn(in), to, false)
		var nh *NotHolderError
		switch {
		case err == nil:
			if l.Holder != to || l.Key != k {
				return nil, fmt.Errorf("handoff gave %+v, not to %+v", l, to)
			}
			return one(leasemodel.Output{Result: leasemodel.OK, Holder: l.Holder.Login, Agent: l.Holder.Agent, Token: l.Token,
				AcquiredAt: l.AcquiredAt.Unix(), ExpiresAt: unixOr0(l.ExpiresAt), Session: l.Session})
		case errors.As(err, &nh):
			return one(leasemodel.Output{Result: leasemodel.NotHolder, Holder: nh.Holder, Agent: nh.Agent, ExpiresAt: unixOr0(nh.ExpiresAt)})
		case errors.Is(err, ErrAlreadyHolder):
			return one(leasemodel.Output{Result: leasemodel.Invalid})
		case errors.Is(err, ErrBusy):
			return one(leasemodel.Output{Result: leasemodel.Unavailable})
		}
		return nil, err
	case leasemodel.Close, leasemodel.Reopen:
		var (
			e   Ended
			err error
		)
		if in.Kind == leasemodel.Close {
			e, err = led.EndIssue(ctx, k, ReasonClosed, in.Version, "")
		} else {
			e, err = led.ReopenIssue(ctx, k, in.Version, "")
		}
		switch {
		case err == nil:
			return one(leasemodel.Output{Result: leasemodel.OK, Freed: len(e.Leases) > 0})
		case errors.Is(err, ErrBusy):
			return one(leasemodel.Output{Result: leasemodel.Unavailable})
		}
		return nil, err
	case leasemodel.Release:
		l, err := led.Release(ctx, k, whoIn(in))
		var nh *NotHolderError
		switch {
		case err == nil:
			if l != nil && (l.Holder.ID != whoIn(in).ID || l.Key != k) {
				return nil, fmt.Errorf("release freed %+v, not the caller's account's", *l)
			}
			return one(leasemodel.Output{Result: leasemodel.OK, Freed: l != nil})
		case errors.As(err, &nh):
			return one(leasemodel.Output{Result: leasemodel.NotHolder, Holder: nh.Holder, Agent: nh.Agent, ExpiresAt: unixOr0(nh.ExpiresAt)})
		case errors.Is(err, ErrBusy):
			return one(leasemodel.Output{Result: leasemodel.Unavailable})
		}
		return nil, err
	case leasemodel.List:
		leases, err := led.List(ctx, k.RepoID)
		if errors.Is(err, ErrBusy) {
			return nil, nil // a failed read says nothing
		}
		if err != nil {
			return nil, err
		}
		if !slices.IsSortedFunc(leases, func(a, b Lease) int {
			if c := a.AcquiredAt.Compare(b.AcquiredAt); c != 0 {
				return c
			}
			return int(a.Issue - b.Issue)
		}) {
			return nil, fmt.Errorf("list is not oldest first: %+v", leases)
		}
		byIssue := map[int64]Lease{}
		for _, l := range leases {
			if !slices.Contains(linKeys, l.Key) {
				return nil, fmt.Errorf("list shows an issue nobody claimed: %+v", l)
			}
			byIssue[l.Issue] = l
		}
		var outs []linKeyedOutput
		for _, lk := range linKeys {
			if lk.RepoID != k.RepoID {
				continue
			}
			o := leasemodel.Output{Result: leasemodel.OK}
			if l, ok := byIssue[lk.Issue]; ok {
				o = leasemodel.Output{Result: leasemodel.OK, Present: true, Holder: l.Holder.Login, Agent: l.Holder.Agent, Token: l.Token, AcquiredAt: l.AcquiredAt.Unix(), ExpiresAt: unixOr0(l.ExpiresAt), Session: l.Session}
			}
			outs = append(outs, linKeyedOutput{key: lk, out: o})
		}
		return outs, nil
	}
	return nil, errors.New("unknown operation kind")
}

func unixOr0(t *time.Time) int64 {
	if t == nil {
		return 0
	}
	return t.Unix()
}

func linSeed(t testing.TB) int64 {
	t.Helper()
	if v := os.Getenv("COLLAB_LIN_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("COLLAB_LIN_SEED=%q: %v", v, err)
		}
		return n
	}
	return time.Now().UnixNano()
}

// Sixteen clients, two store handles on one ledger (as two processes would
// have), at least 10,000 operations at CI size, short ttls and a moving
// clock: the recorded history must be linearizable.
func TestLinearizabilityOfTheLedger(t *testing.T) { forEachEngine(t, testLinearizabilityOfTheLedger) }

func testLinearizabilityOfTheLedger(t *testing.T, e engine) {
	scale := leasemodel.Scale(t)
	seed := linSeed(t)
	t.Logf("seed %d (COLLAB_LIN_SEED), scale %d (COLLAB_STRESS_SCALE)", seed, scale)
	clock, ledgers, stores := openLinLedgers(t, e)
	const clients = 16
	start := time.Now()
	run := runLinearizability(t, clock, ledgers, clients, 750*scale, seed)
	if t.Failed() {
		return
	}
	t.Logf("%d clients made %d operations (%d recorded, %d busy) in %s; the clock moved %d s",
		clients, run.ops, len(run.history), run.busy, time.Since(start).Round(time.Millisecond),
		clock.sec.Load()-time.Date(2026, 9, 5, 12, 0, 0, 0, time.UTC).Unix())

	// The run must have exercised what the model is about.
	mustExercise(t, stores[0], 20, ActionAcquire, ActionTakeover, ActionReacquire, ActionRenew, ActionRelease)
	if res := leasemodel.Check(t, linModel, run.history, time.Duration(scale)*2*time.Minute, true); res != porcupine.Ok {
		t.Fatalf("the ledger's history is %s, want Ok", res)
	}
}

// openLinLedgers opens two store handles on one new ledger on e (as two
// processes would have), on a shared logical clock, with opts too.
func openLinLedgers(t *testing.T, e engine, opts ...Option) (*linClock, []linLedger, []*Store) {
	t.Helper()
	clock := &linClock{}
	clock.sec.Store(time.Date(2026, 9, 5, 12, 0, 0, 0, time.UTC).Unix())
	path := e.newDB(t)
	var ledgers []linLedger
	var stores []*Store
	for range 2 {
		s, err := Open(path, append([]Option{WithClock(clock), WithBusyTimeout(30 * time.Second)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		ledgers = append(ledgers, s)
		stores = append(stores, s)
	}
	return clock, ledgers, stores
}

// mustExercise fails t unless the history of linKeys in s holds at least
// least events of each of these actions: a run that did not exercise
// what the model is about proves nothing.
func mustExercise(t *testing.T, s *Store, least int, actions ...Action) {
	t.Helper()
	seen := map[Action]int{}
	for _, k := range linKeys {
		evs, err := s.History(bg, k)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			seen[e.Action]++
		}
	}
	t.Logf("ledger history: %v", seen)
	for _, a := range actions {
		if seen[a] < least {
			t.Errorf("only %d %s events: the workload does not exercise the model", seen[a], a)
		}
	}
}

// The checker is only worth its silence if it speaks up: each broken store
// below must yield a history it calls Illegal. (A test of the checker: it
// runs on SQLite alone.)
func TestLinearizabilityCheckerCatchesBrokenStores(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(*Store) linLedger
	}{
		// Release deletes the row, so the next tenure starts at token 1
		// again: a fencing token goes backwards.
		{"release deletes the row", func(s *Store) linLedger { return deletingRelease{s} }},
		// Acquire decides on a read made outside the write transaction:
		// two clients that both saw the issue free both get it.
		{"acquire decides on a stale read", func(s *Store) linLedger { return staleAcquire{s} }},
		// A lease is still live at its exact expiry instant.
		{"lease live at its expiry instant", func(s *Store) linLedger { return liveAtExpiry{s} }},
		// The forge's close is recorded but the live lease stays.
		{"close keeps the lease", func(s *Store) linLedger { return closeKeepsLease{s} }},
		// next looks at the live leases first, then tries its candidates
		// one transaction each: "none" can come while one was free.
		{"next tries candidates one by one", func(s *Store) linLedger { return nextOneByOne{s} }},
		// Another agent of the holder's account may not release its claim.
		{"release by the pair only", func(s *Store) linLedger { return pairRelease{s} }},
		// Agents of one account share their claims, as accounts did.
		{"agents share the account's claim", func(s *Store) linLedger { return sharedAgents{s} }},
		// A handoff that passes the tenure on, token and all, instead of
		// beginning the target's own.
		{"handoff keeps the token", func(s *Store) linLedger { return handoffKeepsToken{s} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mustCatch(t, func(clock *linClock, s *Store, seed int64) linRun {
				return runLinearizability(t, clock, []linLedger{tc.wrap(s)}, 16, 200, seed)
			})
		})
	}
}

// mustCatch runs a workload on a broken store (run: on a new ledger on
// the clock, with the seed) and fails t unless the checker calls its
// history Illegal. A broken store shows itself only when the run happens
// to interleave the wrong way; it is given three runs to do so.
func mustCatch(t *testing.T, run func(clock *linClock, s *Store, seed int64) linRun) {
	t.Helper()
	mustCatchUnder(t, linModel, nil, run)
}

// mustCatchUnder is mustCatch with the store opened with opts too, checked
// against model.
func mustCatchUnder(t *testing.T, model porcupine.Model, opts []Option, run func(clock *linClock, s *Store, seed int64) linRun) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		seed := linSeed(t)
		clock := &linClock{}
		clock.sec.Store(time.Date(2026, 9, 5, 12, 0, 0, 0, time.UTC).Unix())
		s, err := Open(t.TempDir()+"/collab.db", append([]Option{WithClock(clock), WithBusyTimeout(30 * time.Second)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		r := run(clock, s, seed)
		_ = s.Close()
		if t.Failed() {
			return
		}
		res := leasemodel.Check(t, model, r.history, 2*time.Minute, false)
		if res == porcupine.Illegal {
			return
		}
		if attempt == 3 {
			t.Fatalf("seed %d: the checker called the broken store's history %s three times, want Illegal", seed, res)
		}
	}
}

// handoffKeepsToken hands the lease over as it is: same token, same
// start, same expiry.
type handoffKeepsToken struct{ *Store }

func (s handoffKeepsToken) Handoff(ctx context.Context, k Key, by, to Holder, _ bool) (Lease, Lease, error) {
	var out, from Lease
	err := s.write(ctx, issueScope(k), func(tx *gorm.DB, now int64) error {
		row, found, err := load(tx, k)
		switch {
		case err != nil:
			return err
		case !found || !row.live(now) || !row.ofAccount(by):
			return notHolder(row, found, now)
		case row.heldBy(to):
			return ErrAlreadyHolder
		}
		from = row.lease()
		row.Holder, row.HolderID, row.Agent = &to.Login, &to.ID, to.Agent
		if err := store(tx, row, true); err != nil {
			return err
		}
		out = row.lease()
		return nil
	})
	return out, from, err
}

// pairRelease refuses a release by another agent of the holder's
// account, as if only the holder (the account and the agent) might.
type pairRelease struct{ *Store }

func (p pairRelease) Release(ctx context.Context, k Key, h Holder) (*Lease, error) {
	cur, err := p.Current(ctx, k)
	if err == nil && cur != nil && cur.Holder.ID == h.ID && cur.Holder.Agent != h.Agent {
		return nil, &NotHolderError{Holder: cur.Holder.Login, Agent: cur.Holder.Agent, ExpiresAt: cur.ExpiresAt}
	}
	return p.Store.Release(ctx, k, h)
}

// sharedAgents drops the agent from every call: the account is the
// holder, as before agents.
type sharedAgents struct{ *Store }

func noAgent(h Holder) Holder { h.Agent = ""; return h }

func (a sharedAgents) Acquire(ctx context.Context, k Key, h Holder, ttl time.Duration, obs Observed) (Lease, error) {
	l, err := a.Store.Acquire(ctx, k, noAgent(h), ttl, obs)
	l.Holder.Agent = h.Agent // as its caller expects to be told
	return l, err
}

func (a sharedAgents) Renew(ctx context.Context, k Key, h Holder, ttl time.Duration) (Lease, error) {
	l, err := a.Store.Renew(ctx, k, noAgent(h), ttl)
	l.Holder.Agent = h.Agent
	return l, err
}

// deletingRelease releases by deleting the row (in one transaction, with
// the same refusal as the real Release).
type deletingRelease struct{ *Store }

func (d deletingRelease) Release(ctx context.Context, k Key, h Holder) (*Lease, error) {
	var out *Lease
	err := d.write(ctx, issueScope(k), func(tx *gorm.DB, now int64) error {
		row, found, err := load(tx, k)
		if err != nil || !found || row.Holder == nil {
			return err
		}
		if row.live(now) && !row.ofAccount(h) {
			return notHolder(row, found, now)
		}
		if row.live(now) {
			l := row.lease()
			out = &l
		}
		return tx.Where("repo_id = ? AND issue = ?", k.RepoID, k.Issue).Delete(&leaseRow{}).Error
	})
	return out, err
}

// staleAcquire checks with Current (outside the write lock), then writes
// a new tenure without checking again.
type nextOneByOne struct{ *Store }

func (s nextOneByOne) AcquireFirst(ctx context.Context, repoID int64, cands []Candidate, h Holder, ttl time.Duration) (Lease, error) {
	live, err := s.List(ctx, repoID)
	if err != nil {
		return Lease{}, err
	}
	for _, c := range cands {
		if slices.ContainsFunc(live, func(l Lease) bool { return l.Issue == c.Issue }) {
			continue
		}
		runtime.Gosched()
		l, err := s.Acquire(ctx, Key{RepoID: repoID, Issue: c.Issue}, h, ttl, c.Observed)
		var held *HeldError
		switch {
		case errors.As(err, &held), errors.Is(err, ErrClosed):
			continue
		case err != nil:
			return Lease{}, err
		}
		return l, nil
	}
	return Lease{}, ErrNoneFree
}

type staleAcquire struct{ *Store }

func (s staleAcquire) Acquire(ctx context.Context, k Key, h Holder, ttl time.Duration, obs Observed) (Lease, error) {
	cur, err := s.Current(ctx, k)
	switch {
	case err != nil:
		return Lease{}, err
	case cur != nil && cur.Holder != h:
		return Lease{}, &HeldError{Holder: cur.Holder.Login, Agent: cur.Holder.Agent, ExpiresAt: cur.ExpiresAt}
	case cur != nil:
		return s.Store.Acquire(ctx, k, h, ttl, obs)
	}
	runtime.Gosched()
	var out Lease
	err = s.write(ctx, issueScope(k), func(tx *gorm.DB, now int64) error {
		row, found, err := load(tx, k)
		if err != nil {
			return err
		}
		row = leaseRow{RepoID: k.RepoID, Issue: k.Issue, Holder: &h.Login, HolderID: &h.ID, Agent: h.Agent, Kind: obs.Kind,
			Token: row.Token + 1, AcquiredAt: now, ExpiresAt: expiry(now, ttl)}
		if found {
			err = tx.Save(&row).Error
		} else {
			err = tx.Create(&row).Error
		}
		out = row.lease()
		return err
	})
	return out, err
}

// liveAtExpiry stores every expiry one second later than it reports, so a
// lease is still live at the instant it claims to expire.
type liveAtExpiry struct{ *Store }

func (l liveAtExpiry) Acquire(ctx context.Context, k Key, h Holder, ttl time.Duration, obs Observed) (Lease, error) {
	if ttl > 0 {
		ttl += time.Second
	}
	lease, err := l.Store.Acquire(ctx, k, h, ttl, obs)
	return earlier(lease), earlierErr(err)
}

func (l liveAtExpiry) Renew(ctx context.Context, k Key, h Holder, ttl time.Duration) (Lease, error) {
	lease, err := l.Store.Renew(ctx, k, h, ttl+time.Second)
	return earlier(lease), earlierErr(err)
}

func (l liveAtExpiry) Release(ctx context.Context, k Key, h Holder) (*Lease, error) {
	lease, err := l.Store.Release(ctx, k, h)
	return lease, earlierErr(err)
}

func (l liveAtExpiry) List(ctx context.Context, repoID int64) ([]Lease, error) {
	leases, err := l.Store.List(ctx, repoID)
	for i := range leases {
		leases[i] = earlier(leases[i])
	}
	return leases, err
}

func earlier(l Lease) Lease {
	l.ExpiresAt = secondEarlier(l.ExpiresAt)
	return l
}

func earlierErr(err error) error {
	var held *HeldError
	var nh *NotHolderError
	switch {
	case errors.As(err, &held):
		return &HeldError{Holder: held.Holder, Agent: held.Agent, ExpiresAt: secondEarlier(held.ExpiresAt)}
	case errors.As(err, &nh):
		return &NotHolderError{Holder: nh.Holder, Agent: nh.Agent, ExpiresAt: secondEarlier(nh.ExpiresAt)}
	}
	return err
}

func secondEarlier(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	e := t.Add(-time.Second)
	return &e
}

// closeKeepsLease records a close without ending the live lease.
type closeKeepsLease struct{ *Store }

func (c closeKeepsLease) EndIssue(ctx context.Context, k Key, why Reason, version int64, delivery string) (Ended, error) {
	return Ended{}, c.write(ctx, issueScope(k), func(tx *gorm.DB, now int64) error {
		var st issueRow
		err := tx.Where("repo_id = ? AND issue = ?", k.RepoID, k.Issue).Take(&st).Error
		switch {
		case errors.Is(err, gorm.ErrRecordNotFound):
			st = issueRow{RepoID: k.RepoID, Issue: k.Issue}
		case err != nil:
			return err
		case version < st.Version:
			return nil
		}
		st.Closed, st.Version, st.CheckedAt = true, max(st.Version, version), now
		return tx.Save(&st).Error
	})
}

// whoIn is the holder of a call of the model.
func whoIn(in leasemodel.Input) Holder {
	h := who(in.Holder)
	h.Agent = in.Agent
	return h
}
