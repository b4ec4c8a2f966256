package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// What the agents report, and what a mode's report computes from it.

// The kinds of Event an agent emits (and "killed", which the coordinator
// records when it kills one).
const (
	evClaimed = "claimed" // it holds the issue (lease: next; assignees: assigned to it alone)
	evWork    = "work"    // it began working on the issue
	evDoomed  = "doomed"  // it began working and will hang there until killed (faults)
	evWorked  = "worked"  // it finished the work (Took: how long it worked)
	evClosed  = "closed"  // it closed the issue in Gitea
	evStale   = "stale"   // check said its token is stale: it did not close the issue
	evLost    = "lost"    // renew said it no longer holds the issue: it stopped working
	evBackoff = "backoff" // assignees: someone else was assigned too, so it let go
	evRetry   = "retry"   // a temporary failure (exit 75, 255 or an HTTP error) it retried
	evDone    = "done"    // its loop ended normally (Calls: its git collab and API calls)
	evError   = "error"   // its loop failed (Detail says why); it exits 1
	evKilled  = "killed"  // the coordinator SIGKILLed it
)

// Event is one line an agent writes on its stdout, as JSON.
type Event struct {
	Agent  int           `json:"agent"`
	Kind   string        `json:"kind"`
	Issue  int64         `json:"issue,omitempty"`
	Token  int64         `json:"token,omitempty"`
	Took   time.Duration `json:"took,omitempty"`
	Detail string        `json:"detail,omitempty"`
	// Calls are an agent's git collab processes and API requests, by
	// kind, in its done event.
	Calls map[string]*CallStat `json:"calls,omitempty"`
	// Commits are what a push added to its branch (round three).
	Commits []string `json:"commits,omitempty"`
	// CPU is the CPU time of a work's git collab checks, in its last line.
	CPU time.Duration `json:"cpu,omitempty"`
	// At is when the coordinator read it, from the mode's start.
	At time.Duration `json:"-"`
}

// Report is what one mode's run amounts to.
type Report struct {
	Issues, Agents int
	Wall           time.Duration // from starting the agents until the last one stopped
	LastClose      time.Duration // when the last issue was closed, from the start

	// Duplicates are the issues whose work more than one agent finished
	// (or one agent finished twice), with who finished it, in order.
	Duplicates []Duplicate
	// Unclosed are the issues of the backlog no agent closed.
	Unclosed []int64
	Closed   int // issues closed at least once

	Working    time.Duration        // agent time spent in work that finished
	NotWorking time.Duration        // Agents × Wall − Working: coordinating, waiting, idle
	InCalls    time.Duration        // time in git collab and API calls, of agents that finished
	Calls      map[string]*CallStat // those calls by kind
	Retries    int
	// RetryReasons counts the retries by what failed (digits as N).
	RetryReasons map[string]int
	Backoffs     int
	Stale        int
	Lost         int
	// Abandoned are the issues agents were killed while working on.
	Abandoned []Abandoned
	Errors    []string // one per agent whose loop failed
	// Round three: the CPU time of the work processes that reported it
	// (their git, their API requests), and of the git collab check each
	// ran before a push or merge.
	WorkCPU, CheckCPU time.Duration
	// The merge lock (round three): how often it was taken and let go,
	// the time spent waiting for it, and the time it was held.
	Locks, Unlocks     int
	LockWait, LockHeld time.Duration
	// Replaced are the pull requests a work replaced because Gitea no
	// longer tested them ("#old by #new").
	Replaced []string
	// MergeCalls are the works' git collab merge processes (round
	// three's runs that merge with it), MergeReplies them by the reply's
	// status (or "exit N"), MergeCallTime their time in all.
	MergeCalls    int
	MergeReplies  map[string]int
	MergeCallTime time.Duration
}

// Duplicate is an issue worked more than once.
type Duplicate struct {
	Issue  int64
	Agents []int // who finished work on it, in order
}

// Abandoned is an issue an agent was killed while working on, and who
// finished it afterwards (-1: nobody).
type Abandoned struct {
	Issue         int64
	Agent         int
	Token         int64
	By            int           // the next agent to claim it, -1 for nobody
	ByToken       int64         // its token
	ClaimedAfter  time.Duration // from the kill to that claim
	ClosedByOther bool
}

// summarize computes a mode's report from its events. issues is the
// backlog's size (issues 1..issues), agents the fleet's, wall the mode's
// duration.
func summarize(issues, agents int, wall time.Duration, events []Event) Report {
	r := Report{Issues: issues, Agents: agents, Wall: wall, Calls: map[string]*CallStat{}, RetryReasons: map[string]int{}, MergeReplies: map[string]int{}}
	worked := map[int64][]int{}
	closed := map[int64]bool{}
	doomed := map[int]Event{} // agent → its doomed event
	killedAt := map[int]time.Duration{}
	for _, e := range events {
		switch e.Kind {
		case evWorked:
			worked[e.Issue] = append(worked[e.Issue], e.Agent)
			r.Working += e.Took
		case evClosed:
			closed[e.Issue] = true
			r.LastClose = max(r.LastClose, e.At)
		case evRetry:
			r.Retries++
			r.RetryReasons[retryReason(e.Detail)]++
		case evBackoff:
			r.Backoffs++
		case evStale:
			r.Stale++
		case evLost:
			r.Lost++
		case evDone:
			for kind, c := range e.Calls {
				if r.Calls[kind] == nil {
					r.Calls[kind] = &CallStat{}
				}
				r.Calls[kind].merge(c)
				r.InCalls += c.Total
			}
		case evError:
			r.Errors = append(r.Errors, errorLine(e))
		case evDoomed:
			doomed[e.Agent] = e
		case evKilled:
			killedAt[e.Agent] = e.At
		case evWorkCPU:
			r.WorkCPU += e.Took
			r.CheckCPU += e.CPU
		case evLocked:
			r.Locks++
			r.LockWait += e.Took
		case evUnlocked:
			r.Unlocks++
			r.LockHeld += e.Took
		case evReplaced:
			r.Replaced = append(r.Replaced, e.Detail)
		case evMergeCall:
			r.MergeCalls++
			r.MergeReplies[e.Detail]++
			r.MergeCallTime += e.Took
		}
	}
	for n, who := range worked {
		if len(who) > 1 {
			r.Duplicates = append(r.Duplicates, Duplicate{Issue: n, Agents: who})
		}
	}
	slices.SortFunc(r.Duplicates, func(a, b Duplicate) int { return int(a.Issue - b.Issue) })
	for n := int64(1); n <= int64(issues); n++ {
		if closed[n] {
			r.Closed++
		} else {
			r.Unclosed = append(r.Unclosed, n)
		}
	}
	r.NotWorking = time.Duration(agents)*wall - r.Working
	for agent, d := range doomed {
		a := Abandoned{Issue: d.Issue, Agent: agent, Token: d.Token, By: -1}
		kill := killedAt[agent]
		for _, e := range events {
			if e.Issue != d.Issue || e.Agent == agent || e.At < kill {
				continue
			}
			if e.Kind == evClaimed && a.By < 0 {
				a.By, a.ByToken, a.ClaimedAfter = e.Agent, e.Token, e.At-kill
			}
			if e.Kind == evClosed {
				a.ClosedByOther = true
			}
		}
		r.Abandoned = append(r.Abandoned, a)
	}
	slices.SortFunc(r.Abandoned, func(a, b Abandoned) int { return int(a.Issue - b.Issue) })
	return r
}

var digits = regexp.MustCompile(`[0-9]+`)

// retryReason is a retry's detail with its numbers (issues, ports) as N,
// cut short, so that retries of one cause count together.
func retryReason(detail string) string {
	s := digits.ReplaceAllString(detail, "N")
	if r := []rune(s); len(r) > 100 {
		s = string(r[:100]) + "…"
	}
	return s
}

// issueList renders issue numbers as "#3, #17" (at most limit of them,
// then how many more).
func issueList(ns []int64, limit int) string {
	var parts []string
	for i, n := range ns {
		if i == limit {
			parts = append(parts, fmt.Sprintf("and %d more", len(ns)-limit))
			break
		}
		parts = append(parts, fmt.Sprintf("#%d", n))
	}
	return strings.Join(parts, ", ")
}
