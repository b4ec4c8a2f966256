package main

import (
	"fmt"
	"strings"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// verb is one git collab command and the collab-lease sub-verb it runs.
type verb struct {
	name        string
	remote      contract.Verb // the collab-lease sub-verb
	issue       bool          // takes <issue>
	ttl         bool          // takes --ttl
	ttlRequired bool
	synopsis    string
	summary     string
	detail      string
}

var verbs = []verb{
	{
		name: "claim", remote: contract.VerbAcquire, issue: true, ttl: true,
		synopsis: "git collab claim <issue> [--ttl <dur>] [--remote <name>] [--json]",
		summary:  "claim an issue or pull request",
		detail: `Claim <issue> of this repository for yourself. With --ttl the claim
expires <dur> from now unless renewed; without it the claim is open-ended
(an assignment) until you unclaim it. Claiming an issue you already hold
succeeds again, keeps its token and sets the expiry from this --ttl.
If someone else holds it, git collab says who and until when, exit 4.`,
	},
	{
		name: "renew", remote: contract.VerbRenew, issue: true, ttl: true, ttlRequired: true,
		synopsis: "git collab renew <issue> --ttl <dur> [--remote <name>] [--json]",
		summary:  "extend your claim: it now ends <dur> from now",
		detail: `Renew your live claim on <issue>: it now expires <dur> from now and keeps
its token. If you do not hold it (never claimed, unclaimed, expired, or
taken over by someone else), nothing changes, exit 4: claim it again.`,
	},
	{
		name: "unclaim", remote: contract.VerbRelease, issue: true,
		synopsis: "git collab unclaim <issue> [--remote <name>] [--json]",
		summary:  "release your claim",
		detail: `Release your claim on <issue>. Releasing an issue nobody holds succeeds
(so a retry after a dropped connection is safe); releasing someone else's
live claim is refused, exit 4.`,
	},
	{
		name: "claims", remote: contract.VerbList,
		synopsis: "git collab claims [--remote <name>] [--json]",
		summary:  "list the live claims on this repository",
		detail:   `List the live claims on this repository, oldest first.`,
	},
}

func findVerb(name string) *verb {
	for i := range verbs {
		if verbs[i].name == name {
			return &verbs[i]
		}
	}
	return nil
}

const optionsHelp = `  --ttl <dur>       claim length: seconds (300) or a duration (90s, 30m, 2h)
  --remote <name>   the remote whose URL names the repository (default origin)
  --json            print the sidecar's JSON reply unchanged, nothing else
  -h, --help        show help`

const issueHelp = `<issue> is an issue or pull request number: 42 or #42.`

const exitHelp = `  0    done (also: claiming what you hold, unclaiming what nobody holds)
  1    error: bad arguments, unknown repository or issue, closed issue,
       or your key no longer belongs to an active Gitea account
  4    conflict: claimed by someone else, or you are not the holder
  75   temporary failure (forge unavailable, database busy): retry
  255  ssh could not reach or log in to the sidecar`

const manNote = `git collab --help opens the manual page (git runs man git-collab); install it
beside the binary with: git collab help --man > <prefix>/share/man/man1/git-collab.1`

const configHelp = `  repository  owner/repo: the last two path segments of the remote's URL
  sidecar     git config collab.sidecar (host:port), else $COLLAB_SIDECAR,
              else the remote's host on port 2222
  ssh         $COLLAB_SSH_COMMAND, else $GIT_SSH_COMMAND, else git config
              core.sshCommand, else $GIT_SSH, else ssh; your keys, agent
              and ssh config apply. The ssh user is the remote URL's, else git.`

// mainHelp is `git collab -h`.
func mainHelp() string {
	var b strings.Builder
	b.WriteString("usage: git collab <command> [<args>] [--remote <name>] [--json]\n\n")
	b.WriteString("Claim issues of this repository's Gitea through its collab-lease sidecar,\n")
	b.WriteString("so that people and agents do not work on the same issue twice.\n\ncommands:\n")
	for _, v := range verbs {
		fmt.Fprintf(&b, "  %-28s %s\n", strings.TrimPrefix(strings.Split(v.synopsis, " [--remote")[0], "git collab "), v.summary)
	}
	fmt.Fprintf(&b, "  %-28s %s\n", "help [<command>]", "show help (also: git collab <command> -h)")
	b.WriteString("\noptions:\n" + optionsHelp + "\n\n" + issueHelp + "\n\nexit status:\n" + exitHelp +
		"\n\nconfiguration:\n" + configHelp + "\n\n" + manNote + "\n")
	return b.String()
}

// verbHelp is `git collab <verb> -h`.
func verbHelp(v *verb) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s\n\n%s\n", v.synopsis, v.detail)
	if v.issue {
		b.WriteString("\n" + issueHelp + "\n")
	}
	b.WriteString("\noptions:\n")
	for _, line := range strings.Split(optionsHelp, "\n") {
		if strings.Contains(line, "--ttl") && !v.ttl {
			continue
		}
		b.WriteString(line + "\n")
	}
	b.WriteString("\nexit status:\n" + exitHelp + "\n")
	return b.String()
}

// manPage is the manual page `git collab --help` shows (git turns that
// into `man git-collab`): install it with
//
//	git collab help --man > <prefix>/share/man/man1/git-collab.1
//
// beside <prefix>/bin/git-collab, where man finds it through PATH.
func manPage() string {
	var b strings.Builder
	b.WriteString(".TH GIT-COLLAB 1 \"\" \"git-collab\" \"Git Manual\"\n")
	b.WriteString(".SH NAME\ngit-collab \\- claim issues of a Gitea repository through the collab-lease sidecar\n")
	b.WriteString(".SH SYNOPSIS\n.nf\n")
	for _, v := range verbs {
		b.WriteString(roff(v.synopsis) + "\n")
	}
	b.WriteString("git collab help [<command>]\n.fi\n")
	b.WriteString(".SH DESCRIPTION\n" + roff(oneParagraph(`Claim issues of this repository's Gitea through its collab-lease
sidecar, so that people and agents do not work on the same issue twice.
Every command runs one collab-lease command on the sidecar over ssh.`)) + "\n")
	b.WriteString(".SH COMMANDS\n")
	for _, v := range verbs {
		fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", v.name, roff(oneParagraph(v.detail)))
	}
	b.WriteString(".SH OPTIONS\n" + roffList(optionsHelp) + ".PP\n" + roff(issueHelp) + "\n")
	b.WriteString(".SH EXIT STATUS\n" + roffList(exitHelp))
	b.WriteString(".SH CONFIGURATION\n.nf\n" + roff(configHelp) + "\n.fi\n")
	return b.String()
}

func oneParagraph(s string) string { return strings.Join(strings.Fields(s), " ") }

// roffList renders "  term   text" lines as tagged paragraphs.
func roffList(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		term, text, _ := strings.Cut(line, "  ")
		fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", roff(term), roff(strings.TrimSpace(text)))
	}
	return b.String()
}

// roff escapes text for a man page: backslashes, and a leading "." or "'"
// that would read as a request.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			lines[i] = `\&` + l
		}
	}
	return strings.Join(lines, "\n")
}
