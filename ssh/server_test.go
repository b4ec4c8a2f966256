package ssh

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/clocktest"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// testKey is a client key pair with its private key in an OpenSSH file.
type testKey struct {
	path string
	fp   string
}

func newTestKey(t *testing.T, dir, name string) testKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := gossh.MarshalPrivateKey(priv, name)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	sshPub, _ := gossh.NewPublicKey(pub)
	return testKey{path: path, fp: gossh.FingerprintSHA256(sshPub)}
}

// world is a running server with a fake forge, a real ledger file, keys
// for alice, bob (writers), carol (reader) and mallory (unknown to the
// forge), and a known_hosts file for the real OpenSSH client.
type world struct {
	t        *testing.T
	dir      string
	forge    *forgetest.Forge
	ledger   *models.Store
	clock    *clocktest.Clock
	srv      *Server
	svc      *lease.Service // the lease service of the running server
	addr     *net.TCPAddr
	known    string
	keys     map[string]testKey
	hostKey  string
	logs     *leasetest.LogBuffer
	tweak    func(*Server) // adjusts the server's limits before it starts
	serveErr chan error
}

func newWorld(t *testing.T, tweak ...func(*Server)) *world {
	t.Helper()
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Fatal("the OpenSSH client is required (apt-get install openssh-client)")
	}
	lw := leasetest.New(t, leasetest.Options{})
	w := &world{t: t, dir: lw.Dir, forge: lw.Forge, ledger: lw.Ledger, clock: lw.Clock, keys: map[string]testKey{},
		logs: &leasetest.LogBuffer{}}
	for _, name := range []string{"alice", "bob", "carol", "mallory"} {
		k := newTestKey(t, w.dir, name)
		w.keys[name] = k
		if name != "mallory" {
			w.forge.AddUser(name)
			w.forge.AddKey(name, k.fp)
		}
	}
	w.forge.AddRepo("acme/widgets", 10, false)
	w.forge.AddRepo("acme/secret", 11, true)
	w.forge.Grant("acme/widgets", "alice", forgetest.Write)
	w.forge.Grant("acme/widgets", "bob", forgetest.Write)
	w.forge.Grant("acme/widgets", "carol", forgetest.Read)
	w.forge.Grant("acme/secret", "alice", forgetest.Write)
	w.forge.AddIssue("acme/widgets", 42, false, false)
	w.forge.AddIssue("acme/widgets", 43, false, false)
	w.forge.AddIssue("acme/widgets", 7, false, true)
	w.forge.AddIssue("acme/widgets", 8, true, false)
	w.forge.AddIssue("acme/secret", 1, false, false)
	w.hostKey = filepath.Join(w.dir, "ssh_host_ed25519_key")
	if len(tweak) > 0 {
		w.tweak = tweak[0]
	}
	w.start("127.0.0.1:0")
	return w
}

func (w *world) start(addr string) {
	w.t.Helper()
	signer, err := LoadOrCreateHostKey(w.hostKey)
	if err != nil {
		w.t.Fatal(err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		w.t.Fatal(err)
	}
	w.addr = l.Addr().(*net.TCPAddr)
	logger := slog.New(slog.NewTextHandler(w.logs, nil))
	w.srv = &Server{HostKey: signer, Keys: w.forge, Logger: logger,
		Handler: &LeaseVerb{Leases: w.service(), Logger: logger}}
	if w.tweak != nil {
		w.tweak(w.srv)
	}
	w.serveErr = make(chan error, 1)
	go func() { w.serveErr <- w.srv.Serve(l) }()
	if w.known == "" {
		w.known = filepath.Join(w.dir, "known_hosts")
		line := fmt.Sprintf("[127.0.0.1]:%d %s", w.addr.Port, gossh.MarshalAuthorizedKey(signer.PublicKey()))
		if err := os.WriteFile(w.known, []byte(line), 0o600); err != nil {
			w.t.Fatal(err)
		}
	}
	srv := w.srv
	w.t.Cleanup(func() { closeAndWait(w.t, srv) })
}

// closeAndWait closes srv and waits for the commands it was running to
// return: a session ended by the close still writes its end to the ledger,
// and that write must be over before the ledger closes and the test's
// directory is removed.
func closeAndWait(t *testing.T, srv *Server) {
	_ = srv.Close()
	done := make(chan struct{})
	go func() {
		srv.commands.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Error("commands still running 20s after the server closed")
	}
}

// service is a new lease service over the world's forge and ledger, for
// a server (re)started. It runs on the system clock (the ledger keeps the
// test clock): the tests of acquire --wait wait for real, short
// deadlines.
func (w *world) service() *lease.Service {
	w.t.Helper()
	w.svc = leasetest.NewService(w.t, w.forge, w.ledger, leasetest.RealClock{}).Service
	return w.svc
}

type result struct {
	stdout, stderr string
	code           int
}

// ssh runs the real OpenSSH client as user with the given extra options
// and remote command words.
func (w *world) ssh(user string, args ...string) result {
	w.t.Helper()
	base := []string{"-F", "/dev/null", "-p", fmt.Sprint(w.addr.Port), "-i", w.keys[user].path,
		"-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-o", "BatchMode=yes",
		"-o", "UserKnownHostsFile=" + w.known, "-o", "StrictHostKeyChecking=yes",
		"-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR"}
	opts, rest := splitOpts(args)
	cmd := exec.Command("ssh", append(append(append(base, opts...), "git@127.0.0.1"), rest...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		w.t.Fatalf("ssh: %v", err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// splitOpts separates leading ssh client options (words before "--") from
// the remote command.
func splitOpts(args []string) (opts, rest []string) {
	for i, a := range args {
		if a == "--" {
			return args[:i], args[i+1:]
		}
	}
	return nil, args
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("stdout is not one JSON object: %q: %v", s, err)
	}
	return m
}

func TestVerbOverOpenSSH(t *testing.T) {
	w := newWorld(t)

	r := w.ssh("alice", "collab-lease acquire acme/widgets 42")
	want := `{"status":"acquired","repo":"acme/widgets","issue":42,"holder":"alice","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":null}` + "\n"
	if r.code != 0 || r.stdout != want || r.stderr != "" {
		t.Fatalf("acquire: %+v\nwant stdout %s", r, want)
	}

	r = w.ssh("bob", "collab-lease", "acquire", "acme/widgets", "42", "--ttl", "5m")
	want = `{"status":"held","repo":"acme/widgets","issue":42,"holder":"alice","agent":null,"expires_at":null}` + "\n"
	if r.code != 4 || r.stdout != want {
		t.Fatalf("conflict: %+v", r)
	}

	r = w.ssh("alice", "collab-lease acquire '/acme/widgets.git' '#42' --ttl 300")
	m := decode(t, r.stdout)
	if r.code != 0 || m["token"] != 1.0 || m["expires_at"] != "2026-09-05T12:05:00Z" {
		t.Fatalf("idempotent re-acquire with ttl: %+v", r)
	}

	w.clock.Advance(time.Minute)
	r = w.ssh("alice", `collab-lease renew "acme/widgets" 42 --ttl 30m`)
	m = decode(t, r.stdout)
	if r.code != 0 || m["status"] != "renewed" || m["expires_at"] != "2026-09-05T12:31:00Z" || m["acquired_at"] != "2026-09-05T12:00:00Z" {
		t.Fatalf("renew: %+v", r)
	}
	r = w.ssh("bob", "collab-lease renew acme/widgets 42 --ttl 30m")
	want = `{"status":"not_holder","repo":"acme/widgets","issue":42,"holder":"alice","agent":null,"expires_at":"2026-09-05T12:31:00Z"}` + "\n"
	if r.code != 4 || r.stdout != want {
		t.Fatalf("renew by bob: %+v", r)
	}
	r = w.ssh("bob", "collab-lease release acme/widgets 42")
	if r.code != 4 || decode(t, r.stdout)["status"] != "not_holder" {
		t.Fatalf("release by bob: %+v", r)
	}

	r = w.ssh("alice", "collab-lease acquire acme/widgets 8 --ttl 2h") // a pull request
	if r.code != 0 {
		t.Fatalf("PR acquire: %+v", r)
	}
	r = w.ssh("carol", "collab-lease list acme/widgets")
	want = `{"repo":"acme/widgets","leases":[{"issue":42,"holder":"alice","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":"2026-09-05T12:31:00Z"},{"issue":8,"holder":"alice","agent":null,"token":1,"acquired_at":"2026-09-05T12:01:00Z","expires_at":"2026-09-05T14:01:00Z"}]}` + "\n"
	if r.code != 0 || r.stdout != want {
		t.Fatalf("list by reader: %+v", r)
	}

	r = w.ssh("alice", "collab-lease release acme/widgets 42")
	if r.code != 0 || r.stdout != `{"status":"released","repo":"acme/widgets","issue":42}`+"\n" {
		t.Fatalf("release: %+v", r)
	}
	r = w.ssh("alice", "collab-lease release acme/widgets 42")
	if r.code != 0 {
		t.Fatalf("releasing nothing: %+v", r)
	}
	r = w.ssh("bob", "collab-lease acquire acme/widgets 42")
	if m := decode(t, r.stdout); r.code != 0 || m["token"] != 2.0 || m["holder"] != "bob" {
		t.Fatalf("acquire after release: %+v", r)
	}
}

func TestVerbErrors(t *testing.T) {
	w := newWorld(t)
	cases := []struct {
		user, cmd string
		code      int
		stderr    string
	}{
		{"alice", "collab-lease acquire acme/widgets 999", 1, "error: issue not found\n"},
		{"alice", "collab-lease acquire acme/widgets 7", 1, "error: issue is closed\n"},
		{"carol", "collab-lease acquire acme/widgets 42", 1, "error: write access to acme/widgets issues is required\n"},
		{"carol", "collab-lease acquire acme/widgets 8", 1, "error: write access to acme/widgets pulls is required\n"},
		{"carol", "collab-lease release acme/widgets 42", 1, "error: write access to acme/widgets issues is required\n"},
		{"alice", "collab-lease acquire acme/widgets 42 --ttl 0", 1, "error: usage: --ttl \"0\" must be at least 1s\n"},
		{"alice", "collab-lease frobnicate acme/widgets 42", 1, "error: usage: unknown verb \"frobnicate\"; try: collab-lease help\n"},
		{"alice", "collab-lease acquire acme/widgets", 1, "error: usage: acquire needs <issue>; expected: collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--force] [--agent <name>]\n"},
		{"alice", "collab-lease acquire acme/widgets 42 extra", 1, "error: usage: unexpected argument \"extra\"; expected: collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--force] [--agent <name>]\n"},
		{"alice", "collab-lease acquire 'acme/widgets 42", 1, "error: usage: unclosed single quote in \"'acme/widgets 42\"\n"},
		{"alice", "rm -rf /", 1, "error: usage: unknown command \"rm\"; this server runs only collab-lease (try: collab-lease help)\n"},
	}
	for _, c := range cases {
		r := w.ssh(c.user, c.cmd)
		if r.code != c.code || r.stdout != "" || r.stderr != c.stderr {
			t.Errorf("%s: %q → %+v", c.user, c.cmd, r)
		}
	}
	if n, err := w.ledger.CountLive(context.Background()); err != nil || n != 0 {
		t.Fatalf("failed commands wrote %d leases (%v)", n, err)
	}
	r := w.ssh("alice", "collab-lease help")
	if r.code != 0 || r.stdout != contract.Usage {
		t.Fatalf("help: %+v", r)
	}
}

// An unknown repository and a private one the caller cannot see get the
// same reply, byte for byte, for every verb.
func TestUnknownAndInvisibleRepoAreIndistinguishable(t *testing.T) {
	w := newWorld(t)
	for _, verb := range []string{"acquire %s 1", "renew %s 1 --ttl 60", "release %s 1", "list %s"} {
		secret := w.ssh("bob", "collab-lease "+fmt.Sprintf(verb, "acme/secret"))
		missing := w.ssh("bob", "collab-lease "+fmt.Sprintf(verb, "acme/nosuch"))
		if secret != missing || secret.code != 1 || secret.stderr != "error: repository not found\n" {
			t.Errorf("%s: private %+v vs unknown %+v", verb, secret, missing)
		}
	}
	if r := w.ssh("alice", "collab-lease acquire acme/secret 1"); r.code != 0 {
		t.Fatalf("alice may write the private repo: %+v", r)
	}
}

func TestUnknownKeyIsRefusedAtAuthentication(t *testing.T) {
	w := newWorld(t)
	r := w.ssh("mallory", "collab-lease help")
	if r.code != 255 || !strings.Contains(r.stderr, "Permission denied") {
		t.Fatalf("unknown key: %+v", r)
	}
}

func TestForgeDownMeansExit75AndNothingWritten(t *testing.T) {
	w := newWorld(t)
	w.forge.SetDown(true)
	for _, cmd := range []string{"collab-lease acquire acme/widgets 42", "collab-lease list acme/widgets"} {
		r := w.ssh("alice", cmd)
		if r.code != 75 || r.stderr != "error: forge unavailable, try again\n" || r.stdout != "" {
			t.Fatalf("%s with the forge down: %+v", cmd, r)
		}
	}
	if r := w.ssh("alice", "collab-lease help"); r.code != 0 {
		t.Fatalf("help needs no forge: %+v", r)
	}
	if n, err := w.ledger.CountLive(context.Background()); err != nil || n != 0 {
		t.Fatalf("a command wrote while the forge was down: %d live (%v)", n, err)
	}
	w.forge.SetDown(false)
	if r := w.ssh("alice", "collab-lease acquire acme/widgets 42"); r.code != 0 {
		t.Fatalf("after the forge is back: %+v", r)
	}
}

func TestShellPtyAndForwardingAreRefused(t *testing.T) {
	w := newWorld(t)
	// Interactive login: a greeting naming the user, the usage, exit 1.
	r := w.ssh("alice")
	if r.code != 1 || !strings.Contains(r.stderr, "Hi alice!") || !strings.Contains(r.stderr, "collab-lease acquire") {
		t.Fatalf("interactive login: %+v", r)
	}
	// A pty is refused (OpenSSH then gives up, as -t makes it fatal).
	r = w.ssh("alice", "-tt", "--", "collab-lease help")
	if r.code != 255 || r.stdout != "" || !strings.Contains(r.stderr, "PTY allocation request failed") {
		t.Fatalf("pty request: %+v", r)
	}
	// Remote port forwarding is refused.
	r = w.ssh("alice", "-o", "ExitOnForwardFailure=yes", "-R", "127.0.0.1:0:127.0.0.1:9", "--", "collab-lease help")
	if r.code != 255 || !strings.Contains(r.stderr, "forwarding failed") {
		t.Fatalf("remote forward: %+v", r)
	}

	// With a programmatic client: shell, subsystem, env, agent and
	// direct-tcpip all fail.
	client := w.dial(t, "alice")
	defer client.Close()
	if _, err := client.Dial("tcp", w.addr.String()); err == nil {
		t.Fatal("direct-tcpip channel accepted")
	}
	sess, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.RequestPty("xterm", 24, 80, gossh.TerminalModes{}); err == nil {
		t.Fatal("pty request accepted")
	}
	if err := sess.Setenv("LD_PRELOAD", "x"); err == nil {
		t.Fatal("env request accepted")
	}
	if ok, _ := sess.SendRequest("auth-agent-req@openssh.com", true, nil); ok {
		t.Fatal("agent forwarding accepted")
	}
	if err := sess.RequestSubsystem("sftp"); err == nil {
		t.Fatal("subsystem accepted")
	}
	sess.Close()
}

func (w *world) dial(t *testing.T, user string) *gossh.Client {
	t.Helper()
	client, err := w.tryDial(user)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// tryDial opens an authenticated x/crypto/ssh client connection as user.
func (w *world) tryDial(user string) (*gossh.Client, error) {
	pemBytes, err := os.ReadFile(w.keys[user].path)
	if err != nil {
		return nil, err
	}
	signer, err := gossh.ParsePrivateKey(pemBytes)
	if err != nil {
		return nil, err
	}
	return gossh.Dial("tcp", w.addr.String(), &gossh.ClientConfig{
		User: "git", Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: gossh.FixedHostKey(w.srv.HostKey.PublicKey()), Timeout: 10 * time.Second,
	})
}

// Fifty real ssh processes race for one issue: exactly one wins.
func TestFiftySSHClientsRaceForOneIssue(t *testing.T) {
	w := newWorld(t)
	users := []string{"alice", "bob"}
	for i := 0; i < 48; i++ {
		name := fmt.Sprintf("agent%02d", i)
		k := newTestKey(t, w.dir, name)
		w.keys[name] = k
		w.forge.AddUser(name)
		w.forge.AddKey(name, k.fp)
		w.forge.Grant("acme/widgets", name, forgetest.Write)
		users = append(users, name)
	}
	results := make([]result, len(users))
	var wg sync.WaitGroup
	for i, u := range users {
		wg.Add(1)
		go func(i int, u string) {
			defer wg.Done()
			results[i] = w.ssh(u, "collab-lease acquire acme/widgets 43 --ttl 10m")
		}(i, u)
	}
	wg.Wait()
	won, held := 0, 0
	for i, r := range results {
		switch r.code {
		case 0:
			won++
		case 4:
			held++
		default:
			t.Errorf("%s: %+v", users[i], r)
		}
	}
	if won != 1 || held != 49 {
		t.Fatalf("won %d, held %d; want 1 and 49", won, held)
	}
}

// Restarting keeps the host key (known_hosts still matches) and the leases.
func TestRestartKeepsHostKeyAndLeases(t *testing.T) {
	w := newWorld(t)
	if r := w.ssh("alice", "collab-lease acquire acme/widgets 42"); r.code != 0 {
		t.Fatal(r)
	}
	st, err := os.Stat(w.hostKey)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("host key mode: %v %v", st, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-w.serveErr; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve returned %v", err)
	}
	w.start(w.addr.String())
	r := w.ssh("bob", "collab-lease acquire acme/widgets 42")
	if r.code != 4 || decode(t, r.stdout)["holder"] != "alice" {
		t.Fatalf("after restart: %+v", r)
	}
}

// Shutdown lets a running command finish and reply, then Serve returns.
func TestShutdownLetsRunningCommandFinish(t *testing.T) {
	w := newWorld(t)
	block, entered := make(chan struct{}), make(chan struct{}, 1)
	w.forge.SetHook(func(ctx context.Context, method string) error {
		if method != "Repo" {
			return nil
		}
		entered <- struct{}{}
		select {
		case <-block:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("slow: %w", forge.ErrUnavailable)
		}
	})
	done := make(chan result, 1)
	go func() { done <- w.ssh("alice", "collab-lease acquire acme/widgets 42") }()
	<-entered // the command is inside the forge call
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- w.srv.Shutdown(ctx)
	}()
	// New connections are refused once shutdown has begun.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", w.addr.String())
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("listener still accepting after Shutdown")
		}
		time.Sleep(5 * time.Millisecond) // polling for readiness, not waiting for time
	}
	close(block)
	r := <-done
	if r.code != 0 || decode(t, r.stdout)["status"] != "acquired" {
		t.Fatalf("in-flight command: %+v", r)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func TestOneLogLinePerCommandWithoutKeyMaterial(t *testing.T) {
	w := newWorld(t)
	w.ssh("alice", "collab-lease acquire acme/widgets 42 --ttl 1h")
	w.ssh("bob", "collab-lease acquire acme/widgets 42")
	// Poll: the log line is written just after the reply is sent.
	deadline := time.Now().Add(5 * time.Second)
	var logs string
	for time.Now().Before(deadline) {
		logs = w.logs.String()
		if strings.Count(logs, "msg=collab-lease") >= 2 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	var cmds []string
	for _, l := range lines {
		if strings.Contains(l, "msg=collab-lease") {
			cmds = append(cmds, l)
		}
	}
	if len(cmds) != 2 || !strings.Contains(cmds[0], "user=alice verb=acquire outcome=acquired exit=0") ||
		!strings.Contains(cmds[1], "user=bob verb=acquire outcome=held exit=4") || !strings.Contains(cmds[1], "repo=acme/widgets issue=42") {
		t.Fatalf("log lines:\n%s", logs)
	}
	if strings.Contains(logs, "ssh-ed25519") || strings.Contains(logs, "PRIVATE KEY") {
		t.Fatalf("key material in logs:\n%s", logs)
	}
}

// One connection may hold at most MaxSessions sessions, and a session that
// asks for nothing is closed after SessionStartTimeout.
func TestSessionLimits(t *testing.T) {
	w := newWorld(t, func(s *Server) { s.MaxSessions = 3; s.SessionStartTimeout = 200 * time.Millisecond })
	client := w.dial(t, "alice")
	defer client.Close()
	var sessions []*gossh.Session
	for i := 0; i < 3; i++ {
		sess, err := client.NewSession()
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		sessions = append(sessions, sess)
	}
	if _, err := client.NewSession(); err == nil {
		t.Fatal("a fourth session was accepted")
	}
	// The idle ones are closed by the server; then there is room again.
	for i, sess := range sessions {
		done := make(chan error, 1)
		go func() { done <- sess.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("idle session %d was not closed", i)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		sess, err := client.NewSession()
		if err == nil {
			out, err := sess.Output("collab-lease help")
			if err != nil || string(out) != contract.Usage {
				t.Fatalf("help after the idle sessions closed: %q %v", out, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no room for a session after the idle ones closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Connections that never finish the handshake cannot lock others out: past
// MaxStartups the oldest is evicted, and a real client still gets in.
func TestStalledHandshakesDoNotLockOthersOut(t *testing.T) {
	w := newWorld(t, func(s *Server) { s.MaxStartups = 8; s.MaxConns = 64; s.MaxConnsPerAddr = 1000 })
	var (
		mu      sync.Mutex
		stalled []net.Conn
	)
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range stalled {
			c.Close()
		}
	}()
	dial := func(n int) {
		for i := 0; i < n; i++ {
			c, err := net.Dial("tcp", w.addr.String())
			if err != nil {
				return // refused: fine, the server protects itself
			}
			mu.Lock()
			stalled = append(stalled, c)
			mu.Unlock()
		}
	}
	dial(200)
	r := w.ssh("alice", "collab-lease acquire acme/widgets 42")
	if r.code != 0 {
		t.Fatalf("a real client among stalled ones: %+v\n%s", r, w.logs.String())
	}
	w.srv.mu.Lock()
	n := w.srv.startups.Len()
	w.srv.mu.Unlock()
	if n > 8 {
		t.Fatalf("%d connections in the handshake, above MaxStartups 8", n)
	}
}

// lookupGate holds the forge's key lookups until released, counting how
// many wait at once (a forgetest.Hook).
type lookupGate struct {
	mu        sync.Mutex
	now, peak int
	release   chan struct{}
}

func newLookupGate() *lookupGate { return &lookupGate{release: make(chan struct{})} }

func (g *lookupGate) hook(ctx context.Context, method string) error {
	if method != "UserByKey" {
		return nil
	}
	g.mu.Lock()
	g.now++
	g.peak = max(g.peak, g.now)
	g.mu.Unlock()
	defer func() { g.mu.Lock(); g.now--; g.mu.Unlock() }()
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("slow forge: %w", forge.ErrUnavailable)
	}
}

// waiting is how many key lookups the gate holds now.
func (g *lookupGate) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.now
}

// Unknown keys cannot flood the forge: at most MaxKeyLookups at once.
func TestKeyLookupsAreCapped(t *testing.T) {
	gate := newLookupGate()
	w := newWorld(t, func(s *Server) {
		s.MaxKeyLookups = 3
		s.HandshakeTimeout = 5 * time.Second
	})
	w.forge.SetHook(gate.hook)
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); w.ssh("mallory", "collab-lease help") }()
	}
	// Wait until lookups are waiting, then let them all through.
	deadline := time.Now().Add(10 * time.Second)
	for gate.waiting() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(gate.release)
	wg.Wait()
	gate.mu.Lock()
	defer gate.mu.Unlock()
	if gate.peak != 3 {
		t.Fatalf("peak concurrent key lookups %d, want exactly the cap 3", gate.peak)
	}
}

// A reader limited to the Issues unit does not see leases on pull
// requests in list. (Of a private repository: a public one's pull
// requests are everyone's to read.)
func TestListHidesPullRequestsFromIssuesOnlyReaders(t *testing.T) {
	w := newWorld(t)
	w.forge.AddIssue("acme/secret", 2, true, false) // a pull request
	w.forge.Grant("acme/secret", "bob", forgetest.Read)
	w.forge.Grant("acme/secret", "carol", forgetest.IssuesOnly)
	if r := w.ssh("alice", "collab-lease acquire acme/secret 1"); r.code != 0 {
		t.Fatal(r)
	}
	if r := w.ssh("alice", "collab-lease acquire acme/secret 2"); r.code != 0 {
		t.Fatal(r)
	}
	var all, limited contract.List
	_ = json.Unmarshal([]byte(w.ssh("bob", "collab-lease list acme/secret").stdout), &all)
	r := w.ssh("carol", "collab-lease list acme/secret")
	if err := json.Unmarshal([]byte(r.stdout), &limited); err != nil {
		t.Fatalf("carol's list: %+v", r)
	}
	if len(all.Leases) != 2 || len(limited.Leases) != 1 || limited.Leases[0].Issue != 1 {
		t.Fatalf("bob sees %+v, carol (issues only) sees %+v", all.Leases, limited.Leases)
	}
}

// When key lookups stay saturated past the handshake deadline, a client is
// let in to be told to retry (exit 75), as when the forge is unreachable.
func TestSaturatedKeyLookupsAnswerRetry(t *testing.T) {
	gate := newLookupGate()
	w := newWorld(t, func(s *Server) {
		s.MaxKeyLookups = 1
		s.HandshakeTimeout = 2 * time.Second
	})
	w.forge.SetHook(gate.hook)
	// One lookup holds the only slot until released.
	blocked := make(chan result, 1)
	go func() { blocked <- w.ssh("bob", "collab-lease help") }()
	deadline := time.Now().Add(10 * time.Second)
	for gate.waiting() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the first lookup never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r := w.ssh("alice", "collab-lease acquire acme/widgets 42")
	close(gate.release)
	if r.code != 75 || r.stderr != "error: forge unavailable, try again\n" {
		t.Fatalf("with key lookups saturated: %+v", r)
	}
	if b := <-blocked; b.code != 0 && b.code != 75 {
		t.Fatalf("the lookup that held the slot: %+v", b)
	}
	if n, err := w.ledger.CountLive(context.Background()); err != nil || n != 0 {
		t.Fatalf("a command ran without a verified identity: %d live (%v)", n, err)
	}
}

// unsignedKey offers a key but cannot sign with it: what anyone holding
// only a published public key (Gitea serves /<user>.keys) can do.
type unsignedKey struct{ gossh.Signer }

func (unsignedKey) Sign(io.Reader, []byte) (*gossh.Signature, error) {
	return nil, errors.New("no private key")
}

// A key that is only offered, never signed with, costs no lookup at the
// forge: nobody can test published keys against the sidecar, or make it
// ask Gitea, without holding the private key.
func TestOfferedKeysAreNotLookedUp(t *testing.T) {
	w := newWorld(t)
	pemBytes, err := os.ReadFile(w.keys["alice"].path)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.ParsePrivateKey(pemBytes)
	if err != nil {
		t.Fatal(err)
	}
	before := w.forge.Calls("UserByKey")
	_, err = gossh.Dial("tcp", w.addr.String(), &gossh.ClientConfig{
		User: "git", Auth: []gossh.AuthMethod{gossh.PublicKeys(unsignedKey{signer})},
		HostKeyCallback: gossh.FixedHostKey(w.srv.HostKey.PublicKey()), Timeout: 10 * time.Second,
	})
	if err == nil {
		t.Fatal("logged in without a signature")
	}
	if got := w.forge.Calls("UserByKey") - before; got != 0 {
		t.Fatalf("an offered, unsigned key cost %d lookups at the forge, want none", got)
	}
	// The same key, signed, is looked up and works.
	if r := w.ssh("alice", "collab-lease help"); r.code != 0 {
		t.Fatalf("a signed key: %+v", r)
	}
}
