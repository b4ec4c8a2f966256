package ssh

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// sessionClient is the real OpenSSH client running `collab-lease
// session`, its stdin and its stdout's lines.
type sessionClient struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan map[string]any
	done  chan error
	first map[string]any
}

func (w *world) openSession(user, args string) *sessionClient {
	w.t.Helper()
	cmd := w.sshCommand(user, "collab-lease session "+args)
	in, err := cmd.StdinPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	cmd.Stdout = nil
	out, err := cmd.StdoutPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	c := &sessionClient{t: w.t, cmd: cmd, in: in, lines: make(chan map[string]any, 64), done: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = map[string]any{"unparsed": sc.Text()}
			}
			c.lines <- m
		}
		close(c.lines)
		c.done <- cmd.Wait()
	}()
	w.t.Cleanup(func() { _ = cmd.Process.Kill() })
	c.first = c.next()
	return c
}

// next is the session's next line (within a deadline).
func (c *sessionClient) next() map[string]any {
	c.t.Helper()
	select {
	case m, ok := <-c.lines:
		if !ok {
			c.t.Fatalf("the session ended; stderr %q", c.cmd.Stderr.(*leasetest.LogBuffer).String())
		}
		return m
	case <-time.After(20 * time.Second):
		c.t.Fatal("no line from the session within 20s")
	}
	return nil
}

// do sends one command line and returns its reply.
func (c *sessionClient) do(line string) map[string]any {
	c.t.Helper()
	if _, err := fmt.Fprintln(c.in, line); err != nil {
		c.t.Fatal(err)
	}
	return c.next()
}

// exit waits for the ssh client to end and returns its exit status.
func (c *sessionClient) exit() int {
	c.t.Helper()
	for range c.lines {
	}
	select {
	case err := <-c.done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			c.t.Fatal(err)
		}
		return 0
	case <-time.After(20 * time.Second):
		c.t.Fatal("the ssh client did not exit")
	}
	return -1
}

// One session through the real OpenSSH client: the first line, one line
// per command in order with "exit", errors as lines, a lost line when an
// admin force-releases its claim, and at EOF its claims released at once
// and exit status 0.
func TestSessionOverOpenSSH(t *testing.T) {
	w := newWorld(t)
	w.forge.Grant("acme/widgets", "alice", forgetest.Admin)
	s := w.openSession("bob", "--agent b1 --grace 10s")
	if s.first["status"] != "session" || s.first["holder"] != "bob" || s.first["agent"] != "b1" || s.first["grace_seconds"] != 10.0 ||
		!models.ValidSessionID(fmt.Sprint(s.first["session"])) {
		t.Fatalf("first line %v", s.first)
	}
	r := s.do("acquire acme/widgets 42")
	if r["status"] != "acquired" || r["exit"] != 0.0 || r["agent"] != "b1" || r["token"] != 1.0 {
		t.Fatalf("acquire in the session: %v", r)
	}
	if r := s.do("acquire acme/widgets 42 --agent b2"); r["status"] != "error" || r["exit"] != 1.0 || !strings.Contains(fmt.Sprint(r["error"]), "--agent") {
		t.Fatalf("--agent in a session: %v", r)
	}
	if r := s.do("frobnicate"); r["status"] != "error" || r["exit"] != 1.0 {
		t.Fatalf("a bad line: %v", r)
	}
	if r := s.do("check acme/widgets 42 --token 1"); r["status"] != "current" || r["exit"] != 0.0 {
		t.Fatalf("check: %v", r)
	}
	if r := s.do("acquire acme/secret 1"); r["status"] != "error" || r["error"] != "repository not found" {
		t.Fatalf("a private repository: %v", r)
	}
	if r := s.do("help"); r["status"] != "help" || r["exit"] != 0.0 || !strings.Contains(fmt.Sprint(r["text"]), "collab-lease session") {
		t.Fatalf("help: %v", r)
	}
	if r := s.do("next acme/widgets"); r["status"] != "acquired" || r["issue"] != 43.0 {
		t.Fatalf("next: %v", r)
	}
	// Someone else's acquire is held by bob's agent.
	if r := w.ssh("alice", "collab-lease acquire acme/widgets 42"); r.code != 4 || decode(t, r.stdout)["agent"] != "b1" {
		t.Fatalf("alice's acquire: %+v", r)
	}
	if r := w.ssh("alice", "collab-lease release acme/widgets 42 --force"); r.code != 0 {
		t.Fatalf("force release: %+v", r)
	}
	lost := s.next()
	if lost["status"] != "lost" || lost["issue"] != 42.0 || lost["ended_by"] != "force_released" || lost["token"] != 1.0 || lost["exit"] != nil {
		t.Fatalf("lost line %v", lost)
	}
	// Its own release is no loss.
	if r := s.do("release acme/widgets 43"); r["status"] != "released" {
		t.Fatalf("release: %v", r)
	}
	if r := s.do("acquire acme/widgets 43"); r["status"] != "acquired" || r["token"] != 2.0 {
		t.Fatalf("acquire again: %v", r)
	}
	_ = s.in.Close()
	if code := s.exit(); code != 0 {
		t.Fatalf("exit status after EOF %d, stderr %q", code, s.cmd.Stderr.(*leasetest.LogBuffer).String())
	}
	if cur, _ := w.ledger.Current(context.Background(), models.Key{RepoID: 10, Issue: 43}); cur != nil {
		t.Fatalf("after EOF the session's claim is %+v, want released", cur)
	}
}

// A SIGKILLed client's session keeps its claims (the ledger's clock does
// not move here) for a --resume by the same agent, which gets them with
// their tokens; the line close ends the resumed one cleanly.
func TestSessionResumeAfterKill(t *testing.T) {
	w := newWorld(t)
	s := w.openSession("bob", "--agent b1 --grace 10s")
	id := fmt.Sprint(s.first["session"])
	if r := s.do("acquire acme/widgets 42"); r["status"] != "acquired" {
		t.Fatalf("acquire: %v", r)
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	s.exit()
	k := models.Key{RepoID: 10, Issue: 42}
	if cur, _ := w.ledger.Current(context.Background(), k); cur == nil || cur.Token != 1 {
		t.Fatalf("after the kill: %+v, want the claim still live within its grace", cur)
	}
	if r := w.ssh("bob", "collab-lease session --agent b2 --resume "+id); r.code != 4 || decode(t, r.stdout)["status"] != "session_gone" {
		t.Fatalf("another agent's resume: %+v", r)
	}
	again := w.openSession("bob", "--agent b1 --resume "+id)
	leases, _ := again.first["leases"].([]any)
	if again.first["session"] != id || len(leases) != 1 || leases[0].(map[string]any)["token"] != 1.0 || leases[0].(map[string]any)["repo"] != "acme/widgets" {
		t.Fatalf("resumed: %v", again.first)
	}
	if r := again.do("check acme/widgets 42 --token 1"); r["status"] != "current" {
		t.Fatalf("check after resume: %v", r)
	}
	if _, err := fmt.Fprintln(again.in, "close"); err != nil {
		t.Fatal(err)
	}
	if code := again.exit(); code != 0 {
		t.Fatalf("close: exit %d", code)
	}
	if cur, _ := w.ledger.Current(context.Background(), k); cur != nil {
		t.Fatalf("after close: %+v, want released", cur)
	}
}

// Ten sessions of one account, ten agents, race for one issue through
// the real OpenSSH client: one winner, nine held naming its agent.
func TestTenSessionsOfOneAccountRace(t *testing.T) {
	w := newWorld(t)
	var sessions []*sessionClient
	for i := range 10 {
		sessions = append(sessions, w.openSession("bob", fmt.Sprintf("--agent agent-%d", i)))
	}
	replies := make([]map[string]any, 10)
	var wg sync.WaitGroup
	for i, s := range sessions {
		wg.Go(func() {
			if _, err := fmt.Fprintln(s.in, "acquire acme/widgets 42"); err == nil {
				replies[i] = <-s.lines
			}
		})
	}
	wg.Wait()
	winner := ""
	for i, r := range replies {
		if r["status"] == "acquired" {
			if winner != "" {
				t.Fatalf("two winners: %s and agent-%d", winner, i)
			}
			winner = fmt.Sprint(r["agent"])
		}
	}
	if winner == "" {
		t.Fatalf("no winner: %v", replies)
	}
	for i, r := range replies {
		if r["status"] == "acquired" {
			continue
		}
		if r["status"] != "held" || r["exit"] != 4.0 || r["agent"] != winner || r["holder"] != "bob" {
			t.Fatalf("agent-%d: %v, want held by %s", i, r, winner)
		}
	}
}

// holdingWithFastRecheck is bob's session holding acme/widgets#42, its key
// rechecked every 50 ms.
func holdingWithFastRecheck(t *testing.T) (*world, *sessionClient) {
	t.Helper()
	old := sessionRecheck
	sessionRecheck = 50 * time.Millisecond
	t.Cleanup(func() { sessionRecheck = old })
	w := newWorld(t)
	s := w.openSession("bob", "--agent b1")
	if r := s.do("acquire acme/widgets 42"); r["status"] != "acquired" {
		t.Fatalf("acquire: %v", r)
	}
	return w, s
}

// A session that only holds its claims, sending nothing, still learns
// when its key is revoked: it ends (exit 1, the revoked line), as a loss,
// its claims left to lapse a grace later.
func TestSessionEndsWhenItsKeyIsRevoked(t *testing.T) {
	w, s := holdingWithFastRecheck(t)
	w.forge.DeleteKey(w.keys["bob"].fp)
	if code := s.exit(); code != 1 || !strings.Contains(s.cmd.Stderr.(*leasetest.LogBuffer).String(), "no longer belongs") {
		t.Fatalf("exit %d, stderr %q, want 1 and the revoked line", code, s.cmd.Stderr.(*leasetest.LogBuffer).String())
	}
	if cur, _ := w.ledger.Current(context.Background(), models.Key{RepoID: 10, Issue: 42}); cur == nil {
		t.Fatal("the claim was released; a revoked key's session is lost, not ended cleanly")
	}
}

// The key's recheck asks the forge; a slow forge must not hold the
// session's loop, or its keepalives and heartbeats stop with it and every
// session is lost at once. While a recheck waits in the forge, the session
// still answers its lines, and the recheck that then finds the key still
// its account's changes nothing.
func TestSessionRecheckDoesNotHoldTheSession(t *testing.T) {
	w, s := holdingWithFastRecheck(t)
	var once sync.Once
	arrived, release := make(chan struct{}), make(chan struct{})
	var returned atomic.Bool
	w.forge.SetHook(func(ctx context.Context, method string) error {
		if method != "UserByKey" {
			return nil
		}
		held := false
		once.Do(func() { held = true })
		if !held {
			return nil
		}
		close(arrived)
		defer returned.Store(true)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	select {
	case <-arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("no recheck reached the forge within 20s")
	}
	r := s.do("help")
	if returned.Load() {
		t.Fatal("the session answered only after its recheck came back from the forge")
	}
	if r["status"] != "help" || r["exit"] != 0.0 {
		t.Fatalf("help while the recheck waits: %v", r)
	}
	calls := w.forge.Calls("UserByKey")
	close(release)
	// Rechecks run one at a time: a later one means the held one is done.
	for deadline := time.Now().Add(20 * time.Second); w.forge.Calls("UserByKey") < calls+2; {
		if time.Now().After(deadline) {
			t.Fatal("no recheck after the held one within 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := s.do("help"); r["status"] != "help" {
		t.Fatalf("help after the rechecks: %v", r)
	}
	if cur, _ := w.ledger.Current(context.Background(), models.Key{RepoID: 10, Issue: 42}); cur == nil {
		t.Fatal("the claim is gone after a recheck that found the key its account's")
	}
}
