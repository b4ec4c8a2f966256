package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/collab-lease/collab-lease/buildinfo"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// `git collab mcp` serves git collab's commands as tools of the Model
// Context Protocol, so a coding agent claims work through its own tool
// calls rather than by shelling out and parsing exit statuses. Every call
// is resolved as the command line resolves it (call.go): the same
// repository, sidecar and ssh, the user's own key, the same reading of
// the reply. But all of them go over one session (session.go), opened at
// the first call and kept for the server's lifetime, so the claims made
// through it live as long as the server does, with no renewing and no ssh
// process per call. What is MCP's alone is how an answer is handed over:
//
//	exit 0        the reply (decodeReply's contract shape) as structured
//	              content, with its one-line summary as text
//	exit 4        the same: held, not_holder, none, stale, refused,
//	              busy, conflict and limit are answers
//	exit 1        a tool error with the sidecar's error line
//	exit 75       a tool error that says it is temporary and how long to
//	              wait before retrying
//	anything else ssh failed: a tool error with ssh's complaint and the
//	              hint the command line gives
//
// What happened to the session between two calls (a claim lost, a
// dropped connection resumed, a session that could not be) is told at the
// top of the next call's result; a claim lost, alone or with its session,
// is also sent to every client at once, as a warning (mcp_lost.go).

// mcpServer answers tool calls for one checkout.
type mcpServer struct {
	a      *app
	srv    *mcp.Server
	remote string // the remote naming the repository, as --remote
	args   sessionArgs
	// tempFails counts exit-75 answers in a row, so the suggested wait
	// grows as a backoff would.
	tempFails atomic.Int32

	mu      sync.Mutex
	k       *keptSession           // nil until the first call, and after the session is gone
	opened  contract.SessionOpened // k's first line: whose claims it holds
	pending []sessionEvent         // taken from k, for collect to read
	notes   []string               // to tell in the next result
	// held are the claims known to be k's, issue to claim, until k is
	// known to be gone (kGone); ended is the highest token of each issue
	// known to have ended: a reply that comes after the news of its
	// claim's end does not bring it back.
	held  map[int64]heldClaim
	kGone bool
	ended map[int64]int64

	// warnMu orders the sending of warnings, and is taken before mu;
	// unsent are the warnings to send.
	warnMu sync.Mutex
	unsent []lostWarning

	// optMu orders the edits of the checkout's push options (and is
	// taken after mu where both are); options are the gate options this
	// server set there, issue to token, to take out again when their
	// claims end with the session.
	optMu   sync.Mutex
	options map[int64]int64
}

// serveMCP is `git collab mcp`: it serves on stdin and stdout until the
// client goes away, or a signal ends it; then it ends its session, which
// releases the claims made through it.
func (a *app) serveMCP(inv Invocation) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m, err := newMCPServer(a, inv)
	if err != nil {
		return a.fail(err)
	}
	defer m.close()
	err = m.serve(ctx, &mcp.IOTransport{Reader: io.NopCloser(a.stdin), Writer: nopWriteCloser{a.stdout}})
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		return a.fail(fmt.Errorf("mcp: %w", err))
	}
	return contract.ExitOK
}

// serve serves one client over t until it goes away or ctx ends, as
// mcp.Server.Run does, but connected as connect connects.
func (m *mcpServer) serve(ctx context.Context, t mcp.Transport) error {
	ss, err := m.connect(ctx, t)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { ss.Close() })
	defer stop()
	err = ss.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// newMCPServer is the server of `git collab mcp` inv: its tools, the
// workflow as instructions and as a prompt, and its warnings of lost
// claims. Its close ends its session.
func newMCPServer(a *app, inv Invocation) (*mcpServer, error) {
	agent, _, err := a.sessionAgent(inv.Flags)
	if err != nil {
		return nil, err
	}
	m := &mcpServer{a: a, remote: inv.Remote, args: sessionArgs{agent: agent, grace: inv.Grace}, options: map[int64]int64{},
		held: map[int64]heldClaim{}, ended: map[int64]int64{}}
	s := mcp.NewServer(&mcp.Implementation{Name: "git-collab", Title: "git collab", Version: buildinfo.Read(version).Version},
		&mcp.ServerOptions{Instructions: workflow, Capabilities: warningCapabilities()})
	s.AddReceivingMiddleware(keepWarnings)
	m.srv = s
	for _, t := range mcpTools {
		if err := t.add(s, m, t); err != nil {
			return nil, err
		}
	}
	s.AddPrompt(&mcp.Prompt{Name: "workflow", Title: "Claim, work, check, unclaim",
		Description: "how to claim an issue, keep the claim while working on it, and release it, with these tools"},
		func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: workflow}}}}, nil
		})
	return m, nil
}

// close ends the session, if one is open, which releases its claims:
// their push options leave the checkout too.
func (m *mcpServer) close() {
	m.mu.Lock()
	k := m.k
	m.k, m.pending = nil, nil
	clear(m.held)
	m.mu.Unlock()
	if k != nil {
		k.Close()
	}
	m.forgetOptions(nil)
}

// followReply keeps the checkout's push options in step with the reply to
// req (pushoption.go), and remembers what it set: the line to add to the
// tool's result, if any.
func (m *mcpServer) followReply(req contract.Command, reply any) string {
	m.optMu.Lock()
	defer m.optMu.Unlock()
	note, err := followReply(m.a.git, req, reply)
	issue, token, set, remove := gateOptionChange(req, reply)
	switch {
	case err != nil:
		return "Warning: " + err.Error() + "."
	case set:
		m.options[issue] = token
	case remove:
		delete(m.options, issue)
	}
	return note
}

// dropOption takes the push option of issue's claim with token out of the
// checkout (token 0: any of issue's), for a claim the session says is
// lost: the note to tell, if any.
func (m *mcpServer) dropOption(issue, token int64) string {
	m.optMu.Lock()
	defer m.optMu.Unlock()
	note, err := removeGateOptions(m.a.git, issue, token)
	if err != nil {
		return "Warning: " + err.Error() + "."
	}
	if t, ok := m.options[issue]; ok && (token == 0 || t == token) {
		delete(m.options, issue)
	}
	if note == "" {
		return ""
	}
	return "Note: " + note + "."
}

// forgetOptions takes out of the checkout the push options this server
// set, but for the claims kept names (issue to token): those of a
// session that ended, or that was resumed without them. It returns the
// notes to tell.
func (m *mcpServer) forgetOptions(kept map[int64]int64) []string {
	m.optMu.Lock()
	var gone [][2]int64
	for issue, token := range m.options {
		if kept[issue] != token {
			gone = append(gone, [2]int64{issue, token})
		}
	}
	m.optMu.Unlock()
	var notes []string
	for _, g := range gone {
		if note := m.dropOption(g[0], g[1]); note != "" {
			notes = append(notes, note)
		}
	}
	return notes
}

// toolArgs is what a tool takes: words are the issue and the options the
// command line would send for the same call.
type toolArgs interface{ words() (int64, []Flag) }

// globArgs is what a tool that names path globs takes (reserve,
// unreserve): its globs, from the repository's root, as well.
type globArgs interface{ globs() []string }

// addTool adds t, which takes an In, to s.
func addTool[In toolArgs](s *mcp.Server, m *mcpServer, t mcpTool) error {
	v := findVerb(t.name)
	if v == nil || v.remote == "" {
		return fmt.Errorf("tool %s runs no git collab command", t.name)
	}
	in, err := inputSchema[In]()
	if err != nil {
		return err
	}
	out, err := outputSchema(t.outcomes)
	if err != nil {
		return fmt.Errorf("tool %s: %w", t.name, err)
	}
	destructive := t.destructive
	repeatable := t.idempotent || t.readOnly
	mcp.AddTool(s, &mcp.Tool{
		Name: t.name, Description: t.description + errorsNote,
		InputSchema: in, OutputSchema: out,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: t.readOnly, IdempotentHint: repeatable,
			DestructiveHint: &destructive},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, args In) (*mcp.CallToolResult, any, error) {
		issue, flags := args.words()
		var globs []string
		if g, ok := any(args).(globArgs); ok {
			globs = g.globs()
		}
		res, reply, err := m.call(ctx, v, issue, flags, globs, repeatable)
		return m.withNotes(res, reply, err)
	})
	return nil
}

// session is the open session, opened now if there is none: on t's
// sidecar, the first time, and again after one is gone.
func (m *mcpServer) session(ctx context.Context, t target) (*keptSession, error) {
	defer m.warn()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.collect()
	if m.k != nil {
		return m.k, nil
	}
	k, err := keepSession(ctx, m.a.dialSession(t, m.args, m.a.stderr))
	if err != nil {
		return nil, err
	}
	m.k, m.opened, m.kGone = k, k.Opened(), false
	go m.watch(k)
	return k, nil
}

// take moves the session's new events to pending, and readies the
// warnings they call for (mcp_lost.go). m.mu is held.
func (m *mcpServer) take() {
	if m.k == nil {
		return
	}
	events := m.k.TakeEvents()
	for _, e := range events {
		m.heard(e)
	}
	m.pending = append(m.pending, events...)
}

// collect turns the session's events into notes; a session that is gone
// is dropped, so that the next call opens another. m.mu is held.
func (m *mcpServer) collect() {
	m.take()
	events := m.pending
	m.pending = nil
	for _, e := range events {
		switch {
		case e.lost != nil:
			m.notes = append(m.notes, "Note: "+lostSays(e.lost.Repo, e.lost.Issue, e.lost.Token, "("+e.lost.EndedBy+")")+".")
			if note := m.dropOption(e.lost.Issue, e.lost.Token); note != "" {
				m.notes = append(m.notes, note)
			}
		case e.resumed != nil:
			var held []string
			kept := map[int64]int64{}
			for _, l := range leasesOf(*e.resumed) {
				held = append(held, fmt.Sprintf("%s (token %d)", named(l.Repo, l.Issue), l.Token))
				kept[l.Issue] = l.Token
			}
			said := "it held no claims"
			if len(held) > 0 {
				said = "its claims are kept: " + strings.Join(held, ", ")
			}
			m.notes = append(m.notes, "Note: the connection to the sidecar dropped and was reopened; the session was resumed, and "+said+".")
			m.notes = append(m.notes, m.forgetOptions(kept)...)
		case e.gone != "":
			m.notes = append(m.notes, "Note: "+e.gone+"; the claims made through it were lost: stop working under their tokens, "+
				"and claim again before going on. A new session is opened for the next call.")
			m.notes = append(m.notes, m.forgetOptions(nil)...)
			if m.k != nil {
				m.k.Close()
				m.k = nil
			}
			return
		}
	}
}

// withNotes puts the notes gathered since the last result at the top of
// this one.
func (m *mcpServer) withNotes(res *mcp.CallToolResult, reply any, err error) (*mcp.CallToolResult, any, error) {
	m.mu.Lock()
	m.collect()
	notes := strings.Join(m.notes, "\n")
	m.notes = nil
	m.mu.Unlock()
	m.warn()
	switch {
	case notes == "":
	case err != nil && !errors.Is(err, context.Canceled):
		err = fmt.Errorf("%s\n%w", notes, err)
	case res != nil && len(res.Content) > 0:
		if tc, ok := res.Content[0].(*mcp.TextContent); ok {
			tc.Text = notes + "\n" + tc.Text
		}
	}
	return res, reply, err
}

// call runs one git collab command for a tool over the session and hands
// its outcome over as the table at the top of this file says. repeatable
// says it may be sent again when a dropped connection lost its answer.
func (m *mcpServer) call(ctx context.Context, v *verb, issue int64, flags []Flag, globs []string, repeatable bool) (*mcp.CallToolResult, any, error) {
	t, err := m.a.resolve(m.remote)
	if err != nil {
		return nil, nil, gitCollabError(err)
	}
	line, req, err := sessionLine(v.remote, t.repo, issue, flags, globs...)
	if err != nil {
		return nil, nil, gitCollabError(err)
	}
	var (
		k *keptSession
		r sessionReply
	)
	for attempt := 0; ; attempt++ {
		k, err = m.session(ctx, t)
		if err != nil {
			return m.openFailed(err, t)
		}
		r, err = k.Do(ctx, line, m.late(k, req))
		var gone *errKeptGone
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil, nil, ctx.Err()
		case errors.As(err, &gone) && attempt == 0:
			continue // nothing was sent: the next session takes it
		case errors.Is(err, errSessionEnded) && repeatable && attempt == 0:
			continue // the same call again is safe
		case errors.Is(err, errSessionEnded):
			return nil, nil, fmt.Errorf("git-collab: %v before the sidecar answered, so it may or may not have been done; "+
				"call claims to see what you hold before calling %s again", err, v.name)
		default:
			return nil, nil, gitCollabError(err)
		}
		break
	}
	res, reply, err := m.answerReply(t, req, r.code, r.body, r.said)
	m.track(k, reply)
	return res, reply, err
}

// late releases a claim whose caller went away before its answer came
// (an agent that cancelled a claim with wait): nobody would know of it.
func (m *mcpServer) late(k *keptSession, req contract.Command) func(sessionReply) {
	if req.Verb != contract.VerbAcquire && req.Verb != contract.VerbNext {
		return nil
	}
	return func(r sessionReply) {
		if r.code != contract.ExitOK {
			return
		}
		tenure, err := decodeAs[contract.Tenure](r.body)
		if err != nil || tenure.Status != contract.StatusAcquired {
			return
		}
		line, _, err := sessionLine(contract.VerbRelease, tenure.Repo, tenure.Issue, nil)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), releaseWait)
		defer cancel()
		k.Do(ctx, line, nil)
	}
}

// openFailed is the tool error for a session that could not be opened.
func (m *mcpServer) openFailed(err error, t target) (*mcp.CallToolResult, any, error) {
	var se *sessionExit
	if !errors.As(err, &se) {
		return nil, nil, gitCollabError(err)
	}
	return m.answerReply(t, contract.Command{}, se.code, nil, se.said)
}

// answerReply hands over an answer with exit status code: the reply body
// to req, or said, the error line of an exit 1 or 75 or ssh's complaint.
func (m *mcpServer) answerReply(t target, req contract.Command, code int, body []byte, said string) (*mcp.CallToolResult, any, error) {
	if code != contract.ExitTempFail {
		m.tempFails.Store(0)
	}
	switch code {
	case contract.ExitOK, contract.ExitConflict:
		x := exchange{req: req, code: code, stdout: body}
		x.reply, x.replyErr = decodeReply(req, code, body)
		if x.replyErr != nil {
			// Whatever happened on the sidecar happened: say what it was.
			return nil, nil, fmt.Errorf("git-collab: could not read the reply of the sidecar at %s (exit status %d): %v; the reply: %s",
				t.sidecar.Addr(), code, x.replyErr, strings.TrimSpace(string(body)))
		}
		return answer(x, m.a.now(), m.followReply(req, x.reply)), x.reply, nil
	case contract.ExitError:
		return nil, nil, errors.New(orSaid(said, code))
	case contract.ExitTempFail:
		wait := retryAfter(int(m.tempFails.Add(1)))
		return nil, nil, fmt.Errorf("%s\ntemporary, retry with backoff: nothing was done; wait %ds, then make the same call again "+
			"(the suggested wait doubles with each temporary failure in a row, up to %ds)", orSaid(said, code), wait/time.Second, maxRetryAfter/time.Second)
	case -1:
		return nil, nil, fmt.Errorf("git-collab: could not read the reply of the sidecar at %s: it is not a JSON reply; the reply: %s",
			t.sidecar.Addr(), strings.TrimSpace(string(body)))
	}
	if said != "" {
		said += "\n"
	}
	return nil, nil, errors.New(said + "git-collab: " + transportHint(code, t.sidecar, t.ssh))
}

// gitCollabError is a failure of git-collab itself, worded as the command
// line words it: nothing reached the sidecar.
func gitCollabError(err error) error { return errors.New("git-collab: " + err.Error()) }

// The suggested wait after an exit 75: doubling from the first, with a
// cap, as the agent loop of docs/agents.md backs off.
const (
	firstRetryAfter = 2 * time.Second
	maxRetryAfter   = time.Minute
)

// retryAfter is the wait to suggest after the n-th temporary failure in a
// row.
func retryAfter(n int) time.Duration {
	d := firstRetryAfter
	for i := 1; i < n && d < maxRetryAfter; i++ {
		d *= 2
	}
	return min(d, maxRetryAfter)
}

// answer is a tool result for an exit 0 or 4 reply: the line git collab
// would print, note (what it changed in the checkout, "" if nothing),
// what to do about it, and the reply as JSON text for clients that read
// no structured content.
func answer(x exchange, now time.Time, note string) *mcp.CallToolResult {
	r := renderReply(x.req, x.reply, now)
	r.addNote(note)
	text := strings.TrimSpace(r.stdout + r.stderr)
	if advice := adviceFor(x.req, x.reply); advice != "" {
		text += "\n" + advice
	}
	body, err := json.Marshal(x.reply)
	if err != nil {
		body = bytes.TrimSpace(x.stdout) // cannot happen: it was decoded from JSON
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}, &mcp.TextContent{Text: string(body)}}}
}

// adviceFor is what an agent should do next, for the answers where it is
// easy to get wrong.
func adviceFor(req contract.Command, reply any) string {
	switch r := reply.(type) {
	case *contract.Tenure:
		if r.Status == contract.StatusAcquired {
			return fmt.Sprintf("Yours while this server runs: check token %d right before a merge or a push, unclaim when done.", r.Token)
		}
	case *contract.Conflict:
		switch {
		case r.Status == contract.StatusHeld:
			return "Not an error: someone else is working on it. Pick other work (next), or claim it again later."
		case req.Verb == contract.VerbRenew:
			return "Not an error, but the claim is no longer yours: stop working under its token, and claim it again before going on."
		case req.Verb == contract.VerbMerge:
			return "Not an error: nothing was merged. Only the holder of the pull request's claim, or of a claim of an issue it closes, may merge it."
		case req.Verb == contract.VerbReserve:
			return "Not an error: nothing was reserved, as the claim of that issue is not yours. Claim it first, or reserve without issue."
		}
		return "Not an error: it is not yours to release; force is for repository admins."
	case *contract.None:
		return "Not an error: nothing to claim right now. Look again later."
	case *contract.HandedOff:
		return "The claim is theirs now: stop working under your token."
	case *contract.Limit:
		switch req.Verb {
		case contract.VerbHandoff:
			return "Not an error: the target holds as many claims as the sidecar allows; hand it to someone else, or keep it."
		case contract.VerbReserve:
			return "Not an error: you hold as many reservations as the sidecar allows. Unreserve some first."
		}
		return "Not an error: you hold as many claims as the sidecar allows. Finish and unclaim one of them first."
	case *contract.Cooling:
		return "Not an error: its last claim lapsed moments ago, and it stays its holder's until then. Pick other work, or claim it after until."
	case *contract.Stale:
		return "Not an error, but your claim is gone: do not merge or push under this token."
	case *contract.Reservations:
		if r.Status == contract.StatusReserved {
			return "Reserved: no other holder may reserve these paths while they are yours, and where the sidecar runs its gate, Gitea refuses others' pushes that change them. They end with their claim (or with this server, if they have neither an issue nor a ttl); unreserve them once you are done with them."
		}
	case *contract.ReserveConflict:
		return "Not an error: nothing was reserved, as other holders' reservations (with) cover some of these paths. Work on other paths, reserve fewer, or ask again once theirs end."
	case *contract.Merged:
		return "Merged. The claims it ended are over: claim new work before pushing again."
	case *contract.MergeRefused:
		return "Not an error: Gitea would not merge it. Fix what the reason names (a conflict: update the branch and push), or wait for the check or approval it wants, then merge again."
	case *contract.MergeBusy:
		return "Not an error: nothing was merged, as other merges into the same branch came first. Merge again, perhaps with a longer wait."
	}
	return ""
}
