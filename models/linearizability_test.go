package models

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
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
)

// Linearizability of the ledger against SPEC §2: sixteen clients run
// acquire, renew, release and list concurrently on a few issues with
// short ttls while the clock moves, every call and answer is recorded, and
// porcupine searches for one sequential order of the whole history that
// the sequential model below (linSpec) would have answered identically.
// Linearizable means: at most one live holder at any instant, tokens that
// only grow and grow by exactly one per new tenure, re-acquire keeps the
// token, and a lease is not live at its exact expiry instant — for every
// interleaving the run happened to produce, not just for hand-picked ones.
//
// How time enters the model. The clock is a shared logical clock in whole
// seconds that the clients themselves move forward, at random, between
// their operations; nothing sleeps. Each operation records the clock just
// before its call and just after its return, so the `now` the store used
// lies in that window [Lo, Hi] (the clock never goes back). The model
// tries each value of the window and keeps the answers that match.
//
// Why not put "advance the clock" into the history as an operation of its
// own and let the model's state carry `now`? Because that model would be
// wrong about this store, and would cry wolf: List reads the clock and
// only then opens its read snapshot, so a write that commits in between,
// at a later clock value, is visible to a List that judges liveness at the
// earlier one. No single instant has that (rows, now) pair, yet nothing a
// client can rely on is broken. So reads are judged at their own `now`.
// Writes are stricter, and the model says so: every write (including one
// that is refused) reads the clock while it holds the write lock, so in
// the order of the ledger's history the writes' clock values never
// decrease. The state carries the last write's `now` (LastWrite) and a
// write may not be placed at an earlier one; a store that decided with a
// clock reading taken before it held the lock would fail that.
//
// Where a window allows several values of `now`, the model keeps one
// successor state per distinct lease row, the one with the smallest `now`:
// it allows every continuation a later `now` would, so nothing sound is
// lost. The history is partitioned by issue (a list is split into one
// read per issue of its repository), which keeps the check fast; the
// atomicity of a list across issues is not what this checks.

// linKeys are the issues the clients fight over, in two repositories so
// that a list sees more than one of them.
var linKeys = []Key{{RepoID: 1, Issue: 1}, {RepoID: 1, Issue: 2}, {RepoID: 1, Issue: 3}, {RepoID: 2, Issue: 1}, {RepoID: 2, Issue: 2}}

var linHolders = []string{"alice", "bob", "carol", "dave"}

type linKind uint8

const (
	linAcquire linKind = iota
	linRenew
	linRelease
	linList // one issue's part of a list of its repository
)

func (k linKind) String() string {
	return [...]string{"acquire", "renew", "release", "list"}[k]
}

// linInput is one call. TTL is in seconds (0: open-ended acquire).
type linInput struct {
	Kind   linKind
	Key    Key
	Holder string
	TTL    int64
	Lo, Hi int64 // the clock (Unix seconds) just before the call and just after the return
}

type linResult uint8

const (
	linOK        linResult = iota
	linHeld                // acquire: *HeldError
	linNotHolder           // renew, release: *NotHolderError
	linBusy                // ErrBusy: nothing was written (the store's contract)
)

// linOutput is one answer, with only the fields the answer carries set, so
// that two answers compare with ==.
type linOutput struct {
	Result     linResult
	Present    bool   // list: the issue has a live lease
	Holder     string // ok: the holder; held/not_holder: the live holder ("" none)
	Token      int64
	AcquiredAt int64
	ExpiresAt  int64 // 0: open-ended, or none
	Freed      bool  // release: it freed a live lease
}

// linState is one issue's lease row as the model sees it.
type linState struct {
	Holder     string // "": free
	Token      int64
	AcquiredAt int64
	ExpiresAt  int64 // 0: open-ended (or free)
	LastWrite  int64 // the clock value of the latest write on this issue
}

func (s linState) live(now int64) bool {
	return s.Holder != "" && (s.ExpiresAt == 0 || s.ExpiresAt > now)
}

func (s linState) sameRow(o linState) bool {
	s.LastWrite, o.LastWrite = 0, 0
	return s == o
}

// linSpec is SPEC §2 as a sequential function: the answer to in on state s
// at clock value now, and the state after it.
func linSpec(s linState, in linInput, now int64) (linOutput, linState) {
	live := s.live(now)
	exp := int64(0)
	if in.TTL > 0 {
		exp = now + in.TTL
	}
	refused := func(r linResult) (linOutput, linState) {
		if !live {
			return linOutput{Result: r}, s
		}
		return linOutput{Result: r, Holder: s.Holder, ExpiresAt: s.ExpiresAt}, s
	}
	granted := func(s linState) (linOutput, linState) {
		return linOutput{Result: linOK, Holder: s.Holder, Token: s.Token, AcquiredAt: s.AcquiredAt, ExpiresAt: s.ExpiresAt}, s
	}
	switch in.Kind {
	case linAcquire:
		switch {
		case live && s.Holder != in.Holder:
			return refused(linHeld)
		case live: // idempotent: same tenure, expiry from this call
			s.ExpiresAt = exp
			return granted(s)
		default: // a new tenure, token old+1
			return granted(linState{Holder: in.Holder, Token: s.Token + 1, AcquiredAt: now, ExpiresAt: exp, LastWrite: s.LastWrite})
		}
	case linRenew:
		if !live || s.Holder != in.Holder {
			return refused(linNotHolder)
		}
		s.ExpiresAt = exp
		return granted(s)
	case linRelease:
		if live && s.Holder != in.Holder {
			return refused(linNotHolder)
		}
		if s.Holder != "" { // the row is freed and keeps its token
			s.Holder, s.AcquiredAt, s.ExpiresAt = "", 0, 0
		}
		return linOutput{Result: linOK, Freed: live}, s
	case linList:
		if !live {
			return linOutput{Result: linOK}, s
		}
		return linOutput{Result: linOK, Present: true, Holder: s.Holder, Token: s.Token, AcquiredAt: s.AcquiredAt, ExpiresAt: s.ExpiresAt}, s
	}
	panic("unknown operation kind")
}

// linStep returns every state the model can be in after in answered out
// on s, trying each clock value of the operation's window.
func linStep(s linState, in linInput, out linOutput) []any {
	if out.Result == linBusy {
		return []any{s} // nothing was written
	}
	lo := in.Lo
	if in.Kind != linList {
		lo = max(lo, s.LastWrite)
	}
	var next []any
	for now := lo; now <= in.Hi; now++ {
		want, ns := linSpec(s, in, now)
		if want != out {
			continue
		}
		if in.Kind != linList {
			ns.LastWrite = now
		}
		if !slices.ContainsFunc(next, func(x any) bool { return x.(linState).sameRow(ns) }) {
			next = append(next, ns)
		}
	}
	return next
}

var linModel = (&porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[Key][]porcupine.Operation{}
		var keys []Key
		for _, op := range history {
			k := op.Input.(linInput).Key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() []any { return []any{linState{}} },
	Step: func(state, input, output any) []any {
		return linStep(state.(linState), input.(linInput), output.(linOutput))
	},
	Hash: func(state any) uint64 {
		s := state.(linState)
		h := fnv.New64a()
		fmt.Fprintf(h, "%s|%d|%d|%d|%d", s.Holder, s.Token, s.AcquiredAt, s.ExpiresAt, s.LastWrite)
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		call := fmt.Sprintf("%s %d#%d by %s ttl %d @[%d,%d]", in.Kind, in.Key.RepoID, in.Key.Issue, in.Holder, in.TTL, in.Lo, in.Hi)
		switch out.Result {
		case linHeld:
			return fmt.Sprintf("%s -> held by %s until %d", call, out.Holder, out.ExpiresAt)
		case linNotHolder:
			return fmt.Sprintf("%s -> not_holder (%q until %d)", call, out.Holder, out.ExpiresAt)
		case linBusy:
			return call + " -> busy"
		}
		switch in.Kind {
		case linRelease:
			return fmt.Sprintf("%s -> released (freed %v)", call, out.Freed)
		case linList:
			if !out.Present {
				return call + " -> not listed"
			}
		}
		return fmt.Sprintf("%s -> %s token %d at %d until %d", call, out.Holder, out.Token, out.AcquiredAt, out.ExpiresAt)
	},
	DescribeState: func(state any) string {
		s := state.(linState)
		return fmt.Sprintf("%q token %d at %d until %d (last write %d)", s.Holder, s.Token, s.AcquiredAt, s.ExpiresAt, s.LastWrite)
	},
}).ToModel()

// linLedger is what the clients call: the Store, or a broken variant of it.
type linLedger interface {
	Acquire(ctx context.Context, k Key, holder string, ttl time.Duration) (Lease, error)
	Renew(ctx context.Context, k Key, holder string, ttl time.Duration) (Lease, error)
	Release(ctx context.Context, k Key, holder string) (*Lease, error)
	List(ctx context.Context, repoID int64) ([]Lease, error)
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
	var (
		seq     atomic.Int64 // porcupine's call/return order: a linearizable counter
		mu      sync.Mutex
		run     linRun
		wg      sync.WaitGroup
		failed  atomic.Bool
		started = make(chan struct{})
	)
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewSource(seed + int64(c)))
			led := ledgers[c%len(ledgers)]
			holder := linHolders[c%len(linHolders)] // four clients per holder: concurrent re-acquires
			var local []porcupine.Operation
			busy := 0
			<-started
			for range opsPerClient {
				k := linKeys[rng.Intn(len(linKeys))]
				in := linInput{Key: k, Holder: holder}
				switch r := rng.Intn(20); {
				case r < 8:
					in.Kind = linAcquire
					if rng.Intn(8) > 0 { // one in eight open-ended
						in.TTL = int64(1 + rng.Intn(4))
					}
				case r < 11:
					in.Kind, in.TTL = linRenew, int64(1+rng.Intn(4))
				case r < 16:
					in.Kind = linRelease
				default:
					in.Kind = linList
				}
				in.Lo = clock.sec.Load()
				call := seq.Add(1)
				outs, err := linCall(led, in)
				ret := seq.Add(1)
				in.Hi = clock.sec.Load()
				if err != nil {
					if failed.CompareAndSwap(false, true) {
						t.Errorf("client %d: %s %v by %s: %v", c, in.Kind, k, holder, err)
					}
					return
				}
				for _, o := range outs {
					in := in
					if in.Kind == linList {
						in.Key = o.key
					}
					if o.out.Result == linBusy {
						busy++
					}
					local = append(local, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: o.out, Return: ret})
				}
				// Time moves on by itself, as far as the clients can tell.
				if rng.Intn(12) == 0 {
					clock.sec.Add(int64(1 + rng.Intn(2)*rng.Intn(3)))
				}
			}
			mu.Lock()
			run.history = append(run.history, local...)
			run.ops += opsPerClient
			run.busy += busy
			mu.Unlock()
		})
	}
	close(started)
	wg.Wait()
	return run
}

type linKeyedOutput struct {
	key Key
	out linOutput
}

// linCall makes one call and translates its answer; a list answers once
// per issue of its repository. An error is returned only for answers the
// contract does not allow at all.
func linCall(led linLedger, in linInput) ([]linKeyedOutput, error) {
	ctx := context.Background()
	ttl := time.Duration(in.TTL) * time.Second
	one := func(out linOutput) ([]linKeyedOutput, error) {
		return []linKeyedOutput{{key: in.Key, out: out}}, nil
	}
	granted := func(l Lease, err error) ([]linKeyedOutput, error) {
		var held *HeldError
		var nh *NotHolderError
		switch {
		case err == nil:
			if l.Holder != in.Holder || l.Key != in.Key {
				return nil, fmt.Errorf("granted %+v to the wrong caller or issue", l)
			}
			return one(linOutput{Result: linOK, Holder: l.Holder, Token: l.Token, AcquiredAt: l.AcquiredAt.Unix(), ExpiresAt: unixOr0(l.ExpiresAt)})
		case errors.As(err, &held) && in.Kind == linAcquire:
			return one(linOutput{Result: linHeld, Holder: held.Holder, ExpiresAt: unixOr0(held.ExpiresAt)})
		case errors.As(err, &nh) && in.Kind == linRenew:
			return one(linOutput{Result: linNotHolder, Holder: nh.Holder, ExpiresAt: unixOr0(nh.ExpiresAt)})
		case errors.Is(err, ErrBusy):
			return one(linOutput{Result: linBusy})
		}
		return nil, err
	}
	switch in.Kind {
	case linAcquire:
		return granted(led.Acquire(ctx, in.Key, in.Holder, ttl))
	case linRenew:
		return granted(led.Renew(ctx, in.Key, in.Holder, ttl))
	case linRelease:
		l, err := led.Release(ctx, in.Key, in.Holder)
		var nh *NotHolderError
		switch {
		case err == nil:
			if l != nil && (l.Holder != in.Holder || l.Key != in.Key) {
				return nil, fmt.Errorf("release freed %+v, not the caller's", *l)
			}
			return one(linOutput{Result: linOK, Freed: l != nil})
		case errors.As(err, &nh):
			return one(linOutput{Result: linNotHolder, Holder: nh.Holder, ExpiresAt: unixOr0(nh.ExpiresAt)})
		case errors.Is(err, ErrBusy):
			return one(linOutput{Result: linBusy})
		}
		return nil, err
	case linList:
		leases, err := led.List(ctx, in.Key.RepoID)
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
		for _, k := range linKeys {
			if k.RepoID != in.Key.RepoID {
				continue
			}
			o := linOutput{Result: linOK}
			if l, ok := byIssue[k.Issue]; ok {
				o = linOutput{Result: linOK, Present: true, Holder: l.Holder, Token: l.Token, AcquiredAt: l.AcquiredAt.Unix(), ExpiresAt: unixOr0(l.ExpiresAt)}
			}
			outs = append(outs, linKeyedOutput{key: k, out: o})
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

// stressScale multiplies the sizes of the stress tests (COLLAB_STRESS_SCALE,
// default 1: the size CI runs).
func stressScale(t testing.TB) int {
	t.Helper()
	v := os.Getenv("COLLAB_STRESS_SCALE")
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("COLLAB_STRESS_SCALE=%q: want a positive integer", v)
	}
	return n
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

// checkLinearizable runs porcupine on the history and returns its verdict;
// on a violation it writes the visualization to a file and names it.
func checkLinearizable(t *testing.T, history []porcupine.Operation, timeout time.Duration, visualize bool) porcupine.CheckResult {
	t.Helper()
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(linModel, history, timeout)
	t.Logf("checked %d recorded operations in %s: %s", len(history), time.Since(start).Round(time.Millisecond), res)
	if res == porcupine.Illegal && visualize {
		f, err := os.CreateTemp("", "ledger-linearizability-*.html")
		if err == nil {
			if err := porcupine.Visualize(linModel, info, f); err == nil {
				t.Logf("visualization of the violation: %s", f.Name())
			}
			_ = f.Close()
		}
	}
	return res
}

// Sixteen clients, two store handles on one file (as two processes would
// have), at least 10,000 operations at CI size, short ttls and a moving
// clock: the recorded history must be linearizable.
func TestLinearizabilityOfTheLedger(t *testing.T) {
	scale := stressScale(t)
	seed := linSeed(t)
	t.Logf("seed %d (COLLAB_LIN_SEED), scale %d (COLLAB_STRESS_SCALE)", seed, scale)
	clock := &linClock{}
	clock.sec.Store(time.Date(2026, 9, 5, 12, 0, 0, 0, time.UTC).Unix())
	path := t.TempDir() + "/collab.db"
	var ledgers []linLedger
	var stores []*Store
	for range 2 {
		s, err := Open(path, WithClock(clock), WithBusyTimeout(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		ledgers = append(ledgers, s)
		stores = append(stores, s)
	}
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
	actions := map[Action]int{}
	for _, k := range linKeys {
		evs, err := stores[0].History(bg, k)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			actions[e.Action]++
		}
	}
	t.Logf("ledger history: %v", actions)
	for _, a := range []Action{ActionAcquire, ActionTakeover, ActionReacquire, ActionRenew, ActionRelease} {
		if actions[a] < 20 {
			t.Errorf("only %d %s events: the workload does not exercise the model", actions[a], a)
		}
	}
	if res := checkLinearizable(t, run.history, time.Duration(scale)*2*time.Minute, true); res != porcupine.Ok {
		t.Fatalf("the ledger's history is %s, want Ok", res)
	}
}

// The checker is only worth its silence if it speaks up: each broken store
// below must yield a history it calls Illegal.
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A broken store shows itself only when the run happens to
			// interleave the wrong way; give it three runs to do so.
			for attempt := 1; ; attempt++ {
				seed := linSeed(t)
				clock := &linClock{}
				clock.sec.Store(time.Date(2026, 9, 5, 12, 0, 0, 0, time.UTC).Unix())
				s, err := Open(t.TempDir()+"/collab.db", WithClock(clock), WithBusyTimeout(30*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				run := runLinearizability(t, clock, []linLedger{tc.wrap(s)}, 16, 200, seed)
				_ = s.Close()
				if t.Failed() {
					return
				}
				res := checkLinearizable(t, run.history, 2*time.Minute, false)
				if res == porcupine.Illegal {
					return
				}
				if attempt == 3 {
					t.Fatalf("seed %d: the checker called the broken store's history %s three times, want Illegal", seed, res)
				}
			}
		})
	}
}

// deletingRelease releases by deleting the row (in one transaction, with
// the same refusal as the real Release).
type deletingRelease struct{ *Store }

func (d deletingRelease) Release(ctx context.Context, k Key, holder string) (*Lease, error) {
	var out *Lease
	err := d.write(ctx, func(tx *gorm.DB, now int64) error {
		row, found, err := load(tx, k)
		if err != nil || !found || row.Holder == nil {
			return err
		}
		if row.live(now) && *row.Holder != holder {
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
type staleAcquire struct{ *Store }

func (s staleAcquire) Acquire(ctx context.Context, k Key, holder string, ttl time.Duration) (Lease, error) {
	cur, err := s.Current(ctx, k)
	switch {
	case err != nil:
		return Lease{}, err
	case cur != nil && cur.Holder != holder:
		return Lease{}, &HeldError{Holder: cur.Holder, ExpiresAt: cur.ExpiresAt}
	case cur != nil:
		return s.Store.Acquire(ctx, k, holder, ttl)
	}
	runtime.Gosched()
	var out Lease
	err = s.write(ctx, func(tx *gorm.DB, now int64) error {
		row, found, err := load(tx, k)
		if err != nil {
			return err
		}
		row = leaseRow{RepoID: k.RepoID, Issue: k.Issue, Holder: &holder, Token: row.Token + 1, AcquiredAt: now, ExpiresAt: expiry(now, ttl)}
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

func (l liveAtExpiry) Acquire(ctx context.Context, k Key, holder string, ttl time.Duration) (Lease, error) {
	if ttl > 0 {
		ttl += time.Second
	}
	lease, err := l.Store.Acquire(ctx, k, holder, ttl)
	return earlier(lease), earlierErr(err)
}

func (l liveAtExpiry) Renew(ctx context.Context, k Key, holder string, ttl time.Duration) (Lease, error) {
	lease, err := l.Store.Renew(ctx, k, holder, ttl+time.Second)
	return earlier(lease), earlierErr(err)
}

func (l liveAtExpiry) Release(ctx context.Context, k Key, holder string) (*Lease, error) {
	lease, err := l.Store.Release(ctx, k, holder)
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
		return &HeldError{Holder: held.Holder, ExpiresAt: secondEarlier(held.ExpiresAt)}
	case errors.As(err, &nh):
		return &NotHolderError{Holder: nh.Holder, ExpiresAt: secondEarlier(nh.ExpiresAt)}
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

// The model itself, on histories small enough to check by hand: the
// window of an operation straddling an expiry allows either answer, and
// nothing else does.
func TestLinearizabilityModelOnHandWrittenHistories(t *testing.T) {
	k := Key{RepoID: 1, Issue: 1}
	acq := func(h string, ttl, lo, hi int64) linInput {
		return linInput{Kind: linAcquire, Key: k, Holder: h, TTL: ttl, Lo: lo, Hi: hi}
	}
	got := func(h string, token, at, exp int64) linOutput {
		return linOutput{Result: linOK, Holder: h, Token: token, AcquiredAt: at, ExpiresAt: exp}
	}
	held := func(h string, exp int64) linOutput { return linOutput{Result: linHeld, Holder: h, ExpiresAt: exp} }
	// ops are sequential unless their [call, return] overlap: op i is
	// [2i, 2i+1] unless concurrent says they all overlap.
	for _, tc := range []struct {
		name       string
		ops        []porcupine.Operation
		concurrent bool
		want       bool
	}{
		{"takeover at the exact expiry instant", []porcupine.Operation{
			{Input: acq("a", 5, 100, 100), Output: got("a", 1, 100, 105)},
			{Input: acq("b", 5, 105, 105), Output: got("b", 2, 105, 110)},
		}, false, true},
		{"takeover a second early", []porcupine.Operation{
			{Input: acq("a", 5, 100, 100), Output: got("a", 1, 100, 105)},
			{Input: acq("b", 5, 104, 104), Output: got("b", 2, 104, 109)},
		}, false, false},
		{"held at the exact expiry instant", []porcupine.Operation{
			{Input: acq("a", 5, 100, 100), Output: got("a", 1, 100, 105)},
			{Input: acq("b", 5, 105, 105), Output: held("a", 105)},
		}, false, false},
		{"held in a window that straddles the expiry", []porcupine.Operation{
			{Input: acq("a", 5, 100, 100), Output: got("a", 1, 100, 105)},
			{Input: acq("b", 5, 104, 105), Output: held("a", 105)},
		}, false, true},
		{"two holders at once", []porcupine.Operation{
			{Input: acq("a", 0, 100, 100), Output: got("a", 1, 100, 0)},
			{Input: acq("b", 0, 100, 100), Output: got("b", 2, 100, 0)},
		}, true, false},
		{"concurrent racers, one wins", []porcupine.Operation{
			{Input: acq("a", 0, 100, 100), Output: held("b", 0)},
			{Input: acq("b", 0, 100, 100), Output: got("b", 1, 100, 0)},
		}, true, true},
		{"re-acquire keeps the token", []porcupine.Operation{
			{Input: acq("a", 5, 100, 100), Output: got("a", 1, 100, 105)},
			{Input: acq("a", 9, 102, 102), Output: got("a", 1, 100, 111)},
		}, false, true},
		{"re-acquire bumps the token", []porcupine.Operation{
			{Input: acq("a", 5, 100, 100), Output: got("a", 1, 100, 105)},
			{Input: acq("a", 9, 102, 102), Output: got("a", 2, 102, 111)},
		}, false, false},
		{"token restarts after release", []porcupine.Operation{
			{Input: acq("a", 0, 100, 100), Output: got("a", 1, 100, 0)},
			{Input: linInput{Kind: linRelease, Key: k, Holder: "a", Lo: 100, Hi: 100}, Output: linOutput{Result: linOK, Freed: true}},
			{Input: acq("b", 0, 101, 101), Output: got("b", 1, 101, 0)},
		}, false, false},
		{"a write whose window reaches back before the previous write", []porcupine.Operation{
			{Input: acq("a", 5, 100, 100), Output: got("a", 1, 100, 105)},
			{Input: acq("b", 5, 105, 105), Output: got("b", 2, 105, 110)},
			{Input: acq("a", 5, 100, 106), Output: held("b", 110)}, // decided at 105 or later
		}, false, true},
		{"a write decided at a clock older than the previous write's", []porcupine.Operation{
			{Input: acq("a", 5, 100, 100), Output: got("a", 1, 100, 105)},
			{Input: linInput{Kind: linRenew, Key: k, Holder: "x", TTL: 5, Lo: 106, Hi: 106}, Output: linOutput{Result: linNotHolder}},
			{Input: acq("b", 5, 104, 107), Output: held("a", 105)}, // only true at 104, before the renew's 106
		}, false, false},
	} {
		for i := range tc.ops {
			tc.ops[i].Call, tc.ops[i].Return = int64(2*i), int64(2*i+1)
			if tc.concurrent {
				tc.ops[i].Call, tc.ops[i].Return = 0, 1
			}
		}
		if ok := porcupine.CheckOperations(linModel, tc.ops); ok != tc.want {
			t.Errorf("%s: linearizable = %v, want %v", tc.name, ok, tc.want)
		}
	}
}
