package main

import (
	"slices"
)

// What landed in git, for round three: each push's commits against what
// main holds at the end, and each zombie's late writes against what
// Gitea holds.

// gitOutcome is what a round-three run left in Gitea.
type gitOutcome struct {
	Pushes int // pushes Gitea accepted
	// Lost are the commits a live holder pushed that main does not hold
	// at the end.
	Lost []string
	// ZombiePushes are the commits a zombie made after its freeze that
	// reached Gitea (its pushes that landed); ZombieMerges the pull
	// requests it merged then.
	ZombiePushes []string
	ZombieMerges []string
	// ZombieStops say, per zombie, what stopped it once woken: "stale"
	// (its check), "terminated" (git collab run), "" (nothing did).
	ZombieStops []string
}

// judgeGit computes a run's gitOutcome from its events and zombies;
// inMain says whether main holds a commit at the end, inGitea whether
// Gitea has it at all.
func judgeGit(events []Event, zombies []zombie, inMain, inGitea func(sha string) bool) gitOutcome {
	var o gitOutcome
	late := func(i int, e Event) *zombie {
		for k := range zombies {
			z := &zombies[k]
			if e.Agent == z.Agent && e.Issue == z.Issue && i > z.trigger {
				return z
			}
		}
		return nil
	}
	stops := make([]string, len(zombies))
	var zombieCommits, live []string
	for i, e := range events {
		z := late(i, e)
		switch e.Kind {
		case evPushed:
			o.Pushes++
			if z != nil {
				zombieCommits = append(zombieCommits, e.Commits...)
			} else {
				live = append(live, e.Commits...)
			}
		case evCommitted:
			if z != nil {
				zombieCommits = append(zombieCommits, e.Detail)
			}
		case evMerged:
			if z != nil {
				o.ZombieMerges = append(o.ZombieMerges, e.Detail)
			}
		case evStale, evTerminated:
			if z != nil {
				k := slices.IndexFunc(zombies, func(x zombie) bool { return x.Agent == z.Agent })
				if stops[k] == "" {
					stops[k] = e.Kind
				}
			}
		}
	}
	o.ZombieStops = stops
	for _, sha := range dedupe(zombieCommits) {
		if inGitea(sha) {
			o.ZombiePushes = append(o.ZombiePushes, sha)
		}
	}
	for _, sha := range dedupe(live) {
		if !inMain(sha) {
			o.Lost = append(o.Lost, sha)
		}
	}
	return o
}

func dedupe(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}
