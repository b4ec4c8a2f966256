package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/models/leasemodel"
)

// Crashes under load: eight SSH clients acquire, renew and release three
// issues while the sidecar is killed with SIGKILL over and over (thirty
// times at CI size) and started again on the same data directory and
// address. Afterwards, with the sidecar stopped, the ledger must hold
// every acquire a client was told succeeded, its tenure history must hand
// out tokens 1, 2, 3, … per issue with none repeated or skipped, and no
// client may have seen a token repeated for another tenure or lower than
// one it had already been given. Every acknowledged renew, and every
// acknowledged release of a tenure still live when it was asked, must be
// in the history too, and no command may hang. Every start must be clean.

// seenWrite is a renew or release a client was told succeeded, of the
// tenure the client knew it held (its own last acknowledged acquire or
// renew of the issue, with no command of unknown fate since).
type seenWrite struct {
	kind      leasemodel.Kind
	issue     int64
	holder    string
	token     int64
	expiresAt int64 // renew: the expiry it set; release: the one in force (0: open-ended)
	callUnix  int64 // release: when it was called, wall clock
}

// held is what one client knows it holds on one issue.
type held struct {
	token, expiresAt int64
}

// seenAcquire is one acquire a client was told succeeded.
type seenAcquire struct {
	issue      int64
	holder     string
	token      int64
	acquiredAt int64
	expiresAt  int64
	call, ret  time.Duration // since the run started (monotonic)
}

// acks is what the clients of a load run were told succeeded.
type acks struct {
	mu     sync.Mutex
	seen   []seenAcquire
	writes []seenWrite
}

// loadClient is one client of a load run: a connection of its own user
// (so that what it holds is its own business), and what it knows it
// holds, its commands being sequential.
type loadClient struct {
	a    *agent
	rng  *rand.Rand
	mine map[int64]held
}

func newLoadClient(a *agent, seed int64) *loadClient {
	return &loadClient{a: a, rng: rand.New(rand.NewSource(seed)), mine: map[int64]held{}}
}

// step runs one acquire (ttl 1–3 s), renew or release of a random issue
// of issues in repo, with a deadline of its own, and records in k what it
// was told succeeded; start is when the run began. It says whether it was
// an acknowledged acquire. An error wrapping errTransport is a command
// whose fate is unknown (its connection died, or would not open); any
// other error is a command that hung or an answer the contract does not
// allow.
func (c *loadClient) step(ctx context.Context, ack *acks, repo Repo, issues []int64, start time.Time, deadline time.Duration) (bool, error) {
	n := issues[c.rng.Intn(len(issues))]
	in := leasemodel.Input{Key: leasemodel.Key{RepoID: repo.ID, Issue: n}, Holder: c.a.user.Login}
	switch roll := c.rng.Intn(10); {
	case roll < 6:
		in.Kind, in.TTL = leasemodel.Acquire, int64(1+c.rng.Intn(3))
	case roll < 7:
		in.Kind, in.TTL = leasemodel.Renew, 2
	default:
		in.Kind = leasemodel.Release
	}
	call, callUnix := time.Since(start), time.Now().Unix()
	cctx, cancel := context.WithTimeout(ctx, deadline)
	r, err := c.a.run(cctx, e2eCommand(in, repo.FullName()))
	hung := cctx.Err() == context.DeadlineExceeded
	cancel()
	ret := time.Since(start)
	if hung {
		return false, fmt.Errorf("%s: %s of #%d hung for %s", c.a.user.Login, in.Kind, n, deadline)
	}
	if err != nil {
		delete(c.mine, n) // its fate is unknown
		return false, fmt.Errorf("%s: %w", c.a.user.Login, err)
	}
	outs, err := e2eAnswer(in, r, issues)
	if err != nil {
		return false, fmt.Errorf("%s: %v", c.a.user.Login, err)
	}
	if len(outs) != 1 || outs[0].Result != leasemodel.OK {
		delete(c.mine, n)
		return false, nil
	}
	o := outs[0]
	ack.mu.Lock()
	defer ack.mu.Unlock()
	switch in.Kind {
	case leasemodel.Acquire:
		ack.seen = append(ack.seen, seenAcquire{issue: n, holder: o.Holder, token: o.Token, acquiredAt: o.AcquiredAt, expiresAt: o.ExpiresAt, call: call, ret: ret})
		c.mine[n] = held{token: o.Token, expiresAt: o.ExpiresAt}
		return true, nil
	case leasemodel.Renew:
		ack.writes = append(ack.writes, seenWrite{kind: in.Kind, issue: n, holder: o.Holder, token: o.Token, expiresAt: o.ExpiresAt})
		c.mine[n] = held{token: o.Token, expiresAt: o.ExpiresAt}
	case leasemodel.Release:
		if h, known := c.mine[n]; known {
			ack.writes = append(ack.writes, seenWrite{kind: in.Kind, issue: n, holder: c.a.user.Login, token: h.token, expiresAt: h.expiresAt, callUnix: callUnix})
		}
		delete(c.mine, n)
	}
	return false, nil
}

func TestCrashUnderLoadEndToEnd(t *testing.T) {
	scale := leasemodel.Scale(t)
	kills := 30 * scale
	g, w, bin := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	users := racerUsers(t, ctx, g, w, 50)[:8]
	issues := newIssues(t, g, w, 3, "Crash")

	var (
		curMu sync.Mutex
		cur   *Sidecar
		all   []*Sidecar // every process, for their logs
	)
	first, err := StartSidecar(ctx, SidecarOptions{Binary: bin, Gitea: g, DataDir: filepath.Join(t.TempDir(), "data")})
	if err != nil {
		t.Fatal(err)
	}
	cur, all = first, []*Sidecar{first}
	t.Cleanup(func() {
		curMu.Lock()
		defer curMu.Unlock()
		_ = cur.Stop(20 * time.Second)
		if t.Failed() {
			for i, s := range all {
				t.Logf("log of sidecar process %d:\n%s", i, tail(s.Logs(), 40))
			}
		}
	})

	var agents []*agent
	for _, u := range users {
		a, err := newAgent(first, u) // same address and host key across restarts
		if err != nil {
			t.Fatal(err)
		}
		defer a.close()
		agents = append(agents, a)
	}

	start := time.Now()
	var (
		stop       atomic.Bool
		wg         sync.WaitGroup
		ack        acks
		acked      atomic.Int64 // acquires answered "acquired" (for the killer's pacing)
		ops        atomic.Int64
		cut        atomic.Int64 // commands whose connection died before the answer
		refused    atomic.Int64 // dials while the sidecar was down
		unexpected = make(chan error, len(agents))
	)
	for i, a := range agents {
		wg.Go(func() {
			c := newLoadClient(a, time.Now().UnixNano()+int64(i))
			for !stop.Load() {
				acquired, err := c.step(ctx, &ack, w.Widgets, issues, start, 30*time.Second) // a kill cuts a command off at once
				ops.Add(1)
				switch {
				case errors.Is(err, errTransport):
					// Killed mid-command, or not listening yet: the fate
					// of this command is unknown. Try again shortly.
					if strings.Contains(err.Error(), "dial:") {
						refused.Add(1)
					} else {
						cut.Add(1)
					}
					time.Sleep(10 * time.Millisecond) // pacing of the retry, not a wait for time to pass
				case err != nil:
					unexpected <- err
					return
				case acquired:
					acked.Add(1)
				}
			}
		})
	}

	// The killer: let some acquires through, then kill at a random moment.
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	var restarts []time.Duration
	for i := range kills {
		target := acked.Load() + 5
		for deadline := time.Now().Add(30 * time.Second); acked.Load() < target; {
			if time.Now().After(deadline) {
				stop.Store(true)
				wg.Wait()
				t.Fatalf("kill %d: no acquire succeeded within 30s after the last restart", i)
			}
			select {
			case err := <-unexpected:
				stop.Store(true)
				wg.Wait()
				t.Fatal(err)
			case <-time.After(5 * time.Millisecond):
			}
		}
		time.Sleep(time.Duration(rng.Intn(150)) * time.Millisecond) // a random moment within the load
		curMu.Lock()
		cur.Kill()
		began := time.Now()
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		next, err := cur.Restart(rctx)
		rcancel()
		if err != nil {
			curMu.Unlock()
			stop.Store(true)
			wg.Wait()
			t.Fatalf("restart %d after SIGKILL: %v", i+1, err)
		}
		restarts = append(restarts, time.Since(began))
		cur = next
		all = append(all, next)
		curMu.Unlock()
	}
	// Some load on the last process too, then stop everything.
	for target, deadline := acked.Load()+5, time.Now().Add(30*time.Second); acked.Load() < target; {
		if time.Now().After(deadline) {
			stop.Store(true)
			wg.Wait()
			t.Fatal("no acquire succeeded within 30s after the last restart")
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	close(unexpected)
	for err := range unexpected {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	curMu.Lock()
	if err := cur.Stop(20 * time.Second); err != nil {
		t.Errorf("the last sidecar did not stop cleanly: %v", err)
	}
	curMu.Unlock()
	slices.Sort(restarts)
	t.Logf("%d SIGKILLs in %s under %d commands (%d acquires acknowledged, %d commands cut off by a kill, %d dials refused while down); restart to listening: median %s, max %s",
		kills, elapsed.Round(time.Millisecond), ops.Load(), len(ack.seen), cut.Load(), refused.Load(),
		restarts[len(restarts)/2].Round(time.Millisecond), restarts[len(restarts)-1].Round(time.Millisecond))
	if cut.Load() == 0 {
		t.Errorf("no command was cut off by a kill: the kills did not land under load")
	}

	// Every start was clean.
	for i, s := range all {
		if logs := s.Logs(); strings.Contains(logs, "panic") || strings.Contains(logs, "level=ERROR") {
			t.Errorf("sidecar process %d logged an error or a panic:\n%s", i, tail(logs, 40))
		}
	}

	// The ledger, read with the sidecar stopped.
	store, err := models.Open(cur.DB)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ack.check(t, ctx, store, w.Widgets.ID, issues)
}

// check reads the history of each of issues (of repository repoID) in
// the ledger and holds it to what the clients were told: tenures are
// numbered 1, 2, 3, … with every other event in the tenure in force, and
// the live lease is the last tenure's; every acknowledged acquire and
// renew, and every acknowledged release of a tenure still live when it
// was asked, is in the history; and no client saw a token handed out for
// two tenures, or lower than one already handed out before it asked.
func (ack *acks) check(t *testing.T, ctx context.Context, store *models.Store, repoID int64, issues []int64) {
	t.Helper()
	ack.mu.Lock()
	defer ack.mu.Unlock()
	for _, n := range issues {
		k := models.Key{RepoID: repoID, Issue: n}
		evs, err := store.History(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		// Tenures are numbered 1, 2, 3, … in the order they began, and
		// every other event belongs to the tenure in force.
		var tenure int64
		events := map[string]int{}
		for _, e := range evs {
			switch e.Action {
			case models.ActionAcquire, models.ActionTakeover:
				if e.Token != tenure+1 {
					t.Errorf("issue %d: event %d (%s by %s) starts tenure %d after tenure %d", n, e.ID, e.Action, e.Holder, e.Token, tenure)
				}
				tenure = e.Token
			default:
				if e.Token != tenure {
					t.Errorf("issue %d: event %d (%s by %s) has token %d in tenure %d", n, e.ID, e.Action, e.Holder, e.Token, tenure)
				}
			}
			if e.Action == models.ActionAcquire || e.Action == models.ActionTakeover || e.Action == models.ActionReacquire {
				events[acquireSignature(e.Holder, e.Token, e.AcquiredAt, e.ExpiresAt)]++
			}
		}
		if cur, err := store.Current(ctx, k); err != nil {
			t.Fatal(err)
		} else if cur != nil && cur.Token != tenure {
			t.Errorf("issue %d: the live lease has token %d, the history's last tenure is %d", n, cur.Token, tenure)
		}
		// Every acknowledged acquire is in the history.
		var mine []seenAcquire
		for _, a := range ack.seen {
			if a.issue != n {
				continue
			}
			mine = append(mine, a)
			var exp *int64
			if a.expiresAt != 0 {
				exp = &a.expiresAt
			}
			sig := acquireSignature(a.holder, a.token, a.acquiredAt, exp)
			if events[sig] == 0 {
				t.Errorf("issue %d: acknowledged acquire by %s (token %d, acquired %d, expires %d) is not in the ledger", n, a.holder, a.token, a.acquiredAt, a.expiresAt)
			}
			events[sig]--
		}
		// What clients saw: one tenure per token, and never a token lower
		// than one already handed out before the call.
		byToken := map[int64]seenAcquire{}
		for _, a := range mine {
			if b, ok := byToken[a.token]; ok && (b.holder != a.holder || b.acquiredAt != a.acquiredAt) {
				t.Errorf("issue %d: token %d handed to %s (acquired %d) and to %s (acquired %d)", n, a.token, b.holder, b.acquiredAt, a.holder, a.acquiredAt)
			}
			byToken[a.token] = a
		}
		for _, a := range mine {
			for _, b := range mine {
				if b.ret < a.call && a.token < b.token {
					t.Errorf("issue %d: %s was given token %d after %s had been given %d", n, a.holder, a.token, b.holder, b.token)
				}
			}
		}
		// Every acknowledged renew is in the history, and so is every
		// acknowledged release of a tenure that had not expired when it
		// was asked (the ledger's times are whole seconds: one of slack).
		renews, releases := 0, 0
		for _, wr := range ack.writes {
			if wr.issue != n {
				continue
			}
			found := false
			for _, e := range evs {
				switch wr.kind {
				case leasemodel.Renew:
					found = found || (e.Action == models.ActionRenew && e.Holder == wr.holder && e.Token == wr.token &&
						e.ExpiresAt != nil && *e.ExpiresAt == wr.expiresAt)
				case leasemodel.Release:
					found = found || (e.Action == models.ActionRelease && e.Holder == wr.holder && e.Token == wr.token)
				}
			}
			switch {
			case found && wr.kind == leasemodel.Renew:
				renews++
			case found:
				releases++
			case wr.kind == leasemodel.Renew:
				t.Errorf("issue %d: acknowledged renew by %s (token %d, to %d) is not in the ledger", n, wr.holder, wr.token, wr.expiresAt)
			case wr.expiresAt == 0 || wr.expiresAt > wr.callUnix+1:
				t.Errorf("issue %d: acknowledged release by %s of token %d (live until %d, released at %d) is not in the ledger", n, wr.holder, wr.token, wr.expiresAt, wr.callUnix)
			}
		}
		t.Logf("issue %d: %d tenures, %d events, %d acknowledged acquires, %d renews and %d releases found in the ledger", n, tenure, len(evs), len(mine), renews, releases)
	}
}

func acquireSignature(holder string, token, acquiredAt int64, expiresAt *int64) string {
	exp := "open"
	if expiresAt != nil {
		exp = fmt.Sprint(*expiresAt)
	}
	return fmt.Sprintf("%s|%d|%d|%s", holder, token, acquiredAt, exp)
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
