package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// These tests drive git collab mcp's tools through an MCP client of the
// same SDK, in process, over its in-memory transport; the server runs
// the real git and, as main_test.go's do, the fake ssh. The real sidecar
// and OpenSSH, over stdio, are in integration/mcp_e2e_test.go.

var update = flag.Bool("update", false, "rewrite the golden files of testdata (mcp-tools.json, help.txt) from what git collab makes")

// mcpClient connects a client to git collab mcp's server in h's checkout,
// with h's environment as it is now.
func (h *harness) mcpClient() *mcp.ClientSession {
	h.t.Helper()
	s, err := newMCPServer(h.app(nil, io.Discard, io.Discard), Invocation{Remote: "origin"})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(s.close)
	return connectMCP(h.t, s)
}

// connectMCP connects a client to s over the in-memory transport.
func connectMCP(t *testing.T, s *mcpServer) *mcp.ClientSession {
	t.Helper()
	return connectMCPWith(t, s, nil, nil)
}

// connectMCPWith connects a client with options to s over the in-memory
// transport.
func connectMCPWith(t *testing.T, s *mcpServer, client *mcp.ClientOptions, session *mcp.ClientSessionOptions) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.connect(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, client).Connect(ctx, ct, session)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

// callTool calls a tool; a protocol error fails the test.
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	if args == nil {
		args = map[string]any{}
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return res
}

// texts are the text contents of a result.
func texts(res *mcp.CallToolResult) []string {
	var out []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			out = append(out, tc.Text)
		}
	}
	return out
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

// mcpCalls are tool calls, the git collab command line that makes the
// same call, and the replies of the sidecar (exit 0 and 4) to it.
var mcpCalls = []struct {
	tool    string
	args    map[string]any
	cli     []string
	replies []mcpReply
}{
	{"claim", map[string]any{"issue": 42, "ttl": "30m", "wait": "5m"}, []string{"claim", "42", "--ttl", "30m", "--wait", "5m"}, []mcpReply{
		{"0", acquiredJSON, "claimed acme/widgets#42 (token 3, expires 12:05 UTC, in 30m)\npush option collab-lease=42:3 set in this checkout\nYours while this server runs: check token 3"},
		{"4", `{"status":"held","repo":"acme/widgets","issue":42,"holder":"bob","agent":null,"expires_at":"2026-09-05T12:05:00Z"}`,
			"acme/widgets#42 is claimed by bob until 12:05 UTC\nNot an error: someone else is working on it."},
	}},
	{"renew", map[string]any{"issue": 42, "ttl": "1h"}, []string{"renew", "42", "--ttl", "1h"}, []mcpReply{
		{"0", `{"status":"renewed","repo":"acme/widgets","issue":42,"holder":"alice","agent":null,"token":3,"acquired_at":"2026-09-05T11:00:00Z","expires_at":"2026-09-05T12:35:00Z"}`,
			"renewed acme/widgets#42 (token 3, expires 12:35 UTC, in 1h)"},
		{"4", `{"status":"not_holder","repo":"acme/widgets","issue":42,"holder":null,"agent":null,"expires_at":null}`,
			"not renewed: you do not hold acme/widgets#42 (nobody does; claim it again)\nNot an error, but the claim is no longer yours"},
	}},
	{"unclaim", map[string]any{"issue": 42, "force": true}, []string{"unclaim", "42", "--force"}, []mcpReply{
		{"0", `{"status":"released","repo":"acme/widgets","issue":42}`, "released acme/widgets#42"},
		{"4", `{"status":"not_holder","repo":"acme/widgets","issue":42,"holder":"bob","agent":null,"expires_at":null}`,
			"not released: acme/widgets#42 is claimed by bob (open-ended)\nNot an error: it is not yours to release"},
	}},
	{"handoff", map[string]any{"issue": 42, "to": "bob/agent-8"}, []string{"handoff", "42", "--to", "bob/agent-8"}, []mcpReply{
		{"0", `{"status":"handed_off","repo":"acme/widgets","issue":42,"holder":"bob","agent":"agent-8","token":4,"expires_at":"2026-09-05T12:05:00Z","from":{"holder":"alice","agent":null,"token":3}}`,
			"handed acme/widgets#42 to bob/agent-8 (token 4, expires 12:05 UTC, in 30m)\nThe claim is theirs now"},
		{"4", `{"status":"not_holder","repo":"acme/widgets","issue":42,"holder":"carol","agent":null,"expires_at":null}`,
			"not handed off: acme/widgets#42 is claimed by carol (open-ended)"},
	}},
	{"claims", nil, []string{"claims"}, []mcpReply{
		{"0", `{"repo":"acme/widgets","leases":[{"issue":42,"holder":"alice","agent":null,"token":3,"acquired_at":"2026-09-05T11:35:00Z","expires_at":null}]}`,
			"ISSUE  HOLDER  TOKEN  EXPIRES\n#42    alice   3      open-ended"},
	}},
	{"next", map[string]any{"labels": []string{"good first issue", "it's"}, "pulls": true, "ttl": "30m"},
		[]string{"next", "--label", "good first issue", "--label", "it's", "--pulls", "--ttl", "30m"}, []mcpReply{
			{"0", strings.Replace(acquiredJSON, `"issue":42`, `"issue":7`, 1), "claimed acme/widgets#7 (token 3, expires 12:05 UTC, in 30m)"},
			{"4", `{"status":"none","repo":"acme/widgets"}`, "nothing to claim in acme/widgets\nNot an error: nothing to claim right now."},
		}},
	{"check", map[string]any{"issue": 7, "token": 3}, []string{"check", "7", "--token", "3"}, []mcpReply{
		{"0", `{"status":"current","repo":"acme/widgets","issue":7,"holder":"alice","agent":null,"token":3,"acquired_at":"2026-09-05T11:35:00Z","expires_at":null}`,
			"token 3 is current: acme/widgets#7 held by alice (open-ended)"},
		{"4", `{"status":"stale","repo":"acme/widgets","issue":7,"token":null}`,
			"token 3 is stale: nobody holds acme/widgets#7\nNot an error, but your claim is gone: do not merge or push"},
	}},
	{"merge", map[string]any{"pull": 7, "token": 3, "style": "squash", "delete_branch": true, "wait": "5m"},
		[]string{"merge", "7", "--token", "3", "--style", "squash", "--delete-branch", "--wait", "5m"}, []mcpReply{
			{"0", `{"status":"merged","repo":"acme/widgets","pull":7,"sha":"6f1c0e2d9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e","issue":7,"token":3}`,
				"merged acme/widgets!7 under token 3: 6f1c0e2d9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e\nMerged. The claims it ended are over"},
			{"4", `{"status":"refused","repo":"acme/widgets","pull":7,"reason":"Please try again later"}`,
				"not merged: Gitea refused acme/widgets!7: Please try again later\nNot an error: Gitea would not merge it."},
			{"4", `{"status":"busy","repo":"acme/widgets","pull":7,"ahead":2}`,
				"not merged: acme/widgets!7 did not get its turn within 5m (2 merges ahead); merge again later, or with a longer --wait\nNot an error: nothing was merged"},
			{"4", `{"status":"stale","repo":"acme/widgets","issue":42,"token":4}`,
				"not merged: token 3 is stale: acme/widgets#42 is now at token 4\nNot an error, but your claim is gone"},
			{"4", `{"status":"not_holder","repo":"acme/widgets","issue":7,"holder":"bob","agent":null,"expires_at":null}`,
				"not merged: acme/widgets!7 is claimed by bob (open-ended)\nNot an error: nothing was merged. Only the holder"},
		}},
	{"reserve", map[string]any{"globs": []string{"src/auth/**", "docs/auth.md"}, "issue": 42, "shared": true},
		[]string{"reserve", "src/auth/**", "docs/auth.md", "--issue", "42", "--shared"}, []mcpReply{
			{"0", `{"status":"reserved","repo":"acme/widgets","reservations":[{"glob":"src/auth/**","shared":true,"holder":"alice","agent":"a1","issue":42,"expires_at":"2026-09-05T12:05:00Z"},` +
				`{"glob":"docs/auth.md","shared":true,"holder":"alice","agent":"a1","issue":42,"expires_at":"2026-09-05T12:05:00Z"}]}`,
				"reserved src/auth/** (shared) · alice · a1 · #42 · until 12:05 UTC\nreserved docs/auth.md (shared) · alice · a1 · #42 · until 12:05 UTC\nReserved: no other holder"},
			{"4", `{"status":"conflict","repo":"acme/widgets","with":[{"glob":"src/**","shared":false,"holder":"bot","agent":"agent-3","issue":12,"expires_at":"2026-09-05T12:05:00Z"}]}`,
				"not reserved: src/** is reserved by bot · agent-3 for acme/widgets#12 until 12:05 UTC\nNot an error: nothing was reserved"},
			{"4", `{"status":"not_holder","repo":"acme/widgets","issue":42,"holder":null,"agent":null,"expires_at":null}`,
				"not reserved: you do not hold acme/widgets#42 (nobody does; claim it again)\nNot an error: nothing was reserved, as the claim"},
			{"4", `{"status":"limit","repo":"acme/widgets","issue":42,"holder":"alice","agent":"a1","scope":"reservations","limit":256,"live":256}`,
				"not reserved: you hold 256 reservations, the sidecar's cap of 256; unreserve some first\nNot an error: you hold as many reservations"},
		}},
	{"unreserve", map[string]any{"globs": []string{"src/auth/**"}, "issue": 42, "force": true},
		[]string{"unreserve", "src/auth/**", "--issue", "42", "--force"}, []mcpReply{
			{"0", `{"status":"unreserved","repo":"acme/widgets","reservations":[{"glob":"src/auth/**","shared":false,"holder":"bob","agent":null,"issue":null,"expires_at":null}]}`,
				"unreserved src/auth/** · bob · no expiry"},
			{"0", `{"status":"unreserved","repo":"acme/widgets","reservations":[]}`, "nothing to unreserve in acme/widgets"},
		}},
	{"reservations", map[string]any{"path": "src/auth/login.go"}, []string{"reservations", "--path", "src/auth/login.go"}, []mcpReply{
		{"0", `{"status":"reservations","repo":"acme/widgets","reservations":[{"glob":"src/**","shared":false,"holder":"bot","agent":"agent-3","issue":12,"expires_at":"2026-09-06T09:00:00Z"}]}`,
			"src/** · bot · agent-3 · #12 · until 2026-09-06 09:00 UTC"},
		{"0", `{"status":"reservations","repo":"acme/widgets","reservations":[]}`, "no reservation in acme/widgets matches src/auth/login.go"},
	}},
	{"history", map[string]any{"issue": 7, "limit": 5}, []string{"history", "7", "--limit", "5"}, []mcpReply{
		{"0", `{"repo":"acme/widgets","issue":7,"tenures":[{"token":1,"holder":"alice","agent":null,"acquired_at":"2026-09-05T11:00:00Z","ended_at":"2026-09-05T11:30:00Z","ended_by":"force_released","forced_by":"root"}]}`,
			"TOKEN  HOLDER  ACQUIRED   ENDED      HOW\n1      alice   11:00 UTC  11:30 UTC  force_released by root"},
	}},
}

type mcpReply struct {
	code, stdout string
	text         string // how the first text content starts
}

// withExit is a reply as a session sends it: with "exit".
func withExit(reply, code string) string {
	return strings.TrimSuffix(strings.TrimSpace(reply), "}") + `,"exit":` + code + "}"
}

// Every tool sends over the session exactly the command git collab
// sends for the same call, and hands over the sidecar's exit 0 and exit
// 4 replies whole: as structured content, as JSON text, and summed up as
// git collab would, not as errors.
func TestMCPToolsAnswerAsGitCollabDoes(t *testing.T) {
	t.Parallel()
	if len(mcpCalls) != len(mcpTools) {
		t.Fatalf("%d tools, %d tested", len(mcpTools), len(mcpCalls))
	}
	for _, c := range mcpCalls {
		t.Run(c.tool, func(t *testing.T) {
			t.Parallel()
			cli := newHarness(t, "ssh://alice@forge.example:22/acme/widgets.git")
			cli.answer("0", "{}", "")
			cli.run(append(c.cli, "--json")...)
			sent := cli.sshArgs()
			want := strings.TrimPrefix(sent[len(sent)-1], "collab-lease ")
			for _, r := range c.replies {
				h := newHarness(t, "ssh://alice@forge.example:22/acme/widgets.git")
				f := newFakeSidecar(t, h)
				f.set(func() { f.reply = func(string) (string, bool) { return withExit(r.stdout, r.code), true } })
				res := callTool(t, h.mcpClient(), c.tool, c.args)
				if got := f.received(); len(got) != 1 || got[0] != want {
					t.Fatalf("exit %s: the session received %q; git collab sends %q", r.code, got, want)
				}
				if args := f.conn(1).args; args[len(args)-1] != "collab-lease session --agent 'box-4242'" || args[len(args)-2] != "alice@forge.example" ||
					!slices.Contains(args, "ServerAliveInterval=10") {
					t.Fatalf("ssh ran with %q", args)
				}
				txt := texts(res)
				if res.IsError || len(txt) != 2 || !strings.HasPrefix(txt[0], r.text) {
					t.Fatalf("exit %s: %+v %q\nwant text starting %q", r.code, res, txt, r.text)
				}
				structured, err := json.Marshal(res.StructuredContent)
				if err != nil {
					t.Fatal(err)
				}
				if !sameJSON(t, structured, []byte(r.stdout)) || !sameJSON(t, []byte(txt[1]), []byte(r.stdout)) {
					t.Fatalf("exit %s: structured %s, text %s; the sidecar said %s", r.code, structured, txt[1], r.stdout)
				}
			}
		})
	}
}

// Whatever is not an answer is a tool error, for every tool: the
// sidecar's error line (exit 1); the same with what to do about a
// temporary failure (75); ssh's complaint and where git collab looked
// (255, and any status the sidecar never uses).
func TestMCPFailuresAreToolErrors(t *testing.T) {
	t.Parallel()
	refused := "ssh: connect to host forge.example port 2222: Connection refused\n"
	for _, c := range mcpCalls {
		t.Run(c.tool, func(t *testing.T) {
			t.Parallel()
			for _, f := range []struct {
				code, stderr, want string
			}{
				{"1", "error: write access to acme/widgets issues is required\n", "error: write access to acme/widgets issues is required"},
				{"1", "", "error: the sidecar answered exit status 1 without saying why"},
				{"75", "error: forge unavailable, try again\n", "error: forge unavailable, try again\n" +
					"temporary, retry with backoff: nothing was done; wait 2s, then make the same call again " +
					"(the suggested wait doubles with each temporary failure in a row, up to 60s)"},
				{"255", refused, strings.TrimSpace(refused) + "\ngit-collab: could not reach the sidecar at forge.example:2222 over ssh " +
					`(address from the host of remote "origin"); set git config collab.sidecar host:port or COLLAB_SIDECAR`},
				{"3", "", "git-collab: ssh to the sidecar at forge.example:2222 ended with exit status 3, which the sidecar never uses " +
					"(the command from COLLAB_SSH_COMMAND failed?)"},
			} {
				h := newHarness(t, "git@forge.example:acme/widgets.git")
				h.answer(f.code, "", f.stderr)
				res := callTool(t, h.mcpClient(), c.tool, c.args)
				if txt := texts(res); !res.IsError || len(txt) != 1 || txt[0] != f.want || res.StructuredContent != nil {
					t.Errorf("exit %s: %+v %q\nwant the tool error %q", f.code, res, txt, f.want)
				}
			}
		})
	}
}

// The wait suggested after a temporary failure doubles while they come
// in a row, up to a minute, and starts over after any other answer; all
// the calls go over one session, one ssh.
func TestMCPTemporaryFailureSuggestsABackoff(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	code := ""
	f.set(func() {
		f.reply = func(string) (string, bool) {
			switch code {
			case "0":
				return `{"repo":"acme/widgets","leases":[],"exit":0}`, true
			case "1":
				return `{"status":"error","exit":1,"error":"issue not found"}`, true
			}
			return `{"status":"error","exit":75,"error":"lease database busy, try again"}`, true
		}
	})
	cs := h.mcpClient()
	for _, step := range []struct{ code, wait string }{
		{"75", "wait 2s"}, {"75", "wait 4s"}, {"75", "wait 8s"}, {"75", "wait 16s"}, {"75", "wait 32s"}, {"75", "wait 60s"}, {"75", "wait 60s"},
		{"0", ""}, {"75", "wait 2s"}, {"1", ""}, {"75", "wait 2s"},
	} {
		f.set(func() { code = step.code })
		res := callTool(t, cs, "claims", nil)
		txt := texts(res)
		if step.wait == "" {
			if res.IsError != (step.code != "0") {
				t.Fatalf("exit %s: %+v %q", step.code, res, txt)
			}
			continue
		}
		if !res.IsError || len(txt) != 1 || !strings.HasPrefix(txt[0], "error: lease database busy, try again\ntemporary, retry with backoff") ||
			!strings.Contains(txt[0], step.wait+",") {
			t.Fatalf("want %q: %q", step.wait, txt)
		}
	}
	if f.runs() != 1 {
		t.Fatalf("ssh ran %d times for one session", f.runs())
	}
}

// Mistakes found before anything is sent are tool errors in git
// collab's words, as the command line prints them; ssh does not run.
func TestMCPLocalMistakesSendNothing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"claim", map[string]any{"issue": 42, "ttl": "1.5s"}, `git-collab: --ttl "1.5s" must be a whole number of seconds`},
		{"claim", map[string]any{"issue": 42, "wait": "forever"}, `git-collab: --wait "forever" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{"renew", map[string]any{"issue": 42, "ttl": ""}, `git-collab: renew needs --ttl <dur>`},
		{"next", map[string]any{"labels": []string{"a,b"}}, `git-collab: --label "a,b" may not contain a comma; give --label once per label`},
		{"history", map[string]any{"issue": 7, "limit": 201}, `validating "arguments"`},
		{"claim", map[string]any{"issue": 0}, `validating "arguments"`},
		{"check", map[string]any{"issue": 7}, `validating "arguments"`},
		{"claim", map[string]any{"issue": "#42"}, `validating "arguments"`},
		{"claims", map[string]any{"repo": "acme/other"}, `validating "arguments"`},
		{"merge", map[string]any{"pull": 7, "style": "octopus"}, `validating "arguments"`},
		{"merge", map[string]any{"pull": 0}, `validating "arguments"`},
		{"merge", map[string]any{"issue": 7}, `validating "arguments"`},
		{"merge", map[string]any{"pull": 7, "wait": "1.5s"}, `git-collab: --wait "1.5s" must be a whole number of seconds`},
		{"reserve", map[string]any{"globs": "src/**"}, `validating "arguments"`},
		{"reserve", map[string]any{"globs": []string{"src/**"}, "issue": 0}, `validating "arguments"`},
		{"reserve", map[string]any{"globs": []string{"/etc/**"}, "issue": 4}, `git-collab: glob "/etc/**" starts with /`},
		{"reserve", map[string]any{"globs": []string{}, "issue": 4}, `git-collab: reserve needs <glob>...`},
		{"reserve", map[string]any{"globs": []string{"src/**"}, "issue": 4, "ttl": "1h"}, `git-collab: --issue and --ttl both given`},
		{"reservations", map[string]any{"path": "../a"}, `git-collab: --path "../a" has a segment ".."`},
	} {
		h := newHarness(t, "git@forge.example:acme/widgets.git")
		res := callTool(t, h.mcpClient(), c.tool, c.args)
		if txt := texts(res); !res.IsError || len(txt) != 1 || !strings.HasPrefix(txt[0], c.want) {
			t.Errorf("%s %v: %+v %q\nwant a tool error starting %q", c.tool, c.args, res, txt, c.want)
		}
		if h.sshArgs() != nil {
			t.Errorf("%s %v: ssh ran", c.tool, c.args)
		}
	}

	h := newHarness(t, "")
	h.repo = t.TempDir() // not a repository
	res := callTool(t, h.mcpClient(), "claims", nil)
	if txt := texts(res); !res.IsError || len(txt) != 1 || txt[0] != "git-collab: not inside a git repository; run git collab in a checkout of the repository" {
		t.Errorf("%+v %q", res, txt)
	}
}

// A reply git collab cannot read is a tool error that shows it: the
// sidecar may have done something, and the agent should know what.
func TestMCPReplyItCannotReadIsShown(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ reply, want string }{
		{"hello", "git-collab: could not read the reply of the sidecar at forge.example:2222: it is not a JSON reply; the reply: hello"},
		{`{"status":"odd","exit":0}`, `git-collab: could not read the reply of the sidecar at forge.example:2222 (exit status 0): ` +
			`unexpected status "odd" with exit status 0; the reply: {"status":"odd","exit":0}`},
	} {
		h := newHarness(t, "git@forge.example:acme/widgets.git")
		f := newFakeSidecar(t, h)
		f.set(func() { f.reply = func(string) (string, bool) { return c.reply, true } })
		res := callTool(t, h.mcpClient(), "claim", map[string]any{"issue": 42})
		if txt := texts(res); !res.IsError || len(txt) != 1 || txt[0] != c.want {
			t.Errorf("%+v %q", res, txt)
		}
	}
}

// The tools, their schemas, the prompt and the instructions are what an
// agent learns the contract from: a change to them shows up here as a
// change to testdata/mcp-tools.json (go test -run MCPToolList -update).
func TestMCPToolListIsTheGoldenOne(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	cs := h.mcpClient()
	ctx := context.Background()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	prompts, err := cs.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "workflow"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(map[string]any{
		"instructions": cs.InitializeResult().Instructions,
		"tools":        tools.Tools,
		"prompts":      prompts.Prompts,
		"workflow":     prompt.Messages,
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	checkGolden(t, "mcp-tools.json", got, "MCPToolList")
	// Every tool is a command of git collab's.
	for _, tool := range tools.Tools {
		if v := findVerb(tool.Name); v == nil || v.remote == "" || tool.OutputSchema == nil {
			t.Errorf("tool %s", tool.Name)
		}
	}
}

// `git collab mcp` serves on stdin and stdout, sends a lost claim there
// at once, and ends with exit 0 when the client goes away, closing its
// session: its claims are released.
func TestMCPServesOnStdio(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var errb bytes.Buffer
	done := make(chan int)
	go func() {
		code := h.app(inR, outW, &errb).run([]string{"mcp", "--agent", "agent-7", "--grace", "1m"})
		outW.Close()
		done <- code
	}()
	opts, warnings := gatherWarnings()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts).
		Connect(context.Background(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f.runs() != 0 {
		t.Fatal("the session opened before the first tool call")
	}
	res := callTool(t, cs, "next", nil)
	if res.IsError || !strings.HasPrefix(texts(res)[0], "nothing to claim in acme/widgets") {
		t.Fatalf("%+v", res)
	}
	if res := callTool(t, cs, "claim", map[string]any{"issue": 42}); res.IsError || !f.claimed(42) {
		t.Fatalf("%+v", res)
	}
	if args := f.conn(1).args; args[len(args)-1] != "collab-lease session --agent 'agent-7' --grace '1m'" {
		t.Fatalf("ssh ran with %q", args)
	}
	callTool(t, cs, "claim", map[string]any{"issue": 43})
	f.lose(43, "closed")
	if d := warnings.next(t, "the client"); d.Issue != 43 || d.Token != 2 || d.EndedBy != "closed" || d.Agent == nil || *d.Agent != "agent-7" {
		t.Fatalf("%+v", d)
	}
	cs.Close()
	select {
	case code := <-done:
		if code != 0 || errb.String() != "" {
			t.Fatalf("exit %d, stderr %q", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("git collab mcp did not end when its client went away")
	}
	if f.claimed(42) || f.runs() != 1 {
		t.Fatalf("after the end: claimed %v, %d ssh runs", f.claimed(42), f.runs())
	}
}

// A claim made over the session needs no ttl, and every call goes over
// the one session: one ssh for all of them.
func TestMCPCallsGoOverOneSession(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	cs := h.mcpClient()
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"claim", map[string]any{"issue": 42}},
		{"check", map[string]any{"issue": 42, "token": 1}},
		{"claims", nil},
		{"unclaim", map[string]any{"issue": 42}},
	} {
		if res := callTool(t, cs, c.tool, c.args); res.IsError {
			t.Fatalf("%s: %q", c.tool, texts(res))
		}
	}
	want := []string{"acquire 'acme/widgets' '42'", "check 'acme/widgets' '42' --token '1'", "list 'acme/widgets'", "release 'acme/widgets' '42'"}
	if got := f.received(); !reflect.DeepEqual(got, want) || f.runs() != 1 {
		t.Fatalf("%d ssh runs sent %q, want one sending %q", f.runs(), got, want)
	}
}

// After a dropped connection the session is resumed at once, and the
// next result says so; a claim lost meanwhile is told the same way.
func TestMCPResumesAndSaysSo(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	cs := h.mcpClient()
	callTool(t, cs, "claim", map[string]any{"issue": 42})
	callTool(t, cs, "claim", map[string]any{"issue": 43})
	f.conn(1).drop()
	c := f.conn(2)
	if got := c.args[len(c.args)-1]; got != "collab-lease session --agent 'box-4242' --resume 's-1'" {
		t.Fatalf("the second exec %q", got)
	}
	waitFor(t, "the resume", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.sessions["s-1"].conn == c })
	f.lose(43, "force_released")
	// The lost line is read before the reply that comes after it.
	res := callTool(t, cs, "check", map[string]any{"issue": 42, "token": 1})
	txt := texts(res)
	if res.IsError || len(txt) != 2 ||
		!strings.Contains(txt[0], "Note: the connection to the sidecar dropped and was reopened; the session was resumed, and its claims are kept: acme/widgets#") ||
		!strings.Contains(txt[0], "Note: your claim on acme/widgets#43 (token 2) was lost (force_released)") ||
		!strings.HasSuffix(txt[0], "token 1 is current: acme/widgets#42 held by alice/box-4242 (open-ended)") {
		t.Fatalf("%+v %q", res, txt)
	}
	// Told once.
	if txt := texts(callTool(t, cs, "claims", nil)); strings.Contains(txt[0], "Note:") {
		t.Fatalf("%q", txt)
	}
}

// A session the sidecar will not resume is gone with its claims: the
// next result says so, and it goes over a new session.
func TestMCPSaysWhenTheSessionIsGone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	f.set(func() { f.refuseResume = true })
	cs := h.mcpClient()
	callTool(t, cs, "claim", map[string]any{"issue": 42})
	f.conn(1).drop()
	f.conn(2) // the refused resume
	waitFor(t, "the refusal", func() bool {
		h := f.conn(2)
		select {
		case <-h.done:
			return true
		default:
			return false
		}
	})
	res := callTool(t, cs, "claims", nil)
	txt := texts(res)
	if res.IsError || !strings.HasPrefix(txt[0], "Note: the connection to the sidecar dropped, and the sidecar no longer has the session; "+
		"the claims made through it were lost") {
		t.Fatalf("%+v %q", res, txt)
	}
	if f.runs() != 3 || f.conn(3).args[len(f.conn(3).args)-1] != "collab-lease session --agent 'box-4242'" {
		t.Fatalf("%d ssh runs", f.runs())
	}
}

// A call the agent gives up on (a claim with wait) gets its answer all
// the same, in its turn; a claim it made is released, since nobody would
// know of it.
func TestMCPCancelledClaimIsReleased(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	hold := make(chan struct{})
	f.set(func() { f.hold = hold })
	// The server's own call, so that it is cancelled before the answer
	// comes, as a client's cancellation may or may not be.
	m, err := newMCPServer(h.app(nil, io.Discard, io.Discard), Invocation{Remote: "origin"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := m.call(ctx, findVerb("claim"), 42, []Flag{{Name: "--wait", Value: "1m"}}, nil, true)
		done <- err
	}()
	waitFor(t, "the claim to be sent", func() bool { return len(f.received()) == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled call returned %v", err)
	}
	f.set(func() { f.hold = nil })
	close(hold)
	waitFor(t, "the release", func() bool { r := f.received(); return len(r) == 2 && r[1] == "release 'acme/widgets' '42'" })
	if f.runs() != 1 {
		t.Fatalf("%d ssh runs", f.runs())
	}
}
