package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"golang.org/x/crypto/ssh"

	"github.com/collab-lease/collab-lease/models"
)

// Linearizability of the whole service, end to end: sixteen SSH clients
// (eight Gitea users, two persistent connections each, one session per
// command) run acquire, renew, release and list against a real sidecar and
// the real Gitea, with wall-clock ttls of one or two seconds so that
// leases expire and are taken over while the clients work. The history of
// calls and answers is checked with porcupine against the sequential
// model of SPEC §2 below (the same rules as models/linearizability_test.go,
// restated here because a test file cannot import another package's).
//
// Time. The sidecar decides with its wall clock in whole seconds, and the
// clients share that clock (same machine). So the `now` a command used
// lies in [floor(call), floor(return)] of the client's own readings, and
// the model tries each second of that window: an operation whose window
// straddles an expiry may be judged either way, and nothing else may.
// That is sound (no false alarm) as long as the wall clock is not stepped
// during the run, which the test checks against the monotonic clock.
// Writes decide with the clock read under the ledger's write lock, so
// their seconds never decrease in the ledger's order; the model holds
// them to that. A release does not say whether it freed a live lease, so
// the model does not ask. Exit 75 means nothing was done (SPEC §3).
//
// The check is only worth its silence if it can fail: two corrupted copies
// of the real history — one answer's token set one lower (a token going
// backwards), one "held" answer turned into a grant of the holder's
// tenure (two holders at once) — must each be Illegal.

type e2eKind uint8

const (
	e2eAcquire e2eKind = iota
	e2eRenew
	e2eRelease
	e2eList // one issue's part of a list of the repository
)

func (k e2eKind) String() string { return [...]string{"acquire", "renew", "release", "list"}[k] }

type e2eInput struct {
	Kind   e2eKind
	Issue  int64
	Holder string
	TTL    int64  // seconds; 0: open-ended acquire
	Lo, Hi int64  // Unix seconds just before the call and just after the answer
	Client string // for messages only
}

type e2eResult uint8

const (
	e2eOK e2eResult = iota
	e2eHeld
	e2eNotHolder
	e2eUnavailable // exit 75: nothing was done
)

type e2eOutput struct {
	Result     e2eResult
	Present    bool   // list: the issue has a live lease
	Holder     string // ok: the holder; held/not_holder: the live holder ("" none)
	Token      int64
	AcquiredAt int64
	ExpiresAt  int64 // 0: open-ended, or none
}

type e2eState struct {
	Holder     string
	Token      int64
	AcquiredAt int64
	ExpiresAt  int64
	LastWrite  int64
}

func (s e2eState) live(now int64) bool {
	return s.Holder != "" && (s.ExpiresAt == 0 || s.ExpiresAt > now)
}

// e2eSpec is SPEC §2 as a sequential function (see linSpec in models/).
func e2eSpec(s e2eState, in e2eInput, now int64) (e2eOutput, e2eState) {
	live := s.live(now)
	exp := int64(0)
	if in.TTL > 0 {
		exp = now + in.TTL
	}
	refused := func(r e2eResult) (e2eOutput, e2eState) {
		if !live {
			return e2eOutput{Result: r}, s
		}
		return e2eOutput{Result: r, Holder: s.Holder, ExpiresAt: s.ExpiresAt}, s
	}
	granted := func(s e2eState) (e2eOutput, e2eState) {
		return e2eOutput{Result: e2eOK, Holder: s.Holder, Token: s.Token, AcquiredAt: s.AcquiredAt, ExpiresAt: s.ExpiresAt}, s
	}
	switch in.Kind {
	case e2eAcquire:
		switch {
		case live && s.Holder != in.Holder:
			return refused(e2eHeld)
		case live:
			s.ExpiresAt = exp
			return granted(s)
		default:
			return granted(e2eState{Holder: in.Holder, Token: s.Token + 1, AcquiredAt: now, ExpiresAt: exp, LastWrite: s.LastWrite})
		}
	case e2eRenew:
		if !live || s.Holder != in.Holder {
			return refused(e2eNotHolder)
		}
		s.ExpiresAt = exp
		return granted(s)
	case e2eRelease:
		if live && s.Holder != in.Holder {
			return refused(e2eNotHolder)
		}
		if s.Holder != "" {
			s.Holder, s.AcquiredAt, s.ExpiresAt = "", 0, 0
		}
		return e2eOutput{Result: e2eOK}, s
	case e2eList:
		if !live {
			return e2eOutput{Result: e2eOK}, s
		}
		return e2eOutput{Result: e2eOK, Present: true, Holder: s.Holder, Token: s.Token, AcquiredAt: s.AcquiredAt, ExpiresAt: s.ExpiresAt}, s
	}
	panic("unknown operation kind")
}

func e2eStep(s e2eState, in e2eInput, out e2eOutput) []any {
	if out.Result == e2eUnavailable {
		return []any{s}
	}
	lo := in.Lo
	if in.Kind != e2eList {
		lo = max(lo, s.LastWrite)
	}
	var next []any
	for now := lo; now <= in.Hi; now++ {
		want, ns := e2eSpec(s, in, now)
		if want != out {
			continue
		}
		if in.Kind != e2eList {
			ns.LastWrite = now
		}
		// One successor per distinct row, with the earliest clock: it
		// allows whatever a later one would.
		if !slices.ContainsFunc(next, func(x any) bool {
			o := x.(e2eState)
			o.LastWrite = ns.LastWrite
			return o == ns
		}) {
			next = append(next, ns)
		}
	}
	return next
}

var e2eModel = (&porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[int64][]porcupine.Operation{}
		var issues []int64
		for _, op := range history {
			n := op.Input.(e2eInput).Issue
			if _, ok := by[n]; !ok {
				issues = append(issues, n)
			}
			by[n] = append(by[n], op)
		}
		var out [][]porcupine.Operation
		for _, n := range issues {
			out = append(out, by[n])
		}
		return out
	},
	Init: func() []any { return []any{e2eState{}} },
	Step: func(state, input, output any) []any {
		return e2eStep(state.(e2eState), input.(e2eInput), output.(e2eOutput))
	},
	Hash: func(state any) uint64 {
		s := state.(e2eState)
		h := fnv.New64a()
		fmt.Fprintf(h, "%s|%d|%d|%d|%d", s.Holder, s.Token, s.AcquiredAt, s.ExpiresAt, s.LastWrite)
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(e2eInput), output.(e2eOutput)
		return fmt.Sprintf("%s #%d by %s (%s) ttl %d @[%d,%d] -> %+v", in.Kind, in.Issue, in.Holder, in.Client, in.TTL, in.Lo, in.Hi, out)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%+v", state.(e2eState)) },
}).ToModel()

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
	signer, err := loadSigner(u.Key.Path)
	if err != nil {
		return nil, err
	}
	hostKey, err := loadSigner(filepath.Join(s.DataDir, "ssh_host_ed25519_key"))
	if err != nil {
		return nil, err
	}
	return &agent{user: u, addr: s.SSHAddr, config: &ssh.ClientConfig{
		User:            "git",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(hostKey.PublicKey()),
		Timeout:         10 * time.Second,
	}}, nil
}

func loadSigner(path string) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ssh.ParsePrivateKey(b)
}

// errTransport marks a command whose fate is unknown: the connection
// failed before the answer arrived.
var errTransport = errors.New("ssh transport")

// run runs one command in a new session on the agent's connection,
// dialing first if there is none. A transport failure drops the
// connection (the next run dials again) and wraps errTransport.
func (a *agent) run(ctx context.Context, cmd string) (SSHResult, error) {
	c, err := a.conn()
	if err != nil {
		return SSHResult{}, fmt.Errorf("%w: dial: %v", errTransport, err)
	}
	sess, err := c.NewSession()
	if err != nil {
		a.drop(c)
		return SSHResult{}, fmt.Errorf("%w: new session: %v", errTransport, err)
	}
	defer sess.Close()
	var out, errb bytes.Buffer
	sess.Stdout, sess.Stderr = &out, &errb
	done := make(chan error, 1)
	go func() { done <- sess.Run(cmd) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		a.drop(c)
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

func (a *agent) conn() (*ssh.Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.client != nil {
		return a.client, nil
	}
	c, err := ssh.Dial("tcp", a.addr, a.config)
	if err != nil {
		return nil, err
	}
	a.client = c
	return c, nil
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

// e2eScale is COLLAB_STRESS_SCALE (default 1: the size CI runs).
func e2eScale(t testing.TB) int {
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

// tenureReply is the JSON of acquired, renewed, held and not_holder.
type tenureReply struct {
	Status     string       `json:"status"`
	Holder     *string      `json:"holder"`
	Token      int64        `json:"token"`
	AcquiredAt *models.Time `json:"acquired_at"`
	ExpiresAt  *models.Time `json:"expires_at"`
}

func unixOf(t *models.Time) int64 {
	if t == nil {
		return 0
	}
	return time.Time(*t).Unix()
}

// e2eAnswer translates one command's result into the model's outputs (a
// list: one per issue in issues). Anything the contract does not allow
// is an error.
func e2eAnswer(in e2eInput, r SSHResult, issues []int64) ([]e2eOutput, error) {
	if r.Code == 75 {
		if r.Stdout != "" || !strings.HasPrefix(r.Stderr, "error: ") {
			return nil, fmt.Errorf("exit 75 with %+v", r)
		}
		if in.Kind == e2eList {
			return nil, nil // a failed read says nothing
		}
		return []e2eOutput{{Result: e2eUnavailable}}, nil
	}
	if in.Kind == e2eList {
		var list models.ListView
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &list) != nil {
			return nil, fmt.Errorf("list: %+v", r)
		}
		by := map[int64]models.View{}
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
		var outs []e2eOutput
		for _, n := range issues {
			o := e2eOutput{Result: e2eOK}
			if l, ok := by[n]; ok {
				o = e2eOutput{Result: e2eOK, Present: true, Holder: l.Holder, Token: l.Token, AcquiredAt: time.Time(l.AcquiredAt).Unix(), ExpiresAt: unixOf(l.ExpiresAt)}
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
	case r.Code == 0 && in.Kind == e2eRelease && v.Status == "released":
		return []e2eOutput{{Result: e2eOK}}, nil
	case r.Code == 0 && (in.Kind == e2eAcquire && v.Status == "acquired" || in.Kind == e2eRenew && v.Status == "renewed"):
		if holder != in.Holder || v.AcquiredAt == nil {
			return nil, fmt.Errorf("%s by %s: %s", in.Kind, in.Holder, r.Stdout)
		}
		return []e2eOutput{{Result: e2eOK, Holder: holder, Token: v.Token, AcquiredAt: unixOf(v.AcquiredAt), ExpiresAt: unixOf(v.ExpiresAt)}}, nil
	case r.Code == 4 && in.Kind == e2eAcquire && v.Status == "held":
		return []e2eOutput{{Result: e2eHeld, Holder: holder, ExpiresAt: unixOf(v.ExpiresAt)}}, nil
	case r.Code == 4 && in.Kind != e2eAcquire && v.Status == "not_holder":
		return []e2eOutput{{Result: e2eNotHolder, Holder: holder, ExpiresAt: unixOf(v.ExpiresAt)}}, nil
	}
	return nil, fmt.Errorf("%s: %+v", in.Kind, r)
}

func e2eCommand(in e2eInput, repo string) string {
	switch in.Kind {
	case e2eList:
		return "collab-lease list " + repo
	case e2eRelease:
		return fmt.Sprintf("collab-lease release %s %d", repo, in.Issue)
	}
	cmd := fmt.Sprintf("collab-lease %s %s %d", in.Kind, repo, in.Issue)
	if in.TTL > 0 {
		cmd += fmt.Sprintf(" --ttl %ds", in.TTL)
	}
	return cmd
}

func TestLinearizabilityEndToEnd(t *testing.T) {
	scale := e2eScale(t)
	s, w := newSidecar(t)
	g, _, _ := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	users := racerUsers(t, ctx, g, w, 50)[:8]
	issues := newIssues(t, g, w, 4, "Linearizability")
	var agents []*agent
	for i := range 16 {
		a, err := newAgent(s, users[i%len(users)])
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

	target := 10000 * scale
	deadline := time.Now().Add(time.Duration(scale) * 90 * time.Second)
	seed := time.Now().UnixNano()
	t.Logf("seed %d, scale %d (COLLAB_STRESS_SCALE): %d operations or until %s", seed, scale, target, time.Until(deadline).Round(time.Second))
	start := time.Now()
	var (
		made    atomic.Int64
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
			for made.Add(1) <= int64(target) && time.Now().Before(deadline) && !failed.Load() {
				in := e2eInput{Issue: issues[rng.Intn(len(issues))], Holder: a.user.Login, Client: fmt.Sprintf("client %d", c)}
				roll := rng.Intn(20)
				if holds(a.user.Login, in.Issue) {
					switch {
					case roll < 1:
						in.Kind, in.TTL = e2eAcquire, int64(1+rng.Intn(2))
					case roll < 2:
						in.Kind, in.TTL = e2eRenew, int64(1+rng.Intn(2))
					case roll < 3:
						in.Kind = e2eRelease
					default:
						in.Kind = e2eList
					}
				} else {
					switch {
					case roll < 12:
						in.Kind = e2eAcquire
						if rng.Intn(20) > 0 { // one in twenty open-ended
							in.TTL = int64(1 + rng.Intn(2))
						}
					case roll < 14:
						in.Kind, in.TTL = e2eRenew, int64(1+rng.Intn(2))
					case roll < 16:
						in.Kind = e2eRelease
					default:
						in.Kind = e2eList
					}
				}
				cmd := e2eCommand(in, w.Widgets.FullName())
				in.Lo = time.Now().Unix()
				call := mono()
				r, err := a.run(ctx, cmd)
				ret := mono()
				in.Hi = time.Now().Unix()
				if err != nil {
					if failed.CompareAndSwap(false, true) {
						t.Errorf("%s (%s): %s: %v", in.Client, in.Holder, cmd, err)
					}
					return
				}
				outs, err := e2eAnswer(in, r, issues)
				if err != nil {
					if failed.CompareAndSwap(false, true) {
						t.Errorf("%s (%s): %s: %v", in.Client, in.Holder, cmd, err)
					}
					return
				}
				if in.Kind != e2eList && len(outs) == 1 && outs[0].Result != e2eUnavailable {
					believe(in.Holder, in.Issue, outs[0].Result == e2eOK && in.Kind != e2eRelease)
				}
				for i, o := range outs {
					in := in
					if in.Kind == e2eList {
						in.Issue = issues[i]
					}
					if o.Result == e2eUnavailable {
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
	ops := min(made.Load(), int64(target))
	t.Logf("16 clients made %d operations over SSH in %s (%.0f/s); %d answered exit 75; %d recorded", ops, elapsed.Round(time.Millisecond),
		float64(ops)/elapsed.Seconds(), unavail, len(history))
	if ops < 1000 {
		t.Errorf("only %d operations: too few to mean anything", ops)
	}

	// What the run exercised, from the answers.
	tenures := map[[2]int64]string{} // (issue, token) -> holder
	held := 0
	for _, op := range history {
		in, out := op.Input.(e2eInput), op.Output.(e2eOutput)
		if out.Result == e2eOK && (in.Kind == e2eAcquire || in.Kind == e2eRenew) {
			tenures[[2]int64{in.Issue, out.Token}] = out.Holder
		}
		if out.Result == e2eHeld {
			held++
		}
	}
	t.Logf("%d tenures seen, %d acquires answered held", len(tenures), held)
	if len(tenures) < 50 || held < 50 {
		t.Errorf("the workload does not exercise the model: %d tenures, %d held", len(tenures), held)
	}

	// And from the ledger itself: leases expired and were taken over.
	if err := s.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	store, err := models.Open(s.DB)
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

	res := checkE2E(t, history, time.Duration(scale)*2*time.Minute, true)
	if res != porcupine.Ok {
		t.Fatalf("the service's history is %s, want Ok", res)
	}

	// Non-vacuity on the real history. A token one lower: pick an answer
	// on tenure t >= 2 whose holder differs from tenure t-1's, so that no
	// reading of the history can make it a re-acquire of t-1.
	mutant := slices.Clone(history)
	picked := -1
	for i, op := range mutant {
		in, out := op.Input.(e2eInput), op.Output.(e2eOutput)
		prev, ok := tenures[[2]int64{in.Issue, out.Token - 1}]
		if out.Result == e2eOK && in.Kind == e2eAcquire && out.Token >= 2 && ok && prev != out.Holder {
			out.Token--
			mutant[i].Output = out
			picked = i
			break
		}
	}
	if picked < 0 {
		t.Fatal("no answer to make a token go backwards with")
	}
	if res := checkE2E(t, mutant, 2*time.Minute, false); res != porcupine.Illegal {
		t.Errorf("a token going backwards (%s) was called %s, want Illegal", e2eModel.DescribeOperation(mutant[picked].Input, mutant[picked].Output), res)
	}
	// Two holders: a "held" answer turned into a grant of the holder's
	// own tenure to the caller.
	mutant = slices.Clone(history)
	picked = -1
	for i, op := range mutant {
		in, out := op.Input.(e2eInput), op.Output.(e2eOutput)
		if out.Result != e2eHeld {
			continue
		}
		for key, h := range tenures {
			if key[0] == in.Issue && h == out.Holder && h != in.Holder {
				var acquiredAt int64
				for _, o := range history {
					if oi, oo := o.Input.(e2eInput), o.Output.(e2eOutput); oi.Issue == in.Issue && oo.Result == e2eOK && oo.Token == key[1] && oo.AcquiredAt != 0 {
						acquiredAt = oo.AcquiredAt
						break
					}
				}
				mutant[i].Output = e2eOutput{Result: e2eOK, Holder: in.Holder, Token: key[1], AcquiredAt: acquiredAt, ExpiresAt: out.ExpiresAt}
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
	if res := checkE2E(t, mutant, 2*time.Minute, false); res != porcupine.Illegal {
		t.Errorf("two holders at once (%s) was called %s, want Illegal", e2eModel.DescribeOperation(mutant[picked].Input, mutant[picked].Output), res)
	}
}

func checkE2E(t *testing.T, history []porcupine.Operation, timeout time.Duration, visualize bool) porcupine.CheckResult {
	t.Helper()
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(e2eModel, history, timeout)
	t.Logf("checked %d recorded operations in %s: %s", len(history), time.Since(start).Round(time.Millisecond), res)
	if res == porcupine.Illegal && visualize {
		if f, err := os.CreateTemp("", "e2e-linearizability-*.html"); err == nil {
			if porcupine.Visualize(e2eModel, info, f) == nil {
				t.Logf("visualization of the violation: %s", f.Name())
			}
			_ = f.Close()
		}
	}
	return res
}
