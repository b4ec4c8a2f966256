package contract

import (
	"strings"
	"testing"
)

// verbGrammar is the Usage line for v with its alignment padding removed,
// as error messages quote it.
func verbGrammar(v Verb) string {
	if s, ok := SyntaxOf(v); ok {
		return s.Line()
	}
	return "collab-lease help"
}

// The usage texts as they were written out by hand before the grammar
// became rows: Usage, and each verb's line as error messages quote it.
// What the rows make must stay these bytes.
const handWrittenUsage = `collab-lease acquire      <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--force] [--agent <name>]
collab-lease renew        <owner>/<repo> <issue> --ttl <dur> [--agent <name>]
collab-lease release      <owner>/<repo> <issue> [--force] [--agent <name>]
collab-lease list         <owner>/<repo> [--agent <name>]
collab-lease next         <owner>/<repo> [--label <name>]... [--pulls] [--oldest] [--ttl <dur>] [--wait <dur>] [--agent <name>]
collab-lease check        <owner>/<repo> <issue> --token <n> [--agent <name>]
collab-lease history      <owner>/<repo> <issue> [--limit <n>] [--agent <name>]
collab-lease handoff      <owner>/<repo> <issue> --to <login>[/<agent>] [--agent <name>]
collab-lease merge        <owner>/<repo> <pull> [--token <n>] [--style merge|rebase|rebase-merge|squash|fast-forward-only] [--delete-branch] [--wait <dur>] [--agent <name>]
collab-lease reserve      <owner>/<repo> <glob>... [--issue <n>] [--shared] [--ttl <dur>] [--agent <name>]
collab-lease unreserve    <owner>/<repo> [<glob>...] [--issue <n>] [--force] [--agent <name>]
collab-lease reservations <owner>/<repo> [--path <path>] [--agent <name>]
collab-lease unquarantine <owner>/<repo> <issue> [--agent <name>]
collab-lease session      [--agent <name>] [--grace <dur>] [--resume <id>]
collab-lease help
`

var handWrittenLines = map[Verb]string{
	VerbAcquire:      "collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--force] [--agent <name>]",
	VerbRenew:        "collab-lease renew <owner>/<repo> <issue> --ttl <dur> [--agent <name>]",
	VerbRelease:      "collab-lease release <owner>/<repo> <issue> [--force] [--agent <name>]",
	VerbList:         "collab-lease list <owner>/<repo> [--agent <name>]",
	VerbNext:         "collab-lease next <owner>/<repo> [--label <name>]... [--pulls] [--oldest] [--ttl <dur>] [--wait <dur>] [--agent <name>]",
	VerbCheck:        "collab-lease check <owner>/<repo> <issue> --token <n> [--agent <name>]",
	VerbHistory:      "collab-lease history <owner>/<repo> <issue> [--limit <n>] [--agent <name>]",
	VerbHandoff:      "collab-lease handoff <owner>/<repo> <issue> --to <login>[/<agent>] [--agent <name>]",
	VerbMerge:        "collab-lease merge <owner>/<repo> <pull> [--token <n>] [--style merge|rebase|rebase-merge|squash|fast-forward-only] [--delete-branch] [--wait <dur>] [--agent <name>]",
	VerbReserve:      "collab-lease reserve <owner>/<repo> <glob>... [--issue <n>] [--shared] [--ttl <dur>] [--agent <name>]",
	VerbUnreserve:    "collab-lease unreserve <owner>/<repo> [<glob>...] [--issue <n>] [--force] [--agent <name>]",
	VerbReservations: "collab-lease reservations <owner>/<repo> [--path <path>] [--agent <name>]",
	VerbUnquarantine: "collab-lease unquarantine <owner>/<repo> <issue> [--agent <name>]",
	VerbSession:      "collab-lease session [--agent <name>] [--grace <dur>] [--resume <id>]",
	VerbHelp:         "collab-lease help",
}

func TestUsageIsTheHandWrittenText(t *testing.T) {
	if Usage != handWrittenUsage {
		t.Errorf("Usage =\n%s\nwant\n%s", Usage, handWrittenUsage)
	}
	for v, want := range handWrittenLines {
		if got := verbGrammar(v); got != want {
			t.Errorf("verbGrammar(%s) = %q, want %q", v, got, want)
		}
	}
	if len(syntaxes) != len(handWrittenLines) {
		t.Errorf("%d rows of syntaxes, %d hand-written lines", len(syntaxes), len(handWrittenLines))
	}
}

// A flag given without its value is named, with what it needs, as before
// the flags became rows.
func TestFlagsWithoutTheirValue(t *testing.T) {
	for line, want := range map[string]string{
		"collab-lease acquire a/b 1 --ttl":       "usage: --ttl needs a duration, e.g. --ttl 30m",
		"collab-lease acquire a/b 1 --wait":      "usage: --wait needs a duration, e.g. --wait 5m",
		"collab-lease next a/b --label":          "usage: --label needs a label name, e.g. --label bug",
		"collab-lease check a/b 1 --token":       "usage: --token needs a number, e.g. --token 3",
		"collab-lease history a/b 1 --limit":     "usage: --limit needs a number, e.g. --limit 20",
		"collab-lease list a/b --agent":          "usage: --agent needs an agent name, e.g. --agent agent-7",
		"collab-lease handoff a/b 1 --to":        "usage: --to needs whom to hand the claim to, e.g. --to bob/agent-8",
		"collab-lease session --grace":           "usage: --grace needs a duration, e.g. --grace 30s",
		"collab-lease session --resume":          "usage: --resume needs a session id, e.g. --resume 0f3c…",
		"collab-lease release a/b 1 --force=yes": `usage: --force takes no value, got "--force=yes"`,
	} {
		if _, err := ParseCommand(line, 0); err == nil || err.Error() != want {
			t.Errorf("ParseCommand(%q) = %v, want %q", line, err, want)
		}
	}
}

// Every row names flags of flagSpecs, requires only flags it takes, and
// shows each at most once; every flag is some verb's.
func TestSyntaxesNameTheirFlags(t *testing.T) {
	used := map[string]bool{}
	for _, s := range syntaxes {
		seen := map[string]bool{}
		for _, f := range s.Flags {
			if findFlag(f) == nil {
				t.Errorf("%s takes %s, which flagSpecs lacks", s.Verb, f)
			}
			if seen[f] {
				t.Errorf("%s takes %s twice", s.Verb, f)
			}
			seen[f], used[f] = true, true
		}
		for _, f := range s.Required {
			if !seen[f] {
				t.Errorf("%s requires %s, which it does not take", s.Verb, f)
			}
		}
	}
	for _, f := range flagSpecs {
		if !used[f.name] {
			t.Errorf("no verb takes %s", f.name)
		}
		if !strings.HasPrefix(f.name, "--") || (f.meta == "") != (f.needs == "") || f.set == nil || f.show == nil {
			t.Errorf("flagSpecs row %s is incomplete", f.name)
		}
	}
}
