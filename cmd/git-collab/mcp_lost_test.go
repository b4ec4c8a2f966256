package main

//lint:file-ignore SA1019 the warnings of a lost claim are MCP log messages, which protocol version 2026-07-28 deprecates; these tests read them as a client does.

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// warnings are the log messages a client received, in order.
type warnings chan *mcp.LoggingMessageParams

// gatherWarnings are a client's options that gather the log messages it
// receives, and where they go. The client asks for none.
func gatherWarnings() (*mcp.ClientOptions, warnings) {
	w := make(warnings, 10)
	return &mcp.ClientOptions{LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) { w <- r.Params }}, w
}

// lostData is what a warning of a lost claim says, as a client reads it.
type lostData struct {
	Message string  `json:"message"`
	Repo    string  `json:"repo"`
	Issue   int64   `json:"issue"`
	Token   int64   `json:"token"`
	Holder  string  `json:"holder"`
	Agent   *string `json:"agent"`
	EndedBy string  `json:"ended_by"`
	Session string  `json:"session"`
}

// next waits for the next log message: a warning of collab-lease's,
// whose data it reads.
func (w warnings) next(t *testing.T, who string) lostData {
	t.Helper()
	select {
	case p := <-w:
		b, err := json.Marshal(p.Data)
		if err != nil {
			t.Fatal(err)
		}
		var d lostData
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: the data %s: %v", who, b, err)
		}
		if p.Level != "warning" || p.Logger != "collab-lease" {
			t.Fatalf("%s: level %q, logger %q: %s", who, p.Level, p.Logger, b)
		}
		return d
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no log message came", who)
	}
	return lostData{}
}

// none checks that no log message came besides those read. The client
// handles a notification before the response that follows it, so after
// a call returns, whatever the server sent before its answer is here.
func (w warnings) none(t *testing.T, who string) {
	t.Helper()
	select {
	case p := <-w:
		t.Fatalf("%s: another log message: %+v", who, p)
	default:
	}
}

// lostWarnings connects two clients to a git collab mcp server in h's
// checkout, and gathers the log messages each receives: one of the
// current protocol, and one of the initialize handshake's (2025-11-25)
// that asks for level (nothing if ""). Neither asks for log messages
// otherwise.
func lostWarnings(t *testing.T, h *harness, level string) (cs *mcp.ClientSession, clients map[string]warnings) {
	t.Helper()
	s, err := newMCPServer(h.app(nil, io.Discard, io.Discard), Invocation{Remote: "origin"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	opts, current := gatherWarnings()
	cs = connectMCPWith(t, s, opts, nil)
	opts, legacy := gatherWarnings()
	old := connectMCPWith(t, s, opts, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if v := old.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Fatalf("the legacy client speaks %s", v)
	}
	if level != "" {
		if err := old.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: mcp.LoggingLevel(level)}); err != nil {
			t.Fatal(err)
		}
	}
	return cs, map[string]warnings{"the current client": current, "the legacy client": legacy}
}

// A claim lost while the server runs is sent at once to every client as
// a warning naming it, whether or not the client asked for log messages,
// and whatever level it asked for; the next result says it too, and
// neither tells it twice.
func TestMCPSendsALostClaimAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	cs, clients := lostWarnings(t, h, "error")
	callTool(t, cs, "claim", map[string]any{"issue": 42})
	callTool(t, cs, "claim", map[string]any{"issue": 43})
	f.lose(43, "force_released")
	for who, w := range clients {
		d := w.next(t, who)
		if d.Repo != "acme/widgets" || d.Issue != 43 || d.Token != 2 || d.Holder != "alice" || d.Agent == nil || *d.Agent != "box-4242" ||
			d.EndedBy != "force_released" || d.Session != "s-1" ||
			d.Message != "your claim on acme/widgets#43 (token 2) was lost (force_released): stop working under its token, and do not merge or push that work" {
			t.Fatalf("%s: %+v", who, d)
		}
	}
	txt := texts(callTool(t, cs, "claims", nil))
	if !strings.HasPrefix(txt[0], "Note: your claim on acme/widgets#43 (token 2) was lost (force_released)") {
		t.Fatalf("%q", txt)
	}
	for who, w := range clients {
		w.none(t, who)
	}
}

// A session the sidecar will not resume is gone with its claims: each
// claim it still held is sent at once as a warning, and the next result
// says it too. A session that held none known is sent as one warning.
func TestMCPSendsALostSessionsClaimsAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	f.set(func() { f.refuseResume = true })
	cs, clients := lostWarnings(t, h, "")
	callTool(t, cs, "claim", map[string]any{"issue": 42})
	callTool(t, cs, "claim", map[string]any{"issue": 43})
	callTool(t, cs, "unclaim", map[string]any{"issue": 43})
	f.conn(1).drop()
	for who, w := range clients {
		d := w.next(t, who)
		if d.Repo != "acme/widgets" || d.Issue != 42 || d.Token != 1 || d.Holder != "alice" || d.Agent == nil || *d.Agent != "box-4242" ||
			d.EndedBy != "session_lost" || d.Session != "s-1" ||
			d.Message != "your claim on acme/widgets#42 (token 1) was lost with its session (the connection to the sidecar dropped, "+
				"and the sidecar no longer has the session): stop working under its token, and do not merge or push that work" {
			t.Fatalf("%s: %+v", who, d)
		}
	}
	txt := texts(callTool(t, cs, "claims", nil))
	if !strings.HasPrefix(txt[0], "Note: the connection to the sidecar dropped, and the sidecar no longer has the session; the claims made through it were lost") {
		t.Fatalf("%q", txt)
	}
	for who, w := range clients {
		w.none(t, who)
	}

	f.conn(3).drop() // the session of that call, which claimed nothing
	for who, w := range clients {
		d := w.next(t, who)
		if d.Repo != "" || d.Issue != 0 || d.Token != 0 || d.Holder != "alice" || d.EndedBy != "session_lost" || d.Session != "s-2" ||
			d.Message != "the session was lost (the connection to the sidecar dropped, and the sidecar no longer has the session), "+
				"and with it any claim made through it: stop working under their tokens, and claim again before going on" {
			t.Fatalf("%s: %+v", who, d)
		}
	}
}
