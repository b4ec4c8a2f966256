package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/collab-lease/collab-lease/integration"
	"github.com/collab-lease/collab-lease/plugin/fence"
)

// The backlog: what is decided from the seed alone, and how it is put
// into Gitea.

// backlog is the plan of one backlog, the same for every copy of it.
type backlog struct {
	Issues  int
	Labels  map[int64]string // issue → its label; about a third carry one
	Blocked map[int64]int64  // issue → the newer issue it depends on
}

// The labels of a backlog, and their colors.
var (
	labelNames  = []string{"bug", "docs"}
	labelColors = []string{"#ee0701", "#0075ca"}
)

// planStream keeps the plan's random numbers apart from workTime's (whose
// second PCG word is an issue number).
const planStream = 1 << 62

// planBacklog decides the backlog of n issues for seed: labels, and
// n/40 (at least one) issues blocked by a newer issue up to 30 numbers
// later, so that each blocked issue can only be done after its blocker.
func planBacklog(seed int64, n int) backlog {
	rng := rand.New(rand.NewPCG(uint64(seed), planStream))
	b := backlog{Issues: n, Labels: map[int64]string{}, Blocked: map[int64]int64{}}
	for i := int64(1); i <= int64(n); i++ {
		if l := rng.IntN(6); l < len(labelNames) {
			b.Labels[i] = labelNames[l]
		}
	}
	if n < 2 {
		return b
	}
	for range max(1, n/40) {
		blocked := 1 + rng.Int64N(int64(n-1))
		if _, dup := b.Blocked[blocked]; dup {
			continue
		}
		b.Blocked[blocked] = blocked + 1 + rng.Int64N(min(30, int64(n)-blocked))
	}
	return b
}

// workTime is how long an agent works on issue n: 50–500 ms, from the
// seed and the issue alone, so every mode and every agent that works on
// it works as long.
func workTime(seed, n int64) time.Duration {
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(n)))
	return time.Duration(50+rng.IntN(451)) * time.Millisecond
}

// seedWidth is how many requests seeding has in flight at once.
const seedWidth = 8

// seedAgents creates the agents fleet00, fleet01, …: each a Gitea user
// with its own SSH key (under keyDir) and access token.
func seedAgents(ctx context.Context, g *integration.Gitea, keyDir string, k int) ([]*integration.User, error) {
	users := make([]*integration.User, k)
	var eg errgroup.Group
	eg.SetLimit(seedWidth)
	for i := range users {
		eg.Go(func() error {
			u, err := integration.NewUser(ctx, g, keyDir, agentLogin(i))
			users[i] = u
			return err
		})
	}
	return users, eg.Wait()
}

func agentLogin(i int) string { return fmt.Sprintf("fleet%02d", i) }

// botLogin is the one account of round three's fleets.
const botLogin = "bot"

// seedBot creates the account bot with k keys (its own, then one per
// further agent): a fleet under one account, its agents told apart only
// by --agent. It returns the private key files, agent i's at index i.
func seedBot(ctx context.Context, g *integration.Gitea, keyDir string, k int) (*integration.User, []string, error) {
	bot, err := integration.NewUser(ctx, g, keyDir, botLogin)
	if err != nil {
		return nil, nil, err
	}
	keys := make([]string, k)
	keys[0] = bot.Key.Path
	var eg errgroup.Group
	eg.SetLimit(seedWidth)
	for i := 1; i < k; i++ {
		eg.Go(func() error {
			key, err := integration.AddKey(ctx, g, bot, keyDir, botLogin+"-"+agentLogin(i))
			keys[i] = key.Path
			return err
		})
	}
	return bot, keys, eg.Wait()
}

// seedRepo creates the public repository org/name holding backlog b
// (issues 1…b.Issues, labels, dependencies), with every agent (and bot)
// a write collaborator, through the admin API straight to Gitea (not
// counted). With withMain it has a first commit on main to branch from;
// with fenced, main requires the status fenced merges set.
func seedRepo(ctx context.Context, g *integration.Gitea, org, name string, b backlog, withMain, fenced bool, agents []*integration.User, bot *integration.User) (integration.Repo, error) {
	admin := g.Admin()
	repo := integration.Repo{Owner: org, Name: name}
	var out struct{ ID int64 }
	if err := admin.Do(ctx, "POST", "/orgs/"+org+"/repos", map[string]any{"name": name, "default_branch": "main", "auto_init": withMain}, &out); err != nil {
		return repo, err
	}
	repo.ID = out.ID
	path := "/repos/" + repo.FullName()
	if fenced {
		if err := admin.Do(ctx, "POST", path+"/branch_protections", map[string]any{
			"rule_name": "main", "enable_status_check": true, "status_check_contexts": []string{fence.StatusContext},
		}, nil); err != nil {
			return repo, fmt.Errorf("protect main of %s: %w", repo.FullName(), err)
		}
	}
	agents = append(slices.Clone(agents), bot)

	labelIDs := make([]int64, len(labelNames))
	numbers := make([]int64, b.Issues)
	var eg errgroup.Group
	eg.SetLimit(seedWidth)
	for i, l := range labelNames {
		eg.Go(func() error {
			var out struct{ ID int64 }
			err := admin.Do(ctx, "POST", path+"/labels", map[string]any{"name": l, "color": labelColors[i]}, &out)
			labelIDs[i] = out.ID
			return err
		})
	}
	for _, u := range agents {
		eg.Go(func() error {
			return admin.Do(ctx, "PUT", path+"/collaborators/"+u.Login, map[string]any{"permission": "write"}, nil)
		})
	}
	for i := range numbers {
		eg.Go(func() error {
			var out struct{ Number int64 }
			err := admin.Do(ctx, "POST", path+"/issues", map[string]any{
				"title": "Backlog item", "body": "An issue of the fleet benchmark's backlog.",
			}, &out)
			numbers[i] = out.Number
			return err
		})
	}
	if err := eg.Wait(); err != nil {
		return repo, fmt.Errorf("seed %s: %w", repo.FullName(), err)
	}
	// Created in parallel, the issues are numbered 1…n in some order:
	// labels and dependencies go by number, so the plan holds whatever
	// the order was.
	slices.Sort(numbers)
	for i, n := range numbers {
		if n != int64(i+1) {
			return repo, fmt.Errorf("seed %s: the issues are numbered %v…, not 1…%d", repo.FullName(), numbers[:min(len(numbers), 5)], b.Issues)
		}
	}
	for n, l := range b.Labels {
		id := labelIDs[slices.Index(labelNames, l)]
		eg.Go(func() error {
			return admin.Do(ctx, "POST", fmt.Sprintf("%s/issues/%d/labels", path, n), map[string]any{"labels": []int64{id}}, nil)
		})
	}
	for n, by := range b.Blocked {
		eg.Go(func() error {
			return admin.Do(ctx, "POST", fmt.Sprintf("%s/issues/%d/dependencies", path, n),
				map[string]any{"owner": org, "repo": name, "index": by}, nil)
		})
	}
	if err := eg.Wait(); err != nil {
		return repo, fmt.Errorf("seed %s: %w", repo.FullName(), err)
	}
	return repo, nil
}

// openIssues lists the open issues of repo, straight from Gitea (not
// counted), lowest number first.
func openIssues(ctx context.Context, g *integration.Gitea, repo integration.Repo) ([]int64, error) {
	var open []int64
	for page := 1; ; page++ {
		var issues []struct{ Number int64 }
		if err := g.Admin().Do(ctx, "GET", fmt.Sprintf("/repos/%s/issues?state=open&type=issues&limit=50&page=%d", repo.FullName(), page), nil, &issues); err != nil {
			return nil, err
		}
		for _, is := range issues {
			open = append(open, is.Number)
		}
		if len(issues) < 50 {
			slices.Sort(open)
			return open, nil
		}
	}
}

// checkoutHome is where agent i's checkouts (and HOME) are.
func checkoutHome(dir string, i int) string { return filepath.Join(dir, "agents", agentLogin(i)) }

// lockRepoName is the repository of the merge locks: one issue for each
// round-three mode's backlog, which its agents hold while they merge.
const lockRepoName = "merge-locks"

// seedLocks creates org/merge-locks, with every agent (and bot) a write
// collaborator, and in it the merge lock of each round-three mode that
// runs (the issue "Merge lock of backlog-<key>", in spec.Lock). It
// returns the repository.
func seedLocks(ctx context.Context, g *integration.Gitea, org string, specs []modeSpec, runs map[string]bool, agents []*integration.User, bot *integration.User) (integration.Repo, error) {
	admin := g.Admin()
	repo := integration.Repo{Owner: org, Name: lockRepoName}
	var out struct{ ID int64 }
	if err := admin.Do(ctx, "POST", "/orgs/"+org+"/repos", map[string]any{"name": repo.Name}, &out); err != nil {
		return repo, err
	}
	repo.ID = out.ID
	path := "/repos/" + repo.FullName()
	var eg errgroup.Group
	eg.SetLimit(seedWidth)
	for _, u := range append(slices.Clone(agents), bot) {
		eg.Go(func() error {
			return admin.Do(ctx, "PUT", path+"/collaborators/"+u.Login, map[string]any{"permission": "write"}, nil)
		})
	}
	for i := range specs {
		if !specs[i].Round3 || !runs[specs[i].Key] || specs[i].MergeVerb {
			continue
		}
		eg.Go(func() error {
			var out struct{ Number int64 }
			err := admin.Do(ctx, "POST", path+"/issues", map[string]any{
				"title": "Merge lock of backlog-" + specs[i].Key,
				"body":  "Held by the agent of the fleet benchmark that is merging into main.",
			}, &out)
			specs[i].Lock = out.Number
			return err
		})
	}
	if err := eg.Wait(); err != nil {
		return repo, fmt.Errorf("seed %s: %w", repo.FullName(), err)
	}
	return repo, nil
}
