package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// verb is one git collab command and the collab-lease sub-verb it runs.
// For a command with a sub-verb, issue, pull, flags, required and (unless
// it is given) synopsis come from the sub-verb's row of the contract's
// grammar (fromGrammar).
type verb struct {
	name     string
	remote   contract.Verb // the collab-lease sub-verb; "" for run and mcp, which run several over a session
	issue    bool          // takes <issue>
	pull     bool          // takes <pull>, a pull request's number, where others take <issue>
	globs    bool          // takes <glob>... (reserve), or [<glob>...] (unreserve) where needGlob is false
	needGlob bool
	flags    []string // the sidecar options it takes (see options)
	required string   // the one of them it cannot do without, if any
	synopsis string
	brief    string // the synopsis in the list of commands, if not the synopsis itself
	summary  string
	detail   string
}

// takes reports whether v takes the sidecar option named flag.
func (v *verb) takes(flag string) bool { return slices.Contains(v.flags, flag) }

// verbs are the commands, in the order an agent meets them.
var verbs = fromGrammar([]verb{
	{
		name: "run", flags: []string{"--next", "--label", "--pulls", "--ttl", "--wait", "--grace", "--reserve", "--agent"},
		synopsis: "git collab run [<issue> | --next [--label <name>]... [--pulls]] [--ttl <dur>] [--wait <dur>] [--grace <dur>] [--reserve <glob>]... [--agent <name>] [--remote <name>] -- <command> [<arg>...]",
		brief:    "run [<issue> | --next] [<options>] -- <command>",
		summary:  "claim, run <command> under the claim, release",
		detail: `Open a session with the sidecar, claim <issue> (or, with --next, the
next issue, as git collab next does), and run <command> with COLLAB_REPO,
COLLAB_ISSUE, COLLAB_TOKEN, COLLAB_HOLDER, COLLAB_AGENT and COLLAB_SESSION
in its environment, in a process group of its own. The session keeps the
claim alive while the command runs: no renewing. When the command exits,
the claim is released and git collab run exits with its status (a signal
as 128+n). Not claimed (held, cooling, your cap, nothing to claim): git
collab says why, exit 4, and the command never starts. If the claim is
lost while the command runs (force-released, the issue closed, merged or
deleted, handed off, or the connection gone for longer than --grace),
git collab says why, sends the command's process group SIGTERM, and
SIGKILL 10s later, and exits 4: the work must not land. A dropped
connection is reopened within --grace (default 30s), and the claim kept.
--ttl caps the claim's whole life; --wait waits for a held issue, or
with --next for one to come free (nothing claimed when it runs out).
--reserve reserves <glob> (repeat it for more) with the claim, as git
collab reserve --issue does, before the command starts: the reservations
end with the claim. If another holder's reservation is in the way, git
collab names it, releases the claim, and exits 4: the command never
starts. Inside the command, git collab check with no arguments checks the claim,
and every git collab command acts as the same agent; check, claims and
history and reservations ride the session (COLLAB_RUN_SOCKET names its private socket)
instead of an ssh of their own. Every git push the command makes carries
the claim's token as the push option collab-lease=<issue>:<token> (a
push.pushOption entry in GIT_CONFIG_COUNT, after the caller's own), which
Gitea's gate asks of pushes to a claimed branch; a git push -o of the
command's own sends only its own options. The agent is
--agent, else COLLAB_AGENT, else <short host name>-<pid>. SIGINT, SIGTERM
and SIGHUP are passed on to the command. ssh runs without a terminal: use
a key without a passphrase, or an agent.`,
	},
	{
		name: "next", remote: contract.VerbNext,
		brief:   "next [--label <name>]... [--pulls] [--oldest] [<options>]",
		summary: "claim the oldest issue nobody holds",
		detail: `Claim the oldest (lowest-numbered) open issue of this repository that
nobody holds, that carries every --label given, and that no open issue it
depends on blocks; with --pulls, the oldest such pull request. --ttl works
as for claim. Agents running next at the same time never get the same
issue. If the sidecar has priority labels, next takes the oldest issue
of the highest priority there is first; --oldest takes the oldest
whatever its labels. If nothing qualifies, git collab says so, exit 4:
that is an answer, not a failure to retry at once. With --wait, when
nothing qualifies the sidecar waits up to <dur> for an issue to come free
(a claim released, lapsed or lost, an issue opened) and claims it; agents
waiting together are served first come, first served. The claim's push
option goes into the checkout as for claim.`,
	},
	{
		name: "claim", remote: contract.VerbAcquire,
		summary: "claim an issue or pull request",
		detail: `Claim <issue> of this repository for yourself. With --ttl the claim
expires <dur> from now unless renewed; without it the claim is open-ended
(an assignment) until you unclaim it. Claiming an issue you already hold
succeeds again, keeps its token and sets the expiry from this --ttl.
If someone else holds it, git collab says who and until when, exit 4.
With --wait, git collab first waits up to <dur> for their claim to be
released or to expire (waiters are served first come, first served), and
says who holds it, exit 4, only if the wait runs out. In a checkout, the
claim's token goes into its own config as the push option
collab-lease=<issue>:<token> (a value of push.pushOption, in place of an
older one of the issue), so that every git push from it carries it for
Gitea's gate; git collab says so on the line after the claim's.`,
	},
	{
		name: "renew", remote: contract.VerbRenew,
		summary: "extend your claim: it now ends <dur> from now",
		detail: `Renew your live claim on <issue>: it now expires <dur> from now and keeps
its token. If you do not hold it (never claimed, unclaimed, expired, or
taken over by someone else), nothing changes, exit 4: claim it again.`,
	},
	{
		name: "reserve", remote: contract.VerbReserve,
		brief:   "reserve <glob>... [<options>]",
		summary: "keep other agents off these paths",
		detail: `Reserve paths of this repository, named by globs, so that no other
holder works on them at the same time: exclusive, unless --shared (shared
reservations of several holders may overlap; an exclusive one overlaps
none of another holder's). A reservation lives as long as its anchor:
with --issue, your claim on <n> (it ends when the claim does, however the
claim ends; a claim you do not hold: exit 4); without, its own --ttl,
which it then needs. All the globs are reserved, or none: if a glob of
another holder's reservation in the way matches a path one of them
matches (decided exactly), git collab names it (glob, holder, agent,
issue, expiry), exit 4, and nothing is reserved. Reserving a glob you hold
again renews it. At most 64 globs at once; past the sidecar's cap of
reservations per holder, exit 4. Where the sidecar runs its gate (serve
--gate), Gitea refuses a push whose new commits change a path under
another holder's exclusive reservation. git collab run --reserve
reserves with the run's claim.`,
	},
	{
		name: "unreserve", remote: contract.VerbUnreserve,
		brief:   "unreserve [<glob>...] [<options>]",
		summary: "end your reservations (all, or these globs)",
		detail: `End your reservations of the globs given, exactly as they were reserved,
or all of yours in this repository if none is given; with --issue, only
those that live with your claim on <n>. It says which it ended, maybe
none: unreserving what you do not hold succeeds. Reservations end with
their claim anyway. A repository admin ends anyone's with --force.`,
	},
	{
		name: "reservations", remote: contract.VerbReservations,
		summary: "list the live reservations of this repository",
		detail: `List the live reservations of this repository, oldest first: glob,
holder, agent, the issue whose claim it lives with, and when it ends;
with --path, only those whose glob matches <path>, the ones a push
changing it would meet. Needs only read access.`,
	},
	{
		name: "check", remote: contract.VerbCheck,
		synopsis: "git collab check [<issue> --token <n>] [--agent <name>] [--remote <name>] [--json]",
		summary:  "is token <n> still the live claim on <issue>?",
		detail: `Check that <n> is the token of the live claim on <issue>: exit 0 if it
is, and exit 4 if that claim has since been released, has expired or was
taken over (git collab says the token now current, if anyone holds the
issue). Run it just before an action your claim must fence, such as a
merge or a push, and drop the action on exit 4. Needs only read access.
With no <issue> and no --token, under git collab run, it checks the run's
claim: COLLAB_TOKEN on COLLAB_ISSUE of COLLAB_REPO. Where the sidecar
fences pushes (serve --fence-pushes), Gitea itself refuses a push to a
claimed pull request's branch from anyone but the holder's account
("Not allowed to push to protected branch"): after such a refusal, check
says whose claim it is now.`,
	},
	{
		name: "merge", remote: contract.VerbMerge,
		brief:   "merge <pull> [<options>]",
		summary: "have the sidecar merge <pull> under your claim",
		detail: `Merge pull request <pull> through the sidecar, as the holder of its
claim or of the claim of an issue it closes (anyone else: exit 4), under
that claim's current token: --token <n>, else your current one (a token
no longer current: stale, exit 4, as for check). Merges into one base
branch happen one at a time, first come first served, however many
agents and replicas merge: git collab waits up to --wait (default 2m)
for its turn, saying on stderr where it stands (waiting: 2 ahead of
you), and answers busy, exit 4, if the turn does not come. Then the
sidecar has Gitea merge it as your account (--style: merge, rebase,
rebase-merge, squash or fast-forward-only; --delete-branch deletes its
branch once merged), waiting while Gitea still tests the pull request,
and trying once more if the base branch moved. Gitea's refusal (a
conflict, a check or an approval it wants) is refused with Gitea's
words, exit 4: fix that, then merge again. Merged: the claims the merge
ends (the pull request's, and those of the issues it closes) are over,
and the push options of the pull request and of the claim it was merged
under leave the checkout's config. Where the sidecar runs its gate
(serve --gate), Gitea refuses any other merge
of a pull request a claim fences: merge with git collab merge. Under
git collab run, a merge of run's own agent that ends run's claim ends it
as a release would: run does not stop its command, and exits with its
status (when the session is on another replica of the sidecar than the
merge, run hears it as a lost claim).`,
	},
	{
		name: "unclaim", remote: contract.VerbRelease,
		summary: "release your claim",
		detail: `Release your claim on <issue>. Releasing an issue nobody holds succeeds
(so a retry after a dropped connection is safe); releasing someone else's
live claim is refused, exit 4, unless you are an admin of the repository
and give --force: the claim then ends as force_released, and its history
names you. Released, or not yours: the issue's push option leaves the
checkout's config, and git collab says so.`,
	},
	{
		name: "handoff", remote: contract.VerbHandoff,
		summary: "hand your claim to someone else",
		detail: `Hand your live claim on <issue> to another account, or to one of an
account's agents (login/agent), in one step: your claim ends as
handed_off and theirs begins with the next token, keeping your expiry (at
least ten minutes ahead). They must be allowed to claim the issue
themselves, within the sidecar's caps. Any agent of your account may hand
off your account's claims; a repository admin may hand off anyone's. Not
yours: exit 4.`,
	},
	{
		name: "claims", remote: contract.VerbList,
		summary: "list the live claims on this repository",
		detail:  `List the live claims on this repository, oldest first.`,
	},
	{
		name: "history", remote: contract.VerbHistory,
		summary: "who held <issue>, and how each claim ended",
		detail: `Show the claims of <issue>, newest first: each one's token and holder,
when it began, and when and how it ended (released, expired, taken_over,
closed, merged, deleted, or force_released by a repository admin); live
if it has not. --limit shows at most <n> of them (default 20, at most 200).`,
	},
	{
		name:     "mcp",
		flags:    []string{"--agent", "--grace"},
		synopsis: "git collab mcp [--agent <name>] [--grace <dur>] [--remote <name>]",
		summary:  "serve these commands to coding agents over MCP",
		detail: `Serve claim, renew, unclaim, claims, next, check, handoff, merge,
history, reserve, unreserve and reservations as tools of the Model
Context Protocol, on stdin and stdout, to a coding agent that starts git
collab mcp in a checkout (command git, arguments collab mcp). At the
first tool call it opens one session with the sidecar, on the same
repository, sidecar and ssh as git collab, and sends every call over it:
the claims made through it live as long as the server runs, with no
renewing (a ttl caps one), and are released when it ends; so do the
reservations made with neither an issue nor a ttl. The tools take paths
from the repository's root. A dropped connection is reopened within --grace (default 30s) and
the session resumed; the next tool result says so, and says which claims
were lost, if any. A claim lost, alone or with the session, is also sent
to the client at once, as a log message at level warning. It acts as
--agent, else COLLAB_AGENT, else <short host name>-<pid>. Each answer is
the sidecar's JSON reply. Exit 4 answers (held, not_holder, none, stale, a
merge refused or busy, a reservation's conflict) are ordinary results; the rest are tool errors, and
a temporary one (75) says how long to wait before retrying. ssh runs
without a terminal: use a key without a passphrase, or an agent. It serves
until the client closes its stdin, then exits 0.`,
	},
})

// fromGrammar fills in each command of vs that runs a sub-verb from the
// sub-verb's row of the contract's grammar: whether it takes <issue>,
// <pull> or globs, its flags, the one it requires, and, unless the row of vs gives one, its
// synopsis: the sub-verb's usage without <owner>/<repo>, which git names.
func fromGrammar(vs []verb) []verb {
	for i := range vs {
		v := &vs[i]
		s, ok := contract.SyntaxOf(v.remote)
		if !ok {
			continue
		}
		v.issue, v.pull, v.flags = s.TakesArg(contract.ArgIssue), s.TakesArg(contract.ArgPull), s.Flags
		v.needGlob = s.TakesArg(contract.ArgGlobs)
		v.globs = v.needGlob || s.TakesArg(contract.ArgSomeGlobs)
		if len(s.Required) > 0 {
			v.required = s.Required[0]
		}
		if v.synopsis == "" {
			words := []string{"git collab", v.name}
			for _, a := range s.Args {
				if a != contract.ArgRepo {
					words = append(words, a.Meta())
				}
			}
			words = append(append(words, s.FlagWords()...), "[--remote <name>]", "[--json]")
			v.synopsis = strings.Join(words, " ")
		}
	}
	return vs
}

func findVerb(name string) *verb {
	for i := range verbs {
		if verbs[i].name == name {
			return &verbs[i]
		}
	}
	return nil
}

// optionsHelp lists the options for which keep is true, one a line.
func optionsHelp(keep func(option) bool) string {
	var lines []string
	for _, o := range options {
		if keep(o) {
			lines = append(lines, fmt.Sprintf("  %-16s  %s", strings.TrimSpace(o.name+" "+o.meta), o.text))
		}
	}
	return strings.Join(lines, "\n")
}

func allOptions(option) bool { return true }

const issueHelp = `<issue> is an issue or pull request number: 42 or #42.`

const pullHelp = `<pull> is a pull request number: 7 or #7.`

const globHelp = `<glob> is a path glob: / between directories, * any characters within one
name, ? one character, ** any number of directories, a trailing / a whole
directory (src/auth/ is src/auth/**). Globs and paths are read as git
reads a pathspec: from the directory git collab runs in (auth/** in src
is src/auth/**), or from the repository's root after :/ (:/docs/); a ..
above the root is refused.`

const exitHelp = `  0    done (also: claiming what you hold, unclaiming what nobody holds)
  1    error: bad arguments, unknown repository or issue, closed issue,
       or your key no longer belongs to an active Gitea account
  4    an answer, not an error: claimed by someone else, cooling down
       after a claim lapsed, past your claim or reservation cap, you are
       not the holder, nothing to claim (next), a stale token (check,
       merge), a merge Gitea refused or whose turn did not come (merge),
       or another holder's reservation in the way (reserve)
  75   temporary failure (forge unavailable, database busy): retry
  255  ssh could not reach or log in to the sidecar`

const runExitHelp = `  n    the command's own exit status (a signal: 128+n); the claim is released
  4    not claimed (held, cooling down, your cap, nothing to claim), or
       not reserved (--reserve; the claim is released): the command never
       started; or the claim was lost and the command stopped
  1    error, as for every command; the command never started
  75   temporary failure: retry; the command never started
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
	const width = 30
	for _, v := range verbs {
		use := v.brief
		if use == "" {
			use = strings.TrimPrefix(strings.NewReplacer(" [--remote <name>]", "", " [--json]", "").Replace(v.synopsis), "git collab ")
		}
		if len(use) > width {
			// Too long to share its line: the summary goes under it.
			fmt.Fprintf(&b, "  %s\n  %-*s %s\n", use, width, "", v.summary)
			continue
		}
		fmt.Fprintf(&b, "  %-*s %s\n", width, use, v.summary)
	}
	fmt.Fprintf(&b, "  %-*s %s\n", width, "help [<command>]", "show help (also: git collab <command> -h)")
	b.WriteString("\noptions:\n" + optionsHelp(allOptions) + "\n\n" + issueHelp + "\n\nexit status:\n" + exitHelp +
		"\n\nconfiguration:\n" + configHelp + "\n\n" + manNote + "\n")
	return b.String()
}

// verbHelp is `git collab <verb> -h`.
func verbHelp(v *verb) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s\n\n%s\n", v.synopsis, v.detail)
	switch {
	case v.issue:
		b.WriteString("\n" + issueHelp + "\n")
	case v.pull:
		b.WriteString("\n" + pullHelp + "\n")
	case v.globs || v.takes("--path") || v.takes("--reserve"):
		b.WriteString("\n" + globHelp + "\n")
	}
	b.WriteString("\noptions:\n" + optionsHelp(func(o option) bool {
		if o.name == "--json" {
			return v.remote != "" // mcp's answers are JSON already
		}
		return !o.scoped() || v.takes(o.name)
	}) + "\n")
	switch {
	case v.name == "run":
		b.WriteString("\nexit status:\n" + runExitHelp + "\n")
	case v.remote != "": // mcp's calls end in results, not in its exit status
		b.WriteString("\nexit status:\n" + exitHelp + "\n")
	}
	return b.String()
}

// agentLoop is the manual page's example: the loop of docs/agents.md.
const agentLoop = `# take the next free issue, run work.sh under the claim, release it;
# exit 4: nothing to claim, or the claim was lost and work.sh stopped
git collab run --next -- ./work.sh
# in work.sh: push only while the claim is still the run's
git collab check && git push origin "HEAD:refs/heads/issue-$COLLAB_ISSUE"`

// reserveExample is the manual page's example of reservations, as
// docs/agents.md gives them.
const reserveExample = `# claim 42 and reserve the paths its work changes, until the claim ends;
# exit 4 if another holder's reservation is in the way: work.sh never starts
git collab run 42 --reserve 'src/auth/**' --reserve docs/auth.md -- ./work.sh
# who holds what a change to src/auth/login.go would meet
git collab reservations --path src/auth/login.go`

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
Every command runs one collab-lease command on the sidecar over ssh; run
and mcp open one session there and send all of theirs over it.`)) + "\n")
	b.WriteString(".SH COMMANDS\n")
	for _, v := range verbs {
		fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", v.name, roff(oneParagraph(v.detail)))
	}
	b.WriteString(".SH OPTIONS\n" + roffList(optionsHelp(allOptions)) + ".PP\n" + roff(issueHelp) + "\n.PP\n" + roff(oneParagraph(globHelp)) + "\n")
	b.WriteString(".SH EXIT STATUS\n" + roffList(exitHelp))
	b.WriteString(".PP\n" + roff(oneParagraph(`Exit status 4 is an answer: do other work, or claim again later
(claim --wait lets the sidecar do the waiting); retrying at once changes
nothing. After 75 nothing was done: retry the same command with backoff.`)) + "\n")
	b.WriteString(".SH CONFIGURATION\n.nf\n" + roff(configHelp) + "\n.fi\n")
	b.WriteString(".SH EXAMPLES\nAn agent's loop:\n.PP\n.nf\n" + roff(agentLoop) + "\n.fi\n")
	b.WriteString(".PP\nKeeping agents off each other's files:\n.PP\n.nf\n" + roff(reserveExample) + "\n.fi\n")
	return b.String()
}

func oneParagraph(s string) string { return strings.Join(strings.Fields(s), " ") }

// roffList renders "  term   text" lines as tagged paragraphs; a line
// indented deeper than the terms continues the text above it.
func roffList(s string) string {
	var b strings.Builder
	var term, text string
	flush := func() {
		if term != "" {
			fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", roff(term), roff(text))
		}
	}
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "   ") && term != "" {
			text += " " + strings.TrimSpace(line)
			continue
		}
		flush()
		var rest string
		term, rest, _ = strings.Cut(strings.TrimSpace(line), "  ")
		text = strings.TrimSpace(rest)
	}
	flush()
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
