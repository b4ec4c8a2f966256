package main

import (
	"fmt"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// The tools of git collab mcp as an agent sees them: what each takes,
// what it answers, and the words that teach the contract's rules. How a
// call runs is in mcp.go.

// workflow is the server's instructions and its "workflow" prompt: the
// loop of docs/agents.md, in the tools' words.
const workflow = `Claim an issue before working on it, so that no other agent or person works on it at the same time:
1. next (or claim with an issue number). The answer's token identifies your claim. This server keeps the claim alive for as long as it runs: no renewing. A ttl, if you give one, caps the claim's whole life.
2. If other agents may touch the same files, reserve the paths you will change, with the claim's issue, so that the reservations end with the claim. A conflict names the reservations in the way: work on something else rather than on their paths.
3. Work. If a result starts with a note that a claim of yours was lost, stop working under its token, and claim again before going on; do not assume earlier work is still yours to finish.
4. Right before a push, check the issue with your token; unless it answers current, do not push. While the claim is yours, every git push from this checkout carries its token as the push option collab-lease=<issue>:<token>, which Gitea may require: push with plain git push, or, if you give -o options of your own, add -o collab-lease=<issue>:<token> too.
5. To merge the pull request of your claim (or one that closes your claimed issue), call merge, not Gitea's merge: it checks your token, waits its turn behind other merges into the same branch, and merges; Gitea may refuse any other merge.
6. unclaim when done, or when you give up.
The statuses held, cooling, limit, not_holder, none, stale, refused, busy and conflict are answers, not errors: retrying at once changes nothing. A tool error that says "temporary" is the one to retry, after the wait it gives; other tool errors need a different call.`

// errorsNote ends every tool's description: the outcomes an agent must
// tell apart, in one place.
const errorsNote = ` A tool error that says "temporary" means nothing was done: retry the same call after the wait it gives. Any other tool error (bad arguments, unknown or closed issue, no access, ssh failure) needs a different call, not a retry.`

// claimArgs and the other *Args are the tools' inputs (toolArgs). words
// turns one into what the command line would send: the issue and the
// sidecar options, whose values RemoteCommand then holds to the sidecar's
// grammar.
type claimArgs struct {
	Issue int64  `json:"issue" jsonschema:"the issue or pull request number, e.g. 42"`
	TTL   string `json:"ttl,omitempty" jsonschema:"how long the claim may last at most, from now: seconds (\"300\") or a duration (\"90s\", \"30m\", \"2h\"); omit it and the claim lasts as long as this server runs, with no renewing"`
	Wait  string `json:"wait,omitempty" jsonschema:"if someone else holds the issue, wait up to this long (e.g. \"5m\") for their claim to be released or to lapse before answering held"`
}

func (a claimArgs) words() (int64, []Flag) {
	return a.Issue, flagsOf("--ttl", a.TTL, "--wait", a.Wait)
}

type renewArgs struct {
	Issue int64  `json:"issue" jsonschema:"the issue or pull request number"`
	TTL   string `json:"ttl" jsonschema:"the claim then lapses this long from now: seconds (\"300\") or a duration (\"90s\", \"30m\", \"2h\")"`
}

func (a renewArgs) words() (int64, []Flag) { return a.Issue, flagsOf("--ttl", a.TTL) }

type unclaimArgs struct {
	Issue int64 `json:"issue" jsonschema:"the issue or pull request number"`
	Force bool  `json:"force,omitempty" jsonschema:"release someone else's claim (repository admins only)"`
}

func (a unclaimArgs) words() (int64, []Flag) { return a.Issue, switchIf("--force", a.Force) }

type handoffArgs struct {
	Issue int64  `json:"issue" jsonschema:"the issue or pull request number"`
	To    string `json:"to" jsonschema:"whom the claim goes to: a Gitea login, or login/agent for one of that account's agents"`
}

func (a handoffArgs) words() (int64, []Flag) { return a.Issue, flagsOf("--to", a.To) }

type mergeArgs struct {
	Pull         int64  `json:"pull" jsonschema:"the pull request number, e.g. 7"`
	Token        int64  `json:"token,omitempty" jsonschema:"the token of the claim you merge under: the pull request's, or that of an issue it closes; omit it for your current one"`
	Style        string `json:"style,omitempty" jsonschema:"how Gitea merges; omit it for merge"`
	DeleteBranch bool   `json:"delete_branch,omitempty" jsonschema:"delete the pull request's branch once merged"`
	Wait         string `json:"wait,omitempty" jsonschema:"how long to wait for the turn to merge into the base branch, behind other merges into it (e.g. \"5m\"); omit it for 2m"`
}

func (a mergeArgs) words() (int64, []Flag) {
	flags := append(numberIf("--token", a.Token), flagsOf("--style", a.Style)...)
	flags = append(flags, switchIf("--delete-branch", a.DeleteBranch)...)
	return a.Pull, append(flags, flagsOf("--wait", a.Wait)...)
}

type claimsArgs struct{}

func (claimsArgs) words() (int64, []Flag) { return 0, nil }

type nextArgs struct {
	Labels []string `json:"labels,omitempty" jsonschema:"only issues that carry every one of these labels"`
	Pulls  bool     `json:"pulls,omitempty" jsonschema:"pull requests instead of issues"`
	Oldest bool     `json:"oldest,omitempty" jsonschema:"the oldest free issue, whatever the sidecar's priority labels (without it, the highest priority first)"`
	TTL    string   `json:"ttl,omitempty" jsonschema:"how long the claim may last at most, from now: seconds (\"300\") or a duration (\"90s\", \"30m\", \"2h\"); omit it and the claim lasts as long as this server runs, with no renewing"`
	Wait   string   `json:"wait,omitempty" jsonschema:"if nothing qualifies now, wait up to this long (e.g. \"5m\") for an issue to come free before answering none"`
}

func (a nextArgs) words() (int64, []Flag) {
	var flags []Flag
	for _, l := range a.Labels {
		flags = append(flags, Flag{Name: "--label", Value: l})
	}
	flags = append(flags, switchIf("--pulls", a.Pulls)...)
	flags = append(flags, switchIf("--oldest", a.Oldest)...)
	return 0, append(flags, flagsOf("--ttl", a.TTL, "--wait", a.Wait)...)
}

type checkArgs struct {
	Issue int64 `json:"issue" jsonschema:"the issue or pull request number"`
	Token int64 `json:"token" jsonschema:"the token your claim was given"`
}

func (a checkArgs) words() (int64, []Flag) {
	return a.Issue, []Flag{{Name: "--token", Value: fmt.Sprint(a.Token)}}
}

type historyArgs struct {
	Issue int64 `json:"issue" jsonschema:"the issue or pull request number"`
	Limit int   `json:"limit,omitempty" jsonschema:"show at most this many claims, newest first (default 20, at most 200)"`
}

func (a historyArgs) words() (int64, []Flag) { return a.Issue, numberIf("--limit", int64(a.Limit)) }

type reserveArgs struct {
	Globs  []string `json:"globs" jsonschema:"the paths to reserve, as globs from the repository's root: / between directories, * any characters within one name, ? one character, ** any number of directories, a trailing / a whole directory (src/auth/ is src/auth/**); e.g. [\"src/auth/**\", \"docs/auth.md\"]"`
	Issue  int64    `json:"issue,omitempty" jsonschema:"the issue of your claim the reservations live with: they end when the claim does, however it ends; omit it and they live as long as this server runs (or for ttl)"`
	Shared bool     `json:"shared,omitempty" jsonschema:"a shared reservation: it stands only in the way of others' exclusive ones, and only their exclusive ones in its way (for files many touch, such as a changelog)"`
	TTL    string   `json:"ttl,omitempty" jsonschema:"without issue: how long the reservations last at most, from now, as for claim's ttl"`
}

func (a reserveArgs) words() (int64, []Flag) {
	flags := append(numberIf("--issue", a.Issue), switchIf("--shared", a.Shared)...)
	return 0, append(flags, flagsOf("--ttl", a.TTL)...)
}

func (a reserveArgs) globs() []string { return a.Globs }

type unreserveArgs struct {
	Globs []string `json:"globs,omitempty" jsonschema:"the globs to unreserve, exactly as they were reserved; omit them for all of yours in this repository"`
	Issue int64    `json:"issue,omitempty" jsonschema:"only the reservations that live with your claim on this issue"`
	Force bool     `json:"force,omitempty" jsonschema:"end someone else's reservations of globs (repository admins only)"`
}

func (a unreserveArgs) words() (int64, []Flag) {
	return 0, append(numberIf("--issue", a.Issue), switchIf("--force", a.Force)...)
}

func (a unreserveArgs) globs() []string { return a.Globs }

type reservationsArgs struct {
	Path string `json:"path,omitempty" jsonschema:"only the reservations whose glob matches this path from the repository's root, e.g. src/auth/login.go: those a push changing it would meet"`
}

func (a reservationsArgs) words() (int64, []Flag) { return 0, flagsOf("--path", a.Path) }

// switchIf is the option name, which takes no value, if on.
func switchIf(name string, on bool) []Flag {
	if !on {
		return nil
	}
	return []Flag{{Name: name}}
}

// numberIf is the option name with the value n, if n is set.
func numberIf(name string, n int64) []Flag {
	if n == 0 {
		return nil
	}
	return []Flag{{Name: name, Value: fmt.Sprint(n)}}
}

// flagsOf is the valued options among name/value pairs whose value is set.
func flagsOf(pairs ...string) []Flag {
	var flags []Flag
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] != "" {
			flags = append(flags, Flag{Name: pairs[i], Value: pairs[i+1]})
		}
	}
	return flags
}

// outcome is one shape a tool's structured content may take: a contract
// reply type, the "status" it then carries ("" for one without), what it
// means to the agent, and what its fields mean where replyFields would
// say otherwise.
type outcome struct {
	shape  any
	status string
	means  string
	fields map[string]string
}

// The outcomes of the tools (their exit 0 and exit 4 replies).
var (
	outAcquired = outcome{shape: contract.Tenure{}, status: contract.StatusAcquired,
		means: "the issue is yours: token fences your work; this server keeps the claim alive while it runs (expires_at moves ahead as it does), up to the ttl if you gave one"}
	outHeld = outcome{shape: contract.Conflict{}, status: contract.StatusHeld,
		means: "an answer, not an error: holder has the issue until expires_at; pick other work, or claim it later"}
	outRenewed = outcome{shape: contract.Tenure{}, status: contract.StatusRenewed,
		means: "still yours, same token, now until expires_at"}
	outNotHolder = outcome{shape: contract.Conflict{}, status: contract.StatusNotHolder,
		means:  "an answer, not an error: you do not hold the issue; a lapsed claim is not yours",
		fields: notHolderFields}
	outHandedOff = outcome{shape: contract.HandedOff{}, status: contract.StatusHandedOff,
		means:  "handed off: the claim is the target's now, with a new token; stop working under yours",
		fields: map[string]string{"holder": "the target's Gitea login", "agent": "the target's agent; null: the account itself", "token": "the target's new token", "from": "your tenure, which ended handed_off"}}
	outReleased = outcome{shape: contract.Released{}, status: contract.StatusReleased,
		means: "released, or nobody held it: either way it is free"}
	outCooling = outcome{shape: contract.Cooling{}, status: contract.StatusCooling,
		means: "an answer, not an error: the issue's last claim lapsed moments ago, and only its holder may claim it before until; pick other work, or claim it after until"}
	outLimit = outcome{shape: contract.Limit{}, status: contract.StatusLimit,
		means:  "an answer, not an error: you (scope holder) or your account (scope account) hold limit live claims, the sidecar's cap; unclaim one before claiming another",
		fields: map[string]string{"issue": "the issue asked for; null for next", "holder": "your Gitea login", "agent": "your agent; null: the account itself"}}
	outNone = outcome{shape: contract.None{}, status: contract.StatusNone,
		means: "an answer, not an error: no issue qualifies now; look again later"}
	outCurrent = outcome{shape: contract.Tenure{}, status: contract.StatusCurrent,
		means: "the token is the live claim's: the fenced action may go ahead"}
	outStale = outcome{shape: contract.Stale{}, status: contract.StatusStale,
		means:  "an answer, not an error: the token is no longer the live claim's; do not merge or push",
		fields: map[string]string{"token": "the live claim's token, not the one checked; null: nobody holds the issue"}}
	outMerged = outcome{shape: contract.Merged{}, status: contract.StatusMerged,
		means:  "merged: the claims the merge ended (the pull request's, and those of the issues it closes) are over; do not push to its branch under them",
		fields: map[string]string{"token": "the token of the claim it was merged under"}}
	outRefused = outcome{shape: contract.MergeRefused{}, status: contract.StatusRefused,
		means: "an answer, not an error: Gitea would not merge (a conflict, a check or an approval it wants, a closed pull request); reason is Gitea's words: fix that, then merge again"}
	outBusy = outcome{shape: contract.MergeBusy{}, status: contract.StatusBusy,
		means: "an answer, not an error: other merges into the same base branch came first and the wait ran out; nothing was merged: merge again later, or with a longer wait"}
	outMergeStale = outcome{shape: contract.Stale{}, status: contract.StatusStale,
		means: "an answer, not an error: the token is no longer the live claim's, and nothing was merged: do not merge or push under it",
		fields: map[string]string{"issue": "the issue or pull request of the claim the token named",
			"token": "the live claim's token, not the one merged under; null: nobody holds it"}}
	outMergeNotHolder = outcome{shape: contract.Conflict{}, status: contract.StatusNotHolder,
		means: "an answer, not an error: you hold neither the pull request's claim nor that of an issue it closes, and nothing was merged",
		fields: map[string]string{"issue": "the pull request, or the issue it closes whose claim holder holds",
			"holder": "the Gitea login holding the pull request's claim, else that of an issue it closes; null: nobody holds any",
			"agent":  "which agent of holder's account holds it; null: the account itself, or nobody holds it", "expires_at": "when their claim lapses; null: open-ended, or nobody holds it"}}
	outReserved = outcome{shape: contract.Reservations{}, status: contract.StatusReserved,
		means: "all the globs are yours (a glob you already held is renewed): other holders cannot reserve what they match, and where the gate is on Gitea refuses their pushes that change it", fields: reservationFields}
	outReserveConflict = outcome{shape: contract.ReserveConflict{}, status: contract.StatusConflict,
		means: "an answer, not an error: other holders' reservations (with) match paths your globs match, and nothing was reserved; work elsewhere, or reserve again once theirs end", fields: reservationFields}
	outReserveNotHolder = outcome{shape: contract.Conflict{}, status: contract.StatusNotHolder,
		means:  "an answer, not an error: you do not hold the claim of issue, and nothing was reserved; claim it first",
		fields: notHolderFields}
	outReserveLimit = outcome{shape: contract.Limit{}, status: contract.StatusLimit,
		means:  "an answer, not an error: you hold limit live reservations, the sidecar's cap (scope reservations), and nothing was reserved; unreserve some first",
		fields: map[string]string{"issue": "the issue given; null: none", "holder": "your Gitea login", "agent": "your agent; null: the account itself"}}
	outUnreserved   = outcome{shape: contract.Reservations{}, status: contract.StatusUnreserved, means: "ended: the reservations removed, maybe none", fields: reservationFields}
	outReservations = outcome{shape: contract.Reservations{}, status: contract.StatusReservations, means: "the live reservations, oldest first", fields: reservationFields}
	outList         = outcome{shape: contract.List{}, means: "the live claims, oldest first"}
	outHistory      = outcome{shape: contract.History{}, means: "the issue's claims, newest first"}
)

// notHolderFields describe the properties of a not_holder answer.
var notHolderFields = map[string]string{"holder": "the Gitea login holding the issue now; null: nobody does",
	"agent":      "which agent of holder's account holds it; null: the account itself, or nobody holds it",
	"expires_at": "when their claim lapses; null: open-ended, or nobody holds it"}

// reservationFields describe the properties of reservations.
var reservationFields = map[string]string{
	"issue":      "the issue whose claim the reservation lives with: it ends when the claim does; null: none (it lives with a session, or for its own ttl)",
	"holder":     "the Gitea login of the reservation's holder",
	"agent":      "which agent of the holder's account holds it; null: the account itself",
	"expires_at": "when it ends unless its anchor (claim, session or ttl) lives on (RFC 3339, UTC); null: open-ended",
}

// replyFields describe the properties of the reply shapes, wherever they
// occur.
var replyFields = map[string]string{
	"repo":        "the repository, owner/name",
	"issue":       "the issue or pull request number",
	"holder":      "the Gitea login of the claim's holder",
	"agent":       "which agent of the holder's account holds the claim (git collab mcp --agent, or COLLAB_AGENT); null: the account itself",
	"token":       "the fencing token of the claim: each new claim of the issue gets a larger one; give it to check before a merge or a push",
	"acquired_at": "when the claim began (RFC 3339, UTC)",
	"expires_at":  "when the claim lapses unless renewed or kept alive by a session, such as this server's (RFC 3339, UTC); null: open-ended, until unclaimed",
	"leases":      "the live claims, oldest first",
	"tenures":     "the claims of the issue, newest first",
	"ended_at":    "when the claim ended; null while it is live",
	"ended_by": "how it ended: released, expired (it lapsed, nobody took the issue since), taken_over (it lapsed and someone claimed the issue), " +
		"closed, merged, deleted, force_released (by a repository admin, named in forced_by); null while it is live",
	"forced_by":      "the repository admin who force-released it",
	"from":           "the tenure the handoff ended",
	"until":          "when the issue's lock-delay ends (RFC 3339, UTC): from then on anyone may claim it",
	"scope":          "which cap: holder (you, as this agent) or account (all your account's agents)",
	"limit":          "the cap: how many live claims the scope may hold",
	"live":           "how many live claims the scope holds now",
	"ended_by_login": "who released it, where a person or an agent did (released, force_released)",
	"ended_by_agent": "which agent of ended_by_login's account released it; null: the account itself",
	"pull":           "the pull request number",
	"sha":            "the merge commit",
	"reason":         "Gitea's words, on one line",
	"ahead":          "how many merges into the same base branch were before this one when the wait ran out, the one under way included",
	"reservations":   "the reservations, one per glob",
	"with":           "the other holders' reservations in the way, one per glob",
	"glob":           "the reserved paths: a glob from the repository's root",
	"shared":         "a shared reservation, which stands only in the way of exclusive ones; false: exclusive",
}

// mcpTool is one tool: the git collab command it runs, what it says of
// itself, and its outcomes.
type mcpTool struct {
	name        string // also the git collab command it runs
	description string
	outcomes    []outcome
	readOnly    bool
	idempotent  bool
	destructive bool // it can end someone else's claim
	// add adds it to a server: addTool with its arguments' type.
	add func(*mcp.Server, *mcpServer, mcpTool) error
}

var mcpTools = []mcpTool{
	{name: "next", add: addTool[nextArgs], outcomes: []outcome{outAcquired, outNone, outLimit}, description: `Claim the oldest open issue (with pulls: pull request) of this repository that nobody holds, that carries every one of labels, and that no open issue blocks. Agents calling next at the same time never get the same issue. Answers status acquired with the issue, its token and expires_at, exactly like claim; or status none when nothing qualifies, which is an answer, not an error: look again later, or call with wait to have the sidecar wait for an issue to come free. The claim lasts as long as this server runs, with no renewing; a ttl caps it.`},
	{name: "claim", add: addTool[claimArgs], idempotent: true, outcomes: []outcome{outAcquired, outHeld, outCooling, outLimit}, description: `Claim an issue or pull request of this repository before working on it. This server keeps the claim alive for as long as it runs, with no renewing, and releases it when it ends; with ttl the claim lapses that long from now at the latest. Answers status acquired with the token that fences your work; claiming what you already hold succeeds again with the same token. If someone else holds it, answers status held with holder and expires_at: an answer, not an error, so pick other work or claim again later. With wait, the sidecar first waits up to that long for the claim to be released or to lapse.`},
	{name: "renew", add: addTool[renewArgs], idempotent: true, outcomes: []outcome{outRenewed, outNotHolder}, description: `Extend your live claim: it now lapses ttl from now, with the same token. A claim made through this server needs no renewing while it runs; renew sets how long it lasts at most. Answers status renewed, or status not_holder when the claim is no longer yours (it lapsed, was released, or was taken over: holder says by whom, null if by nobody): then stop working under its token, claim again before going on, and do not assume earlier work is still yours to finish.`},
	{name: "check", add: addTool[checkArgs], readOnly: true, outcomes: []outcome{outCurrent, outStale}, description: `Check that token is still the live claim on the issue. Call it right before every action your claim must fence, such as a merge or a push: a claim can lapse between two calls. Answers status current (go ahead) or status stale (the claim was released, lapsed or taken over since; token is the live claim's, null if nobody holds the issue): an answer, not an error, and the action must not happen. Needs only read access.`},
	{name: "handoff", add: addTool[handoffArgs], destructive: true, outcomes: []outcome{outHandedOff, outNotHolder, outLimit}, description: `Hand your live claim on an issue to another holder: a Gitea login, or login/agent for one of that account's agents. In one step your claim ends (handed_off) and theirs begins with the next token, keeping your expiry (at least ten minutes ahead); from then on your token is stale, so stop working under it. The target must be allowed to claim the issue itself. Answers status handed_off; not_holder if the claim is not yours to hand (an answer, not an error); limit if the target holds as many claims as the sidecar allows.`},
	{name: "unclaim", add: addTool[unclaimArgs], idempotent: true, destructive: true, outcomes: []outcome{outReleased, outNotHolder}, description: `Release your claim on an issue when you are done with it or give up. Answers status released, also when nobody held it, so a retry is safe. Someone else's live claim is not released: status not_holder with holder and expires_at, an answer, not an error; with force a repository admin releases it anyway.`},
	{name: "merge", add: addTool[mergeArgs], destructive: true, outcomes: []outcome{outMerged, outRefused, outBusy, outMergeStale, outMergeNotHolder}, description: `Merge a pull request of this repository through the sidecar, as the holder of its claim or of the claim of an issue it closes, under that claim's live token (token, else your current one): use it instead of Gitea's own merge, which Gitea may refuse for a claimed pull request. Merges into one base branch happen one at a time across all agents: the sidecar waits up to wait (default 2m) for this one's turn, then has Gitea merge it as your account (style; delete_branch deletes its branch), waiting while Gitea still tests it. Answers status merged with the merge commit (sha); the claims it ended (the pull request's, and those of the issues it closes) are over, and their loss is noted like any other. Answers, not errors: refused (Gitea's reason: fix it, then merge again), busy (its turn did not come in time: merge again later), stale (the token is no longer the live claim's: nothing was merged), not_holder (not your claim).`},
	{name: "reserve", add: addTool[reserveArgs], idempotent: true, outcomes: []outcome{outReserved, outReserveConflict, outReserveNotHolder, outReserveLimit}, description: `Reserve paths of this repository, as globs from its root, so that no other agent works on the same files at the same time: two agents on two issues that touch the same files would otherwise find out only when their work conflicts. Reserve what you will change right after claiming, with issue, so that the reservations end with the claim however it ends. Exclusive unless shared: an exclusive glob conflicts with any other holder's reservation that may match a common path; a shared one only with others' exclusive ones. All the globs are reserved or none: status reserved, or status conflict naming the reservations in the way (with), an answer, not an error. Where the sidecar runs its gate, Gitea refuses a push that changes a path under another holder's exclusive reservation.`},
	{name: "unreserve", add: addTool[unreserveArgs], idempotent: true, destructive: true, outcomes: []outcome{outUnreserved}, description: `End your reservations of globs (exactly as reserved), or all of yours in this repository if you give none; with issue, only those that live with that claim. Reservations end with their claim anyway. Answers status unreserved with those it ended, maybe none, so a retry is safe. With force a repository admin ends someone else's.`},
	{name: "reservations", add: addTool[reservationsArgs], readOnly: true, outcomes: []outcome{outReservations}, description: `List the live reservations of this repository, oldest first: glob, shared, holder, agent, the issue whose claim it lives with, and expires_at; with path, only those whose glob matches that path. Call it before changing files another agent may be working on.`},
	{name: "claims", add: addTool[claimsArgs], readOnly: true, outcomes: []outcome{outList}, description: `List the live claims on this repository, oldest first: issue, holder, token and expires_at (null: open-ended) of each.`},
	{name: "history", add: addTool[historyArgs], readOnly: true, outcomes: []outcome{outHistory}, description: `Show who claimed an issue, newest first: token, holder, acquired_at, and ended_at and ended_by (released, expired, taken_over, closed, merged, deleted, force_released with forced_by; both null while the claim is live).`},
}

// inputSchema is In's schema, with the bounds the sidecar's grammar holds
// its numbers to.
func inputSchema[In any]() (*jsonschema.Schema, error) {
	s, err := jsonschema.For[In](nil)
	if err != nil {
		return nil, err
	}
	for name, p := range s.Properties {
		switch name {
		case "issue", "pull", "token":
			p.Minimum = jsonschema.Ptr(1.0)
		case "style":
			for _, style := range contract.MergeStyles() {
				p.Enum = append(p.Enum, style)
			}
		case "limit":
			p.Minimum, p.Maximum = jsonschema.Ptr(1.0), jsonschema.Ptr(float64(contract.MaxHistoryLimit))
		case "labels":
			p.MaxItems = jsonschema.Ptr(contract.MaxLabels)
		case "globs":
			p.MaxItems = jsonschema.Ptr(contract.MaxReserveGlobs)
		}
	}
	return s, nil
}

// outputSchema is the schema of a tool's structured content: its one
// outcome's shape, or one of several.
func outputSchema(outcomes []outcome) (*jsonschema.Schema, error) {
	opts := &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[contract.Time](): {Type: "string", Format: "date-time"},
	}}
	var branches []*jsonschema.Schema
	for _, o := range outcomes {
		s, err := jsonschema.ForType(reflect.TypeOf(o.shape), opts)
		if err != nil {
			return nil, err
		}
		describe(s, o.fields)
		if o.status != "" {
			var status any = o.status
			s.Properties["status"].Const = &status
		}
		s.Title, s.Description = o.status, o.means
		branches = append(branches, s)
	}
	if len(branches) == 1 {
		return branches[0], nil
	}
	return &jsonschema.Schema{Type: "object", OneOf: branches}, nil
}

// describe gives every property of s, however deep, its text: from
// fields, else from replyFields.
func describe(s *jsonschema.Schema, fields map[string]string) {
	if s == nil {
		return
	}
	for name, p := range s.Properties {
		if d, ok := fields[name]; ok {
			p.Description = d
		} else if d, ok := replyFields[name]; ok {
			p.Description = d
		}
		describe(p, fields)
	}
	describe(s.Items, fields)
}
