package ssh

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/forgetest"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// The agent verbs (docs/ssh.md) through the real OpenSSH client: exit
// codes and replies.
func TestAgentVerbsOverSSH(t *testing.T) {
	w := newWorld(t)
	r := w.ssh("alice", "collab-lease next acme/widgets --ttl 30m")
	if m := decode(t, r.stdout); r.code != 0 || m["status"] != "acquired" || m["issue"] != 42.0 {
		t.Fatalf("next: %+v", r)
	}
	r = w.ssh("bob", "collab-lease next acme/widgets")
	if m := decode(t, r.stdout); r.code != 0 || m["issue"] != 43.0 || m["holder"] != "bob" {
		t.Fatalf("second next: %+v", r)
	}
	// 7 is closed; 8 is a pull request, which next takes only with --pulls.
	r = w.ssh("bob", "collab-lease next acme/widgets")
	if r.code != 4 || r.stdout != `{"status":"none","repo":"acme/widgets"}`+"\n" || r.stderr != "" {
		t.Fatalf("next with nothing free: %+v", r)
	}
	r = w.ssh("bob", "collab-lease next acme/widgets --pulls")
	if m := decode(t, r.stdout); r.code != 0 || m["issue"] != 8.0 {
		t.Fatalf("next --pulls: %+v", r)
	}
	r = w.ssh("carol", "collab-lease next acme/widgets")
	if r.code != 1 || r.stderr != "error: write access to acme/widgets issues is required\n" {
		t.Fatalf("next by a reader: %+v", r)
	}

	r = w.ssh("carol", "collab-lease check acme/widgets 42 --token 1")
	if m := decode(t, r.stdout); r.code != 0 || m["status"] != "current" || m["holder"] != "alice" {
		t.Fatalf("check current: %+v", r)
	}
	r = w.ssh("carol", "collab-lease check acme/widgets 42 --token 2")
	if r.code != 4 || r.stdout != `{"status":"stale","repo":"acme/widgets","issue":42,"token":1}`+"\n" {
		t.Fatalf("check stale: %+v", r)
	}

	r = w.ssh("alice", "collab-lease release acme/widgets 43 --force")
	if r.code != 1 || r.stderr != "error: admin access to acme/widgets is required\n" {
		t.Fatalf("force release by a writer: %+v", r)
	}
	w.forge.Grant("acme/widgets", "alice", forgetest.Admin)
	r = w.ssh("alice", "collab-lease release acme/widgets 43 --force")
	if r.code != 0 || r.stdout != `{"status":"released","repo":"acme/widgets","issue":43}`+"\n" {
		t.Fatalf("force release by an admin: %+v", r)
	}
	r = w.ssh("carol", "collab-lease history acme/widgets 43")
	m := decode(t, r.stdout)
	tenures, _ := m["tenures"].([]any)
	if r.code != 0 || len(tenures) != 1 {
		t.Fatalf("history: %+v", r)
	}
	if ten := tenures[0].(map[string]any); ten["holder"] != "bob" || ten["ended_by"] != "force_released" || ten["forced_by"] != "alice" {
		t.Fatalf("history names: %v", ten)
	}
	r = w.ssh("alice", "collab-lease history acme/secret 1")
	if r.code != 0 {
		t.Fatalf("history of a never-claimed issue: %+v", r)
	}
	r = w.ssh("carol", "collab-lease history acme/secret 1")
	if r.code != 1 || r.stderr != "error: repository not found\n" {
		t.Fatalf("history of a private repository: %+v", r)
	}
}

// A waiting ssh client gets the issue as soon as its holder releases it;
// one that goes away stops waiting at once; and a client that only waits
// is kept alive past the server's idle timeout.
func TestAcquireWaitOverSSH(t *testing.T) {
	// An idle timeout short enough for a test to outlive, long enough for
	// a client on a busy machine to answer a keepalive within it (at 400
	// ms, a descheduled client was cut, and its wait ended with it).
	w := newWorld(t, func(s *Server) { s.IdleTimeout = 2 * time.Second })
	if r := w.ssh("alice", "collab-lease acquire acme/widgets 42"); r.code != 0 {
		t.Fatalf("acquire: %+v", r)
	}

	// Killed while waiting: its waiter is gone at once.
	quitter := w.sshProcess("bob", "collab-lease acquire acme/widgets 42 --wait 1h")
	waitUntil(t, "bob waiting", func() bool { return w.svc.Waiters() == 1 })
	_ = quitter.Process.Kill()
	_ = quitter.Wait()
	waitUntil(t, "the killed client's waiter gone", func() bool { return w.svc.Waiters() == 0 })

	waiter := w.sshProcess("bob", "collab-lease acquire acme/widgets 42 --wait 1h --ttl 5m")
	done := make(chan error, 1)
	go func() { done <- waiter.Wait() }()
	waitUntil(t, "bob waiting again", func() bool { return w.svc.Waiters() == 1 })
	// Several keepalives, one each half idle timeout: more than the idle
	// timeout has passed.
	before := w.srv.keepalives.Load()
	waitUntil(t, "keepalives", func() bool { return w.srv.keepalives.Load() >= before+3 })
	select {
	case err := <-done:
		t.Fatalf("the waiting client ended before the release: %v, stderr %q", err, waiter.Stderr)
	default:
	}
	if r := w.ssh("alice", "collab-lease release acme/widgets 42"); r.code != 0 {
		t.Fatalf("release: %+v", r)
	}
	if err := <-done; err != nil {
		t.Fatalf("the waiting client: %v, stderr %q", err, waiter.Stderr)
	}
	out := waiter.Stdout.(*leasetest.LogBuffer).String()
	if m := decode(t, out); m["status"] != "acquired" || m["holder"] != "bob" || m["token"] != 2.0 {
		t.Fatalf("the waiter's reply: %s", out)
	}
}

// sshProcess starts the real OpenSSH client running one command, without
// waiting for it.
func (w *world) sshProcess(user, command string) *exec.Cmd {
	w.t.Helper()
	cmd := w.sshCommand(user, command)
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd
}

// sshCommand is the real OpenSSH client set to run one command, not
// started, its stdout and stderr each a LogBuffer.
func (w *world) sshCommand(user, command string) *exec.Cmd {
	cmd := exec.Command("ssh", "-F", "/dev/null", "-p", fmt.Sprint(w.addr.Port), "-i", w.keys[user].path,
		"-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-o", "BatchMode=yes",
		"-o", "UserKnownHostsFile="+w.known, "-o", "StrictHostKeyChecking=yes",
		"-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR", "git@127.0.0.1", command)
	cmd.Stdout, cmd.Stderr = &leasetest.LogBuffer{}, &leasetest.LogBuffer{}
	return cmd
}

// waitUntil polls cond until it holds, or fails the test after a deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An internal error tells the client nothing but "internal error", and
// the log everything.
func TestInternalErrorIsLoggedWithItsDetail(t *testing.T) {
	w := newWorld(t)
	_ = w.ledger.Close()
	r := w.ssh("alice", "collab-lease list acme/widgets")
	if r.code != 1 || r.stderr != "error: internal error\n" {
		t.Fatalf("list on a closed ledger: %+v", r)
	}
	logs := w.logs.String()
	if !strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, "outcome=internal") || !strings.Contains(logs, "err=") {
		t.Fatalf("the log has no detail of the internal error:\n%s", logs)
	}
}

// Agents of one account over the real OpenSSH client: each --agent is a
// holder of its own, named in the replies; a bad name is a usage error.
func TestAgentsOverSSH(t *testing.T) {
	w := newWorld(t)
	r := w.ssh("alice", "collab-lease acquire acme/widgets 42 --ttl 30m --agent agent-7")
	if m := decode(t, r.stdout); r.code != 0 || m["holder"] != "alice" || m["agent"] != "agent-7" || m["token"] != 1.0 {
		t.Fatalf("agent-7's acquire: %+v", r)
	}
	r = w.ssh("alice", "collab-lease acquire acme/widgets 42 --agent agent-8")
	if m := decode(t, r.stdout); r.code != 4 || m["status"] != "held" || m["holder"] != "alice" || m["agent"] != "agent-7" {
		t.Fatalf("agent-8's acquire of agent-7's claim: %+v", r)
	}
	r = w.ssh("alice", "collab-lease acquire acme/widgets 42")
	if m := decode(t, r.stdout); r.code != 4 || m["agent"] != "agent-7" {
		t.Fatalf("the account's acquire of its agent's claim: %+v", r)
	}
	r = w.ssh("alice", "collab-lease list acme/widgets")
	if r.code != 0 || !strings.Contains(r.stdout, `"holder":"alice","agent":"agent-7","token":1`) {
		t.Fatalf("list: %+v", r)
	}
	r = w.ssh("alice", "collab-lease release acme/widgets 42 --agent agent-8")
	if r.code != 0 {
		t.Fatalf("agent-8 releases agent-7's claim: %+v", r)
	}
	r = w.ssh("alice", "collab-lease acquire acme/widgets 42 --agent 'no spaces'")
	if r.code != 1 || !strings.HasPrefix(r.stderr, "error: usage: --agent must be") {
		t.Fatalf("a bad agent name: %+v", r)
	}
}

// acquire --wait says where the waiter stands, on stderr, when that
// changes: bob waits first, alice's agent x behind him; bob gives up, and
// x is next; alice releases, and x has it.
func TestAcquireWaitSaysWhereTheWaiterStands(t *testing.T) {
	w := newWorld(t)
	if r := w.ssh("alice", "collab-lease acquire acme/widgets 42"); r.code != 0 {
		t.Fatalf("acquire: %+v", r)
	}
	bob := w.sshProcess("bob", "collab-lease acquire acme/widgets 42 --wait 1h")
	waitUntil(t, "bob waiting", func() bool { return w.svc.Waiters() == 1 })
	x := w.sshProcess("alice", "collab-lease acquire acme/widgets 42 --wait 1h --agent x")
	stderr := x.Stderr.(*leasetest.LogBuffer)
	waitUntil(t, "x told it is behind bob", func() bool { return stderr.String() == "waiting: 1 ahead of you\n" })
	if got := bob.Stderr.(*leasetest.LogBuffer).String(); got != "waiting: 0 ahead of you\n" {
		t.Fatalf("bob was told %q", got)
	}
	_ = bob.Process.Kill()
	_ = bob.Wait()
	waitUntil(t, "x told it is next", func() bool { return stderr.String() == "waiting: 1 ahead of you\nwaiting: 0 ahead of you\n" })
	if r := w.ssh("alice", "collab-lease release acme/widgets 42"); r.code != 0 {
		t.Fatalf("release: %+v", r)
	}
	if err := x.Wait(); err != nil {
		t.Fatalf("x's wait: %v, stderr %q", err, stderr.String())
	}
	if m := decode(t, x.Stdout.(*leasetest.LogBuffer).String()); m["agent"] != "x" || m["status"] != "acquired" {
		t.Fatalf("x's reply: %v", m)
	}
}

// handoff over the real OpenSSH client: the reply, the target's exit 1
// line, and not_holder.
func TestHandoffOverSSH(t *testing.T) {
	w := newWorld(t)
	if r := w.ssh("alice", "collab-lease acquire acme/widgets 42 --ttl 1h"); r.code != 0 {
		t.Fatalf("acquire: %+v", r)
	}
	r := w.ssh("alice", "collab-lease handoff acme/widgets 42 --to carol")
	if r.code != 1 || r.stderr != "error: carol may not claim in acme/widgets\n" {
		t.Fatalf("a handoff to a reader: %+v", r)
	}
	r = w.ssh("alice", "collab-lease handoff acme/widgets 42 --to alice")
	if r.code != 1 || r.stdout != "" || r.stderr != "error: alice already holds acme/widgets#42\n" {
		t.Fatalf("a handoff to its holder: %+v", r)
	}
	r = w.ssh("bob", "collab-lease handoff acme/widgets 42 --to bob")
	if m := decode(t, r.stdout); r.code != 4 || m["status"] != "not_holder" {
		t.Fatalf("bob hands off alice's claim: %+v", r)
	}
	r = w.ssh("alice", "collab-lease handoff acme/widgets 42 --to bob/b1")
	if m := decode(t, r.stdout); r.code != 0 || m["status"] != "handed_off" || m["holder"] != "bob" || m["agent"] != "b1" || m["token"] != 2.0 {
		t.Fatalf("alice hands off to bob's b1: %+v", r)
	}
}
