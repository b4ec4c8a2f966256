package main

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// How a run is shown: a plain summary on stdout and the markdown section
// of bench/RESULTS.md, both from the same figures.

type summary struct {
	opts    options
	backlog backlog
	results []ModeResult // lease, assignees, faults
	total   time.Duration
	load    string
	// giteaGit is what the git Gitea ran says of its version.
	giteaGit string
	// sizing is how the runs were sized from Gitea's speed.
	sizing sizing
}

// row is one measure across the modes.
type row struct {
	label string
	cell  func(ModeResult) string
}

// perClosed divides by a run's closed issues (at least 1).
func perClosed(r ModeResult) float64 { return float64(max(r.Report.Closed, 1)) }

func cpuPerClosed(d time.Duration, r ModeResult) string {
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000/perClosed(r))
}

// round splits the runs into round two's and round three's.
func (s summary) round(three bool) []ModeResult {
	var out []ModeResult
	for _, r := range s.results {
		if r.Spec.Round3 == three {
			out = append(out, r)
		}
	}
	return out
}

// mergeRequests are a run's requests to merge per closed issue: its
// git collab merge calls, by reply, where its work merges with them; its
// merge requests to Gitea's API otherwise.
func mergeRequests(r ModeResult) string {
	if r.Spec.MergeVerb {
		replies := r.Report.MergeReplies
		keys := slices.Collect(maps.Keys(replies))
		slices.SortFunc(keys, func(a, b string) int { return cmp.Or(replies[b]-replies[a], strings.Compare(a, b)) })
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%.2f %s", float64(replies[k])/perClosed(r), k))
		}
		out := fmt.Sprintf("%.2f", float64(r.Report.MergeCalls)/perClosed(r))
		if len(parts) > 0 {
			out += " (" + strings.Join(parts, " + ") + ")"
		}
		return out
	}
	all := 0
	for _, m := range r.Traffic.Merges {
		all += m.N
	}
	return fmt.Sprintf("%.2f (Gitea's API)", float64(all)/perClosed(r))
}

// byKey is the runs by their mode's key.
func (s summary) byKey() map[string]ModeResult {
	out := map[string]ModeResult{}
	for _, r := range s.results {
		out[r.Spec.Key] = r
	}
	return out
}

// unclosed is a run's issues never closed, and whether its bound
// stopped it.
func unclosed(r ModeResult) string {
	if r.StoppedAt > 0 {
		return fmt.Sprintf("%d (stopped at %s, its bound %s)", len(r.Report.Unclosed), dur(r.StoppedAt), dur(r.Bound))
	}
	return fmt.Sprint(len(r.Report.Unclosed))
}

// rows3 are round three's measures.
func (s summary) rows3() []row {
	zombies := func(r ModeResult, n int) string {
		if len(r.Spec.Zombies) == 0 {
			return "no zombies"
		}
		return fmt.Sprint(n)
	}
	return []row{
		{"issues worked more than once", func(r ModeResult) string { return fmt.Sprint(len(r.Report.Duplicates)) }},
		{"zombie pushes landed (commits)", func(r ModeResult) string { return zombies(r, len(r.Git.ZombiePushes)) }},
		{"zombie merges landed", func(r ModeResult) string { return zombies(r, len(r.Git.ZombieMerges)) }},
		{"commits lost (pushed by a live holder, not in main, not in flight)", func(r ModeResult) string {
			return fmt.Sprintf("%d (of %d pushes)", len(r.Git.Lost), r.Git.Pushes)
		}},
		{"issues never closed", unclosed},
		{"commits in flight when the run was stopped (on their issue's branch, its work unfinished)", func(r ModeResult) string {
			if r.StoppedAt == 0 {
				return "none (not stopped)"
			}
			return fmt.Sprint(len(r.Git.InFlight))
		}},
		{"pushes Gitea's gate refused (of them zombies')", func(r ModeResult) string {
			if !r.Spec.Gate {
				return "no gate"
			}
			return fmt.Sprintf("%d (%d)", r.Git.Gated, r.Git.ZombieGated)
		}},
		{"wall time to the last close", func(r ModeResult) string { return fmt.Sprintf("%.1f s", r.Report.LastClose.Seconds()) }},
		{"Gitea requests per closed issue (sidecar + agents, git included)", func(r ModeResult) string {
			sc, ag := float64(r.Requests[srcSidecar]), float64(r.Requests[srcAgents])
			return fmt.Sprintf("%.1f (%.1f + %.1f)", (sc+ag)/perClosed(r), sc/perClosed(r), ag/perClosed(r))
		}},
		{"merge requests per closed issue: git collab merge calls where the work merges with it, Gitea merge API calls where it merges itself (goal ≤ 1.1)", mergeRequests},
		{"pull requests the agents replaced (goal 0 with git collab merge)", func(r ModeResult) string { return fmt.Sprint(len(r.Report.Replaced)) }},
		{"wall time to the last close ÷ assignees only, 20 accounts (goal ≤ 0.5×)", func(r ModeResult) string {
			base, ok := s.byKey()["assignees-accounts"]
			if !ok || base.Report.LastClose == 0 {
				return "no such run"
			}
			return fmt.Sprintf("%.2f×", ratio(r.Report.LastClose.Seconds(), base.Report.LastClose.Seconds()))
		}},
		{"Gitea merge API calls per closed issue, the sidecar's or the agents' (merged + main moved meanwhile + not yet, + other answers)", func(r ModeResult) string {
			n := func(code int) float64 {
				if m := r.Traffic.Merges[code]; m != nil {
					return float64(m.N)
				}
				return 0
			}
			all := 0.0
			for _, m := range r.Traffic.Merges {
				all += float64(m.N)
			}
			ok, moved, notYet := n(http.StatusOK), n(http.StatusConflict), n(http.StatusMethodNotAllowed)
			out := fmt.Sprintf("%.1f (%.1f + %.1f + %.1f", all/perClosed(r), ok/perClosed(r), moved/perClosed(r), notYet/perClosed(r))
			if other := all - ok - moved - notYet; other > 0 {
				// Any other answer (a 5xx, a 404): the parts add up.
				out += fmt.Sprintf(" + %.1f other", other/perClosed(r))
			}
			return out + ")"
		}},
		{"merge lock: mean wait / mean hold", func(r ModeResult) string {
			if r.Spec.MergeVerb {
				return fmt.Sprintf("none: git collab merge, %.1f s a call", r.Report.MergeCallTime.Seconds()/float64(max(r.Report.MergeCalls, 1)))
			}
			if r.Report.Locks == 0 {
				return "not taken"
			}
			return fmt.Sprintf("%.1f s / %.2f s", r.Report.LockWait.Seconds()/float64(r.Report.Locks),
				r.Report.LockHeld.Seconds()/float64(max(r.Report.Unlocks, 1)))
		}},
		{"sidecar CPU per closed issue", func(r ModeResult) string {
			if !r.UsesSidecar {
				return "no sidecar"
			}
			return cpuPerClosed(r.SidecarCPU, r)
		}},
		{"Gitea CPU per closed issue", func(r ModeResult) string { return cpuPerClosed(r.GiteaCPU, r) }},
		{"agents' CPU per closed issue (everything they ran)", func(r ModeResult) string { return cpuPerClosed(r.AgentsCPU, r) }},
		{"of it, claiming (git collab run, claims; the agent's loop)", func(r ModeResult) string {
			return cpuPerClosed(r.AgentsCPU-r.Report.WorkCPU-r.Report.CheckCPU, r)
		}},
		{"of it, git collab check before each push and the merge", func(r ModeResult) string {
			if r.Spec.Bare {
				return "none (switched off)"
			}
			return cpuPerClosed(r.Report.CheckCPU, r)
		}},
		{"of it, the work (git, Gitea's API)", func(r ModeResult) string { return cpuPerClosed(r.Report.WorkCPU, r) }},
		{"retries / back-offs / stale checks", func(r ModeResult) string {
			return fmt.Sprintf("%d / %d / %d", r.Report.Retries, r.Report.Backoffs, r.Report.Stale)
		}},
	}
}

// notes3 tell the zombies' stories and set round three against its
// goals.
func (s summary) notes3() []string {
	var out []string
	byKey := map[string]ModeResult{}
	for _, r := range s.results {
		byKey[r.Spec.Key] = r
	}
	for _, r := range s.round(true) {
		for k, z := range r.Zombies {
			what := fmt.Sprintf("%s: %s was frozen (SIGSTOP) %.1f s into the run, right after its first push to #%d (token %d); ",
				r.Spec.Title, agentLogin(z.Agent), z.Frozen.Seconds(), z.Issue, z.Token)
			if z.Err != "" {
				what += "its claim was never seen taken over (" + z.Err + "); woken anyway."
			} else {
				what += fmt.Sprintf("the history showed token %d (agent %s) %.1f s later, and it was woken (SIGCONT); ", z.ByToken, z.ByAgent, (z.TakenOver - z.Frozen).Seconds())
				var zo zombieOutcome
				if k < len(r.Git.Zombies) {
					zo = r.Git.Zombies[k]
				}
				if r.Spec.Bare {
					what += "git collab run saw the claim lost, but its work, detached from run's stop and checking nothing, went on; "
				}
				switch zo.Stop {
				case evStale:
					what += "its git collab check said stale before its next push, so it pushed and merged nothing more."
				case evTerminated:
					what += "git collab run saw the claim lost and stopped its work (SIGTERM) before its next push."
				case evGated:
					what += fmt.Sprintf("its next push carried its old token %d, and Gitea's gate refused it: \"%s\"; %s.", z.Token, zo.Said, lateWrites(zo))
				case evMergeStale:
					what += fmt.Sprintf("the sidecar refused its git collab merge with its old token %d (%s); %s.", z.Token, zo.Said, lateWrites(zo))
				case evFenced:
					what += fmt.Sprintf("Gitea refused its merge for the required status (fenced merges): %s; %s.", zo.Said, lateWrites(zo))
				default:
					what += "nothing stopped it: " + lateWrites(zo) + "."
				}
			}
			out = append(out, what)
		}
		if len(r.Git.Lost) > 0 {
			out = append(out, fmt.Sprintf("%s: commits pushed but not in main: %s.", r.Spec.Title, strings.Join(shortSHAs(r.Git.Lost, 10), ", ")))
		}
	}
	if line := bareZombies(byKey); line != "" {
		out = append(out, line)
	}
	for _, key := range []string{"sessions", "sessions-lock"} {
		if r, ok := byKey[key]; ok {
			out = append(out, mergeGoals(r, byKey))
		}
	}
	if sess, ok := byKey["sessions"]; ok {
		if chain, ok := byKey["chain"]; ok {
			claim, chained := sess.AgentsCPU-sess.Report.WorkCPU, chain.AgentsCPU-chain.Report.WorkCPU
			out = append(out, fmt.Sprintf("Agents' CPU for claiming per closed issue (git collab run and the checks), beside %s (git collab next, renew, check and unclaim, each a process chain and an SSH handshake): %s against %s, %.2f× (goal ≤ 0.2×).",
				chain.Spec.Title, cpuPerClosed(claim, sess), cpuPerClosed(chained, chain), ratio(float64(claim)/perClosed(sess), float64(chained)/perClosed(chain))))
		}
		if old, ok := byKey["lease"]; ok {
			claim := sess.AgentsCPU - sess.Report.WorkCPU
			out = append(out, fmt.Sprintf("Agents' CPU for claiming per closed issue (git collab run and the checks), beside round two's collab-lease (a git collab process chain and an SSH handshake per call): %s against %s, %.2f× (goal ≤ 0.2×).",
				cpuPerClosed(claim, sess), cpuPerClosed(old.AgentsCPU, old), ratio(float64(claim)/perClosed(sess), float64(old.AgentsCPU)/perClosed(old))))
		}
		for _, key := range []string{"assignees-bot", "assignees-accounts"} {
			if a, ok := byKey[key]; ok {
				unfinished := ""
				if n := len(a.Report.Unclosed); n > 0 {
					unfinished = fmt.Sprintf(" (it left %d issues open, so its time to close them all is longer still)", n)
				}
				out = append(out, fmt.Sprintf("Wall time to the last close, %s against %s: %.1f s against %.1f s%s, %.2f× (goal ≤ 0.5×).",
					sess.Spec.Title, a.Spec.Title, sess.Report.LastClose.Seconds(), a.Report.LastClose.Seconds(), unfinished,
					ratio(sess.Report.LastClose.Seconds(), a.Report.LastClose.Seconds())))
			}
		}
	}
	return out
}

// mergeGoals sets a one-account collab-lease run against round three's
// goals for merging: its wall time to the last close at most half the
// 20-account assignees run's, at most 1.1 merge requests per closed
// issue, and no pull request replaced.
func mergeGoals(r ModeResult, byKey map[string]ModeResult) string {
	how := "merging with git collab merge"
	if !r.Spec.MergeVerb {
		how = "merging through Gitea's API holding the merge lock"
	}
	verdict := func(met bool) string {
		if met {
			return "met"
		}
		return "not met"
	}
	wall := "not measured: no run of assignees only, 20 accounts"
	if base, ok := byKey["assignees-accounts"]; ok && base.Report.LastClose > 0 {
		q := ratio(r.Report.LastClose.Seconds(), base.Report.LastClose.Seconds())
		wall = fmt.Sprintf("%.1f s against %.1f s, %.2f× (goal ≤ 0.5×: %s)", r.Report.LastClose.Seconds(), base.Report.LastClose.Seconds(), q, verdict(q <= 0.5))
	}
	calls := r.Report.MergeCalls
	what := "git collab merge calls"
	if !r.Spec.MergeVerb {
		calls, what = 0, "Gitea merge API calls"
		for _, m := range r.Traffic.Merges {
			calls += m.N
		}
	}
	per := float64(calls) / perClosed(r)
	return fmt.Sprintf("%s, %s: wall time to the last close against assignees only, 20 accounts: %s; %d %s for %d closed issues, %.2f per closed issue (goal ≤ 1.1: %s); %d pull requests replaced (goal 0: %s).",
		r.Spec.Title, how, wall, calls, what, r.Report.Closed, per, verdict(per <= 1.1), len(r.Report.Replaced), verdict(len(r.Report.Replaced) == 0))
}

// lateWrites says what a zombie landed once woken.
func lateWrites(zo zombieOutcome) string {
	out := "none of its late commits reached Gitea"
	if n := len(zo.Landed); n > 0 {
		out = fmt.Sprintf("%d of its late commits reached Gitea (%s)", n, strings.Join(shortSHAs(zo.Landed, 5), ", "))
	}
	if len(zo.Merged) == 0 {
		return out + " and it merged nothing"
	}
	return out + " and it merged pull request #" + strings.Join(zo.Merged, ", #")
}

// bareZombies sets the zombie runs with the agents' own defenses off
// against each other: what lands with the gate and without it ("" if
// neither ran).
func bareZombies(byKey map[string]ModeResult) string {
	var parts []string
	for _, key := range []string{"zombies-bare-gate", "zombies-bare-nogate"} {
		r, ok := byKey[key]
		if !ok {
			continue
		}
		p := fmt.Sprintf("without it, %d zombie commits and %d zombie merges landed", len(r.Git.ZombiePushes), len(r.Git.ZombieMerges))
		if r.Spec.Gate {
			p = fmt.Sprintf("with the gate, %d zombie commits (goal: 0; it refused %d of the zombies' pushes) and %d zombie merges landed",
				len(r.Git.ZombiePushes), r.Git.ZombieGated, len(r.Git.ZombieMerges))
		}
		parts = append(parts, p+fmt.Sprintf(", %d commits of live holders lost, %d issues worked more than once", len(r.Git.Lost), len(r.Report.Duplicates)))
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("The %d zombies with their agents' own defenses off (no git collab check; the work not stopped when its claim is lost, and pushing with the token of the tenure it began under): %s. Their merges go through git collab merge with that token, which the sidecar refuses once the tenure is not the claim's current one, whether or not the push before it landed (under one account the required status says success for any agent of it: Gitea's own check of the merge would not refuse it).",
		zombieCount, strings.Join(parts, "; "))
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func shortSHAs(shas []string, limit int) []string {
	var out []string
	for i, sha := range shas {
		if i == limit {
			out = append(out, fmt.Sprintf("and %d more", len(shas)-limit))
			break
		}
		out = append(out, sha[:min(len(sha), 10)])
	}
	return out
}

func (s summary) rows() []row {
	closed := perClosed
	return []row{
		{"issues worked more than once", func(r ModeResult) string { return fmt.Sprint(len(r.Report.Duplicates)) }},
		{"issues never closed", unclosed},
		{"wall time (last issue closed)", func(r ModeResult) string {
			return fmt.Sprintf("%.1f s (%.1f s)", r.Report.Wall.Seconds(), r.Report.LastClose.Seconds())
		}},
		{"agent-seconds working / not working", func(r ModeResult) string {
			return fmt.Sprintf("%.1f / %.1f", r.Report.Working.Seconds(), r.Report.NotWorking.Seconds())
		}},
		{"agent time in git collab and API calls per closed issue", func(r ModeResult) string {
			return fmt.Sprintf("%.0f ms", float64(r.Report.InCalls.Milliseconds())/closed(r))
		}},
		{"Gitea requests per closed issue (sidecar + agents)", func(r ModeResult) string {
			sc, ag := float64(r.Requests[srcSidecar]), float64(r.Requests[srcAgents])
			return fmt.Sprintf("%.2f (%.2f + %.2f)", (sc+ag)/closed(r), sc/closed(r), ag/closed(r))
		}},
		{"sidecar CPU per closed issue", func(r ModeResult) string {
			if !r.UsesSidecar {
				return "no sidecar"
			}
			return fmt.Sprintf("%.1f ms", float64(r.SidecarCPU.Microseconds())/1000/closed(r))
		}},
		{"Gitea CPU per closed issue", func(r ModeResult) string {
			return fmt.Sprintf("%.1f ms", float64(r.GiteaCPU.Microseconds())/1000/closed(r))
		}},
		{"agents' CPU per closed issue (their git, git-collab, ssh)", func(r ModeResult) string {
			return fmt.Sprintf("%.1f ms", float64(r.AgentsCPU.Microseconds())/1000/closed(r))
		}},
		{"retries (exit 75 or 255, HTTP 5xx) / back-offs / stale checks", func(r ModeResult) string {
			return fmt.Sprintf("%d / %d / %d", r.Report.Retries, r.Report.Backoffs, r.Report.Stale)
		}},
	}
}

func (s summary) title() string {
	return fmt.Sprintf("%d agents drain a backlog", s.opts.agents)
}

// table is one round's table.
type table struct {
	title, about string
	results      []ModeResult
	rows         []row
	bold         int // the first rows, in bold: what must be 0
}

func (s summary) tables() []table {
	return []table{
		{title: fmt.Sprintf("Round two: %d agents, %d accounts, a %d-issue backlog, no git", s.opts.agents, s.opts.agents, s.opts.issues),
			about:   "Each agent is a Gitea user with its own SSH key and a loop of real `git collab` processes (OpenSSH, a handshake per call) in its own checkout; work on an issue takes 50–500 ms and touches no git, the same per issue in every run.",
			results: s.round(false), rows: s.rows(), bold: 2},
		{title: fmt.Sprintf("Round three: %d agents, real pushes and merges, a %d-issue backlog", s.opts.agents, cmp.Or(s.sizing.GitIssues, s.opts.gitIssues)),
			about: fmt.Sprintf("The collab-lease runs are one Gitea account `bot` with a key per agent, each agent a loop of `git collab run --next --wait 30s --grace %s --agent <name> -- <work>` (the sidecar wakes a waiting agent when an issue comes free); the work fetches, commits to `work/<issue>`, pushes, opens a pull request \"Fixes #N\", works 1–8 s (the same per issue in every run), pushes again and, once the required status says success, merges with `git collab merge <pull>` (the sidecar checks that the agent holds the claim and that its token is current, waits for its turn to merge into `main`, one merge at a time, first come first served, asks Gitea to merge as the holder, waits while Gitea tests the pull request, and ends the claim before it replies), checking its token with `git collab check` before each push and the merge; `main` requires the `collab-lease/claim` status and `serve --fence-pushes` is on. The merge-lock run does the same work but merges as the work did before `git collab merge`: through Gitea's API, holding the repository's merge lock (an issue claimed with `git collab claim --wait`), replacing a pull request Gitea has not tested within the lock's hold. The run without sessions does the same work as the first, claimed the way round two's agents claim (`git collab next --ttl 20s`, `git collab renew` every 10 s, the checks and the merge over ssh, `git collab unclaim`; each a process chain and a handshake), for the agents' CPU to compare with. The baselines do the same work with Gitea's assignees alone, the merge lock included, as `bot` (every agent sees itself assigned, so the lock excludes nobody) or as 20 accounts. The runs with defenses off are the 3-zombie run with the agents' own defenses switched off: the work runs no `git collab check`, merges through Gitea's API holding the merge lock (an agent that skips the sidecar's checks skips its merge too) and is not stopped when its claim is lost (it runs in a process group of its own, out of reach of `git collab run`'s SIGTERM and SIGKILL, keeping the token and push option run gave it), with `serve --gate` on (Gitea's pre-receive hook asks the sidecar about every push) or off.",
				sessionGrace),
			results: s.round(true), rows: s.rows3(), bold: 5},
	}
}

// notes are the sentences under the table: duplicates, the faults, errors.
func (s summary) notes() []string {
	var out []string
	for _, r := range s.results {
		rep := r.Report
		if len(rep.Duplicates) > 0 {
			var parts []string
			for _, d := range rep.Duplicates {
				var who []string
				for _, a := range d.Agents {
					who = append(who, agentLogin(a))
				}
				parts = append(parts, fmt.Sprintf("#%d (%s)", d.Issue, strings.Join(who, ", ")))
			}
			out = append(out, fmt.Sprintf("%s: worked more than once: %s.", r.Spec.Title, strings.Join(parts, "; ")))
		}
		if len(rep.Unclosed) > 0 {
			out = append(out, fmt.Sprintf("%s: never closed: %s.", r.Spec.Title, issueList(rep.Unclosed, 30)))
		}
		for _, a := range rep.Abandoned {
			what := fmt.Sprintf("%s: %s was SIGKILLed while working on #%d (token %d); ", r.Spec.Title, agentLogin(a.Agent), a.Issue, a.Token)
			switch {
			case a.By < 0:
				what += "nobody claimed it again."
			default:
				what += fmt.Sprintf("%s claimed it %.1f s later (token %d, after the %s claim expired)", agentLogin(a.By), a.ClaimedAfter.Seconds(), a.ByToken, r.Spec.TTL)
				if a.ClosedByOther {
					what += " and closed it."
				} else {
					what += " but did not close it."
				}
			}
			out = append(out, what)
		}
		if r.StoppedAt > 0 {
			what := fmt.Sprintf("%s: its agents were stopped (SIGKILL) %s, with %d issues still open", r.Spec.Title, r.stopped(), len(r.OpenInGitea))
			if r.Spec.Round3 {
				what += fmt.Sprintf(" and %d commits of work in flight (still on their issue's branch, that work unfinished: not counted as lost)", len(r.Git.InFlight))
			}
			out = append(out, what+".")
		}
		if r.Restart != nil {
			out = append(out, fmt.Sprintf("%s: the sidecar was restarted (SIGTERM, then started on the same ledger and addresses) after the %dth close, %.1f s into the run; it was back %.2f s later.",
				r.Spec.Title, r.Restart.AfterCloses, r.Restart.At.Seconds(), r.Restart.Took.Seconds()))
		}
		if n := len(r.Report.Replaced); n > 0 {
			shown := r.Report.Replaced[:min(n, 10)]
			more := ""
			if n > len(shown) {
				more = fmt.Sprintf(" and %d more", n-len(shown))
			}
			out = append(out, fmt.Sprintf("%s: %d pull requests replaced that stayed \"not yet\" for %s while their work held the merge lock (Gitea tested them late, or its in-memory queue lost their test): %s%s.",
				r.Spec.Title, n, cmp.Or(s.sizing.LockHold, lockHold), strings.Join(shown, ", "), more))
		}
		if len(r.WorkErrors) > 0 {
			out = append(out, fmt.Sprintf("%s: %d pieces of work failed, e.g. %s", r.Spec.Title, len(r.WorkErrors),
				firstLines(strings.Join(r.WorkErrors, "\n"), 3)))
		}
		if r.Err != nil {
			out = append(out, fmt.Sprintf("%s: FAILED: %s", r.Spec.Title, firstLines(r.Err.Error(), 5)))
		}
	}
	return out
}

// breakdown says where one mode's calls and requests went: the agents'
// calls and the requests to Gitea, by kind, most frequent first.
func (s summary) breakdown(r ModeResult, top int) []string {
	var out []string
	line := func(what string, stats map[string]*CallStat) {
		keys := make([]string, 0, len(stats))
		for k := range stats {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b string) int {
			return cmp.Or(stats[b].N-stats[a].N, strings.Compare(a, b))
		})
		var parts []string
		for i, k := range keys {
			if i == top {
				parts = append(parts, fmt.Sprintf("%d kinds more", len(keys)-top))
				break
			}
			c := stats[k]
			p := fmt.Sprintf("%s ×%d (mean %s, max %s", k, c.N, ms(c.Total/time.Duration(max(c.N, 1))), ms(c.Max))
			if c.Canceled > 0 {
				p += fmt.Sprintf(", %d given up by the caller", c.Canceled)
			}
			parts = append(parts, p+")")
		}
		if len(parts) > 0 {
			out = append(out, fmt.Sprintf("%s: %s: %s.", r.Spec.Title, what, strings.Join(parts, "; ")))
		}
	}
	if len(r.Report.RetryReasons) > 0 {
		reasons := r.Report.RetryReasons
		keys := slices.Collect(maps.Keys(reasons))
		slices.SortFunc(keys, func(a, b string) int { return cmp.Or(reasons[b]-reasons[a], strings.Compare(a, b)) })
		var parts []string
		for i, k := range keys {
			if i == top {
				parts = append(parts, fmt.Sprintf("%d reasons more", len(keys)-top))
				break
			}
			parts = append(parts, fmt.Sprintf("%d× %s", reasons[k], k))
		}
		out = append(out, fmt.Sprintf("%s: retried: %s.", r.Spec.Title, strings.Join(parts, "; ")))
	}
	line("agents' calls", r.Report.Calls)
	line("Gitea requests", r.Traffic.Routes)
	if asked := r.Traffic.Deps[srcSidecar]; len(asked) > 0 {
		out = append(out, fmt.Sprintf("%s: %s.", r.Spec.Title, s.dependencyAsks(asked)))
	}
	return out
}

// dependencyAsks says how often the sidecar asked Gitea about the
// dependencies of the blocked issues and of the others.
func (s summary) dependencyAsks(asked map[int64]int) string {
	var blocked []string
	total, others, otherIssues := 0, 0, 0
	for _, n := range slices.Sorted(maps.Keys(asked)) {
		total += asked[n]
		if by, ok := s.backlog.Blocked[n]; ok {
			blocked = append(blocked, fmt.Sprintf("#%d (blocked by #%d) %d×", n, by, asked[n]))
		} else {
			others += asked[n]
			otherIssues++
		}
	}
	return fmt.Sprintf("the sidecar asked Gitea %d times about an issue's dependencies: about the blocked issues %s; about %d other issues %d times (%.1f each)",
		total, strings.Join(blocked, ", "), otherIssues, others, float64(others)/float64(max(otherIssues, 1)))
}

func ms(d time.Duration) string {
	if d >= time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

// text is the summary printed on stdout.
func (s summary) text() string {
	var b strings.Builder
	for _, t := range s.tables() {
		if len(t.results) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\nfleet: %s (seed %d), real git collab over OpenSSH against a real Gitea\n\n", t.title, s.opts.seed)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprint(tw, "\t")
		for _, r := range t.results {
			fmt.Fprintf(tw, "%s\t", r.Spec.Title)
		}
		fmt.Fprintln(tw)
		for _, row := range t.rows {
			fmt.Fprintf(tw, "%s\t", row.label)
			for _, r := range t.results {
				fmt.Fprintf(tw, "%s\t", row.cell(r))
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "fleet: %s\n\n", s.sizing.describe())
	for _, n := range append(s.notes(), s.notes3()...) {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	for _, r := range s.results {
		for _, l := range s.breakdown(r, 8) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	fmt.Fprintf(&b, "\nWhole run, setup included: %.1f s (load average %s; Gitea ran %s). Reproduce: %s\n", s.total.Seconds(), s.load, s.giteaGit, s.opts.reproduction)
	return b.String()
}

// markdown is the section of bench/RESULTS.md.
func (s summary) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Fleet: %s\n\n", s.title())
	fmt.Fprintf(&b, "Written by `bench/fleet` in this run (`%s`, seed %d; the whole run took %.0f s, setup included; load average at its end %s; Gitea ran %s). Every request to Gitea passed a counting proxy. What each run does: `bench/README.md`.\n",
		s.opts.reproduction, s.opts.seed, s.total.Seconds(), s.load, s.giteaGit)
	fmt.Fprintf(&b, "\n%s\n", s.sizing.describe())
	for _, t := range s.tables() {
		if len(t.results) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n### %s\n\n%s\n\n", t.title, t.about)
		b.WriteString("| |")
		for _, r := range t.results {
			fmt.Fprintf(&b, " %s |", r.Spec.Title)
		}
		b.WriteString("\n|---|")
		for range t.results {
			b.WriteString("---|")
		}
		b.WriteString("\n")
		for i, row := range t.rows {
			fmt.Fprintf(&b, "| %s |", row.label)
			for _, r := range t.results {
				c := row.cell(r)
				if i < t.bold {
					c = "**" + c + "**"
				}
				fmt.Fprintf(&b, " %s |", c)
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n")
	for _, n := range append(s.notes(), s.notes3()...) {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	b.WriteString("\nWhere the calls and requests went (count, mean and max latency; numbers in paths as `{n}`):\n\n")
	for _, r := range s.results {
		for _, l := range s.breakdown(r, 6) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	b.WriteString("\n")
	return b.String()
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, " / ")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// loadAverage is the 1, 5 and 15 minute load averages, or "n/a".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}
