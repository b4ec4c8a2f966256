package main

//lint:file-ignore SA1019 MCP deprecates its log messages as of protocol version 2026-07-28, but they are how a server speaks to a client unasked, and clients still show them.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// A claim lost while git collab mcp runs (a lost line of its session, or
// the session lost with its claims) is told in the next tool result, but
// an agent may work a long while before its next call, and a person
// watching the client should know at once. So it is also sent to every
// client at once, as a log message (notifications/message) at level
// warning, logger "collab-lease", whose data names the claim:
//
//	{"message":"your claim on acme/widgets#42 (token 3) was lost (force_released): …",
//	 "repo":"acme/widgets","issue":42,"token":3,"holder":"alice","agent":"agent-7",
//	 "ended_by":"force_released","session":"…"}
//
// A session lost with its claims sends one such warning per claim known
// to be its, ended_by "session_lost" (the word of its history), or one
// without repo, issue and token if none is known.
//
// It is sent whether or not the client asked for log messages. The SDK
// sends none before a client sets a level with logging/setLevel, and none
// below that level (ServerSession.Log), and a client of protocol version
// 2026-07-28 cannot set one: so every session starts at level warning
// (connect), and keepWarnings keeps a client from raising it above.

// Where the warnings come from, and at what level.
const (
	lostLogger = "collab-lease"
	lostLevel  = mcp.LoggingLevel("warning")
)

// warnWait bounds the sending of one warning to one client.
const warnWait = 5 * time.Second

// lostWarning is the data of a warning.
type lostWarning struct {
	Message string  `json:"message"`
	Repo    string  `json:"repo,omitempty"`
	Issue   int64   `json:"issue,omitempty"`
	Token   int64   `json:"token,omitempty"`
	Holder  string  `json:"holder,omitempty"`
	Agent   *string `json:"agent,omitempty"`
	EndedBy string  `json:"ended_by"`
	Session string  `json:"session,omitempty"`
}

// heldClaim is a claim of the session, as its server knows it.
type heldClaim struct {
	repo  string
	token int64
}

// lostSays is what the server says of a claim lost, and why.
func lostSays(repo string, issue, token int64, why string) string {
	return fmt.Sprintf("your claim on %s (token %d) was lost %s: stop working under its token, and do not merge or push that work",
		named(repo, issue), token, why)
}

// warningCapabilities are the server's: it sends log messages.
func warningCapabilities() *mcp.ServerCapabilities {
	return &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}}
}

// connect serves one client over t, at level warning from the start.
func (m *mcpServer) connect(ctx context.Context, t mcp.Transport) (*mcp.ServerSession, error) {
	return m.srv.Connect(ctx, t, &mcp.ServerSessionOptions{State: &mcp.ServerSessionState{LogLevel: lostLevel}})
}

// keepWarnings is a receiving middleware: a client's logging/setLevel may
// lower the level of the messages it gets, not raise it above warning.
func keepWarnings(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if r, ok := req.(*mcp.ServerRequest[*mcp.SetLoggingLevelParams]); ok && r.Params != nil &&
			slices.Contains([]mcp.LoggingLevel{"error", "critical", "alert", "emergency"}, r.Params.Level) {
			r.Params.Level = lostLevel
		}
		return next(ctx, method, req)
	}
}

// track keeps held in step with a reply to a tool call, sent over k.
func (m *mcpServer) track(k *keptSession, reply any) {
	issue, token, set, remove := gateOptionChange(contract.Command{}, reply)
	m.mu.Lock()
	defer m.mu.Unlock()
	if k != m.k || m.kGone {
		return // its claims are told lost already, or their session was closed
	}
	switch tenure, ok := reply.(*contract.Tenure); {
	case set && ok && token > m.ended[issue]:
		m.held[issue] = heldClaim{repo: tenure.Repo, token: token}
	case remove:
		delete(m.held, issue)
	}
}

// heard keeps held in step with an event of the session, and readies the
// warnings of the claims it ended. m.mu is held.
func (m *mcpServer) heard(e sessionEvent) {
	warning := func(repo string, issue, token int64, endedBy, message string) lostWarning {
		return lostWarning{Message: message, Repo: repo, Issue: issue, Token: token,
			Holder: m.opened.Holder, Agent: m.opened.Agent, EndedBy: endedBy, Session: m.opened.Session}
	}
	switch {
	case e.lost != nil:
		n := e.lost
		m.ended[n.Issue] = max(m.ended[n.Issue], n.Token)
		if c, ok := m.held[n.Issue]; ok && (n.Token == 0 || c.token <= n.Token) {
			delete(m.held, n.Issue)
		}
		m.unsent = append(m.unsent, warning(n.Repo, n.Issue, n.Token, n.EndedBy, lostSays(n.Repo, n.Issue, n.Token, "("+n.EndedBy+")")))
	case e.resumed != nil:
		clear(m.held)
		for _, l := range leasesOf(*e.resumed) {
			m.held[l.Issue] = heldClaim{repo: l.Repo, token: l.Token}
		}
	case e.gone != "":
		for _, issue := range slices.Sorted(maps.Keys(m.held)) {
			c := m.held[issue]
			m.unsent = append(m.unsent, warning(c.repo, issue, c.token, contract.EndSessionLost,
				lostSays(c.repo, issue, c.token, "with its session ("+e.gone+")")))
		}
		if len(m.held) == 0 {
			m.unsent = append(m.unsent, warning("", 0, 0, contract.EndSessionLost,
				"the session was lost ("+e.gone+"), and with it any claim made through it: stop working under their tokens, and claim again before going on"))
		}
		clear(m.held)
		m.kGone = true
	}
}

// watch takes k's events as they come, so that the warnings they call
// for are sent at once, until k is closed or is no longer the server's.
func (m *mcpServer) watch(k *keptSession) {
	for {
		select {
		case <-k.Wake():
		case <-k.Closed():
			return
		}
		m.mu.Lock()
		mine := m.k == k
		if mine {
			m.take()
		}
		m.mu.Unlock()
		if !mine {
			return
		}
		m.warn()
	}
}

// warn sends the warnings readied so far to every client, in order. A
// client that cannot be told (it went away) is passed over.
func (m *mcpServer) warn() {
	m.warnMu.Lock()
	defer m.warnMu.Unlock()
	m.mu.Lock()
	unsent := m.unsent
	m.unsent = nil
	m.mu.Unlock()
	for _, w := range unsent {
		for ss := range m.srv.Sessions() {
			ctx, cancel := context.WithTimeout(context.Background(), warnWait)
			ss.Log(ctx, &mcp.LoggingMessageParams{Level: lostLevel, Logger: lostLogger, Data: w})
			cancel()
		}
	}
}
