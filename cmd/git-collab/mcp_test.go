package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// These tests drive git collab mcp's tools through an MCP client of the
// same SDK, in process, over its in-memory transport; the server runs
// the real git and, as main_test.go's do, the fake ssh. The real sidecar
// and OpenSSH, over stdio, are in integration/mcp_e2e_test.go.

var update = flag.Bool("update", false, "rewrite testdata/mcp-tools.json from what git collab mcp lists")

// mcpClient connects a client to git collab mcp's server in h's checkout,
// with h's environment as it is now.
func (h *harness) mcpClient() *mcp.ClientSession {
	h.t.Helper()
	s, err := newMCPServer(h.app(nil, io.Discard, io.Discard), "origin")
	if err != nil {
		h.t.Fatal(err)
	}
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
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
		{"0", acquiredJSON, "claimed acme/widgets#42 (token 3, expires 12:05 UTC, in 30m)\nYours: renew before it expires, check token 3"},
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
	{"history", map[string]any{"issue": 7, "limit": 5}, []string{"history", "7", "--limit", "5"}, []mcpReply{
		{"0", `{"repo":"acme/widgets","issue":7,"tenures":[{"token":1,"holder":"alice","agent":null,"acquired_at":"2026-09-05T11:00:00Z","ended_at":"2026-09-05T11:30:00Z","ended_by":"force_released","forced_by":"root"}]}`,
			"TOKEN  HOLDER  ACQUIRED   ENDED      HOW\n1      alice   11:00 UTC  11:30 UTC  force_released by root"},
	}},
}

type mcpReply struct {
	code, stdout string
	text         string // how the first text content starts
}

// Every tool sends exactly the command git collab sends for the same
// call, to the same sidecar through the same ssh, and hands over the
// sidecar's exit 0 and exit 4 replies whole: as structured content, as
// JSON text, and summed up as git collab would, not as errors.
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
			for _, r := range c.replies {
				h := newHarness(t, "ssh://alice@forge.example:22/acme/widgets.git")
				h.answer(r.code, r.stdout, "")
				res := callTool(t, h.mcpClient(), c.tool, c.args)
				if got, want := h.sshArgs(), cli.sshArgs(); !reflect.DeepEqual(got, want) {
					t.Fatalf("exit %s: ssh ran with %q; git collab runs %q", r.code, got, want)
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
// in a row, up to a minute, and starts over after any other answer.
func TestMCPTemporaryFailureSuggestsABackoff(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	// The answer is read from a file, so one server sees them change.
	answerFile := filepath.Join(t.TempDir(), "answer")
	h.setenv("COLLAB_SSH_COMMAND=. " + shellQuote(answerFile) + "; " + shellQuote(h.ssh))
	set := func(code string) {
		if err := os.WriteFile(answerFile, []byte("FAKE_CODE="+code+"; export FAKE_CODE\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h.setenv("FAKE_STDOUT="+`{"repo":"acme/widgets","leases":[]}`, "FAKE_STDERR=error: lease database busy, try again\n")
	cs := h.mcpClient()
	for _, step := range []struct{ code, wait string }{
		{"75", "wait 2s"}, {"75", "wait 4s"}, {"75", "wait 8s"}, {"75", "wait 16s"}, {"75", "wait 32s"}, {"75", "wait 60s"}, {"75", "wait 60s"},
		{"0", ""}, {"75", "wait 2s"}, {"1", ""}, {"75", "wait 2s"},
	} {
		set(step.code)
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
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	h.answer("0", "hello\n", "")
	res := callTool(t, h.mcpClient(), "claim", map[string]any{"issue": 42})
	want := "git-collab: could not read the reply of the sidecar at forge.example:2222 (exit status 0): " +
		"not the JSON reply expected: invalid character 'h' looking for beginning of value; the reply: hello"
	if txt := texts(res); !res.IsError || len(txt) != 1 || txt[0] != want {
		t.Fatalf("%+v %q", res, txt)
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
	golden := filepath.Join("testdata", "mcp-tools.json")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -run MCPToolList -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("git collab mcp lists tools other than %s; if that is meant, run go test -run MCPToolList -update and review the diff\n%s",
			golden, got)
	}
	// Every tool is a command of git collab's.
	for _, tool := range tools.Tools {
		if v := findVerb(tool.Name); v == nil || v.remote == "" || tool.OutputSchema == nil {
			t.Errorf("tool %s", tool.Name)
		}
	}
}

// `git collab mcp` serves on stdin and stdout, and ends with exit 0 when
// the client goes away.
func TestMCPServesOnStdio(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	h.answer("4", `{"status":"none","repo":"acme/widgets"}`, "")
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var errb bytes.Buffer
	done := make(chan int)
	go func() {
		code := h.app(inR, outW, &errb).run([]string{"mcp"})
		outW.Close()
		done <- code
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(context.Background(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := callTool(t, cs, "next", nil)
	if res.IsError || !strings.HasPrefix(texts(res)[0], "nothing to claim in acme/widgets") {
		t.Fatalf("%+v", res)
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
}
