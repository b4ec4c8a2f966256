package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models/leasemodel"
)

// Gitea goes away under load. Six SSH clients, each holding a lease on an
// issue of its own, keep acquiring, renewing and listing while Gitea is
// stopped. With the sidecar's identity and permission caches warm (60 s):
//
//   - every acquire answers exit 75 "forge unavailable" within 5 s (it
//     must ask Gitea whether the issue is open, which is never cached);
//   - renew, release and list of existing leases keep working, over the
//     same connections and over new ones of cached keys;
//   - a key the sidecar has not seen is let in and answered exit 75;
//   - nothing hangs: every command of the run answers within 5 s;
//   - with caches of 3 s, renew works until they run out and answers
//     exit 75 after that.
//
// Then Gitea starts again and acquires work again, without restarting
// the sidecar.

// timedResult is one command's answer with when it was asked and answered.
type timedResult struct {
	who, cmd  string
	r         SSHResult
	err       error
	call, ret time.Time
}

func (tr timedResult) took() time.Duration { return tr.ret.Sub(tr.call) }

func TestGiteaOutageUnderLoadEndToEnd(t *testing.T) {
	const bound = 5 * time.Second
	scale := leasemodel.Scale(t)
	g, w, _ := shared(t)
	// --issue-state-ttl 0: every acquire asks Gitea whether the issue is
	// open, so the outage shows in acquire (with the default, an issue
	// whose state the ledger knows is claimable during an outage; see
	// TestHotPathAgainstGitea).
	s, _ := newSidecar(t, "--key-cache-ttl", "60s", "--perm-cache-ttl", "60s", "--forge-timeout", "2s", "--issue-state-ttl", "0s")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	racers := racerUsers(t, ctx, g, w, 50)
	users, cold := racers[:6], racers[6]
	issues := newIssues(t, g, w, len(users), "Outage")
	repo := w.Widgets.FullName()
	pid := s.PID()

	var agents []*agent
	for _, u := range users {
		a, err := newAgent(s, u)
		if err != nil {
			t.Fatal(err)
		}
		defer a.close()
		agents = append(agents, a)
	}
	do := func(a *agent, cmd string) timedResult {
		tr := timedResult{who: a.user.Login, cmd: cmd, call: time.Now()}
		cctx, ccancel := context.WithTimeout(ctx, time.Minute)
		defer ccancel()
		tr.r, tr.err = a.run(cctx, cmd)
		tr.ret = time.Now()
		return tr
	}
	must := func(tr timedResult, code int) {
		t.Helper()
		if tr.err != nil || tr.r.Code != code {
			t.Fatalf("%s: %s: exit %d (%v), want %d: %q %q", tr.who, tr.cmd, tr.r.Code, tr.err, code, tr.r.Stdout, tr.r.Stderr)
		}
	}
	acquire := func(i int) string { return fmt.Sprintf("collab-lease acquire %s %d --ttl 120s", repo, issues[i]) }
	renew := func(i int) string { return fmt.Sprintf("collab-lease renew %s %d --ttl 120s", repo, issues[i]) }
	release := func(i int) string { return fmt.Sprintf("collab-lease release %s %d", repo, issues[i]) }
	list := "collab-lease list " + repo

	// Warm the caches: each user resolves its key, reads its permission
	// and takes its own issue.
	for i, a := range agents {
		must(do(a, acquire(i)), 0)
	}

	// The load: each client cycles through acquiring its own issue again,
	// renewing it, listing, and trying a neighbour's issue.
	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		mu      sync.Mutex
		results []timedResult
	)
	for i, a := range agents {
		wg.Go(func() {
			cycle := []string{acquire(i), renew(i), list, acquire((i + 1) % len(agents))}
			for k := 0; !stop.Load(); k++ {
				tr := do(a, cycle[k%len(cycle)])
				mu.Lock()
				results = append(results, tr)
				mu.Unlock()
				if tr.err != nil {
					return
				}
			}
		})
	}
	waitFor := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; {
			mu.Lock()
			got := len(results)
			mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the load made %d commands in a minute, want %d", got, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor(200)

	// A second sidecar whose caches last only 3 s, warmed just before the
	// outage: its renews work until the permission cache runs out, and
	// answer exit 75 after that.
	const shortTTL = 3 * time.Second
	short, _ := newSidecar(t, "--key-cache-ttl", "3s", "--perm-cache-ttl", "3s", "--forge-timeout", "2s", "--issue-state-ttl", "0s")
	shortAgent, err := newAgent(short, users[5])
	if err != nil {
		t.Fatal(err)
	}
	defer shortAgent.close()
	warm := do(shortAgent, acquire(5))
	must(warm, 0)

	stopBegan := time.Now()
	stopGitea(t, g)
	down := time.Now()
	t.Logf("Gitea stopped in %s", down.Sub(stopBegan).Round(time.Millisecond))
	mu.Lock()
	before := len(results)
	mu.Unlock()
	waitFor(before + 300*scale)
	stop.Store(true)
	wg.Wait()

	// Commands wholly inside the outage.
	var acquireTimes []time.Duration
	inside := 0
	for _, tr := range results {
		if tr.err != nil {
			t.Fatalf("%s: %s: %v", tr.who, tr.cmd, tr.err)
		}
		if tr.took() > bound {
			t.Errorf("%s: %s took %s (exit %d), more than %s", tr.who, tr.cmd, tr.took(), tr.r.Code, bound)
		}
		if tr.ret.Before(stopBegan) && tr.r.Code != 0 && tr.r.Code != 4 {
			t.Errorf("%s before the outage: %s: %+v", tr.who, tr.cmd, tr.r)
		}
		if tr.call.Before(down) {
			continue
		}
		inside++
		switch {
		case strings.HasPrefix(tr.cmd, "collab-lease acquire"):
			acquireTimes = append(acquireTimes, tr.took())
			if tr.r.Code != 75 || tr.r.Stderr != "error: forge unavailable, try again\n" || tr.r.Stdout != "" {
				t.Errorf("%s during the outage: %s: %+v", tr.who, tr.cmd, tr.r)
			}
		case strings.HasPrefix(tr.cmd, "collab-lease renew"):
			if v := parse(t, tr.r); tr.r.Code != 0 || v.Status != "renewed" || v.Token != 1 {
				t.Errorf("%s during the outage: %s: %+v", tr.who, tr.cmd, tr.r)
			}
		default: // list
			if tr.r.Code != 0 || strings.Count(tr.r.Stdout, `"holder"`) != len(issues) {
				t.Errorf("%s during the outage: %s: %+v", tr.who, tr.cmd, tr.r)
			}
		}
	}
	if len(acquireTimes) < 50 {
		t.Fatalf("only %d acquires during the outage", len(acquireTimes))
	}
	slices.Sort(acquireTimes)
	t.Logf("%d commands before the outage, %d during it; acquire answered exit 75 in median %s, max %s",
		before, inside, acquireTimes[len(acquireTimes)/2].Round(time.Microsecond), acquireTimes[len(acquireTimes)-1].Round(time.Microsecond))

	// Still in the outage: release works, and the freed issue cannot be
	// taken again until Gitea is back.
	for i := range 3 {
		must(do(agents[i], release(i)), 0)
		must(do(agents[i], renew(i)), 4)
		tr := do(agents[i], acquire(i))
		must(tr, 75)
		if tr.took() > bound {
			t.Errorf("acquire took %s during the outage", tr.took())
		}
	}
	// A new connection of a cached key works as well.
	fresh, err := newAgent(s, users[3])
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.close()
	must(do(fresh, renew(3)), 0)
	// A key the sidecar never saw cannot be checked: let in, exit 75.
	stranger, err := newAgent(s, cold)
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.close()
	tr := do(stranger, list)
	if tr.err != nil || tr.r.Code != 75 || tr.r.Stderr != "error: forge unavailable, try again\n" || tr.took() > bound {
		t.Fatalf("unknown key during the outage: %+v %v in %s", tr.r, tr.err, tr.took())
	}
	stranger.close()

	// The short-lived caches run out during the outage: renew goes on
	// working until then, and then answers exit 75, over the same
	// connection and over a new one.
	var lastOK, firstFail timedResult
	for deadline := time.Now().Add(shortTTL + 10*time.Second); ; {
		tr := do(shortAgent, renew(5))
		if tr.err != nil || tr.took() > bound || (tr.r.Code != 0 && tr.r.Code != 75) {
			t.Fatalf("renew while the cache runs out: %+v %v in %s", tr.r, tr.err, tr.took())
		}
		if tr.r.Code == 75 {
			firstFail = tr
			break
		}
		lastOK = tr
		if time.Now().After(deadline) {
			t.Fatalf("renew still works %s after the caches were warmed, with Gitea down", time.Since(warm.call))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if lastOK.cmd != "" && lastOK.call.After(warm.ret.Add(shortTTL)) {
		t.Errorf("renew worked at %s after warming, past the %s cache", lastOK.call.Sub(warm.ret), shortTTL)
	}
	if firstFail.ret.Before(warm.call.Add(shortTTL)) {
		t.Errorf("renew failed %s after warming, within the %s cache", firstFail.ret.Sub(warm.call), shortTTL)
	}
	t.Logf("with 3 s caches: renew worked until %s after warming, exit 75 from %s", lastOK.ret.Sub(warm.call).Round(time.Millisecond), firstFail.call.Sub(warm.call).Round(time.Millisecond))
	shortAgent.close()
	if tr := do(shortAgent, renew(5)); tr.err != nil || tr.r.Code != 75 {
		t.Fatalf("a new connection after the key cache ran out: %+v %v", tr.r, tr.err)
	}

	// Gitea comes back; so does the service, in the same process.
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	for deadline := time.Now().Add(30 * time.Second); ; {
		tr := do(agents[0], acquire(0))
		if tr.err == nil && tr.r.Code == 0 {
			if v := parse(t, tr.r); v.Token != 2 {
				t.Fatalf("acquire after the outage: %+v", v)
			}
			break
		}
		if tr.err != nil || tr.r.Code != 75 || time.Now().After(deadline) {
			t.Fatalf("acquire after Gitea came back: %+v %v", tr.r, tr.err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("acquires work again %s after Gitea answered", time.Since(up).Round(time.Millisecond))
	for i := 1; i < 3; i++ {
		must(do(agents[i], acquire(i)), 0)
	}
	must(do(agents[4], acquire(0)), 4)
	must(do(stranger, list), 0) // the key is resolved now
	if s.PID() != pid {
		t.Fatalf("the sidecar was restarted (pid %d, was %d)", s.PID(), pid)
	}
}

// Gitea hangs instead of going away: it accepts connections and never
// answers (a frozen or overloaded forge). The sidecar talks to it through
// a proxy that can be switched to swallow everything. Acquires must give
// up after --forge-timeout (2 s) with exit 75, renew and list of warm
// leases must not wait at all, and when Gitea answers again so does the
// service.
func TestGiteaHangsUnderLoadEndToEnd(t *testing.T) {
	const bound = 5 * time.Second
	g, w, bin := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	racers := racerUsers(t, ctx, g, w, 50)
	users := racers[:6]
	issues := newIssues(t, g, w, len(users), "Hang")
	repo := w.Widgets.FullName()

	proxy, err := newHangProxy(strings.TrimPrefix(g.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.close()
	s, err := StartSidecar(ctx, SidecarOptions{Binary: bin, Gitea: &Gitea{URL: "http://" + proxy.addr(), AdminToken: g.AdminToken},
		DataDir: t.TempDir() + "/data", Args: []string{"--forge-timeout", "2s", "--key-cache-ttl", "60s", "--perm-cache-ttl", "60s", "--issue-state-ttl", "0s"}})
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, s)
	var agents []*agent
	for i, u := range users {
		a, err := newAgent(s, u)
		if err != nil {
			t.Fatal(err)
		}
		defer a.close()
		agents = append(agents, a)
		if r, err := a.run(ctx, fmt.Sprintf("collab-lease acquire %s %d --ttl 120s", repo, issues[i])); err != nil || r.Code != 0 {
			t.Fatalf("warm up: %+v %v", r, err)
		}
	}

	proxy.hang(true)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		results []timedResult
	)
	for i, a := range agents {
		wg.Go(func() {
			for _, cmd := range []string{
				fmt.Sprintf("collab-lease acquire %s %d --ttl 120s", repo, issues[i]),
				fmt.Sprintf("collab-lease renew %s %d --ttl 120s", repo, issues[i]),
				"collab-lease list " + repo,
				fmt.Sprintf("collab-lease acquire %s %d", repo, issues[(i+1)%len(issues)]),
				fmt.Sprintf("collab-lease release %s %d", repo, issues[i]),
			} {
				tr := timedResult{who: a.user.Login, cmd: cmd, call: time.Now()}
				tr.r, tr.err = a.run(ctx, cmd)
				tr.ret = time.Now()
				mu.Lock()
				results = append(results, tr)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	var slowest time.Duration
	for _, tr := range results {
		want, fast := 0, true
		if strings.HasPrefix(tr.cmd, "collab-lease acquire") {
			want, fast = 75, false
			slowest = max(slowest, tr.took())
		}
		switch {
		case tr.err != nil || tr.r.Code != want:
			t.Errorf("%s with Gitea hung: %s: exit %d %v, want %d: %q", tr.who, tr.cmd, tr.r.Code, tr.err, want, tr.r.Stderr)
		case tr.took() > bound:
			t.Errorf("%s with Gitea hung: %s took %s", tr.who, tr.cmd, tr.took())
		case fast && tr.took() > 1500*time.Millisecond:
			t.Errorf("%s with Gitea hung: %s took %s though it needs nothing from Gitea", tr.who, tr.cmd, tr.took())
		case !fast && tr.r.Stderr != "error: forge unavailable, try again\n":
			t.Errorf("%s with Gitea hung: %s: %q", tr.who, tr.cmd, tr.r.Stderr)
		}
	}
	t.Logf("with Gitea hung, acquires gave up with exit 75 after at most %s", slowest.Round(time.Millisecond))

	proxy.hang(false)
	for i, a := range agents {
		if r, err := a.run(ctx, fmt.Sprintf("collab-lease acquire %s %d --ttl 120s", repo, issues[i])); err != nil || r.Code != 0 {
			t.Fatalf("%s after Gitea answers again: %+v %v", a.user.Login, r, err)
		}
	}
}

// hangProxy forwards TCP connections to a target until it is told to
// hang; then it drops the connections it forwards and holds every new
// one open without answering.
type hangProxy struct {
	l      net.Listener
	target string
	hung   atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func newHangProxy(target string) (*hangProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &hangProxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

func (p *hangProxy) addr() string { return p.l.Addr().String() }

func (p *hangProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.track(c)
		go func() {
			defer p.untrack(c)
			if p.hung.Load() {
				_, _ = io.Copy(io.Discard, c) // swallow, never answer
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				return
			}
			p.track(up)
			defer p.untrack(up)
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			_, _ = io.Copy(c, up)
		}()
	}
}

func (p *hangProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns[c] = struct{}{}
}

func (p *hangProxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	_ = c.Close()
}

// hang switches hanging on or off; either way the connections open now
// are closed, so that what comes next meets the new behaviour.
func (p *hangProxy) hang(on bool) {
	p.hung.Store(on)
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *hangProxy) close() {
	_ = p.l.Close()
	p.hang(false)
}
