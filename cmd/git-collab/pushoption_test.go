//go:build unix

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// These tests hold git collab to the push options of pushoption.go with
// the real git: its config read as pushes read it, and real pushes to a
// bare repository that advertises push options, whose pre-receive hook
// writes down the options it was given, as the gate's hook reads them.

// withIdentity lets h's git make commits.
func (h *harness) withIdentity() {
	h.setenv("GIT_AUTHOR_NAME=Alice", "GIT_AUTHOR_EMAIL=alice@example.org",
		"GIT_COMMITTER_NAME=Alice", "GIT_COMMITTER_EMAIL=alice@example.org")
}

// localOptions are the push.pushOption values of h's checkout's own config.
func (h *harness) localOptions() []string {
	h.t.Helper()
	cmd := exec.Command("git", "-C", h.repo, "config", "--local", "--get-all", "push.pushOption")
	cmd.Env = h.env
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
}

// gateRemote adds to h's checkout a remote named gate: a bare repository
// that advertises push options, as Gitea's do, with a pre-receive hook
// that appends each push's options to the file it returns, one a line,
// and a line "--" after them.
func (h *harness) gateRemote() (pushed string) {
	h.t.Helper()
	dir := h.t.TempDir()
	bare, pushed := filepath.Join(dir, "gate.git"), filepath.Join(dir, "pushed")
	h.git("init", "-q", "--bare", bare)
	h.git("-C", bare, "config", "receive.advertisePushOptions", "true")
	hook := `#!/bin/sh
i=0
while [ "$i" -lt "${GIT_PUSH_OPTION_COUNT:-0}" ]; do
	eval "printf '%s\n' \"\$GIT_PUSH_OPTION_$i\"" >>` + shellQuote(pushed) + `
	i=$((i + 1))
done
echo -- >>` + shellQuote(pushed) + "\n"
	if err := os.WriteFile(filepath.Join(bare, "hooks", "pre-receive"), []byte(hook), 0o755); err != nil {
		h.t.Fatal(err)
	}
	h.git("-C", h.repo, "remote", "add", "gate", bare)
	return pushed
}

// pushedOptions are the options of every push the gate remote took, a
// list per push.
func pushedOptions(t *testing.T, pushed string) [][]string {
	t.Helper()
	b, err := os.ReadFile(pushed)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	var cur []string
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "--" {
			out, cur = append(out, cur), nil
			continue
		}
		cur = append(cur, line)
	}
	return out
}

// The command git collab run runs pushes with the claim's token, added
// after the config entries its caller's environment gives git, which
// stay; every option git would send without it is sent too; and the
// checkout's own config is left as it was.
func TestRunsPushesCarryTheClaimsToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	h.withIdentity()
	f := newFakeSidecar(t, h)
	pushed := h.gateRemote()
	h.git("-C", h.repo, "config", "--add", "push.pushOption", "from-config")
	h.setenv("GIT_CONFIG_COUNT=2", "GIT_CONFIG_KEY_0=push.pushOption", "GIT_CONFIG_VALUE_0=from-caller",
		"GIT_CONFIG_KEY_1=user.name", "GIT_CONFIG_VALUE_1=Alice Caller")
	r := h.run("run", "42", "--", "sh", "-c", `cd "$1" && git config --get-all push.pushOption && git config user.name &&
		git commit -q --allow-empty -m work && git push -q gate HEAD:refs/heads/work/42`, "sh", h.repo)
	if r.code != 0 || r.stdout != "from-config\nfrom-caller\ncollab-lease=42:1\nAlice Caller\n" {
		t.Fatalf("%+v", r)
	}
	if got, want := pushedOptions(t, pushed), [][]string{{"from-config", "from-caller", "collab-lease=42:1"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the push carried %q, want %q", got, want)
	}
	if got := h.localOptions(); !reflect.DeepEqual(got, []string{"from-config"}) {
		t.Fatalf("the checkout's push options are %q after run", got)
	}
	if f.claimed(42) {
		t.Fatal("still claimed")
	}

	// An empty value empties the list read before it: one in the
	// checkout's config, or in the caller's entries, drops what came
	// before it, never the claim's token, which comes after both.
	h.git("-C", h.repo, "config", "--add", "push.pushOption", "")
	h.setenv("GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=push.pushOption", "GIT_CONFIG_VALUE_0=")
	r = h.run("run", "42", "--", "sh", "-c", `cd "$1" && git commit -q --allow-empty -m more && git push -q gate HEAD:refs/heads/work/42`, "sh", h.repo)
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	if got, want := pushedOptions(t, pushed)[1], []string{"collab-lease=42:2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the push carried %q, want %q", got, want)
	}
}

// A git collab run under another adds its own claim's option after the
// outer one's: the inner command's pushes carry both.
func TestRunInsideRunCarriesBothTokens(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	newFakeSidecar(t, h)
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h.setenv(asGitCollabEnv + "=1")
	r := h.run("run", "42", "--", "sh", "-c", `cd "$1" && "$2" run 43 -- git config --get-all push.pushOption`, "sh", h.repo, bin)
	if r.code != 0 || r.stdout != "collab-lease=42:1\ncollab-lease=43:2\n" {
		t.Fatalf("%+v", r)
	}
}

// A GIT_CONFIG_COUNT that git would refuse is refused before anything is
// claimed: one line, exit 1, and the command never starts.
func TestRunRefusesAConfigCountGitWouldRefuse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"GIT_CONFIG_COUNT=two"}, `git-collab: GIT_CONFIG_COUNT "two" is not a number of config entries; git would refuse it too: fix or unset it` + "\n"},
		{[]string{"GIT_CONFIG_COUNT=-1"}, `git-collab: GIT_CONFIG_COUNT "-1" is not a number of config entries; git would refuse it too: fix or unset it` + "\n"},
		{[]string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=push.pushOption"},
			`git-collab: GIT_CONFIG_COUNT is "1", but GIT_CONFIG_VALUE_0 is not set; git would refuse it too: fix or unset it` + "\n"},
	} {
		h := newHarness(t, "git@forge.example:acme/widgets.git")
		f := newFakeSidecar(t, h)
		h.setenv(c.env...)
		marker := filepath.Join(t.TempDir(), "ran")
		if r := h.run("run", "42", "--", "touch", marker); r != (result{"", c.want, 1}) {
			t.Errorf("%q: %+v, want %q", c.env, r, c.want)
		}
		if _, err := os.Stat(marker); err == nil || f.runs() != 0 {
			t.Errorf("%q: the command ran, or ssh did (%d)", c.env, f.runs())
		}
	}
}

// The count is read as git reads it.
func TestGitConfigCount(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		want int
		ok   bool
	}{
		{map[string]string{}, 0, true},
		{map[string]string{"GIT_CONFIG_COUNT": ""}, 0, true},
		{map[string]string{"GIT_CONFIG_COUNT": "0"}, 0, true},
		{map[string]string{"GIT_CONFIG_COUNT": " +1", "GIT_CONFIG_KEY_0": "a.b", "GIT_CONFIG_VALUE_0": ""}, 1, true},
		{map[string]string{"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "a.b", "GIT_CONFIG_VALUE_0": "c", "GIT_CONFIG_VALUE_1": "d"}, 0, false},
		{map[string]string{"GIT_CONFIG_COUNT": "1 "}, 0, false},
		{map[string]string{"GIT_CONFIG_COUNT": "+"}, 0, false},
		{map[string]string{"GIT_CONFIG_COUNT": "99999999999"}, 0, false},
	} {
		n, err := gitConfigCount(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
		if n != c.want || (err == nil) != c.ok {
			t.Errorf("%q: %d, %v", c.env, n, err)
		}
		// git agrees.
		cmd := exec.Command("git", "config", "--list")
		cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull, "HOME=" + t.TempDir()}
		for k, v := range c.env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		if err := cmd.Run(); (err == nil) != c.ok {
			t.Errorf("%q: git config --list: %v", c.env, err)
		}
	}
}

// claim and next set the claim's option in the checkout's own config,
// in place of any older one of the issue; unclaim, a handoff, and a
// reply that the claim is not yours take it out. Options of other
// issues, and other options, stay. The reply names what changed.
func TestClaimAndUnclaimKeepTheCheckoutsPushOption(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	h.withIdentity()
	for _, v := range []string{"ci.skip", "collab-lease=42:2", "collab-lease=420:5", "collab-lease=7:1"} {
		h.git("-C", h.repo, "config", "--add", "push.pushOption", v)
	}
	notHolder := `{"status":"not_holder","repo":"acme/widgets","issue":%d,"holder":"bob","agent":null,"expires_at":null}` + "\n"
	for _, c := range []struct {
		args         []string
		code, stdout string
		want         result
		options      []string
	}{
		{[]string{"claim", "42"}, "0", acquiredJSON,
			result{"claimed acme/widgets#42 (token 3, expires 12:05 UTC, in 30m)\npush option collab-lease=42:3 set in this checkout (in place of collab-lease=42:2)\n", "", 0},
			[]string{"ci.skip", "collab-lease=420:5", "collab-lease=7:1", "collab-lease=42:3"}},
		{[]string{"claim", "42"}, "0", acquiredJSON, // the same claim again
			result{"claimed acme/widgets#42 (token 3, expires 12:05 UTC, in 30m)\npush option collab-lease=42:3 set in this checkout\n", "", 0},
			[]string{"ci.skip", "collab-lease=420:5", "collab-lease=7:1", "collab-lease=42:3"}},
		{[]string{"claim", "420"}, "4", `{"status":"held","repo":"acme/widgets","issue":420,"holder":"bob","agent":null,"expires_at":null}` + "\n",
			result{"", "acme/widgets#420 is claimed by bob (open-ended)\n", 4},
			[]string{"ci.skip", "collab-lease=420:5", "collab-lease=7:1", "collab-lease=42:3"}},
		{[]string{"unclaim", "42"}, "0", `{"status":"released","repo":"acme/widgets","issue":42}` + "\n",
			result{"released acme/widgets#42\npush option collab-lease=42:3 removed from this checkout\n", "", 0},
			[]string{"ci.skip", "collab-lease=420:5", "collab-lease=7:1"}},
		{[]string{"unclaim", "42"}, "0", `{"status":"released","repo":"acme/widgets","issue":42}` + "\n",
			result{"released acme/widgets#42\n", "", 0},
			[]string{"ci.skip", "collab-lease=420:5", "collab-lease=7:1"}},
		{[]string{"unclaim", "7"}, "4", strings.Replace(notHolder, "%d", "7", 1),
			result{"", "not released: acme/widgets#7 is claimed by bob (open-ended)\npush option collab-lease=7:1 removed from this checkout\n", 4},
			[]string{"ci.skip", "collab-lease=420:5"}},
		{[]string{"next"}, "0", strings.Replace(acquiredJSON, `"issue":42`, `"issue":7`, 1),
			result{"claimed acme/widgets#7 (token 3, expires 12:05 UTC, in 30m)\npush option collab-lease=7:3 set in this checkout\n", "", 0},
			[]string{"ci.skip", "collab-lease=420:5", "collab-lease=7:3"}},
		{[]string{"renew", "7", "--ttl", "1h"}, "4", `{"status":"not_holder","repo":"acme/widgets","issue":7,"holder":null,"agent":null,"expires_at":null}` + "\n",
			result{"", "not renewed: you do not hold acme/widgets#7 (nobody does; claim it again)\npush option collab-lease=7:3 removed from this checkout\n", 4},
			[]string{"ci.skip", "collab-lease=420:5"}},
		{[]string{"claim", "42", "--json"}, "0", acquiredJSON,
			result{acquiredJSON, "", 0}, // --json prints the sidecar's reply, nothing else
			[]string{"ci.skip", "collab-lease=420:5", "collab-lease=42:3"}},
		{[]string{"handoff", "42", "--to", "bob", "--json"}, "0",
			`{"status":"handed_off","repo":"acme/widgets","issue":42,"holder":"bob","agent":null,"token":4,"expires_at":null,"from":{"holder":"alice","agent":null,"token":3}}` + "\n",
			result{`{"status":"handed_off","repo":"acme/widgets","issue":42,"holder":"bob","agent":null,"token":4,"expires_at":null,"from":{"holder":"alice","agent":null,"token":3}}` + "\n",
				"", 0},
			[]string{"ci.skip", "collab-lease=420:5"}},
		{[]string{"check", "420", "--token", "5"}, "4", `{"status":"stale","repo":"acme/widgets","issue":420,"token":6}` + "\n",
			result{"", "token 5 is stale: acme/widgets#420 is now at token 6\n", 4},
			[]string{"ci.skip", "collab-lease=420:5"}}, // check only reads
	} {
		h.answer(c.code, c.stdout, "")
		if r := h.run(c.args...); r != c.want {
			t.Errorf("%q: %+v, want %+v", c.args, r, c.want)
		}
		if got := h.localOptions(); !reflect.DeepEqual(got, c.options) {
			t.Errorf("%q: the checkout's push options are %q, want %q", c.args, got, c.options)
		}
	}

	// A push from the checkout carries them, with no -o.
	pushed := h.gateRemote()
	h.answer("0", acquiredJSON, "")
	h.run("claim", "42")
	h.git("-C", h.repo, "commit", "-q", "--allow-empty", "-m", "work")
	h.git("-C", h.repo, "push", "-q", "gate", "HEAD:refs/heads/work/42")
	if got, want := pushedOptions(t, pushed), [][]string{{"ci.skip", "collab-lease=420:5", "collab-lease=42:3"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the push carried %q, want %q", got, want)
	}
}

// A merge takes out of the checkout the options of the claims it ended
// that the reply names: the pull request's own (whoever held it) and the
// issue's it was merged under. A merge that did not happen changes
// nothing, but one answered not_holder, as a release would be.
func TestMergeTakesThePullRequestsPushOptionOut(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	for _, v := range []string{"ci.skip", "collab-lease=7:3", "collab-lease=42:3", "collab-lease=8:1", "collab-lease=43:5", "collab-lease=44:5", "collab-lease=9:2"} {
		h.git("-C", h.repo, "config", "--add", "push.pushOption", v)
	}
	merged := `{"status":"merged","repo":"acme/widgets","pull":%d,"sha":"6f1c0e2d","issue":%d,"token":%d}` + "\n"
	for _, c := range []struct {
		args         []string
		code, stdout string
		want         result
		options      []string
	}{
		{[]string{"merge", "7", "--style", "squash"}, "4", `{"status":"refused","repo":"acme/widgets","pull":7,"reason":"merge conflict"}` + "\n",
			result{"", "not merged: Gitea refused acme/widgets!7: merge conflict\n", 4},
			[]string{"ci.skip", "collab-lease=7:3", "collab-lease=42:3", "collab-lease=8:1", "collab-lease=43:5", "collab-lease=44:5", "collab-lease=9:2"}},
		{[]string{"merge", "7", "--token", "2"}, "4", `{"status":"stale","repo":"acme/widgets","issue":7,"token":3}` + "\n",
			result{"", "not merged: token 2 is stale: acme/widgets#7 is now at token 3\n", 4},
			[]string{"ci.skip", "collab-lease=7:3", "collab-lease=42:3", "collab-lease=8:1", "collab-lease=43:5", "collab-lease=44:5", "collab-lease=9:2"}},
		// Under the pull request's own claim: 42:3 is another issue's.
		{[]string{"merge", "7"}, "0", fmt.Sprintf(merged, 7, 7, 3),
			result{"merged acme/widgets!7 under token 3: 6f1c0e2d\npush option collab-lease=7:3 removed from this checkout\n", "", 0},
			[]string{"ci.skip", "collab-lease=42:3", "collab-lease=8:1", "collab-lease=43:5", "collab-lease=44:5", "collab-lease=9:2"}},
		// Under issue 42's claim: both options go.
		{[]string{"merge", "8"}, "0", fmt.Sprintf(merged, 8, 42, 3),
			result{"merged acme/widgets!8 under token 3: 6f1c0e2d\npush option collab-lease=8:1 removed from this checkout\n" +
				"push option collab-lease=42:3 removed from this checkout\n", "", 0},
			[]string{"ci.skip", "collab-lease=43:5", "collab-lease=44:5", "collab-lease=9:2"}},
		// Options of other issues with the same token stay.
		{[]string{"merge", "10"}, "0", fmt.Sprintf(merged, 10, 43, 5),
			result{"merged acme/widgets!10 under token 5: 6f1c0e2d\npush option collab-lease=43:5 removed from this checkout\n", "", 0},
			[]string{"ci.skip", "collab-lease=44:5", "collab-lease=9:2"}},
		{[]string{"merge", "11"}, "0", fmt.Sprintf(merged, 11, 11, 8),
			result{"merged acme/widgets!11 under token 8: 6f1c0e2d\n", "", 0},
			[]string{"ci.skip", "collab-lease=44:5", "collab-lease=9:2"}},
		{[]string{"merge", "9"}, "4", `{"status":"not_holder","repo":"acme/widgets","issue":9,"holder":"bob","agent":null,"expires_at":null}` + "\n",
			result{"", "not merged: acme/widgets!9 is claimed by bob (open-ended)\npush option collab-lease=9:2 removed from this checkout\n", 4},
			[]string{"ci.skip", "collab-lease=44:5"}},
	} {
		h.answer(c.code, c.stdout, "")
		if r := h.run(c.args...); r != c.want {
			t.Errorf("%q: %+v, want %+v", c.args, r, c.want)
		}
		if got := h.localOptions(); !reflect.DeepEqual(got, c.options) {
			t.Errorf("%q: the checkout's push options are %q, want %q", c.args, got, c.options)
		}
	}
}

// A checkout whose config cannot be written does not turn a claim into a
// failure: one warning line, and the reply as ever.
func TestClaimThatCannotSetThePushOptionWarns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	// git writes its config through config.lock: one that is there
	// already makes every write fail.
	if err := os.WriteFile(filepath.Join(h.repo, ".git", "config.lock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h.answer("0", acquiredJSON, "")
	r := h.run("claim", "42")
	if r.code != 0 || r.stdout != "claimed acme/widgets#42 (token 3, expires 12:05 UTC, in 30m)\n" ||
		!strings.HasPrefix(r.stderr, "git-collab: warning: could not set push option collab-lease=42:3 in this checkout (") ||
		!strings.HasSuffix(r.stderr, "); push with -o collab-lease=42:3\n") || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("%+v", r)
	}
}

// Outside a repository there is no checkout to push from: nothing is
// done, and nothing said.
func TestNoRepositoryNoPushOption(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	g := execGit{dir: dir, env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=" + os.DevNull, "GIT_CEILING_DIRECTORIES=" + filepath.Dir(dir)}}
	if note, err := setGateOption(g, 42, 3); note != "" || err != nil {
		t.Fatalf("set: %q, %v", note, err)
	}
	if note, err := removeGateOptions(g, 42, 0); note != "" || err != nil {
		t.Fatalf("remove: %q, %v", note, err)
	}
}

// The MCP server's claim sets the option in its checkout, and its
// result says so; unclaim takes it out, and so does a lost line of the
// session, the session's loss, and the server's end.
func TestMCPKeepsTheCheckoutsPushOption(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	h.git("-C", h.repo, "config", "--add", "push.pushOption", "ci.skip")
	f := newFakeSidecar(t, h)
	s, err := newMCPServer(h.app(nil, io.Discard, io.Discard), Invocation{Remote: "origin"})
	if err != nil {
		t.Fatal(err)
	}
	closeServer := s.close
	defer closeServer()
	cs := connectMCP(t, s)

	res := callTool(t, cs, "claim", map[string]any{"issue": 42})
	if txt := texts(res); res.IsError || !strings.HasPrefix(txt[0], "claimed acme/widgets#42 (token 1, expires 12:05 UTC, in 30m)\npush option collab-lease=42:1 set in this checkout\nYours") {
		t.Fatalf("%q", txt)
	}
	callTool(t, cs, "claim", map[string]any{"issue": 43})
	callTool(t, cs, "claim", map[string]any{"issue": 44})
	if got, want := h.localOptions(), []string{"ci.skip", "collab-lease=42:1", "collab-lease=43:2", "collab-lease=44:3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the checkout's push options are %q, want %q", got, want)
	}

	res = callTool(t, cs, "unclaim", map[string]any{"issue": 43})
	if txt := texts(res); res.IsError || txt[0] != "released acme/widgets#43\npush option collab-lease=43:2 removed from this checkout" {
		t.Fatalf("%q", txt)
	}

	f.lose(42, "force_released")
	waitFor(t, "the lost claim's option to go", func() bool {
		// The server hears of it at its next call, before the call's own
		// answer.
		res = callTool(t, cs, "claims", nil)
		return strings.Contains(texts(res)[0], "lost")
	})
	if txt := texts(res); !strings.Contains(txt[0], "was lost (force_released): stop working under its token, and do not merge or push that work.\n"+
		"Note: push option collab-lease=42:1 removed from this checkout.\n") {
		t.Fatalf("%q", txt)
	}
	if got, want := h.localOptions(), []string{"ci.skip", "collab-lease=44:3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the checkout's push options are %q, want %q", got, want)
	}

	closeServer()
	if got, want := h.localOptions(), []string{"ci.skip"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after the server's end the checkout's push options are %q, want %q", got, want)
	}
}

// The MCP server's merge takes the pull request's option out of its
// checkout, as an unclaim would; the claim of an issue the pull request
// closes goes when the session says it was lost.
func TestMCPMergeTakesThePullRequestsPushOptionOut(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	cs := h.mcpClient()
	callTool(t, cs, "claim", map[string]any{"issue": 7})
	callTool(t, cs, "claim", map[string]any{"issue": 42})
	if got, want := h.localOptions(), []string{"collab-lease=7:1", "collab-lease=42:2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the checkout's push options are %q, want %q", got, want)
	}
	res := callTool(t, cs, "merge", map[string]any{"pull": 7, "style": "squash"})
	if txt := texts(res); res.IsError || !strings.HasPrefix(txt[0], "merged acme/widgets!7 under token 1: 6f1c0e2d\npush option collab-lease=7:1 removed from this checkout\nMerged.") {
		t.Fatalf("%q", txt)
	}
	if got, want := f.received()[2], "merge 'acme/widgets' '7' --style 'squash'"; got != want {
		t.Fatalf("the session received %q, want %q", got, want)
	}
	if got, want := h.localOptions(), []string{"collab-lease=42:2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the checkout's push options are %q, want %q", got, want)
	}
	f.lose(42, "closed")
	waitFor(t, "the closed issue's option to go", func() bool {
		return strings.Contains(texts(callTool(t, cs, "claims", nil))[0], "Note: push option collab-lease=42:2 removed from this checkout.")
	})
	if got := h.localOptions(); got != nil {
		t.Fatalf("the checkout's push options are %q", got)
	}
}

// A session the sidecar will not resume took its claims with it: their
// options leave the checkout, and the next result says so.
func TestMCPLostSessionTakesItsPushOptions(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	f.set(func() { f.refuseResume = true })
	cs := h.mcpClient()
	callTool(t, cs, "claim", map[string]any{"issue": 42})
	f.conn(1).drop()
	waitFor(t, "the refused resume", func() bool {
		select {
		case <-f.conn(2).done:
			return true
		default:
			return false
		}
	})
	txt := texts(callTool(t, cs, "claims", nil))
	if !strings.Contains(txt[0], "A new session is opened for the next call.\nNote: push option collab-lease=42:1 removed from this checkout.\n") {
		t.Fatalf("%q", txt)
	}
	if got := h.localOptions(); got != nil {
		t.Fatalf("the checkout's push options are %q", got)
	}
}
