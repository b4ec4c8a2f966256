package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// The command `git collab run` runs often calls git collab itself, most
// often `git collab check` right before each push and the merge. Those
// calls ride run's session instead of an ssh of their own: run listens on
// a Unix socket in a directory only its user may enter, names it in
// COLLAB_RUN_SOCKET, and sends each line it is given over the session it
// already holds. A check then costs no ssh process and no handshake.
//
// Only the verbs that read ride it (check, list, history, reservations),
// and only for the sidecar and agent of the run: a claim or a
// reservation made over the session would live as long as the session
// does, not as its --ttl says. Anything the
// socket does not answer (another sidecar, another verb, a run that has
// ended, a session that is reconnecting) goes over ssh as before. A caller
// rides only if the socket's directory is its own user's and no one
// else's to enter: once run has ended, another user must not be able to
// put a socket of theirs where the name points and answer "current".

// runSocketEnv names run's socket in its command's environment.
const runSocketEnv = "COLLAB_RUN_SOCKET"

// runRequest is one line a command asks run to send.
type runRequest struct {
	Sidecar string `json:"sidecar"` // user@host:port of the sidecar it is meant for
	Agent   string `json:"agent"`   // the agent it acts as
	Line    string `json:"line"`    // the session line
	// Own: a check of run's own claim (git collab check with no
	// arguments), meant for run's sidecar whatever the caller's checkout
	// says, so the caller need not read its git remote and config first.
	// Run answers it only for its claim's repository and issue.
	Own bool `json:"own,omitempty"`
}

// runClaim is the claim a run holds: what a check of its own may ask about.
type runClaim struct {
	repo  string // owner/name
	issue int64
}

// runAnswer is the session's answer, or why run did not send it.
type runAnswer struct {
	Exit int    `json:"exit"`
	Body string `json:"body,omitempty"` // the answer line
	Said string `json:"said,omitempty"` // the error line of an exit 1 or 75
	// Refused: nothing was sent; the caller uses ssh.
	Refused string `json:"refused,omitempty"`
}

// ridingVerbs are the verbs that may ride a run's session.
var ridingVerbs = []contract.Verb{contract.VerbCheck, contract.VerbList, contract.VerbHistory, contract.VerbReservations}

// rideWait bounds one command that rides a run's session, from the caller's side and run's.
var rideWait = time.Minute

// rideLimit bounds a request line (a command line is at most 4096 bytes);
// answerLimit an answer (a session's answer line, escaped, and more).
const (
	rideLimit   = 3 * contract.MaxCommandLen
	answerLimit = 32 << 20
)

// sidecarKey is how a request names the sidecar it is meant for.
func sidecarKey(sc Sidecar) string { return sc.User + "@" + sc.Addr() }

// serveRiders listens for the commands of run's command and sends them
// over k, the session of agent on sidecar sc. It returns the environment
// entry that names the socket and the function that stops it; with no
// socket (a temporary directory that cannot be made, a path too long for
// one), the entry names none and the command's calls use ssh.
func serveRiders(k *keptSession, sc Sidecar, agent string, own runClaim) (env string, stop func()) {
	// An empty entry hides the socket of a run this one runs under.
	none := runSocketEnv + "="
	dir, err := os.MkdirTemp("", "git-collab-run-")
	if err != nil {
		return none, func() {}
	}
	path := filepath.Join(dir, "session")
	l, err := net.Listen("unix", path)
	if err != nil {
		os.RemoveAll(dir)
		return none, func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		open  = map[net.Conn]bool{}
		ended bool
	)
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				time.Sleep(acceptPause) // out of descriptors, say: the next may do
				continue
			}
			mu.Lock()
			if ended {
				mu.Unlock()
				c.Close()
				return
			}
			open[c] = true
			mu.Unlock()
			wg.Go(func() {
				defer func() {
					mu.Lock()
					delete(open, c)
					mu.Unlock()
					c.Close()
				}()
				answerRider(ctx, c, k, sidecarKey(sc), agent, own)
			})
		}
	})
	return runSocketEnv + "=" + path, func() {
		cancel()
		l.Close()
		mu.Lock()
		ended = true
		for c := range open {
			_ = c.SetDeadline(time.Now()) // a caller that never wrote keeps nobody waiting
		}
		mu.Unlock()
		os.RemoveAll(dir)
		wg.Wait()
	}
}

// checkedBy says whether line is a check of claim c.
func (c runClaim) checkedBy(line string) bool {
	cmd, err := contract.ParseCommand("collab-lease "+line, 0)
	return err == nil && cmd.Verb == contract.VerbCheck && cmd.Owner+"/"+cmd.Name == c.repo && cmd.Issue == c.issue
}

// acceptPause is the pause after a failed accept.
const acceptPause = 50 * time.Millisecond

// answerRider answers one connection to run's socket: one request, one answer.
func answerRider(ctx context.Context, c net.Conn, k *keptSession, sidecar, agent string, own runClaim) {
	_ = c.SetDeadline(time.Now().Add(rideWait))
	answer := func(a runAnswer) {
		b, _ := json.Marshal(a)
		_, _ = c.Write(append(b, '\n'))
	}
	line, err := bufio.NewReader(io.LimitReader(c, rideLimit)).ReadBytes('\n')
	if err != nil {
		return
	}
	var req runRequest
	if err := json.Unmarshal(line, &req); err != nil {
		answer(runAnswer{Refused: "not a request"})
		return
	}
	verb, _, _ := strings.Cut(req.Line, " ")
	switch {
	case req.Own && !own.checkedBy(req.Line):
		answer(runAnswer{Refused: "not a check of this run's claim"})
		return
	case !req.Own && req.Sidecar != sidecar:
		answer(runAnswer{Refused: "another sidecar"})
		return
	case req.Agent != agent:
		answer(runAnswer{Refused: "another agent"})
		return
	case !slices.Contains(ridingVerbs, contract.Verb(verb)) || strings.ContainsAny(req.Line, "\r\n"):
		answer(runAnswer{Refused: "not a command that reads"})
		return
	}
	if !k.Connected() {
		// Reconnecting: the caller asks over ssh rather than wait.
		answer(runAnswer{Refused: "the session is reconnecting"})
		return
	}
	ctx, cancel := context.WithTimeout(ctx, rideWait)
	defer cancel()
	r, err := k.Do(ctx, req.Line, nil)
	if err != nil {
		// A read may be sent again: the caller asks over ssh.
		answer(runAnswer{Refused: err.Error()})
		return
	}
	answer(runAnswer{Exit: r.code, Body: string(r.body), Said: r.said})
}

// rideRun sends command v over the session of the git collab run this
// process runs under, if it may (see the top of this file); ok is false
// when the caller must send it over ssh. The exchange is as ssh's would
// be: the exec's stdout, and the sidecar's error line on stderr.
func (a *app) rideRun(ctx context.Context, t target, v contract.Verb, issue int64, flags []Flag, stderr io.Writer) (x exchange, ok bool) {
	path := a.getenv(runSocketEnv)
	if path == "" || !slices.Contains(ridingVerbs, v) || !privateDir(filepath.Dir(path)) {
		return exchange{}, false
	}
	agent := a.getenv("COLLAB_AGENT")
	var rest []Flag
	for _, f := range flags {
		if f.Name == "--agent" {
			agent = f.Value
			continue
		}
		rest = append(rest, f)
	}
	line, req, err := sessionLine(v, t.repo, issue, rest)
	if err != nil {
		return exchange{}, false // ssh's path says what is wrong with it
	}
	return a.askRunExchange(ctx, path, runRequest{Sidecar: sidecarKey(t.sidecar), Agent: agent, Line: line}, req, stderr)
}

// rideOwnCheck sends inv, a check of the claim of the git collab run this
// process runs under (runsClaim), over run's session without reading the
// checkout's remote and config first: the claim is run's, and so is the
// sidecar. ok is false when the caller must go the usual way.
func (a *app) rideOwnCheck(ctx context.Context, inv Invocation, stderr io.Writer) (x exchange, ok bool) {
	path := a.getenv(runSocketEnv)
	if path == "" || inv.Repo == "" || !privateDir(filepath.Dir(path)) {
		return exchange{}, false
	}
	agent := a.getenv("COLLAB_AGENT")
	var rest []Flag
	for _, f := range inv.Flags {
		if f.Name == "--agent" {
			agent = f.Value
			continue
		}
		rest = append(rest, f)
	}
	line, req, err := sessionLine(contract.VerbCheck, inv.Repo, inv.Issue, rest)
	if err != nil {
		return exchange{}, false
	}
	return a.askRunExchange(ctx, path, runRequest{Agent: agent, Line: line, Own: true}, req, stderr)
}

// askRunExchange asks run's socket at path and makes its answer the
// exchange ssh's would have been; ok is false if run did not send it.
func (a *app) askRunExchange(ctx context.Context, path string, r runRequest, req contract.Command, stderr io.Writer) (x exchange, ok bool) {
	ans, err := askRun(ctx, path, r)
	if err != nil || ans.Refused != "" {
		return exchange{}, false
	}
	if r.Own && !slices.Contains([]int{contract.ExitOK, contract.ExitConflict, contract.ExitError, contract.ExitTempFail}, ans.Exit) {
		// Not a sidecar's answer (an ssh failure of the session): the
		// usual way, with the checkout's sidecar, says what went wrong.
		return exchange{}, false
	}
	x = exchange{req: req, code: ans.Exit}
	switch ans.Exit {
	case contract.ExitOK, contract.ExitConflict:
		x.stdout = execStdout([]byte(ans.Body))
		x.reply, x.replyErr = decodeReply(req, x.code, x.stdout)
	default:
		if ans.Said != "" {
			fmt.Fprintln(stderr, ans.Said)
		}
	}
	return x, true
}

// askRun sends req to run's socket at path and reads the answer.
func askRun(ctx context.Context, path string, req runRequest) (runAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, rideWait)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return runAnswer{}, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	b, err := json.Marshal(req)
	if err != nil {
		return runAnswer{}, err
	}
	if _, err := c.Write(append(b, '\n')); err != nil {
		return runAnswer{}, err
	}
	line, err := bufio.NewReader(io.LimitReader(c, answerLimit)).ReadBytes('\n')
	if err != nil {
		return runAnswer{}, err
	}
	var ans runAnswer
	if err := json.Unmarshal(line, &ans); err != nil {
		return runAnswer{}, err
	}
	if ans.Refused == "" && ans.Exit < 0 {
		return runAnswer{}, errors.New("an answer that is not a reply")
	}
	return ans, nil
}

// execStdout is a session's answer line as the exec would have printed
// it: without the "exit" the session adds, ending in a line end.
func execStdout(body []byte) []byte {
	body = bytes.TrimRight(body, "\n")
	if i := bytes.LastIndex(body, []byte(`"exit":`)); i > 0 && body[len(body)-1] == '}' &&
		len(bytes.Trim(body[i+len(`"exit":`):len(body)-1], "-0123456789 ")) == 0 {
		head := bytes.TrimRight(body[:i], " ")
		switch {
		case bytes.HasSuffix(head, []byte(",")):
			body = append(head[:len(head)-1:len(head)-1], '}')
		case bytes.HasSuffix(head, []byte("{")):
			body = append(head[:len(head):len(head)], '}')
		}
	}
	return append(body[:len(body):len(body)], '\n')
}
