package main

import (
	"fmt"
	"slices"
)

// What landed in git, for round three: each push's commits against what
// main holds at the end, and each zombie's late writes against what
// Gitea holds.

// gitOutcome is what a round-three run left in Gitea.
type gitOutcome struct {
	Pushes int // pushes Gitea accepted
	// Gated are the pushes Gitea's gate refused (evGated), ZombieGated
	// those of them a zombie made after its freeze.
	Gated, ZombieGated int
	// Lost are the commits a live holder pushed that main does not hold
	// at the end, but those in flight.
	Lost []string
	// InFlight are the commits a live holder pushed that main does not
	// hold, of work the run's bound stopped: still on their issue's
	// branch, where that issue's work, unfinished when the bound came
	// (the issue still open, or the work that pushed them not done),
	// would have merged them. A commit lost is one that is not there:
	// overwritten or dropped, or left behind by work that had finished.
	InFlight []string
	// ZombiePushes are the commits a zombie made after its freeze that
	// reached Gitea (its pushes that landed); ZombieMerges the pull
	// requests it merged then.
	ZombiePushes []string
	ZombieMerges []string
	// Zombies say, per zombie, what it did once woken.
	Zombies []zombieOutcome
	// ZombieErrors are the failures its work reported after its freeze,
	// as the report lists errors (errorLine).
	ZombieErrors []string
}

// zombieOutcome is what one zombie did once woken.
type zombieOutcome struct {
	// Stop is what stopped it first: evStale (its check), evTerminated
	// (git collab run), evGated (Gitea's gate refused its push; Said is
	// the gate's line), evFenced (the required status refused its merge;
	// Said is Gitea's answer), evMergeStale (git collab merge refused it;
	// Said is the reply's status), "" (nothing did).
	Stop, Said string
	// Landed are its late commits that reached Gitea; Merged the pull
	// requests it merged late.
	Landed, Merged []string
}

// errorLine is how a report lists an agent's failure.
func errorLine(e Event) string { return fmt.Sprintf("agent %d: %s", e.Agent, e.Detail) }

// judgeGit computes a run's gitOutcome from its events and zombies;
// inMain says whether main holds a commit at the end, inGitea whether
// Gitea has it at all.
func judgeGit(events []Event, zombies []zombie, inMain, inGitea func(sha string) bool) gitOutcome {
	var o gitOutcome
	// late is the index of the zombie whose late event e (the i-th) is,
	// -1 if it is none's.
	late := func(i int, e Event) int {
		return slices.IndexFunc(zombies, func(z zombie) bool { return e.Agent == z.Agent && e.Issue == z.Issue && i > z.trigger })
	}
	o.Zombies = make([]zombieOutcome, len(zombies))
	commits := make([][]string, len(zombies))
	var live []string
	for i, e := range events {
		k := late(i, e)
		var z *zombieOutcome
		if k >= 0 {
			z = &o.Zombies[k]
		}
		switch e.Kind {
		case evPushed:
			o.Pushes++
			if z != nil {
				commits[k] = append(commits[k], e.Commits...)
			} else {
				live = append(live, e.Commits...)
			}
		case evCommitted:
			if z != nil {
				commits[k] = append(commits[k], e.Detail)
			}
		case evMerged:
			if z != nil {
				z.Merged = append(z.Merged, e.Detail)
				o.ZombieMerges = append(o.ZombieMerges, e.Detail)
			}
		case evGated:
			o.Gated++
			if z != nil {
				o.ZombieGated++
			}
		case evError:
			if z != nil {
				o.ZombieErrors = append(o.ZombieErrors, errorLine(e))
			}
		}
		if z != nil && z.Stop == "" && slices.Contains([]string{evStale, evTerminated, evGated, evFenced, evMergeStale}, e.Kind) {
			z.Stop = e.Kind
			if e.Kind == evGated || e.Kind == evFenced || e.Kind == evMergeStale {
				z.Said = e.Detail
			}
		}
	}
	for k := range zombies {
		for _, sha := range dedupe(commits[k]) {
			if inGitea(sha) {
				o.Zombies[k].Landed = append(o.Zombies[k].Landed, sha)
				o.ZombiePushes = append(o.ZombiePushes, sha)
			}
		}
	}
	slices.Sort(o.ZombiePushes)
	o.ZombiePushes = slices.Compact(o.ZombiePushes)
	for _, sha := range dedupe(live) {
		if !inMain(sha) {
			o.Lost = append(o.Lost, sha)
		}
	}
	return o
}

// inFlightAtBound moves from o.Lost to o.InFlight the commits of work
// the run's bound stopped: a commit is in flight if onBranch says its
// issue's branch still holds it and, when the bound came, its issue had
// not been closed or the work that pushed it had not ended (a work's
// last line is its evWorkCPU). Only for a run stopped at its bound: one
// that ended by itself has no work in flight.
func (o gitOutcome) inFlightAtBound(events []Event, onBranch func(issue int64, sha string) bool) gitOutcome {
	closed := map[int64]bool{}
	for _, e := range events {
		if e.Kind == evClosed || e.Kind == evMerged {
			closed[e.Issue] = true
		}
	}
	// ended says whether the work of agent on issue that pushed at
	// events[i] reported its end after it.
	ended := func(i int, agent int, issue int64) bool {
		return slices.ContainsFunc(events[i+1:], func(e Event) bool {
			return e.Kind == evWorkCPU && e.Agent == agent && e.Issue == issue
		})
	}
	var lost []string
	for _, sha := range o.Lost {
		flying := false
		for i, e := range events {
			if e.Kind == evPushed && slices.Contains(e.Commits, sha) && onBranch(e.Issue, sha) &&
				(!closed[e.Issue] || !ended(i, e.Agent, e.Issue)) {
				flying = true
				break
			}
		}
		if flying {
			o.InFlight = append(o.InFlight, sha)
		} else {
			lost = append(lost, sha)
		}
	}
	o.Lost = lost
	return o
}

func dedupe(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// without is s but the lines of drop, each taken out once.
func without(s, drop []string) []string {
	var out []string
	drop = slices.Clone(drop)
	for _, l := range s {
		if i := slices.Index(drop, l); i >= 0 {
			drop = slices.Delete(drop, i, i+1)
			continue
		}
		out = append(out, l)
	}
	return out
}
