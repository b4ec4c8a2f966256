package contract

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// cmdTestMaxTTL is the default --max-ttl.
const cmdTestMaxTTL = 168 * time.Hour

type parseCase struct {
	line string
	want Command // checked when err is ""
	err  string  // the whole error line the server prints; "" means success
}

func acq(owner, name string, issue int64, ttl time.Duration) Command {
	return Command{Verb: VerbAcquire, Owner: owner, Name: name, Issue: issue, TTL: ttl}
}

// parseCases is shared with the fuzz targets as their seed corpus.
var parseCases = []parseCase{
	// The five verbs.
	{line: "collab-lease acquire acme/widgets 42", want: acq("acme", "widgets", 42, 0)},
	{line: "collab-lease acquire acme/widgets 42 --ttl 30m", want: acq("acme", "widgets", 42, 30*time.Minute)},
	{line: "collab-lease renew acme/widgets 42 --ttl 90s", want: Command{Verb: VerbRenew, Owner: "acme", Name: "widgets", Issue: 42, TTL: 90 * time.Second}},
	{line: "collab-lease release acme/widgets 42", want: Command{Verb: VerbRelease, Owner: "acme", Name: "widgets", Issue: 42}},
	{line: "collab-lease list acme/widgets", want: Command{Verb: VerbList, Owner: "acme", Name: "widgets"}},
	{line: "collab-lease help", want: Command{Verb: VerbHelp}},

	// --ttl forms and positions.
	{line: "collab-lease acquire acme/widgets 42 --ttl=30m", want: acq("acme", "widgets", 42, 30*time.Minute)},
	{line: "collab-lease acquire acme/widgets 42 --ttl 300", want: acq("acme", "widgets", 42, 300*time.Second)},
	{line: "collab-lease acquire acme/widgets 42 --ttl 1h30m", want: acq("acme", "widgets", 42, 90*time.Minute)},
	{line: "collab-lease acquire acme/widgets 42 --ttl 2000ms", want: acq("acme", "widgets", 42, 2*time.Second)},
	{line: "collab-lease acquire acme/widgets 42 --ttl 1", want: acq("acme", "widgets", 42, time.Second)},
	{line: "collab-lease acquire acme/widgets 42 --ttl 168h", want: acq("acme", "widgets", 42, cmdTestMaxTTL)},
	{line: "collab-lease acquire acme/widgets 42 --ttl 604800", want: acq("acme", "widgets", 42, cmdTestMaxTTL)},
	{line: "collab-lease acquire --ttl 30m acme/widgets 42", want: acq("acme", "widgets", 42, 30*time.Minute)},
	{line: "collab-lease acquire acme/widgets --ttl=30m 42", want: acq("acme", "widgets", 42, 30*time.Minute)},
	{line: "collab-lease renew --ttl 2h acme/widgets #7", want: Command{Verb: VerbRenew, Owner: "acme", Name: "widgets", Issue: 7, TTL: 2 * time.Hour}},

	// <owner>/<repo> spellings.
	{line: "collab-lease acquire /acme/widgets.git 42", want: acq("acme", "widgets", 42, 0)},
	{line: "collab-lease acquire acme/widgets.git 42", want: acq("acme", "widgets", 42, 0)},
	{line: "collab-lease acquire /acme/widgets 42", want: acq("acme", "widgets", 42, 0)},
	{line: "collab-lease acquire acme/Widgets.GIT 42", want: acq("acme", "Widgets", 42, 0)},
	{line: "collab-lease list My-Org_2/my_repo.v2-x", want: Command{Verb: VerbList, Owner: "My-Org_2", Name: "my_repo.v2-x"}},
	{line: "collab-lease list a/b", want: Command{Verb: VerbList, Owner: "a", Name: "b"}},
	{line: "collab-lease list a/-b", want: Command{Verb: VerbList, Owner: "a", Name: "-b"}},
	{line: "collab-lease list a/.hidden", want: Command{Verb: VerbList, Owner: "a", Name: ".hidden"}},
	{line: "collab-lease list a/widgets.github", want: Command{Verb: VerbList, Owner: "a", Name: "widgets.github"}},
	{line: "collab-lease list " + strings.Repeat("o", 100) + "/" + strings.Repeat("r", 100), want: Command{Verb: VerbList, Owner: strings.Repeat("o", 100), Name: strings.Repeat("r", 100)}},

	// <issue> spellings.
	{line: "collab-lease acquire acme/widgets #42", want: acq("acme", "widgets", 42, 0)},
	{line: "collab-lease acquire acme/widgets 1", want: acq("acme", "widgets", 1, 0)},
	{line: "collab-lease acquire acme/widgets 9223372036854775807", want: acq("acme", "widgets", 1<<63-1, 0)},
	{line: "collab-lease acquire acme/widgets 10", want: acq("acme", "widgets", 10, 0)},

	// Quoting and whitespace.
	{line: `collab-lease acquire 'acme'/"widgets" '42'`, want: acq("acme", "widgets", 42, 0)},
	{line: `"collab-lease" "acquire" "acme/widgets" "#42" "--ttl" "30m"`, want: acq("acme", "widgets", 42, 30*time.Minute)},
	{line: `collab-lease acquire acme\/widgets 4\2`, want: acq("acme", "widgets", 42, 0)},
	{line: `collab-lease acquire acme/widgets 42 '--ttl=30m'`, want: acq("acme", "widgets", 42, 30*time.Minute)},
	{line: `collab-lease acquire acme/widgets 42 --ttl='3''0m'`, want: acq("acme", "widgets", 42, 30*time.Minute)},
	{line: "  collab-lease \t acquire\tacme/widgets   42  ", want: acq("acme", "widgets", 42, 0)},
	{line: "collab-lease list acme/widgets\n", want: Command{Verb: VerbList, Owner: "acme", Name: "widgets"}},
	{line: "collab-lease list acme/widgets\r\n", want: Command{Verb: VerbList, Owner: "acme", Name: "widgets"}},
	{line: "collab-lease list acme/widgets \n \n", want: Command{Verb: VerbList, Owner: "acme", Name: "widgets"}},

	// Not collab-lease at all.
	{line: "", err: "error: usage: empty command; try: collab-lease help"},
	{line: " \t ", err: "error: usage: empty command; try: collab-lease help"},
	{line: "\n", err: "error: usage: empty command; try: collab-lease help"},
	{line: "git-upload-pack 'acme/widgets.git'", err: `error: usage: unknown command "git-upload-pack"; this server runs only collab-lease (try: collab-lease help)`},
	{line: "Collab-lease help", err: `error: usage: unknown command "Collab-lease"; this server runs only collab-lease (try: collab-lease help)`},
	{line: "collab-lease", err: "error: usage: missing sub-verb; try: collab-lease help"},

	// Sub-verbs.
	{line: "collab-lease foo", err: `error: usage: unknown verb "foo"; try: collab-lease help`},
	{line: "collab-lease ACQUIRE acme/widgets 42", err: `error: usage: unknown verb "ACQUIRE"; try: collab-lease help`},
	{line: "collab-lease --help", err: `error: usage: unknown verb "--help"; try: collab-lease help`},
	{line: "collab-lease help me", err: `error: usage: help takes no arguments, got "me"`},
	{line: "collab-lease help --ttl 5m", err: `error: usage: help takes no arguments, got "--ttl"`},

	// Arity.
	{line: "collab-lease acquire", err: "error: usage: acquire needs <owner>/<repo>; expected: collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--force] [--agent <name>]"},
	{line: "collab-lease acquire acme/widgets", err: "error: usage: acquire needs <issue>; expected: collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--force] [--agent <name>]"},
	{line: "collab-lease acquire acme/widgets --ttl 5m", err: "error: usage: acquire needs <issue>; expected: collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--force] [--agent <name>]"},
	{line: "collab-lease release acme/widgets", err: "error: usage: release needs <issue>; expected: collab-lease release <owner>/<repo> <issue> [--force] [--agent <name>]"},
	{line: "collab-lease renew", err: "error: usage: renew needs <owner>/<repo>; expected: collab-lease renew <owner>/<repo> <issue> --ttl <dur> [--agent <name>]"},
	{line: "collab-lease list", err: "error: usage: list needs <owner>/<repo>; expected: collab-lease list <owner>/<repo> [--agent <name>]"},
	{line: "collab-lease acquire acme/widgets 42 43", err: `error: usage: unexpected argument "43"; expected: collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--force] [--agent <name>]`},
	{line: "collab-lease release acme/widgets 42 now", err: `error: usage: unexpected argument "now"; expected: collab-lease release <owner>/<repo> <issue> [--force] [--agent <name>]`},
	{line: "collab-lease list acme/widgets 42", err: `error: usage: unexpected argument "42"; expected: collab-lease list <owner>/<repo> [--agent <name>]`},
	{line: "collab-lease acquire acme widgets 42", err: `error: usage: unexpected argument "42"; expected: collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--force] [--agent <name>]`},

	// --ttl placement and shape.
	{line: "collab-lease renew acme/widgets 42", err: "error: usage: renew needs --ttl <dur>; expected: collab-lease renew <owner>/<repo> <issue> --ttl <dur> [--agent <name>]"},
	{line: "collab-lease release acme/widgets 42 --ttl 5m", err: "error: usage: release takes no --ttl; expected: collab-lease release <owner>/<repo> <issue> [--force] [--agent <name>]"},
	{line: "collab-lease list acme/widgets --ttl=5m", err: "error: usage: list takes no --ttl; expected: collab-lease list <owner>/<repo> [--agent <name>]"},
	{line: "collab-lease acquire acme/widgets 42 --ttl", err: "error: usage: --ttl needs a duration, e.g. --ttl 30m"},
	{line: "collab-lease acquire acme/widgets 42 --ttl=", err: "error: usage: --ttl is empty; use whole seconds (300) or a Go duration (90s, 30m, 2h)"},
	{line: "collab-lease acquire acme/widgets 42 --ttl 5m --ttl 6m", err: "error: usage: --ttl given more than once"},
	{line: "collab-lease acquire acme/widgets 42 --ttl=5m --ttl=5m", err: "error: usage: --ttl given more than once"},
	{line: "collab-lease acquire acme/widgets 42 --force", want: Command{Verb: VerbAcquire, Owner: "acme", Name: "widgets", Issue: 42, Force: true}},
	{line: "collab-lease unquarantine acme/widgets 42", want: Command{Verb: VerbUnquarantine, Owner: "acme", Name: "widgets", Issue: 42}},
	{line: "collab-lease unquarantine acme/widgets 42 --force", err: "error: usage: unquarantine takes no --force; expected: collab-lease unquarantine <owner>/<repo> <issue> [--agent <name>]"},
	{line: "collab-lease acquire acme/widgets 42 --frobnicate", err: `error: usage: unknown flag "--frobnicate"; expected: collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--force] [--agent <name>]`},

	// The agent verbs (docs/ssh.md, The agent verbs).
	{line: "collab-lease acquire acme/widgets 42 --wait 5m", want: Command{Verb: VerbAcquire, Owner: "acme", Name: "widgets", Issue: 42, Wait: 5 * time.Minute}},
	{line: "collab-lease acquire acme/widgets 42 --wait=90 --ttl 30m", want: Command{Verb: VerbAcquire, Owner: "acme", Name: "widgets", Issue: 42, TTL: 30 * time.Minute, Wait: 90 * time.Second}},
	{line: "collab-lease acquire acme/widgets 42 --wait 169h", err: `error: usage: --wait "169h" is more than the maximum of 168h`},
	{line: "collab-lease acquire acme/widgets 42 --wait 0", err: `error: usage: --wait "0" must be at least 1s`},
	{line: "collab-lease acquire acme/widgets 42 --wait", err: "error: usage: --wait needs a duration, e.g. --wait 5m"},
	{line: "collab-lease acquire acme/widgets 42 --wait 1m --wait 2m", err: "error: usage: --wait given more than once"},
	{line: "collab-lease release acme/widgets 42 --force", want: Command{Verb: VerbRelease, Owner: "acme", Name: "widgets", Issue: 42, Force: true}},
	{line: "collab-lease release acme/widgets 42 --force=yes", err: `error: usage: --force takes no value, got "--force=yes"`},
	{line: "collab-lease release acme/widgets 42 --force --force", err: "error: usage: --force given more than once"},
	{line: "collab-lease next acme/widgets", want: Command{Verb: VerbNext, Owner: "acme", Name: "widgets"}},
	{line: "collab-lease next acme/widgets --label bug --label 'good first issue' --pulls --ttl 30m", want: Command{Verb: VerbNext, Owner: "acme", Name: "widgets", Labels: []string{"bug", "good first issue"}, Pulls: true, TTL: 30 * time.Minute}},
	{line: "collab-lease next --label=bug acme/widgets", want: Command{Verb: VerbNext, Owner: "acme", Name: "widgets", Labels: []string{"bug"}}},
	{line: "collab-lease next acme/widgets 42", err: `error: usage: unexpected argument "42"; expected: collab-lease next <owner>/<repo> [--label <name>]... [--pulls] [--oldest] [--ttl <dur>] [--wait <dur>] [--agent <name>]`},
	{line: "collab-lease next", err: "error: usage: next needs <owner>/<repo>; expected: collab-lease next <owner>/<repo> [--label <name>]... [--pulls] [--oldest] [--ttl <dur>] [--wait <dur>] [--agent <name>]"},
	{line: "collab-lease next acme/widgets --label", err: "error: usage: --label needs a label name, e.g. --label bug"},
	{line: "collab-lease next acme/widgets --label=", err: "error: usage: --label is empty; expected a label name"},
	{line: "collab-lease next acme/widgets --label a,b", err: `error: usage: --label "a,b" may not contain a comma; give --label once per label`},
	{line: "collab-lease next acme/widgets" + strings.Repeat(" --label x", 11), err: "error: usage: --label given more than 10 times"},
	{line: "collab-lease next acme/widgets --label " + strings.Repeat("l", 256), err: `error: usage: --label "` + strings.Repeat("l", 64) + `"… is longer than 255 bytes`},
	{line: "collab-lease next acme/widgets --wait 5m", want: Command{Verb: VerbNext, Owner: "acme", Name: "widgets", Wait: 5 * time.Minute}},
	{line: "collab-lease next acme/widgets --wait 0s", err: `error: usage: --wait "0s" must be at least 1s`},
	{line: "collab-lease next acme/widgets -1", err: `error: usage: unknown flag "-1"; expected: collab-lease next <owner>/<repo> [--label <name>]... [--pulls] [--oldest] [--ttl <dur>] [--wait <dur>] [--agent <name>]`},
	{line: "collab-lease check acme/widgets #42 --token 3", want: Command{Verb: VerbCheck, Owner: "acme", Name: "widgets", Issue: 42, Token: 3}},
	{line: "collab-lease check acme/widgets 42 --token=9223372036854775807", want: Command{Verb: VerbCheck, Owner: "acme", Name: "widgets", Issue: 42, Token: 1<<63 - 1}},
	{line: "collab-lease check acme/widgets 42", err: "error: usage: check needs --token <n>; expected: collab-lease check <owner>/<repo> <issue> --token <n> [--agent <name>]"},
	{line: "collab-lease check acme/widgets 42 --token 0", err: `error: usage: --token must be a positive number, got "0"`},
	{line: "collab-lease check acme/widgets 42 --token 03", err: `error: usage: --token must not have a leading zero, got "03"`},
	{line: "collab-lease check acme/widgets 42 --token -3", err: `error: usage: --token must be a positive number, got "-3"`},
	{line: "collab-lease check acme/widgets 42 --token 3x", err: `error: usage: --token must be a positive number, got "3x"`},
	{line: "collab-lease check acme/widgets 42 --token 9223372036854775808", err: `error: usage: --token "9223372036854775808" is more than the maximum of 9223372036854775807`},
	{line: "collab-lease check acme/widgets -42 --token 3", err: `error: usage: issue must be a positive number, got "-42"`},
	{line: "collab-lease history acme/widgets 42", want: Command{Verb: VerbHistory, Owner: "acme", Name: "widgets", Issue: 42, Limit: DefaultHistoryLimit}},

	// --agent, on every verb but help.
	{line: "collab-lease acquire acme/widgets 42 --agent agent-7", want: Command{Verb: VerbAcquire, Owner: "acme", Name: "widgets", Issue: 42, Agent: "agent-7"}},
	{line: "collab-lease renew acme/widgets 42 --ttl 5m --agent=a.b_c-9", want: Command{Verb: VerbRenew, Owner: "acme", Name: "widgets", Issue: 42, TTL: 5 * time.Minute, Agent: "a.b_c-9"}},
	{line: "collab-lease release acme/widgets 42 --agent 7", want: Command{Verb: VerbRelease, Owner: "acme", Name: "widgets", Issue: 42, Agent: "7"}},
	{line: "collab-lease list acme/widgets --agent x", want: Command{Verb: VerbList, Owner: "acme", Name: "widgets", Agent: "x"}},
	{line: "collab-lease next acme/widgets --agent x --pulls", want: Command{Verb: VerbNext, Owner: "acme", Name: "widgets", Pulls: true, Agent: "x"}},
	{line: "collab-lease next acme/widgets --oldest", want: Command{Verb: VerbNext, Owner: "acme", Name: "widgets", Oldest: true}},
	{line: "collab-lease handoff acme/widgets 42 --to bob", want: Command{Verb: VerbHandoff, Owner: "acme", Name: "widgets", Issue: 42, ToLogin: "bob"}},
	{line: "collab-lease handoff acme/widgets 42 --to bot/agent-8 --agent agent-7", want: Command{Verb: VerbHandoff, Owner: "acme", Name: "widgets", Issue: 42, ToLogin: "bot", ToAgent: "agent-8", Agent: "agent-7"}},
	{line: "collab-lease handoff acme/widgets 42", err: "error: usage: handoff needs --to <login>[/<agent>]; expected: collab-lease handoff <owner>/<repo> <issue> --to <login>[/<agent>] [--agent <name>]"},
	{line: "collab-lease handoff acme/widgets 42 --to 'a b'", err: `error: usage: --to must be a login, or login/agent, got "a b"`},
	{line: "collab-lease merge acme/widgets 7", want: Command{Verb: VerbMerge, Owner: "acme", Name: "widgets", Issue: 7, Wait: DefaultMergeWait}},
	{line: "collab-lease merge acme/widgets #7 --token 8 --style squash --delete-branch --wait 30s --agent a1",
		want: Command{Verb: VerbMerge, Owner: "acme", Name: "widgets", Issue: 7, Token: 8, Style: "squash", DeleteBranch: true, Wait: 30 * time.Second, Agent: "a1"}},
	{line: "collab-lease merge acme/widgets 7 --style manually-merged", err: `error: usage: --style must be one of merge, rebase, rebase-merge, squash, fast-forward-only, got "manually-merged"`},
	{line: "collab-lease merge acme/widgets 07", err: `error: usage: pull request must not have a leading zero, got "07"`},
	{line: "collab-lease merge acme/widgets", err: "error: usage: merge needs <pull>; expected: collab-lease merge <owner>/<repo> <pull> [--token <n>] [--style merge|rebase|rebase-merge|squash|fast-forward-only] [--delete-branch] [--wait <dur>] [--agent <name>]"},
	{line: "collab-lease reserve acme/widgets src/auth/** src/auth/** docs/ --issue 3",
		want: Command{Verb: VerbReserve, Owner: "acme", Name: "widgets", Issue: 3, Globs: []string{"src/auth/**", "docs/"}}},
	{line: "collab-lease reserve acme/widgets 'src/a b.go' --shared --ttl 10m --agent a1",
		want: Command{Verb: VerbReserve, Owner: "acme", Name: "widgets", Globs: []string{"src/a b.go"}, Shared: true, TTL: 10 * time.Minute, Agent: "a1"}},
	{line: "collab-lease reserve acme/widgets --issue 3", err: "error: usage: reserve needs <glob>...; expected: collab-lease reserve <owner>/<repo> <glob>... [--issue <n>] [--shared] [--ttl <dur>] [--agent <name>]"},
	{line: "collab-lease reserve acme/widgets src/ --issue 3 --ttl 1m", err: "error: usage: --issue and --ttl both given: a reservation of a claim lives as long as the claim"},
	{line: "collab-lease reserve acme/widgets /etc/passwd --ttl 1m", err: `error: usage: glob "/etc/passwd" starts with /: name paths from the repository's root`},
	{line: "collab-lease reserve acme/widgets src/../x --ttl 1m", err: `error: usage: glob "src/../x" has a segment ".."; name paths from the repository's root`},
	{line: "collab-lease reserve acme/widgets src//x --ttl 1m", err: `error: usage: glob "src//x" has an empty segment`},
	{line: "collab-lease reserve acme/widgets 'src/\u202egol.go' --ttl 1m", err: `error: usage: glob "src/\u202egol.go" holds a control or formatting character`},
	{line: "collab-lease reserve acme/widgets 'src/\u009b31m' --ttl 1m", err: `error: usage: glob "src/\u009b31m" holds a control or formatting character`},
	{line: "collab-lease reserve acme/widgets src/x --issue 0", err: `error: usage: issue must be a positive number, got "0"`},
	{line: "collab-lease reserve acme/widgets " + strings.Repeat("a/", 130) + "x --ttl 1m", err: "error: usage: glob \"" + strings.Repeat("a/", 32) + "\"… is longer than 255 bytes"},
	{line: "collab-lease unreserve acme/widgets", want: Command{Verb: VerbUnreserve, Owner: "acme", Name: "widgets"}},
	{line: "collab-lease unreserve acme/widgets src/ --issue 4 --force", want: Command{Verb: VerbUnreserve, Owner: "acme", Name: "widgets", Globs: []string{"src/"}, Issue: 4, Force: true}},
	{line: "collab-lease unreserve acme/widgets src/ --ttl 1m", err: "error: usage: unreserve takes no --ttl; expected: collab-lease unreserve <owner>/<repo> [<glob>...] [--issue <n>] [--force] [--agent <name>]"},
	{line: "collab-lease reservations acme/widgets --path src/auth/login.go", want: Command{Verb: VerbReservations, Owner: "acme", Name: "widgets", Path: "src/auth/login.go"}},
	{line: "collab-lease reservations acme/widgets src/", err: `error: usage: unexpected argument "src/"; expected: collab-lease reservations <owner>/<repo> [--path <path>] [--agent <name>]`},
	{line: "collab-lease reservations acme/widgets --path src/", err: `error: usage: --path "src/" has an empty segment`},
	{line: "collab-lease acquire acme/widgets 7 --issue 8", err: "error: usage: acquire takes no --issue; expected: collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--force] [--agent <name>]"},
	{line: "collab-lease merge acme/widgets 7 --ttl 5m", err: "error: usage: merge takes no --ttl; expected: collab-lease merge <owner>/<repo> <pull> [--token <n>] [--style merge|rebase|rebase-merge|squash|fast-forward-only] [--delete-branch] [--wait <dur>] [--agent <name>]"},
	{line: "collab-lease acquire acme/widgets 7 --style squash", err: "error: usage: acquire takes no --style; expected: collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--force] [--agent <name>]"},
	{line: "collab-lease handoff acme/widgets 42 --to bob/", err: `error: usage: --to "bob/": the agent must be 1 to 40 of A-Z a-z 0-9 . _ - starting with a letter or digit`},
	{line: "collab-lease acquire acme/widgets 42 --oldest", err: "error: usage: acquire takes no --oldest; expected: collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--force] [--agent <name>]"},
	{line: "collab-lease check acme/widgets 42 --token 3 --agent x", want: Command{Verb: VerbCheck, Owner: "acme", Name: "widgets", Issue: 42, Token: 3, Agent: "x"}},
	{line: "collab-lease history acme/widgets 42 --agent x", want: Command{Verb: VerbHistory, Owner: "acme", Name: "widgets", Issue: 42, Limit: DefaultHistoryLimit, Agent: "x"}},
	{line: "collab-lease acquire acme/widgets 42 --agent " + strings.Repeat("a", MaxAgentLen), want: Command{Verb: VerbAcquire, Owner: "acme", Name: "widgets", Issue: 42, Agent: strings.Repeat("a", MaxAgentLen)}},
	{line: "collab-lease acquire acme/widgets 42 --agent " + strings.Repeat("a", MaxAgentLen+1), err: `error: usage: --agent must be 1 to 40 of A-Z a-z 0-9 . _ - starting with a letter or digit, got "` + strings.Repeat("a", MaxAgentLen+1) + `"`},
	{line: "collab-lease acquire acme/widgets 42 --agent .hidden", err: `error: usage: --agent must be 1 to 40 of A-Z a-z 0-9 . _ - starting with a letter or digit, got ".hidden"`},
	{line: "collab-lease acquire acme/widgets 42 --agent 'a b'", err: `error: usage: --agent must be 1 to 40 of A-Z a-z 0-9 . _ - starting with a letter or digit, got "a b"`},
	{line: "collab-lease acquire acme/widgets 42 --agent a/b", err: `error: usage: --agent must be 1 to 40 of A-Z a-z 0-9 . _ - starting with a letter or digit, got "a/b"`},
	{line: "collab-lease acquire acme/widgets 42 --agent", err: `error: usage: --agent needs an agent name, e.g. --agent agent-7`},
	{line: "collab-lease acquire acme/widgets 42 --agent a --agent b", err: `error: usage: --agent given more than once`},
	{line: "collab-lease help --agent a", err: `error: usage: help takes no arguments, got "--agent"`},
	{line: "collab-lease history acme/widgets 42 --limit 200", want: Command{Verb: VerbHistory, Owner: "acme", Name: "widgets", Issue: 42, Limit: 200}},
	{line: "collab-lease history acme/widgets 42 --limit 201", err: `error: usage: --limit "201" is more than the maximum of 200`},
	{line: "collab-lease history acme/widgets 42 --limit 0", err: `error: usage: --limit must be a positive number, got "0"`},
	{line: "collab-lease history acme/widgets 42 --ttl 5m", err: "error: usage: history takes no --ttl; expected: collab-lease history <owner>/<repo> <issue> [--limit <n>] [--agent <name>]"},
	{line: "collab-lease history acme/widgets", err: "error: usage: history needs <issue>; expected: collab-lease history <owner>/<repo> <issue> [--limit <n>] [--agent <name>]"},
	{line: "collab-lease acquire acme/widgets 42 -t 5m", err: `error: usage: unknown flag "-t"; expected: collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--force] [--agent <name>]`},
	{line: "collab-lease acquire acme/widgets 42 --TTL 5m", err: `error: usage: unknown flag "--TTL"; expected: collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--force] [--agent <name>]`},
	{line: "collab-lease acquire acme/widgets 42 --ttl-x=5m", err: `error: usage: unknown flag "--ttl-x=5m"; expected: collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--force] [--agent <name>]`},
	{line: "collab-lease acquire acme/widgets 42 -- 5m", err: `error: usage: unknown flag "--"; expected: collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--force] [--agent <name>]`},
	{line: "collab-lease acquire acme/widgets 42 -", err: `error: usage: unknown flag "-"; expected: collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--force] [--agent <name>]`},
	{line: "collab-lease list acme/widgets -1", err: `error: usage: unknown flag "-1"; expected: collab-lease list <owner>/<repo> [--agent <name>]`},

	// <dur> values.
	{line: "collab-lease acquire acme/widgets 42 --ttl 0", err: `error: usage: --ttl "0" must be at least 1s`},
	{line: "collab-lease acquire acme/widgets 42 --ttl 0s", err: `error: usage: --ttl "0s" must be at least 1s`},
	{line: "collab-lease acquire acme/widgets 42 --ttl 500ms", err: `error: usage: --ttl "500ms" must be at least 1s`},
	{line: "collab-lease acquire acme/widgets 42 --ttl -5m", err: `error: usage: --ttl "-5m" must be at least 1s`},
	{line: "collab-lease acquire acme/widgets 42 --ttl=-5", err: `error: usage: --ttl "-5" must be at least 1s`},
	{line: "collab-lease acquire acme/widgets 42 --ttl +5m", err: `error: usage: --ttl "+5m" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
	{line: "collab-lease acquire acme/widgets 42 --ttl 1.5s", err: `error: usage: --ttl "1.5s" must be a whole number of seconds`},
	{line: "collab-lease acquire acme/widgets 42 --ttl 1500ms", err: `error: usage: --ttl "1500ms" must be a whole number of seconds`},
	{line: "collab-lease acquire acme/widgets 42 --ttl 169h", err: `error: usage: --ttl "169h" is more than the maximum of 168h`},
	{line: "collab-lease renew acme/widgets 42 --ttl 604801", err: `error: usage: --ttl "604801" is more than the maximum of 168h`},
	{line: "collab-lease acquire acme/widgets 42 --ttl 99999999999999999999", err: `error: usage: --ttl "99999999999999999999" is more than the maximum of 168h`},
	{line: "collab-lease acquire acme/widgets 42 --ttl 9999999999999h", err: `error: usage: --ttl "9999999999999h" is more than the maximum of 168h`},
	{line: "collab-lease acquire acme/widgets 42 --ttl 1d", err: `error: usage: --ttl "1d" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
	{line: "collab-lease acquire acme/widgets 42 --ttl '5 m'", err: `error: usage: --ttl "5 m" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
	{line: "collab-lease acquire acme/widgets 42 --ttl m", err: `error: usage: --ttl "m" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},

	// <issue> values.
	{line: "collab-lease acquire acme/widgets 0", err: `error: usage: issue must be a positive number, got "0"`},
	{line: "collab-lease acquire acme/widgets #0", err: `error: usage: issue must be a positive number, got "#0"`},
	{line: "collab-lease acquire acme/widgets 000", err: `error: usage: issue must be a positive number, got "000"`},
	{line: "collab-lease acquire acme/widgets 042", err: `error: usage: issue must not have a leading zero, got "042"`},
	{line: "collab-lease acquire acme/widgets -1", err: `error: usage: issue must be a positive number, got "-1"`},
	{line: "collab-lease acquire acme/widgets +1", err: `error: usage: issue must be a positive number like 42 or #42, got "+1"`},
	{line: "collab-lease acquire acme/widgets #", err: `error: usage: issue must be a positive number like 42 or #42, got "#"`},
	{line: "collab-lease acquire acme/widgets ##42", err: `error: usage: issue must be a positive number like 42 or #42, got "##42"`},
	{line: "collab-lease acquire acme/widgets #-1", err: `error: usage: issue must be a positive number like 42 or #42, got "#-1"`},
	{line: "collab-lease acquire acme/widgets 4.2", err: `error: usage: issue must be a positive number like 42 or #42, got "4.2"`},
	{line: "collab-lease acquire acme/widgets 1e3", err: `error: usage: issue must be a positive number like 42 or #42, got "1e3"`},
	{line: "collab-lease acquire acme/widgets 0x2a", err: `error: usage: issue must be a positive number like 42 or #42, got "0x2a"`},
	{line: "collab-lease acquire acme/widgets ４２", err: `error: usage: issue must be a positive number like 42 or #42, got "４２"`},
	{line: "collab-lease acquire acme/widgets 9223372036854775808", err: `error: usage: issue number too large, got "9223372036854775808"`},
	{line: "collab-lease acquire acme/widgets 99999999999999999999999", err: `error: usage: issue number too large, got "99999999999999999999999"`},

	// <owner>/<repo> values.
	{line: "collab-lease list acme", err: `error: usage: repository must be <owner>/<repo>, got "acme"`},
	{line: "collab-lease list acme.git", err: `error: usage: repository must be <owner>/<repo>, got "acme.git"`},
	{line: "collab-lease list /widgets", err: `error: usage: repository must be <owner>/<repo>, got "/widgets"`},
	{line: "collab-lease list acme/widgets/extra", err: `error: usage: repository must be <owner>/<repo>, got "acme/widgets/extra"`},
	{line: "collab-lease list acme//widgets", err: `error: usage: repository must be <owner>/<repo>, got "acme//widgets"`},
	{line: "collab-lease list //acme/widgets", err: `error: usage: repository must be <owner>/<repo>, got "//acme/widgets"`},
	{line: "collab-lease list //widgets", err: `error: usage: owner is empty in "//widgets"; expected <owner>/<repo>`},
	{line: "collab-lease list /", err: `error: usage: repository must be <owner>/<repo>, got "/"`},
	{line: "collab-lease list acme/", err: `error: usage: repository name is empty in "acme/"; expected <owner>/<repo>`},
	{line: "collab-lease list acme/.git", err: `error: usage: repository name is empty in "acme/.git"; expected <owner>/<repo>`},
	{line: "collab-lease list /acme/", err: `error: usage: repository name is empty in "/acme/"; expected <owner>/<repo>`},
	{line: "collab-lease list acme/widgets.git.git", err: `error: usage: repository name may not end in .git in "acme/widgets.git.git"`},
	{line: "collab-lease list acme/widgets.wiki", err: `error: usage: repository name may not end in .wiki in "acme/widgets.wiki"`},
	{line: "collab-lease list acme/widgets.wiki.git", err: `error: usage: repository name may not end in .wiki in "acme/widgets.wiki.git"`},
	{line: "collab-lease list acme/widgets.RSS", err: `error: usage: repository name may not end in .rss in "acme/widgets.RSS"`},
	{line: "collab-lease list acme/widgets.atom", err: `error: usage: repository name may not end in .atom in "acme/widgets.atom"`},
	{line: "collab-lease list acme/-", err: `error: usage: repository name may not be "-" in "acme/-"`},
	{line: "collab-lease list acme/.", err: `error: usage: repository name may not be "." or contain ".." in "acme/."`},
	{line: "collab-lease list acme/..", err: `error: usage: repository name may not be "." or contain ".." in "acme/.."`},
	{line: "collab-lease list acme/a..b", err: `error: usage: repository name may not be "." or contain ".." in "acme/a..b"`},
	{line: "collab-lease list ../widgets", err: `error: usage: owner may not be "." or contain ".." in "../widgets"`},
	{line: "collab-lease list ./widgets", err: `error: usage: owner may not be "." or contain ".." in "./widgets"`},
	{line: "collab-lease list /-acme/widgets", err: `error: usage: owner may not start with "-" in "/-acme/widgets"`},
	{line: "collab-lease list acme/widgets!", err: `error: usage: repository name may contain only letters, digits, '-', '_' and '.', got "acme/widgets!"`},
	{line: "collab-lease list 'ac me/widgets'", err: `error: usage: owner may contain only letters, digits, '-', '_' and '.', got "ac me/widgets"`},
	{line: "collab-lease list acme/wídgets", err: `error: usage: repository name may contain only letters, digits, '-', '_' and '.', got "acme/wídgets"`},
	{line: "collab-lease list acme/$REPO", err: `error: usage: repository name may contain only letters, digits, '-', '_' and '.', got "acme/$REPO"`},
	{line: "collab-lease list acme/" + strings.Repeat("r", 101), err: `error: usage: repository name is longer than 100 characters in "acme/` + strings.Repeat("r", 59) + `"…`},
	{line: "collab-lease list " + strings.Repeat("o", 101) + "/r", err: `error: usage: owner is longer than 100 characters in "` + strings.Repeat("o", 64) + `"…`},

	// Quoting and whitespace errors.
	{line: "collab-lease acquire 'acme/widgets 42", err: `error: usage: unclosed single quote in "'acme/widgets 42"`},
	{line: `collab-lease acquire "acme/widgets 42`, err: `error: usage: unclosed double quote in "\"acme/widgets 42"`},
	{line: `collab-lease acquire "acme/widgets\" 42`, err: `error: usage: unclosed double quote in "\"acme/widgets\\\" 42"`},
	{line: `collab-lease acquire acme/widgets 42 \`, err: "error: usage: command ends in a backslash"},
	{line: "collab-lease acquire '' 42", err: `error: usage: empty argument ('' or "")`},
	{line: `collab-lease acquire acme/widgets ""`, err: `error: usage: empty argument ('' or "")`},
	{line: `collab-lease "" acquire acme/widgets 42`, err: `error: usage: empty argument ('' or "")`},
	{line: "collab-lease list acme/widgets\x00", err: "error: usage: command contains a control character (0x00)"},
	{line: "collab-lease list 'acme/widgets\x1b[31m'", err: "error: usage: command contains a control character (0x1b)"},
	{line: "collab-lease list acme/widgets\x7f", err: "error: usage: command contains a control character (0x7f)"},
	{line: "collab-lease list acme/widgets\nrm -rf /", err: "error: usage: command spans more than one line"},
	{line: "collab-lease list\nacme/widgets", err: "error: usage: command spans more than one line"},
	{line: "\ncollab-lease list acme/widgets", err: "error: usage: command spans more than one line"},
	{line: "collab-lease list 'acme/widgets\n'", err: "error: usage: command contains a control character (0x0a)"},
	{line: "collab-lease list \"acme/widgets\r\"", err: "error: usage: command contains a control character (0x0d)"},
	{line: "collab-lease list acme/widgets\\\n", err: "error: usage: command contains a control character (0x0a)"},
	{line: "collab-lease list acme/" + strings.Repeat("w", MaxCommandLen), err: "error: usage: command too long (over 4096 bytes)"},
}

func TestParseCommand(t *testing.T) {
	for _, tc := range parseCases {
		got, err := ParseCommand(tc.line, cmdTestMaxTTL)
		if tc.err == "" {
			if err != nil {
				t.Errorf("ParseCommand(%q): unexpected error: %v", tc.line, err)
			} else if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseCommand(%q) = %+v, want %+v", tc.line, got, tc.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("ParseCommand(%q) = %+v, want %s", tc.line, got, tc.err)
			continue
		}
		checkUsageError(t, tc.line, err)
		if got := ErrorLine(err.Error()); got != tc.err {
			t.Errorf("ParseCommand(%q):\n got %s\nwant %s", tc.line, got, tc.err)
		}
		if !reflect.DeepEqual(got, Command{}) {
			t.Errorf("ParseCommand(%q) returned %+v alongside an error", tc.line, got)
		}
	}
}

// checkUsageError holds every parse failure to what the server relies on: the category, the type, and a single printable line.
func checkUsageError(t *testing.T, input string, err error) {
	t.Helper()
	if !errors.Is(err, ErrUsage) {
		t.Errorf("%q: error %v is not ErrUsage", input, err)
	}
	var ue *UsageError
	if !errors.As(err, &ue) {
		t.Errorf("%q: error %v is not a *UsageError", input, err)
	} else if "usage: "+ue.Detail != err.Error() {
		t.Errorf("%q: Error() = %q, Detail = %q", input, err.Error(), ue.Detail)
	}
	msg := err.Error()
	if len(msg) > 512 {
		t.Errorf("%q: error is %d bytes long", input, len(msg))
	}
	for _, r := range msg {
		if r < 0x20 || r == 0x7f {
			t.Errorf("%q: error %q contains control character %#x", input, msg, r)
			break
		}
	}
}

// The lines an operator sees, in full, for the messages the design was
// asked to produce.
func TestParseCommandErrorLines(t *testing.T) {
	for line, want := range map[string]string{
		"collab-lease renew acme/widgets 42":  "error: usage: renew needs --ttl <dur>; expected: collab-lease renew <owner>/<repo> <issue> --ttl <dur> [--agent <name>]",
		"collab-lease foo":                    `error: usage: unknown verb "foo"; try: collab-lease help`,
		"collab-lease acquire acme/widgets x": `error: usage: issue must be a positive number like 42 or #42, got "x"`,
		"collab-lease acquire a/b 1 --ttl 8d": `error: usage: --ttl "8d" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`,
		"collab-lease acquire a/b 1 --ttl 8h": "",
	} {
		_, err := ParseCommand(line, cmdTestMaxTTL)
		got := ""
		if err != nil {
			got = "error: " + err.Error()
		}
		if got != want {
			t.Errorf("ParseCommand(%q):\n got %q\nwant %q", line, got, want)
		}
	}
}

func TestParseCommandLongInputIsCheap(t *testing.T) {
	huge := "collab-lease list acme/" + strings.Repeat("\x00'\"\\", 1<<18)
	allocs := testing.AllocsPerRun(10, func() {
		if _, err := ParseCommand(huge, cmdTestMaxTTL); err == nil {
			t.Fatal("a 1 MiB command parsed")
		}
	})
	if allocs > 5 {
		t.Errorf("rejecting a 1 MiB command took %v allocations", allocs)
	}
	_, err := ParseCommand(huge, cmdTestMaxTTL)
	if got, want := ErrorLine(err.Error()), "error: usage: command too long (over 4096 bytes)"; got != want {
		t.Errorf("error line = %q, want %q", got, want)
	}
	// Exactly at the limit is still parsed on its merits.
	atLimit := "collab-lease list a/" + strings.Repeat("b", MaxCommandLen-len("collab-lease list a/"))
	_, err = ParseCommand(atLimit, cmdTestMaxTTL)
	if err == nil || strings.Contains(err.Error(), "too long") || !strings.Contains(err.Error(), "longer than 100") {
		t.Errorf("command of exactly MaxCommandLen bytes: error = %v, want the name length error", err)
	}
}

func TestParseCommandQuotesLongWordsShort(t *testing.T) {
	word := strings.Repeat("é", 1000) // multi-byte, so the cut must respect runes
	_, err := ParseCommand("collab-lease "+word, cmdTestMaxTTL)
	if err == nil {
		t.Fatal("parsed")
	}
	checkUsageError(t, word, err)
	if !strings.Contains(err.Error(), `…; try: collab-lease help`) {
		t.Errorf("error = %q, want the word cut short with …", err)
	}
}

func TestParseCommandNoMaximum(t *testing.T) {
	for _, limit := range []time.Duration{0, -time.Second} {
		got, err := ParseCommand("collab-lease acquire a/b 1 --ttl 100000h", limit)
		if err != nil || got.TTL != 100000*time.Hour {
			t.Errorf("limit %v: got %+v, %v; want a 100000h TTL", limit, got, err)
		}
		_, err = ParseCommand("collab-lease acquire a/b 1 --ttl 9999999999999h", limit)
		if want := `error: usage: --ttl "9999999999999h" is too large`; err == nil || ErrorLine(err.Error()) != want {
			t.Errorf("limit %v: overflow error = %v, want %s", limit, err, want)
		}
	}
}

func TestSplitWords(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"", nil},
		{" \t ", nil},
		{"\r\n", nil},
		{"a b", []string{"a", "b"}},
		{"  a \t b  ", []string{"a", "b"}},
		{"a\n", []string{"a"}},
		{"a b\r\n \n", []string{"a", "b"}},
		{"'a b'", []string{"a b"}},
		{`"a b"`, []string{"a b"}},
		{"'a\tb'", []string{"a\tb"}},
		{`'acme'/"widgets"`, []string{"acme/widgets"}},
		{`a''`, []string{"a"}},
		{`""a`, []string{"a"}},
		{`a\ b`, []string{"a b"}},
		{`\'`, []string{"'"}},
		{`\\`, []string{`\`}},
		{`'a\b'`, []string{`a\b`}},
		{`'a"b'`, []string{`a"b`}},
		{`"a'b"`, []string{`a'b`}},
		{`"a\"b"`, []string{`a"b`}},
		{`"a\\b"`, []string{`a\b`}},
		{`"a\$b"`, []string{`a$b`}},
		{"\"a\\`b\"", []string{"a`b"}},
		{`"a\nb"`, []string{`a\nb`}},
		{`"a\'b"`, []string{`a\'b`}},
		{`'it'\''s'`, []string{"it's"}},
		{"$HOME a#b #c ; | &", []string{"$HOME", "a#b", "#c", ";", "|", "&"}},
		{"'wídgets'", []string{"wídgets"}},
		{`\é`, []string{"é"}},
	} {
		got, err := SplitWords(tc.line)
		if err != nil {
			t.Errorf("SplitWords(%q): %v", tc.line, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("SplitWords(%q) = %q, want %q", tc.line, got, tc.want)
		}
	}
	for _, tc := range []struct{ line, err string }{
		{"'a", `error: usage: unclosed single quote in "'a"`},
		{`"a`, `error: usage: unclosed double quote in "\"a"`},
		{`"a\"`, `error: usage: unclosed double quote in "\"a\\\""`},
		{`a\`, "error: usage: command ends in a backslash"},
		{"''", `error: usage: empty argument ('' or "")`},
		{`a "" b`, `error: usage: empty argument ('' or "")`},
		{"a\nb", "error: usage: command spans more than one line"},
		{"a\rb", "error: usage: command spans more than one line"},
		{"a\x00", "error: usage: command contains a control character (0x00)"},
		{"'a\x01'", "error: usage: command contains a control character (0x01)"},
		{"a\x1f", "error: usage: command contains a control character (0x1f)"},
		{"'a\nb'", "error: usage: command contains a control character (0x0a)"},
		{"\"a\r\"", "error: usage: command contains a control character (0x0d)"},
		{"a\\\r\n", "error: usage: command contains a control character (0x0d)"},
		{strings.Repeat(" ", MaxCommandLen+1), "error: usage: command too long (over 4096 bytes)"},
	} {
		got, err := SplitWords(tc.line)
		if err == nil {
			t.Errorf("SplitWords(%q) = %q, want %s", tc.line, got, tc.err)
			continue
		}
		checkUsageError(t, tc.line, err)
		if line := ErrorLine(err.Error()); line != tc.err {
			t.Errorf("SplitWords(%q):\n got %s\nwant %s", tc.line, line, tc.err)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		s     string
		limit time.Duration
		want  time.Duration
	}{
		{"1", cmdTestMaxTTL, time.Second},
		{"300", cmdTestMaxTTL, 300 * time.Second},
		{"00300", cmdTestMaxTTL, 300 * time.Second},
		{"90s", cmdTestMaxTTL, 90 * time.Second},
		{"30m", cmdTestMaxTTL, 30 * time.Minute},
		{"2h", cmdTestMaxTTL, 2 * time.Hour},
		{"1h30m", cmdTestMaxTTL, 90 * time.Minute},
		{"1h0m0s", cmdTestMaxTTL, time.Hour},
		{"2000ms", cmdTestMaxTTL, 2 * time.Second},
		{"2000000us", cmdTestMaxTTL, 2 * time.Second},
		{"2000000µs", cmdTestMaxTTL, 2 * time.Second},
		{"1000000000ns", cmdTestMaxTTL, time.Second},
		{"0.5h", cmdTestMaxTTL, 30 * time.Minute},
		{".5h", cmdTestMaxTTL, 30 * time.Minute},
		{"1.h", cmdTestMaxTTL, time.Hour},
		{"1.5s500ms", cmdTestMaxTTL, 2 * time.Second},
		{"168h", cmdTestMaxTTL, cmdTestMaxTTL},
		{"604800", cmdTestMaxTTL, cmdTestMaxTTL},
		{"1s", time.Second, time.Second},
		{"9223372036", 0, 9223372036 * time.Second},
		{"2562047h", 0, 2562047 * time.Hour},
		{"2562047h", -1, 2562047 * time.Hour},
	} {
		got, err := ParseDuration(tc.s, tc.limit)
		if err != nil || got != tc.want {
			t.Errorf("ParseDuration(%q, %v) = %v, %v; want %v", tc.s, tc.limit, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		s     string
		limit time.Duration
		err   string
	}{
		{"", cmdTestMaxTTL, "error: usage: duration is empty; use whole seconds (300) or a Go duration (90s, 30m, 2h)"},
		{"0", cmdTestMaxTTL, `error: usage: duration "0" must be at least 1s`},
		{"0s", cmdTestMaxTTL, `error: usage: duration "0s" must be at least 1s`},
		{"999ms", cmdTestMaxTTL, `error: usage: duration "999ms" must be at least 1s`},
		{"-1s", cmdTestMaxTTL, `error: usage: duration "-1s" must be at least 1s`},
		{"-5", cmdTestMaxTTL, `error: usage: duration "-5" must be at least 1s`},
		{"1.5s", cmdTestMaxTTL, `error: usage: duration "1.5s" must be a whole number of seconds`},
		{"1500ms", cmdTestMaxTTL, `error: usage: duration "1500ms" must be a whole number of seconds`},
		{"1s1ns", cmdTestMaxTTL, `error: usage: duration "1s1ns" must be a whole number of seconds`},
		{"169h", cmdTestMaxTTL, `error: usage: duration "169h" is more than the maximum of 168h`},
		{"604801", cmdTestMaxTTL, `error: usage: duration "604801" is more than the maximum of 168h`},
		{"2s", time.Second, `error: usage: duration "2s" is more than the maximum of 1s`},
		{"2h", 90 * time.Minute, `error: usage: duration "2h" is more than the maximum of 1h30m`},
		{"99999999999999999999", cmdTestMaxTTL, `error: usage: duration "99999999999999999999" is more than the maximum of 168h`},
		{"9223372037", 0, `error: usage: duration "9223372037" is too large`},
		{"2562048h", 0, `error: usage: duration "2562048h" is too large`},
		{"9223372036854775807s", 0, `error: usage: duration "9223372036854775807s" is too large`},
		{"+5", cmdTestMaxTTL, `error: usage: duration "+5" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{"+5m", cmdTestMaxTTL, `error: usage: duration "+5m" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{"-", cmdTestMaxTTL, `error: usage: duration "-" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{"--5m", cmdTestMaxTTL, `error: usage: duration "--5m" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{"1d", cmdTestMaxTTL, `error: usage: duration "1d" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{"5 m", cmdTestMaxTTL, `error: usage: duration "5 m" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{" 5m", cmdTestMaxTTL, `error: usage: duration " 5m" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{"m", cmdTestMaxTTL, `error: usage: duration "m" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{"s", cmdTestMaxTTL, `error: usage: duration "s" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{".s", cmdTestMaxTTL, `error: usage: duration ".s" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{"5.", cmdTestMaxTTL, `error: usage: duration "5." is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{"1e3", cmdTestMaxTTL, `error: usage: duration "1e3" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{"1_000", cmdTestMaxTTL, `error: usage: duration "1_000" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{"0x10", cmdTestMaxTTL, `error: usage: duration "0x10" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{"NaN", cmdTestMaxTTL, `error: usage: duration "NaN" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{"1h-5m", cmdTestMaxTTL, `error: usage: duration "1h-5m" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{"1h+5m", cmdTestMaxTTL, `error: usage: duration "1h+5m" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{"١٢", cmdTestMaxTTL, `error: usage: duration "١٢" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
		{"5M", cmdTestMaxTTL, `error: usage: duration "5M" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
	} {
		got, err := ParseDuration(tc.s, tc.limit)
		if err == nil {
			t.Errorf("ParseDuration(%q, %v) = %v, want %s", tc.s, tc.limit, got, tc.err)
			continue
		}
		checkUsageError(t, tc.s, err)
		if line := ErrorLine(err.Error()); line != tc.err {
			t.Errorf("ParseDuration(%q, %v):\n got %s\nwant %s", tc.s, tc.limit, line, tc.err)
		}
	}
}

func TestFormatTTL(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second:               "1s",
		90 * time.Second:          "1m30s",
		30 * time.Minute:          "30m",
		90 * time.Minute:          "1h30m",
		time.Hour + 5*time.Second: "1h5s",
		cmdTestMaxTTL:             "168h",
		1500 * time.Millisecond:   "1.5s",
		0:                         "0s",
		-time.Minute:              "-1m0s",
		time.Duration(1<<63 - 1).Truncate(time.Second): "2562047h47m16s",
	} {
		if got := formatTTL(d); got != want {
			t.Errorf("formatTTL(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestUsage(t *testing.T) {
	lines := strings.Split(Usage, "\n")
	verbs := []Verb{VerbAcquire, VerbRenew, VerbRelease, VerbList, VerbNext, VerbCheck, VerbHistory, VerbHandoff, VerbMerge, VerbReserve, VerbUnreserve, VerbReservations, VerbUnquarantine, VerbSession, VerbHelp}
	if len(lines) != len(verbs)+1 || lines[len(verbs)] != "" {
		t.Fatalf("Usage is not one line per verb and a trailing newline: %q", Usage)
	}
	// Error messages quote each verb's line; they must not drift from Usage.
	for i, v := range verbs {
		if got, want := verbGrammar(v), strings.Join(strings.Fields(lines[i]), " "); got != want {
			t.Errorf("verbGrammar(%s) = %q, Usage says %q", v, got, want)
		}
	}
}

func TestCommandString(t *testing.T) {
	for want, c := range map[string]Command{
		"collab-lease acquire acme/widgets 42":                                               acq("acme", "widgets", 42, 0),
		"collab-lease acquire acme/widgets 42 --ttl 1h30m":                                   acq("acme", "widgets", 42, 90*time.Minute),
		"collab-lease renew acme/widgets 7 --ttl 1s":                                         {Verb: VerbRenew, Owner: "acme", Name: "widgets", Issue: 7, TTL: time.Second},
		"collab-lease release acme/widgets 7":                                                {Verb: VerbRelease, Owner: "acme", Name: "widgets", Issue: 7},
		"collab-lease list acme/widgets":                                                     {Verb: VerbList, Owner: "acme", Name: "widgets"},
		"collab-lease help":                                                                  {Verb: VerbHelp},
		"collab-lease acquire acme/widgets 7 --ttl 1m --wait 2m":                             {Verb: VerbAcquire, Owner: "acme", Name: "widgets", Issue: 7, TTL: time.Minute, Wait: 2 * time.Minute},
		"collab-lease release acme/widgets 7 --force":                                        {Verb: VerbRelease, Owner: "acme", Name: "widgets", Issue: 7, Force: true},
		"collab-lease next acme/widgets --label bug --label 'it'\\''s odd' --pulls --ttl 1h": {Verb: VerbNext, Owner: "acme", Name: "widgets", Labels: []string{"bug", "it's odd"}, Pulls: true, TTL: time.Hour},
		"collab-lease check acme/widgets 7 --token 12":                                       {Verb: VerbCheck, Owner: "acme", Name: "widgets", Issue: 7, Token: 12},
		"collab-lease history acme/widgets 7":                                                {Verb: VerbHistory, Owner: "acme", Name: "widgets", Issue: 7, Limit: DefaultHistoryLimit},
		"collab-lease history acme/widgets 7 --limit 5":                                      {Verb: VerbHistory, Owner: "acme", Name: "widgets", Issue: 7, Limit: 5},
		"collab-lease reserve acme/widgets 'src/auth/**' docs/ --issue 7 --shared":           {Verb: VerbReserve, Owner: "acme", Name: "widgets", Issue: 7, Globs: []string{"src/auth/**", "docs/"}, Shared: true},
		"collab-lease reserve acme/widgets 'a b/*.go' --ttl 1h":                              {Verb: VerbReserve, Owner: "acme", Name: "widgets", Globs: []string{"a b/*.go"}, TTL: time.Hour},
		"collab-lease unreserve acme/widgets --force":                                        {Verb: VerbUnreserve, Owner: "acme", Name: "widgets", Force: true},
		"collab-lease reservations acme/widgets --path src/x.go":                             {Verb: VerbReservations, Owner: "acme", Name: "widgets", Path: "src/x.go"},
	} {
		if got := c.String(); got != want {
			t.Errorf("%+v.String() = %q, want %q", c, got, want)
		}
		back, err := ParseCommand(want, cmdTestMaxTTL)
		if err != nil || !reflect.DeepEqual(back, c) {
			t.Errorf("ParseCommand(%q) = %+v, %v; want %+v", want, back, err, c)
		}
	}
	if got := acq("acme", "widgets", 1, 0).Repo(); got != "acme/widgets" {
		t.Errorf("Repo() = %q", got)
	}
}

// A client that checks a TTL, an issue or a repository before sending it
// reports the very line the server would.
func TestPartsParseAsTheCommandDoes(t *testing.T) {
	line := func(err error) string {
		if err == nil {
			return ""
		}
		return ErrorLine(err.Error())
	}
	for _, ttl := range []string{"30m", "0", "-5m", "1.5s", "169h", "1d", "99999999999999999999"} {
		_, want := ParseCommand("collab-lease acquire a/b 1 --ttl "+ttl, cmdTestMaxTTL)
		if _, got := ParseTTL(ttl, cmdTestMaxTTL); line(got) != line(want) {
			t.Errorf("ParseTTL(%q): %q, ParseCommand: %q", ttl, line(got), line(want))
		}
	}
	for _, issue := range []string{"42", "#42", "0", "042", "+1", "4x", "9223372036854775808"} {
		_, want := ParseCommand("collab-lease release a/b "+issue, cmdTestMaxTTL)
		if _, got := ParseIssue(issue); line(got) != line(want) {
			t.Errorf("ParseIssue(%q): %q, ParseCommand: %q", issue, line(got), line(want))
		}
		_, want = ParseCommand("collab-lease merge a/b "+issue, cmdTestMaxTTL)
		if _, got := ParsePull(issue); line(got) != line(want) {
			t.Errorf("ParsePull(%q): %q, ParseCommand: %q", issue, line(got), line(want))
		}
	}
	for _, repo := range []string{"acme/widgets", "/acme/widgets.git", "acme", "acme/widgets.wiki", "/-acme/w", "a/b/c"} {
		_, want := ParseCommand("collab-lease list "+repo, cmdTestMaxTTL)
		if _, _, got := ParseRepo(repo); line(got) != line(want) {
			t.Errorf("ParseRepo(%q): %q, ParseCommand: %q", repo, line(got), line(want))
		}
	}
}
