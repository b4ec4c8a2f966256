package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"golang.org/x/crypto/ssh"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/models/leasemodel"
	"github.com/collab-lease/collab-lease/models/pgtest"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Linearizability of the whole service, end to end: sixteen SSH clients
// (eight Gitea users, two persistent connections each, one session per
// command) run acquire (an eighth of them with --wait 1s when the client
// does not hold the issue), renew, release and list against the real
// Gitea and a real sidecar, or three replicas of one on one PostgreSQL
// database with the clients spread over them, with wall-clock ttls of
// one or two seconds so that leases expire and are taken over while the
// clients work. The history of calls and answers is checked with
// porcupine against the sequential model of the lease rules in package
// leasemodel, the one the store's own check in models/ uses.
//
// Time. The sidecar decides with its wall clock in whole seconds, and the
// clients share that clock (same machine). So the `now` a command used
// lies in [floor(call), floor(return)] of the client's own readings: that
// is the window the model tries each second of. That is sound (no false
// alarm) as long as the wall clock is not stepped during the run, which
// the test checks against the monotonic clock. A release does not say
// whether it freed a live lease, so the model does not ask. Exit 75 means
// nothing was done (docs/ssh.md).
//
// The check is only worth its silence if it can fail: two corrupted copies
// of the real history — one answer's token set one lower (a token going
// backwards), one "held" answer turned into a grant of the holder's
// tenure (two holders at once) — must each be Illegal.

// e2eModel is the model as the SSH verb answers: "released" does not say
// whether a live lease was freed.
var e2eModel = leasemodel.New(leasemodel.Options{IgnoreFreed: true})

// agent is one persistent SSH connection of a Gitea user to a sidecar,
// through the Go SSH client; each command is a session of its own.
type agent struct {
	user   *User
	addr   string
	config *ssh.ClientConfig

	mu     sync.Mutex
	client *ssh.Client
}

// newAgent prepares a connection of u to s (it dials on first use).
func newAgent(s *Sidecar, u *User) (*agent, error) {
	cfg, err := clientConfig(s, u)
	if err != nil {
		return nil, err
	}
	return &agent{user: u, addr: s.SSHAddr, config: cfg}, nil
}

// errTransport marks a command whose fate is unknown: the connection
// failed before the answer arrived.
var errTransport = errors.New("ssh transport")

// run runs one command in a new session on the agent's connection,
// dialing first if there is none. A transport failure drops the
// connection (the next run dials again) and wraps errTransport; so does
// ctx ending first, at whatever stage (a sidecar that stops answering
// may do so in the middle of the handshake, or before a session opens).
func (a *agent) run(ctx context.Context, cmd string) (SSHResult, error) {
	c, err := a.conn(ctx)
	if err != nil {
		return SSHResult{}, fmt.Errorf("%w: dial: %v", errTransport, err)
	}
	stop := context.AfterFunc(ctx, func() { a.drop(c) })
	defer stop()
	sess, err := c.NewSession()
	if err != nil {
		a.drop(c)
		return SSHResult{}, fmt.Errorf("%w: new session: %v", errTransport, errors.Join(ctx.Err(), err))
	}
	defer sess.Close()
	var out, errb bytes.Buffer
	sess.Stdout, sess.Stderr = &out, &errb
	err = sess.Run(cmd)
	if ctx.Err() != nil {
		return SSHResult{}, fmt.Errorf("%w: %s: %v", errTransport, cmd, ctx.Err())
	}
	r := SSHResult{Stdout: out.String(), Stderr: errb.String()}
	var exit *ssh.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.Code = exit.ExitStatus()
	default:
		a.drop(c)
		return r, fmt.Errorf("%w: %s: %v", errTransport, cmd, err)
	}
	return r, nil
}

// conn is the agent's connection, dialed (within ctx) if there is none.
func (a *agent) conn(ctx context.Context) (*ssh.Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.client != nil {
		return a.client, nil
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", a.addr)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.Close() })
	cc, chans, reqs, err := ssh.NewClientConn(nc, a.addr, a.config)
	if !stop() {
		err = errors.Join(ctx.Err(), err)
	}
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	a.client = ssh.NewClient(cc, chans, reqs)
	return a.client, nil
}

func (a *agent) drop(c *ssh.Client) {
	a.mu.Lock()
	defer a.mu.Unlock()
	_ = c.Close()
	if a.client == c {
		a.client = nil
	}
}

func (a *agent) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.client != nil {
		_ = a.client.Close()
		a.client = nil
	}
}

// newIssues opens n fresh issues in Widgets and returns their numbers.
func newIssues(t *testing.T, g *Gitea, w *World, n int, title string) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []int64
	for i := range n {
		var is struct{ Number int64 }
		if err := g.Admin().Do(ctx, "POST", "/repos/"+w.Widgets.FullName()+"/issues",
			map[string]any{"title": fmt.Sprintf("%s %d", title, i+1)}, &is); err != nil {
			t.Fatal(err)
		}
		out = append(out, is.Number)
	}
	return out
}

// tenureReply is the JSON of acquired, renewed, held and not_holder.
type tenureReply struct {
	Status     string         `json:"status"`
	Holder     *string        `json:"holder"`
	Token      int64          `json:"token"`
	AcquiredAt *contract.Time `json:"acquired_at"`
	ExpiresAt  *contract.Time `json:"expires_at"`
}

func unixOf(t *contract.Time) int64 {
	if t == nil {
		return 0
	}
	return time.Time(*t).Unix()
}

// e2eAnswer translates one command's result into the model's outputs (a
// list: one per issue in issues). Anything the contract does not allow
// is an error.
func e2eAnswer(in leasemodel.Input, r SSHResult, issues []int64) ([]leasemodel.Output, error) {
	if r.Code == 75 {
		if r.Stdout != "" || !strings.HasPrefix(r.Stderr, "error: ") {
			return nil, fmt.Errorf("exit 75 with %+v", r)
		}
		if in.Kind == leasemodel.List {
			return nil, nil // a failed read says nothing
		}
		return []leasemodel.Output{{Result: leasemodel.Unavailable}}, nil
	}
	if in.Kind == leasemodel.List {
		var list contract.List
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &list) != nil {
			return nil, fmt.Errorf("list: %+v", r)
		}
		by := map[int64]contract.LeaseView{}
		for i, l := range list.Leases {
			if !slices.Contains(issues, l.Issue) {
				return nil, fmt.Errorf("list shows issue %d, which nobody claimed: %s", l.Issue, r.Stdout)
			}
			if i > 0 {
				prev := list.Leases[i-1]
				if p, c := time.Time(prev.AcquiredAt), time.Time(l.AcquiredAt); p.After(c) || (p.Equal(c) && prev.Issue > l.Issue) {
					return nil, fmt.Errorf("list is not oldest first: %s", r.Stdout)
				}
			}
			by[l.Issue] = l
		}
		var outs []leasemodel.Output
		for _, n := range issues {
			o := leasemodel.Output{Result: leasemodel.OK}
			if l, ok := by[n]; ok {
				o = leasemodel.Output{Result: leasemodel.OK, Present: true, Holder: l.Holder, Token: l.Token, AcquiredAt: time.Time(l.AcquiredAt).Unix(), ExpiresAt: unixOf(l.ExpiresAt)}
			}
			outs = append(outs, o)
		}
		return outs, nil
	}
	var v tenureReply
	if (r.Code != 0 && r.Code != 4) || json.Unmarshal([]byte(r.Stdout), &v) != nil {
		return nil, fmt.Errorf("%s: %+v", in.Kind, r)
	}
	holder := ""
	if v.Holder != nil {
		holder = *v.Holder
	}
	switch {
	case r.Code == 0 && in.Kind == leasemodel.Release && v.Status == "released":
		return []leasemodel.Output{{Result: leasemodel.OK}}, nil
	case r.Code == 0 && (in.Kind == leasemodel.Acquire && v.Status == "acquired" || in.Kind == leasemodel.Renew && v.Status == "renewed"):
		if holder != in.Holder || v.AcquiredAt == nil {
			return nil, fmt.Errorf("%s by %s: %s", in.Kind, in.Holder, r.Stdout)
		}
		return []leasemodel.Output{{Result: leasemodel.OK, Holder: holder, Token: v.Token, AcquiredAt: unixOf(v.AcquiredAt), ExpiresAt: unixOf(v.ExpiresAt)}}, nil
	case r.Code == 4 && in.Kind == leasemodel.Acquire && v.Status == "held":
		return []leasemodel.Output{{Result: leasemodel.Held, Holder: holder, ExpiresAt: unixOf(v.ExpiresAt)}}, nil
	case r.Code == 4 && in.Kind != leasemodel.Acquire && v.Status == "not_holder":
		return []leasemodel.Output{{Result: leasemodel.NotHolder, Holder: holder, ExpiresAt: unixOf(v.ExpiresAt)}}, nil
	}
	return nil, fmt.Errorf("%s: %+v", in.Kind, r)
}

func e2eCommand(in leasemodel.Input, repo string) string {
	switch in.Kind {
	case leasemodel.List:
		return "collab-lease list " + repo
	case leasemodel.Release:
		return fmt.Sprintf("collab-lease release %s %d", repo, in.Key.Issue)
	}
	cmd := fmt.Sprintf("collab-lease %s %s %d", in.Kind, repo, in.Key.Issue)
	if in.TTL > 0 {
		cmd += fmt.Sprintf(" --ttl %ds", in.TTL)
	}
	return cmd
}

func TestLinearizabilityEndToEnd(t *testing.T) {
	s, _ := newSidecar(t)
	checkLinearizable(t, []*Sidecar{s}, s.DB, 10000)
}

// The same over three replicas on one PostgreSQL database (docs/operating.md, High availability):
// client i on replica i%3, so the two clients of each user are on two
// different replicas. Fewer operations than for one sidecar, to keep the
// run short: fifteen seconds still see many leases expire and be taken
// over.
func TestLinearizabilityEndToEndOverReplicas(t *testing.T) {
	db := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	replicas := startReplicas(t, ctx, db, 3)
	for _, s := range replicas {
		stopAtEnd(t, s)
	}
	checkLinearizable(t, replicas, db, 4000)
}

// checkLinearizable runs the workload against sidecars, all on the
// ledger ledger (a file or a PostgreSQL URL), client i on sidecar
// i%len(sidecars), for at least minOps operations and fifteen seconds
// (both times the stress scale), and checks the history; it stops the
// sidecars to read the ledger.
func checkLinearizable(t *testing.T, sidecars []*Sidecar, ledger string, minOps int) {
	scale := leasemodel.Scale(t)
	g, w, _ := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	users := racerUsers(t, ctx, g, w, 50)[:8]
	issues := newIssues(t, g, w, 4, "Linearizability")
	var agents []*agent
	for i := range 16 {
		a, err := newAgent(sidecars[i%len(sidecars)], users[i%len(users)])
		if err != nil {
			t.Fatal(err)
		}
		defer a.close()
		agents = append(agents, a)
	}
	// Connect everyone (and warm the sidecar's caches) before the clock starts.
	for _, a := range agents {
		if r, err := a.run(ctx, "collab-lease list acme/widgets"); err != nil || r.Code != 0 {
			t.Fatalf("%s: %+v %v", a.user.Login, r, err)
		}
	}

	target := minOps * scale
	deadline := time.Now().Add(time.Duration(scale) * 90 * time.Second)
	// Leases live 1–2 s: the run must last several lifetimes for them to
	// expire and be taken over, however fast the sidecar answers.
	minRun := time.Duration(scale) * 15 * time.Second
	seed := time.Now().UnixNano()
	t.Logf("seed %d, scale %d (COLLAB_STRESS_SCALE): %d operations and at least %s, or until %s", seed, scale, target, minRun, time.Until(deadline).Round(time.Second))
	start := time.Now()
	var (
		made    atomic.Int64 // operations begun
		done    atomic.Int64 // operations that got an answer or failed
		mu      sync.Mutex
		history []porcupine.Operation
		unavail int
		wg      sync.WaitGroup
		failed  atomic.Bool
	)
	mono := func() int64 { return int64(time.Since(start)) }
	// Holders neglect their leases: a client that believes its user holds
	// an issue mostly leaves it alone (and then renews it late, as a
	// zombie would, or releases it), so that leases expire and are taken
	// over while the others keep trying.
	mine := map[string]map[int64]bool{}
	var mineMu sync.Mutex
	for _, u := range users {
		mine[u.Login] = map[int64]bool{}
	}
	believe := func(login string, issue int64, holds bool) {
		mineMu.Lock()
		defer mineMu.Unlock()
		mine[login][issue] = holds
	}
	holds := func(login string, issue int64) bool {
		mineMu.Lock()
		defer mineMu.Unlock()
		return mine[login][issue]
	}
	for c, a := range agents {
		wg.Go(func() {
			rng := rand.New(rand.NewSource(seed + int64(c)))
			var local []porcupine.Operation
			un := 0
			for (made.Add(1) <= int64(target) || time.Since(start) < minRun) && time.Now().Before(deadline) && !failed.Load() {
				done.Add(1)
				in := leasemodel.Input{Key: leasemodel.Key{RepoID: w.Widgets.ID, Issue: issues[rng.Intn(len(issues))]}, Holder: a.user.Login}
				roll := rng.Intn(20)
				if holds(a.user.Login, in.Key.Issue) {
					switch {
					case roll < 1:
						in.Kind, in.TTL = leasemodel.Acquire, int64(1+rng.Intn(2))
					case roll < 2:
						in.Kind, in.TTL = leasemodel.Renew, int64(1+rng.Intn(2))
					case roll < 3:
						in.Kind = leasemodel.Release
					default:
						in.Kind = leasemodel.List
					}
				} else {
					switch {
					case roll < 12:
						in.Kind = leasemodel.Acquire
						if rng.Intn(20) > 0 { // one in twenty open-ended
							in.TTL = int64(1 + rng.Intn(2))
						}
					case roll < 14:
						in.Kind, in.TTL = leasemodel.Renew, int64(1+rng.Intn(2))
					case roll < 16:
						in.Kind = leasemodel.Release
					default:
						in.Kind = leasemodel.List
					}
				}
				cmd := e2eCommand(in, w.Widgets.FullName())
				if in.Kind == leasemodel.Acquire && !holds(a.user.Login, in.Key.Issue) && rng.Intn(8) == 0 {
					// acquire --wait: its answer is an acquire's, at some
					// instant of its (longer) window.
					cmd += " --wait 1s"
				}
				in.Lo = time.Now().Unix()
				call := mono()
				r, err := a.run(ctx, cmd)
				ret := mono()
				in.Hi = time.Now().Unix()
				if err != nil {
					if failed.CompareAndSwap(false, true) {
						t.Errorf("client %d (%s): %s: %v", c, in.Holder, cmd, err)
					}
					return
				}
				outs, err := e2eAnswer(in, r, issues)
				if err != nil {
					if failed.CompareAndSwap(false, true) {
						t.Errorf("client %d (%s): %s: %v", c, in.Holder, cmd, err)
					}
					return
				}
				if in.Kind != leasemodel.List && len(outs) == 1 && outs[0].Result != leasemodel.Unavailable {
					believe(in.Holder, in.Key.Issue, outs[0].Result == leasemodel.OK && in.Kind != leasemodel.Release)
				}
				for i, o := range outs {
					in := in
					if in.Kind == leasemodel.List {
						in.Key.Issue = issues[i]
					}
					if o.Result == leasemodel.Unavailable {
						un++
					}
					local = append(local, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: o, Return: ret})
				}
			}
			mu.Lock()
			history = append(history, local...)
			unavail += un
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if t.Failed() {
		return
	}
	// The windows are sound only if the wall clock ran with the monotonic one.
	if skew := time.Since(start) - time.Now().Round(0).Sub(start.Round(0)); skew > 200*time.Millisecond || skew < -200*time.Millisecond {
		t.Skipf("the wall clock was stepped by %s during the run: the history's time windows cannot be trusted", skew)
	}
	ops := done.Load()
	where := "one sidecar"
	if len(sidecars) > 1 {
		where = fmt.Sprintf("%d replicas", len(sidecars))
	}
	t.Logf("16 clients made %d operations over SSH to %s in %s (%.0f/s); %d answered exit 75; %d recorded", ops, where, elapsed.Round(time.Millisecond),
		float64(ops)/elapsed.Seconds(), unavail, len(history))
	if ops < 1000 {
		t.Errorf("only %d operations: too few to mean anything", ops)
	}

	// What the run exercised, from the answers.
	tenures := map[[2]int64]string{} // (issue, token) -> holder
	held := 0
	for _, op := range history {
		in, out := op.Input.(leasemodel.Input), op.Output.(leasemodel.Output)
		if out.Result == leasemodel.OK && (in.Kind == leasemodel.Acquire || in.Kind == leasemodel.Renew) {
			tenures[[2]int64{in.Key.Issue, out.Token}] = out.Holder
		}
		if out.Result == leasemodel.Held {
			held++
		}
	}
	t.Logf("%d tenures seen, %d acquires answered held", len(tenures), held)
	if len(tenures) < 50 || held < 50 {
		t.Errorf("the workload does not exercise the model: %d tenures, %d held", len(tenures), held)
	}

	// And from the ledger itself: leases expired and were taken over.
	for _, s := range sidecars {
		if err := s.Stop(20 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	store, err := models.Open(ledger)
	if err != nil {
		t.Fatal(err)
	}
	actions := map[models.Action]int{}
	for _, n := range issues {
		evs, err := store.History(ctx, models.Key{RepoID: w.Widgets.ID, Issue: n})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			actions[e.Action]++
		}
	}
	_ = store.Close()
	t.Logf("ledger history: %v", actions)
	if actions[models.ActionTakeover] < 10 || actions[models.ActionReacquire] < 10 || actions[models.ActionRenew] < 10 {
		t.Errorf("the workload does not exercise expiry: %v", actions)
	}

	res := leasemodel.Check(t, e2eModel, history, time.Duration(scale)*2*time.Minute, true)
	if res != porcupine.Ok {
		t.Fatalf("the service's history is %s, want Ok", res)
	}

	// Non-vacuity on the real history. A token one lower: pick an answer
	// on tenure t >= 2 whose holder differs from tenure t-1's, so that no
	// reading of the history can make it a re-acquire of t-1.
	mutant := slices.Clone(history)
	picked := -1
	for i, op := range mutant {
		in, out := op.Input.(leasemodel.Input), op.Output.(leasemodel.Output)
		prev, ok := tenures[[2]int64{in.Key.Issue, out.Token - 1}]
		if out.Result == leasemodel.OK && in.Kind == leasemodel.Acquire && out.Token >= 2 && ok && prev != out.Holder {
			out.Token--
			mutant[i].Output = out
			picked = i
			break
		}
	}
	if picked < 0 {
		t.Fatal("no answer to make a token go backwards with")
	}
	if res := leasemodel.Check(t, e2eModel, mutant, 2*time.Minute, false); res != porcupine.Illegal {
		t.Errorf("a token going backwards (%s) was called %s, want Illegal", e2eModel.DescribeOperation(mutant[picked].Input, mutant[picked].Output), res)
	}
	// Two holders: a "held" answer turned into a grant of the holder's
	// own tenure to the caller.
	mutant = slices.Clone(history)
	picked = -1
	for i, op := range mutant {
		in, out := op.Input.(leasemodel.Input), op.Output.(leasemodel.Output)
		if out.Result != leasemodel.Held {
			continue
		}
		for key, h := range tenures {
			if key[0] == in.Key.Issue && h == out.Holder && h != in.Holder {
				var acquiredAt int64
				for _, o := range history {
					if oi, oo := o.Input.(leasemodel.Input), o.Output.(leasemodel.Output); oi.Key.Issue == in.Key.Issue && oo.Result == leasemodel.OK && oo.Token == key[1] && oo.AcquiredAt != 0 {
						acquiredAt = oo.AcquiredAt
						break
					}
				}
				mutant[i].Output = leasemodel.Output{Result: leasemodel.OK, Holder: in.Holder, Token: key[1], AcquiredAt: acquiredAt, ExpiresAt: out.ExpiresAt}
				picked = i
				break
			}
		}
		if picked >= 0 {
			break
		}
	}
	if picked < 0 {
		t.Fatal("no held answer to turn into a second holder")
	}
	if res := leasemodel.Check(t, e2eModel, mutant, 2*time.Minute, false); res != porcupine.Illegal {
		t.Errorf("two holders at once (%s) was called %s, want Illegal", e2eModel.DescribeOperation(mutant[picked].Input, mutant[picked].Output), res)
	}
}
