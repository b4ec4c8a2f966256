package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// The session tests run git collab against fakeSidecar, a sidecar of
// sessions in the test process that speaks the session protocol of
// docs/ssh.md: git collab runs its ssh command as it always does, and the
// command is this test binary as a relay (fakeSSH) that connects to the
// fake sidecar over loopback TCP and carries the exec's stdin, stdout,
// stderr and exit status. So a test sees each ssh run as one connection,
// can answer, send lost lines and drop the connection when it likes, and
// git collab sees a real process that ends as ssh would.

// relayEnv names the fake sidecar's address for the relay.
const relayEnv = "GIT_COLLAB_TEST_SIDECAR"

// asGitCollabEnv makes the test binary git-collab itself, for the
// commands git collab run runs in the tests.
const asGitCollabEnv = "GIT_COLLAB_TEST_AS_GIT_COLLAB"

func TestMain(m *testing.M) {
	if addr := os.Getenv(relayEnv); addr != "" {
		os.Exit(relaySSH(addr, os.Args[1:]))
	}
	if os.Getenv(asGitCollabEnv) != "" {
		main()
	}
	// Short enough that the tests wait for them, long enough to tell.
	killDelay = 300 * time.Millisecond
	resumeBackoff = 20 * time.Millisecond
	closeWait = 2 * time.Second
	os.Exit(m.Run())
}

// relaySSH is the relay: it sends its arguments, then stdin, to the fake
// sidecar, and prints what comes back: "1 <line>" on stdout, "2 <line>"
// on stderr, "x <n>" ends with exit status n. A connection that ends
// without "x" is a dropped one: exit 255, as ssh's.
func relaySSH(addr string, args []string) int {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ssh: connect to host %s: %v\n", addr, err)
		return 255
	}
	b, _ := json.Marshal(args)
	conn.Write(append(b, '\n'))
	go func() {
		io.Copy(conn, os.Stdin)
		conn.(*net.TCPConn).CloseWrite()
	}()
	sc := bufio.NewScanner(conn)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		kind, text, _ := strings.Cut(sc.Text(), " ")
		switch kind {
		case "1":
			fmt.Fprintln(os.Stdout, text)
		case "2":
			fmt.Fprintln(os.Stderr, text)
		case "x":
			n, _ := strconv.Atoi(text)
			return n
		}
	}
	fmt.Fprintln(os.Stderr, "Connection to sidecar closed by remote host.")
	return 255
}

// fakeSidecar serves sessions with a small ledger of its own: acquire
// and next claim (next takes issue nextIssue), release releases, check
// compares tokens, list lists the caller's session's claims, merge merges
// a pull request the session holds; reserve, unreserve and reservations
// keep the sessions' reservations, which end with their claims, and
// check lists a claim's. Tests change
// its answers through its fields, under mu, and with reply.
type fakeSidecar struct {
	t  *testing.T
	ln net.Listener

	mu       sync.Mutex
	execs    [][]string // the arguments of every ssh run, in order
	conns    []*fakeConn
	sessions map[string]*fakeSession
	lines    []string // every command line received, in order
	token    int64
	// open, if set, answers an exec before the session opens: an exit
	// status (and stderr line) that ends it at once, or 0 to go on.
	open func(remote string) (code int, stderr string)
	// refuseResume answers every --resume with session_gone.
	refuseResume bool
	held         map[int64]bool // acquire answers held
	// bobs are the globs bob/b1 has reserved for acme/widgets#12: a
	// reserve of one of them answers conflict.
	bobs      map[string]bool
	nextIssue int64 // 0: next answers none
	grace     int   // grace_seconds; 30 if 0
	// reply, if set, answers a command line instead of the ledger; ok
	// false leaves it to the ledger.
	reply func(line string) (answer string, ok bool)
	// hold, if set, keeps a command's answer until it is closed.
	hold chan struct{}
}

type fakeSession struct {
	id, agent string
	conn      *fakeConn
	claims    map[int64]int64 // issue -> token
	reserved  []fakeReservation
}

// fakeReservation is one glob a session reserved, with its claim's issue
// (0: the session's own).
type fakeReservation struct {
	glob   string
	issue  int64
	shared bool
}

// json is r as replies show it, held by alice as agent (JSON).
func (r fakeReservation) json(agent string) string {
	issue := "null"
	if r.issue != 0 {
		issue = strconv.FormatInt(r.issue, 10)
	}
	return fmt.Sprintf(`{"glob":%q,"shared":%t,"holder":"alice","agent":%s,"issue":%s,"expires_at":null}`, r.glob, r.shared, agent, issue)
}

// shown are the session's reservations for which pick is true, as
// replies show them, held by alice as agent (JSON).
func (s *fakeSession) shown(agent string, pick func(fakeReservation) bool) string {
	var out []string
	for _, r := range s.reserved {
		if pick(r) {
			out = append(out, r.json(agent))
		}
	}
	return "[" + strings.Join(out, ",") + "]"
}

// drop ends the session's reservations for which pick is true.
func (s *fakeSession) drop(pick func(fakeReservation) bool) {
	s.reserved = slices.DeleteFunc(s.reserved, pick)
}

// fakeConn is one ssh run.
type fakeConn struct {
	args []string
	c    net.Conn
	mu   sync.Mutex
	sess *fakeSession
	done chan struct{}
	// dropped: the connection failed; its session lives on.
	dropped atomic.Bool
}

func (c *fakeConn) send(kind, text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.c, "%s %s\n", kind, text)
}

// drop ends the connection as a network failure would.
func (c *fakeConn) drop() {
	c.dropped.Store(true)
	c.c.Close()
}

// newFakeSidecar starts one, and points h's ssh at it.
func newFakeSidecar(t *testing.T, h *harness) *fakeSidecar {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeSidecar{t: t, ln: ln, sessions: map[string]*fakeSession{}, held: map[int64]bool{}, bobs: map[string]bool{}}
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, c := range f.conns {
			c.c.Close()
		}
	})
	go f.serve()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A race-enabled binary waits a second before it exits, unless told.
	h.setenv("COLLAB_SSH_COMMAND=GORACE=atexit_sleep_ms=0 " + relayEnv + "=" + ln.Addr().String() + " " + shellQuote(bin) + " -o Fake=yes")
	return f
}

func (f *fakeSidecar) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		go f.handle(c)
	}
}

func (f *fakeSidecar) handle(nc net.Conn) {
	r := bufio.NewReader(nc)
	first, err := r.ReadString('\n')
	if err != nil {
		nc.Close()
		return
	}
	c := &fakeConn{c: nc, done: make(chan struct{})}
	defer close(c.done)
	json.Unmarshal([]byte(first), &c.args)
	f.mu.Lock()
	f.execs = append(f.execs, c.args)
	f.conns = append(f.conns, c)
	open := f.open
	f.mu.Unlock()
	remote := c.args[len(c.args)-1]
	if open != nil {
		if code, stderr := open(remote); code != 0 || stderr != "" {
			if stderr != "" {
				c.send("2", stderr)
			}
			c.send("x", strconv.Itoa(code))
			nc.Close()
			return
		}
	}
	if !f.start(c, remote) {
		nc.Close()
		return
	}
	for {
		line, err := r.ReadString('\n')
		line = strings.TrimRight(line, "\n")
		if err != nil || line == "close" {
			f.end(c)
			c.send("x", "0")
			nc.Close()
			return
		}
		f.mu.Lock()
		f.lines = append(f.lines, line)
		hold := f.hold
		f.mu.Unlock()
		if hold != nil {
			<-hold
		}
		c.send("1", f.answer(c, line))
	}
}

// start opens or resumes the session the exec asks for, and writes its
// first line.
func (f *fakeSidecar) start(c *fakeConn, remote string) bool {
	words, err := contract.SplitWords(remote)
	if err != nil || len(words) < 2 || words[0] != "collab-lease" || words[1] != "session" {
		c.send("2", "error: usage: not a session exec: "+remote)
		c.send("x", "1")
		return false
	}
	opts := map[string]string{}
	for i := 2; i+1 < len(words); i += 2 {
		opts[words[i]] = words[i+1]
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	grace := f.grace
	if grace == 0 {
		grace = 30
	}
	agent := "null"
	if a := opts["--agent"]; a != "" {
		agent = strconv.Quote(a)
	}
	if id := opts["--resume"]; id != "" {
		s := f.sessions[id]
		if f.refuseResume || s == nil || s.agent != opts["--agent"] {
			c.send("1", fmt.Sprintf(`{"status":"session_gone","session":%q}`, id))
			c.send("x", "4")
			return false
		}
		if old := s.conn; old != nil {
			old.send("2", "error: session resumed elsewhere")
			old.send("x", "75")
			old.c.Close()
		}
		s.conn, c.sess = c, s
		var leases []string
		for issue, token := range s.claims {
			leases = append(leases, fmt.Sprintf(`{"repo":"acme/widgets","issue":%d,"holder":"alice","agent":%s,"token":%d,"acquired_at":"2026-09-05T11:35:00Z","expires_at":null}`,
				issue, agent, token))
		}
		c.send("1", fmt.Sprintf(`{"status":"session","session":%q,"holder":"alice","agent":%s,"grace_seconds":%d,"leases":[%s]}`,
			id, agent, grace, strings.Join(leases, ",")))
		return true
	}
	id := fmt.Sprintf("s-%d", len(f.sessions)+1)
	s := &fakeSession{id: id, agent: opts["--agent"], conn: c, claims: map[int64]int64{}}
	f.sessions[id], c.sess = s, s
	c.send("1", fmt.Sprintf(`{"status":"session","session":%q,"holder":"alice","agent":%s,"grace_seconds":%d}`, id, agent, grace))
	return true
}

// end is a clean end: the session's claims are released.
func (f *fakeSidecar) end(c *fakeConn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.sess != nil && c.sess.conn == c && !c.dropped.Load() {
		c.sess.claims = map[int64]int64{}
		delete(f.sessions, c.sess.id)
	}
}

// answer is the ledger's reply line to one command, with its "exit".
func (f *fakeSidecar) answer(c *fakeConn, line string) string {
	f.mu.Lock()
	reply := f.reply
	f.mu.Unlock()
	if reply != nil {
		if a, ok := reply(line); ok {
			return a
		}
	}
	cmd, err := contract.ParseCommand("collab-lease "+line, 0)
	if err != nil {
		return fmt.Sprintf(`{"status":"error","exit":1,"error":%q}`, err.Error())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := c.sess
	agent := "null"
	if s.agent != "" {
		agent = strconv.Quote(s.agent)
	}
	acquired := func(issue, token int64) string {
		return fmt.Sprintf(`{"status":"acquired","repo":"acme/widgets","issue":%d,"holder":"alice","agent":%s,"token":%d,"acquired_at":"2026-09-05T11:35:00Z","expires_at":"2026-09-05T12:05:00Z","exit":0}`,
			issue, agent, token)
	}
	switch cmd.Verb {
	case contract.VerbAcquire:
		if f.held[cmd.Issue] {
			return fmt.Sprintf(`{"status":"held","repo":"acme/widgets","issue":%d,"holder":"bob","agent":null,"expires_at":"2026-09-05T12:05:00Z","exit":4}`, cmd.Issue)
		}
		if _, ok := s.claims[cmd.Issue]; !ok {
			f.token++
			s.claims[cmd.Issue] = f.token
		}
		return acquired(cmd.Issue, s.claims[cmd.Issue])
	case contract.VerbNext:
		if f.nextIssue == 0 {
			return `{"status":"none","repo":"acme/widgets","exit":4}`
		}
		f.token++
		s.claims[f.nextIssue] = f.token
		return acquired(f.nextIssue, f.token)
	case contract.VerbRelease:
		delete(s.claims, cmd.Issue)
		s.drop(func(r fakeReservation) bool { return r.issue == cmd.Issue })
		return fmt.Sprintf(`{"status":"released","repo":"acme/widgets","issue":%d,"exit":0}`, cmd.Issue)
	case contract.VerbCheck:
		if token, ok := s.claims[cmd.Issue]; ok && token == cmd.Token {
			return fmt.Sprintf(`{"status":"current","repo":"acme/widgets","issue":%d,"holder":"alice","agent":%s,"token":%d,"acquired_at":"2026-09-05T11:35:00Z","expires_at":null,"reservations":%s,"exit":0}`,
				cmd.Issue, agent, token, s.shown(agent, func(r fakeReservation) bool { return r.issue == cmd.Issue }))
		}
		return fmt.Sprintf(`{"status":"stale","repo":"acme/widgets","issue":%d,"token":null,"exit":4}`, cmd.Issue)
	case contract.VerbMerge:
		// Merged under the pull request's own claim, which the merge
		// ends; the claims of the issues it closes are the test's to
		// lose.
		token, ok := s.claims[cmd.Issue]
		if !ok {
			return fmt.Sprintf(`{"status":"not_holder","repo":"acme/widgets","issue":%d,"holder":null,"agent":null,"expires_at":null,"exit":4}`, cmd.Issue)
		}
		delete(s.claims, cmd.Issue)
		return fmt.Sprintf(`{"status":"merged","repo":"acme/widgets","pull":%d,"sha":"6f1c0e2d","issue":%d,"token":%d,"exit":0}`, cmd.Issue, cmd.Issue, token)
	case contract.VerbReserve:
		var with []string
		for _, g := range cmd.Globs {
			if f.bobs[g] {
				with = append(with, fmt.Sprintf(`{"glob":%q,"shared":false,"holder":"bob","agent":"b1","issue":12,"expires_at":"2026-09-05T12:05:00Z"}`, g))
			}
		}
		if len(with) > 0 {
			return `{"status":"conflict","repo":"acme/widgets","with":[` + strings.Join(with, ",") + `],"exit":4}`
		}
		if _, ok := s.claims[cmd.Issue]; cmd.Issue != 0 && !ok {
			return fmt.Sprintf(`{"status":"not_holder","repo":"acme/widgets","issue":%d,"holder":null,"agent":null,"expires_at":null,"exit":4}`, cmd.Issue)
		}
		given := func(r fakeReservation) bool { return slices.Contains(cmd.Globs, r.glob) }
		s.drop(given)
		for _, g := range cmd.Globs {
			s.reserved = append(s.reserved, fakeReservation{glob: g, issue: cmd.Issue, shared: cmd.Shared})
		}
		return `{"status":"reserved","repo":"acme/widgets","reservations":` + s.shown(agent, given) + `,"exit":0}`
	case contract.VerbUnreserve:
		named := func(r fakeReservation) bool {
			return (len(cmd.Globs) == 0 || slices.Contains(cmd.Globs, r.glob)) && (cmd.Issue == 0 || r.issue == cmd.Issue)
		}
		removed := s.shown(agent, named)
		s.drop(named)
		return `{"status":"unreserved","repo":"acme/widgets","reservations":` + removed + `,"exit":0}`
	case contract.VerbReservations:
		all := s.shown(agent, func(fakeReservation) bool { return true })
		return `{"status":"reservations","repo":"acme/widgets","reservations":` + all + `,"exit":0}`
	case contract.VerbList:
		var leases []string
		for issue, token := range s.claims {
			leases = append(leases, fmt.Sprintf(`{"issue":%d,"holder":"alice","agent":%s,"token":%d,"acquired_at":"2026-09-05T11:35:00Z","expires_at":null}`, issue, agent, token))
		}
		return `{"repo":"acme/widgets","leases":[` + strings.Join(leases, ",") + `],"exit":0}`
	}
	return `{"status":"error","exit":1,"error":"not in the fake sidecar"}`
}

// set changes the fake's answers.
func (f *fakeSidecar) set(change func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change()
}

// lose ends a claim of the session as something else would, and says so
// on the session's connection.
func (f *fakeSidecar) lose(issue int64, endedBy string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.sessions {
		if token, ok := s.claims[issue]; ok {
			delete(s.claims, issue)
			s.drop(func(r fakeReservation) bool { return r.issue == issue })
			if s.conn != nil {
				s.conn.send("1", fmt.Sprintf(`{"status":"lost","repo":"acme/widgets","issue":%d,"token":%d,"ended_by":%q}`, issue, token, endedBy))
			}
		}
	}
}

// conn waits for the n-th ssh run (from 1) to connect.
func (f *fakeSidecar) conn(n int) *fakeConn {
	f.t.Helper()
	var c *fakeConn
	waitFor(f.t, fmt.Sprintf("ssh run %d", n), func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.conns) >= n {
			c = f.conns[n-1]
			return true
		}
		return false
	})
	return c
}

// runs is how many times ssh ran.
func (f *fakeSidecar) runs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.execs)
}

// received are the command lines received so far.
func (f *fakeSidecar) received() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.lines...)
}

// claimed reports whether any session holds issue.
func (f *fakeSidecar) claimed(issue int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.sessions {
		if _, ok := s.claims[issue]; ok {
			return true
		}
	}
	return false
}

// waitFor polls cond until it holds, or fails the test after a while.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
