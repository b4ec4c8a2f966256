package integration

import (
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// git collab mcp end to end: an MCP client of the official SDK starts
// `git collab mcp` in a real checkout, as a coding agent's host would,
// and talks to it over the subprocess's stdin and stdout; its first tool
// call opens one session (the real OpenSSH client running `collab-lease
// session` against a real sidecar serving the shared Gitea), and every
// call goes over it.

// mcpAgent is an MCP client session with `git collab mcp` in c.
type mcpAgent struct {
	t  *testing.T
	cs *mcp.ClientSession
}

func startMCP(t *testing.T, c *checkout) *mcpAgent {
	t.Helper()
	cmd := exec.Command("git", "collab", "mcp")
	cmd.Dir, cmd.Env = c.dir, c.env
	var stderr leasetest.LogBuffer // ssh's complaints, which git collab mcp passes on
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "collab-e2e", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("start git collab mcp: %v", err)
	}
	t.Cleanup(func() {
		if err := cs.Close(); err != nil {
			t.Errorf("git collab mcp ended with %v", err)
		}
		if t.Failed() {
			t.Logf("git collab mcp's stderr:\n%s", stderr.String())
		}
	})
	return &mcpAgent{t: t, cs: cs}
}

// call calls a tool, and returns its structured content decoded into a
// T (when it has any) and its text.
func call[T any](a *mcpAgent, tool string, args map[string]any) (T, *mcp.CallToolResult, string) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out T
	res, err := a.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		a.t.Fatalf("%s %v: %v", tool, args, err)
	}
	var text []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text = append(text, tc.Text)
		}
	}
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			a.t.Fatal(err)
		}
		if err := json.Unmarshal(b, &out); err != nil {
			a.t.Fatalf("%s %v: %v in %s", tool, args, err, b)
		}
	}
	return out, res, strings.Join(text, "\n")
}

// answer calls a tool that must answer (exit 0 or 4), not fail.
func answer[T any](a *mcpAgent, tool string, args map[string]any) T {
	a.t.Helper()
	out, res, text := call[T](a, tool, args)
	if res.IsError || res.StructuredContent == nil {
		a.t.Fatalf("%s %v: want an answer, got the tool error %q", tool, args, text)
	}
	return out
}

// toolError calls a tool that must fail, and returns its message.
func toolError(a *mcpAgent, tool string, args map[string]any) string {
	a.t.Helper()
	_, res, text := call[any](a, tool, args)
	if !res.IsError {
		a.t.Fatalf("%s %v: want a tool error, got %q", tool, args, text)
	}
	return text
}

// An agent given only the tools claims the next free issue, renews it,
// checks its token and releases it; an issue held by another is an
// ordinary answer naming the holder, and so is the renew of a claim that
// lapsed at its ttl; an unknown issue is a tool error with the sidecar's
// line, and Gitea down is a temporary one that says how long to wait.
// Every call goes over one session: one ssh for the whole conversation.
func TestMCPAgentClaimCycleAgainstGitea(t *testing.T) {
	s, w := newSidecar(t, "--key-cache-ttl", "0", "--perm-cache-ttl", "0", "--forge-timeout", "2s")
	g, _, _ := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	repo := identityRepo(t, ctx, g, w)
	held, free := identityIssue(t, ctx, g, repo), identityIssue(t, ctx, g, repo)
	agent, other := identityUser(t, ctx, g, w, "mcp-agent", repo), identityUser(t, ctx, g, w, "mcp-other", repo)
	expect(t, run(t, s, other, lease("acquire", repo, held, "--ttl", "10m")), 0, "the other claims the older issue")

	a := startMCP(t, newCheckout(t, s, agent, "git@127.0.0.1:"+repo.FullName()+".git", viaEnv))
	tools, err := a.cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if want := []string{"check", "claim", "claims", "handoff", "history", "merge", "next", "renew", "reservations", "reserve", "unclaim", "unreserve"}; !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}

	// next skips the held issue and claims the free one. The session
	// keeps the claim alive, so its expiry is the session's rolling one
	// (a grace ahead), which the ttl only caps.
	got := answer[contract.Tenure](a, "next", map[string]any{"ttl": "10m"})
	if got.Status != contract.StatusAcquired || got.Repo != repo.FullName() || got.Issue != free || got.Holder != agent.Login ||
		got.Token < 1 || got.ExpiresAt == nil || time.Until(time.Time(*got.ExpiresAt)) > 10*time.Minute {
		t.Fatalf("next: %+v", got)
	}
	token, firstExpiry := got.Token, time.Time(*got.ExpiresAt)
	if none := answer[contract.None](a, "next", nil); none != (contract.None{Status: contract.StatusNone, Repo: repo.FullName()}) {
		t.Fatalf("next with every issue held: %+v", none)
	}

	renewed := answer[contract.Tenure](a, "renew", map[string]any{"issue": free, "ttl": "20m"})
	if renewed.Status != contract.StatusRenewed || renewed.Token != token || renewed.ExpiresAt == nil ||
		time.Time(*renewed.ExpiresAt).Before(firstExpiry) {
		t.Fatalf("renew: %+v (first expiry %s)", renewed, firstExpiry)
	}
	current := answer[contract.Tenure](a, "check", map[string]any{"issue": free, "token": token})
	if current.Status != contract.StatusCurrent || current.Token != token || current.Holder != agent.Login {
		t.Fatalf("check: %+v", current)
	}

	// Someone else's claim: answers, not errors, naming the holder.
	conflict, _, text := call[contract.Conflict](a, "claim", map[string]any{"issue": held})
	if conflict.Status != contract.StatusHeld || conflict.Holder == nil || *conflict.Holder != other.Login || conflict.ExpiresAt == nil ||
		!strings.Contains(text, "is claimed by "+other.Login+" until") {
		t.Fatalf("claim of the held issue: %+v %q", conflict, text)
	}
	conflict = answer[contract.Conflict](a, "unclaim", map[string]any{"issue": held})
	if conflict.Status != contract.StatusNotHolder || conflict.Holder == nil || *conflict.Holder != other.Login {
		t.Fatalf("unclaim of the held issue: %+v", conflict)
	}
	list := answer[contract.List](a, "claims", nil)
	if len(list.Leases) != 2 || list.Leases[0].Issue != held || list.Leases[1].Issue != free || list.Leases[1].Holder != agent.Login {
		t.Fatalf("claims: %+v", list)
	}

	released := answer[contract.Released](a, "unclaim", map[string]any{"issue": free})
	if released != (contract.Released{Status: contract.StatusReleased, Repo: repo.FullName(), Issue: free}) {
		t.Fatalf("unclaim: %+v", released)
	}
	stale := answer[contract.Stale](a, "check", map[string]any{"issue": free, "token": token})
	if stale.Status != contract.StatusStale || stale.Token != nil {
		t.Fatalf("check after the unclaim: %+v", stale)
	}
	history := answer[contract.History](a, "history", map[string]any{"issue": free})
	if len(history.Tenures) != 1 || history.Tenures[0].Token != token || history.Tenures[0].EndedBy == nil ||
		*history.Tenures[0].EndedBy != contract.EndReleased {
		t.Fatalf("history: %+v", history)
	}

	// A claim that lapsed is not yours: renew says so, as an answer. In
	// a session a ttl caps the claim's whole life, so a claim for a
	// second lapses at its cap although the session is alive; check (which
	// extends nothing) tells when.
	short := answer[contract.Tenure](a, "claim", map[string]any{"issue": free, "ttl": "1s"})
	if short.Status != contract.StatusAcquired || short.Token <= token {
		t.Fatalf("claim again: %+v", short)
	}
	deadline := time.Now().Add(10 * time.Second)
	for answer[contract.Stale](a, "check", map[string]any{"issue": free, "token": short.Token}).Status != contract.StatusStale {
		if time.Now().After(deadline) {
			t.Fatalf("a claim with a ttl of 1s is still current 10s later: %+v", short)
		}
		time.Sleep(50 * time.Millisecond)
	}
	lapsed := answer[contract.Conflict](a, "renew", map[string]any{"issue": free, "ttl": "10m"})
	if lapsed.Status != contract.StatusNotHolder || lapsed.Holder != nil {
		t.Fatalf("renew of a lapsed claim: %+v", lapsed)
	}

	// A handoff: the other holds it at once, with the next token, and
	// the agent's token is stale.
	mine := answer[contract.Tenure](a, "claim", map[string]any{"issue": free, "ttl": "10m"})
	handed := answer[contract.HandedOff](a, "handoff", map[string]any{"issue": free, "to": other.Login})
	if handed.Status != contract.StatusHandedOff || handed.Holder != other.Login || handed.Token != mine.Token+1 ||
		handed.From.Holder != agent.Login || handed.From.Token != mine.Token {
		t.Fatalf("handoff after %+v: %+v", mine, handed)
	}
	if stale := answer[contract.Stale](a, "check", map[string]any{"issue": free, "token": mine.Token}); stale.Status != contract.StatusStale {
		t.Fatalf("check after the handoff: %+v", stale)
	}

	// Exit 1: the sidecar's line; the call is wrong, not the moment.
	if msg := toolError(a, "claim", map[string]any{"issue": 99999}); msg != contract.LineIssueNotFound {
		t.Fatalf("claim of an unknown issue: %q", msg)
	}

	// Exit 75: Gitea is down; nothing is done, and the agent is told to
	// retry after a while.
	stopGitea(t, g)
	msg := toolError(a, "claim", map[string]any{"issue": held})
	if !strings.HasPrefix(msg, contract.LineForgeUnavailable+"\ntemporary, retry with backoff: nothing was done; wait 2s") {
		t.Fatalf("claim with Gitea down: %q", msg)
	}
	startGitea(t, g)
	list = answer[contract.List](a, "claims", nil)
	if len(list.Leases) != 2 || list.Leases[0].Holder != other.Login || list.Leases[1].Holder != other.Login {
		t.Fatalf("claims after the outage: %+v", list)
	}
	if opened := strings.Count(s.Logs(), `msg="session opened" user=`+agent.Login+" "); opened != 1 {
		t.Fatalf("git collab mcp opened %d sessions, want one for every call", opened)
	}
}

// The instructions and the workflow prompt reach the client.
func TestMCPAgentLearnsTheWorkflowAgainstGitea(t *testing.T) {
	s, w := newSidecar(t)
	a := startMCP(t, newCheckout(t, s, w.Alice, "git@127.0.0.1:acme/widgets.git", viaCoreSSHCommand))
	if in := a.cs.InitializeResult().Instructions; !strings.Contains(in, "check the issue with your token") {
		t.Fatalf("instructions: %q", in)
	}
	p, err := a.cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "workflow"})
	if err != nil || len(p.Messages) != 1 {
		t.Fatalf("workflow prompt: %+v, %v", p, err)
	}
	// And the tools work from a checkout whose ssh is in git config.
	got := answer[contract.Tenure](a, "claim", map[string]any{"issue": w.OpenIssue, "ttl": "5m"})
	if got.Holder != "alice" || got.Issue != w.OpenIssue {
		t.Fatalf("claim: %+v", got)
	}
	answer[contract.Released](a, "unclaim", map[string]any{"issue": w.OpenIssue})
}
