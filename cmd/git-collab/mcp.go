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
	"slices"
	"strings"
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
// goes through resolve and send (call.go), like the command line: the
// same repository, sidecar and ssh, the user's own key, the same reading
// of the reply. What is MCP's alone is how an answer is handed over:
//
//	exit 0        the reply (decodeReply's contract shape) as structured
//	              content, with its one-line summary as text
//	exit 4        the same: held, not_holder, none and stale are answers
//	exit 1        a tool error with the sidecar's error line
//	exit 75       a tool error that says it is temporary and how long to
//	              wait before retrying
//	anything else ssh failed: a tool error with ssh's complaint and the
//	              hint the command line gives

// mcpServer answers tool calls for one checkout.
type mcpServer struct {
	a      *app
	remote string // the remote naming the repository, as --remote
	common []Flag // sent with every tool call: mcp's own --agent
	// tempFails counts exit-75 answers in a row, so the suggested wait
	// grows as a backoff would.
	tempFails atomic.Int32
}

// serveMCP is `git collab mcp`: it serves on stdin and stdout until the
// client goes away, or a signal ends it.
func (a *app) serveMCP(remote string, flags []Flag) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := newMCPServer(a, remote, flags...)
	if err != nil {
		return a.fail(err)
	}
	err = s.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(a.stdin), Writer: nopWriteCloser{a.stdout}})
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		return a.fail(fmt.Errorf("mcp: %w", err))
	}
	return contract.ExitOK
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// newMCPServer is the server of `git collab mcp`: its tools, and the
// workflow as instructions and as a prompt. common are the options every
// tool call sends (mcp's own --agent).
func newMCPServer(a *app, remote string, common ...Flag) (*mcp.Server, error) {
	m := &mcpServer{a: a, remote: remote, common: common}
	s := mcp.NewServer(&mcp.Implementation{Name: "git-collab", Title: "git collab", Version: buildinfo.Read(version).Version},
		&mcp.ServerOptions{Instructions: workflow, Capabilities: &mcp.ServerCapabilities{}})
	for _, t := range mcpTools {
		if err := t.add(s, m, t); err != nil {
			return nil, err
		}
	}
	s.AddPrompt(&mcp.Prompt{Name: "workflow", Title: "Claim, work, renew, check, unclaim",
		Description: "how to claim an issue, keep the claim while working on it, and release it, with these tools"},
		func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: workflow}}}}, nil
		})
	return s, nil
}

// toolArgs is what a tool takes: words are the issue and the options the
// command line would send for the same call.
type toolArgs interface{ words() (int64, []Flag) }

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
	mcp.AddTool(s, &mcp.Tool{
		Name: t.name, Description: t.description + errorsNote,
		InputSchema: in, OutputSchema: out,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: t.readOnly, IdempotentHint: t.idempotent || t.readOnly,
			DestructiveHint: &destructive},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, args In) (*mcp.CallToolResult, any, error) {
		issue, flags := args.words()
		return m.call(ctx, v, issue, flags)
	})
	return nil
}

// call runs one git collab command for a tool and hands its outcome over
// as the table at the top of this file says.
func (m *mcpServer) call(ctx context.Context, v *verb, issue int64, flags []Flag) (*mcp.CallToolResult, any, error) {
	t, err := m.a.resolve(m.remote)
	if err != nil {
		return nil, nil, gitCollabError(err)
	}
	// ssh's stderr: kept for the answer, and passed on to ours, which MCP
	// clients keep as the server's log.
	var stderr bytes.Buffer
	x, err := m.a.send(ctx, t, v.remote, issue, append(slices.Clone(flags), m.common...), io.MultiWriter(&stderr, m.a.stderr), true)
	if err != nil {
		return nil, nil, gitCollabError(err)
	}
	said := strings.TrimSpace(stderr.String())
	if x.code != contract.ExitTempFail {
		m.tempFails.Store(0)
	}
	switch x.code {
	case contract.ExitOK, contract.ExitConflict:
		if x.replyErr != nil {
			// Whatever happened on the sidecar happened: say what it was.
			return nil, nil, fmt.Errorf("git-collab: could not read the reply of the sidecar at %s (exit status %d): %v; the reply: %s",
				t.sidecar.Addr(), x.code, x.replyErr, strings.TrimSpace(string(x.stdout)))
		}
		return answer(x, m.a.now()), x.reply, nil
	case contract.ExitError:
		if said == "" {
			said = "error: the sidecar answered exit status 1 without saying why"
		}
		return nil, nil, errors.New(said)
	case contract.ExitTempFail:
		wait := retryAfter(int(m.tempFails.Add(1)))
		return nil, nil, fmt.Errorf("%s\ntemporary, retry with backoff: nothing was done; wait %ds, then make the same call again "+
			"(the suggested wait doubles with each temporary failure in a row, up to %ds)", said, wait/time.Second, maxRetryAfter/time.Second)
	}
	if said != "" {
		said += "\n"
	}
	return nil, nil, errors.New(said + "git-collab: " + transportHint(x.code, t.sidecar, t.ssh))
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
// would print, what to do about it, and the reply as JSON text for
// clients that read no structured content.
func answer(x exchange, now time.Time) *mcp.CallToolResult {
	r := renderReply(x.req, x.reply, now)
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
			return fmt.Sprintf("Yours: renew before it expires, check token %d right before a merge or a push, unclaim when done.", r.Token)
		}
	case *contract.Conflict:
		switch {
		case r.Status == contract.StatusHeld:
			return "Not an error: someone else is working on it. Pick other work (next), or claim it again later."
		case req.Verb == contract.VerbRenew:
			return "Not an error, but the claim is no longer yours: stop working under its token, and claim it again before going on."
		}
		return "Not an error: it is not yours to release; force is for repository admins."
	case *contract.None:
		return "Not an error: nothing to claim right now. Look again later."
	case *contract.HandedOff:
		return "The claim is theirs now: stop working under your token."
	case *contract.Limit:
		if req.Verb == contract.VerbHandoff {
			return "Not an error: the target holds as many claims as the sidecar allows; hand it to someone else, or keep it."
		}
		return "Not an error: you hold as many claims as the sidecar allows. Finish and unclaim one of them first."
	case *contract.Cooling:
		return "Not an error: its last claim lapsed moments ago, and it stays its holder's until then. Pick other work, or claim it after until."
	case *contract.Stale:
		return "Not an error, but your claim is gone: do not merge or push under this token."
	}
	return ""
}
