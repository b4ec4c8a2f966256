package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/integration"
)

// Sizing the runs from Gitea's speed. Every run is bounded, and round
// three's time goes mostly to Gitea: pushes through its hooks, pull
// requests it creates and tests, merges it builds one at a time. A bound
// fixed for one machine cuts the runs off on a slower one, where every
// claim still holds and only the time ran out. So before the runs the
// coordinator measures Gitea on a warm-up repository of its own, and
// sizes the bounds (and, on a much slower Gitea, round three's backlog)
// from what it measured, against what the same measurement gave on the
// machine the bounds were set on.

// giteaSpeed is what the warm-up measured: the median of its rounds of
// a push of one commit to a new branch (git over HTTP), the creation of
// a pull request from it, the wait until Gitea had tested it (its merge
// tried every warmupPoll until Gitea took it) and the merge that Gitea
// took.
type giteaSpeed struct {
	Rounds                     int
	Push, Create, Ready, Merge time.Duration
}

// issueTime is one issue's Gitea work in round three, as the warm-up
// measured it: the work pushes twice, opens a pull request, and merges
// once Gitea has tested it.
func (s giteaSpeed) issueTime() time.Duration { return 2*s.Push + s.Create + s.Ready + s.Merge }

// refSpeed is what the warm-up measured on the 2-core machine the fixed
// bounds were set on, quiet (2026-12-07; its recorded make bench closed
// round three's 60 issues in 100 to 140 s per run, against 6 minutes):
// Gitea tested each pull request while it created it, so the merge was
// taken at the first try.
var refSpeed = giteaSpeed{Rounds: warmupRounds, Push: 900 * time.Millisecond, Create: 1100 * time.Millisecond,
	Ready: 0, Merge: 1300 * time.Millisecond}

const (
	// warmupRounds are the timed rounds of the warm-up, after one
	// untimed (Gitea's first pull request and merge warm its caches).
	warmupRounds = 3
	// warmupPoll is how often the warm-up tries a merge Gitea has not
	// tested yet.
	warmupPoll = 100 * time.Millisecond
	// maxScale is how far the bounds grow with a slow Gitea before
	// round three's backlog shrinks instead, so that a slow machine
	// still finishes in a time of the same order.
	maxScale = 2.5
	// minGitIssues is the least round three's backlog is cut to: as
	// many issues as the default fleet has agents.
	minGitIssues = 20
	// The backlogs the fixed bounds were set for.
	refIssues    = 200
	refGitIssues = 60
)

// sizing is how the runs are sized from Gitea's speed.
type sizing struct {
	Measured bool // false: not measured (no run needs it), the fixed bounds
	Speed    giteaSpeed
	// Factor is how much slower than refSpeed Gitea was, at least 1.
	Factor float64
	// AskedGitIssues is -git-issues; GitIssues the backlog round three
	// runs, cut when Factor is past maxScale unless -git-issues was
	// given.
	AskedGitIssues, GitIssues int
	Fixed                     bool // -git-issues was given: its backlog is not cut
	// Bound2 and Bound3 bound each run of round two and of round three.
	Bound2, Bound3 time.Duration
	// The work's own waits, scaled alike: for its merge, and for Gitea's
	// test while it holds the merge lock; the agents' and the work's
	// bound on one git collab process or API request; and the
	// coordinator's wait for a frozen claim's takeover.
	MergeDeadline, LockHold, CallTimeout, ZombieWait time.Duration
}

// sizeRuns sizes the runs from speed: every bound and wait grows by how
// much slower than refSpeed Gitea is (never shrinks), and by how much
// larger than the reference the backlog is; past maxScale round three's
// backlog shrinks by as much as the factor exceeds it (not below
// minGitIssues, nor when -git-issues was given), so that its bound stays
// near maxScale × gitModeTimeout.
func sizeRuns(speed giteaSpeed, issues, gitIssues int, fixed bool) sizing {
	s := sizing{Measured: speed.Rounds > 0, Speed: speed, Factor: 1, AskedGitIssues: gitIssues, GitIssues: gitIssues, Fixed: fixed}
	if s.Measured {
		s.Factor = max(1, float64(speed.issueTime())/float64(refSpeed.issueTime()))
	}
	if !fixed && s.Factor > maxScale {
		s.GitIssues = max(min(gitIssues, minGitIssues), int(math.Round(float64(gitIssues)*maxScale/s.Factor)))
	}
	scale := func(d time.Duration, f float64) time.Duration {
		return time.Duration(math.Ceil(float64(d)*f/float64(time.Second))) * time.Second
	}
	s.Bound2 = max(modeTimeout, scale(modeTimeout, s.Factor*float64(issues)/refIssues))
	s.Bound3 = max(gitModeTimeout, scale(gitModeTimeout, s.Factor*float64(s.GitIssues)/refGitIssues))
	s.MergeDeadline = scale(mergeDeadline, s.Factor)
	s.LockHold = scale(lockHold, s.Factor)
	s.CallTimeout = scale(callTimeout, s.Factor)
	s.ZombieWait = scale(zombieWait, s.Factor)
	return s
}

// describe says what was measured and how the runs were sized from it,
// in one paragraph, for the summary and the markdown alike.
func (s sizing) describe() string {
	if !s.Measured {
		return fmt.Sprintf("Gitea's speed was not measured (no run of round three): round two's runs are bounded at %s each.", dur(s.Bound2))
	}
	sp := s.Speed
	out := fmt.Sprintf("Gitea's speed, measured before the runs on a warm-up repository (medians of %d rounds, after one untimed): a push of one commit to a new branch %s, a pull request from it %s, Gitea's test of it until it would merge %s, the merge %s; one issue's Gitea work (two pushes, a pull request, its test and its merge) %s, against %s on the machine the fixed bounds were set on: %.2f×",
		sp.Rounds, ms(sp.Push), ms(sp.Create), ms(sp.Ready), ms(sp.Merge), ms(sp.issueTime()), ms(refSpeed.issueTime()), float64(sp.issueTime())/float64(refSpeed.issueTime()))
	if s.Factor == 1 {
		out += " (no slower: the fixed bounds hold)."
	} else {
		out += "."
	}
	switch {
	case s.GitIssues != s.AskedGitIssues:
		out += fmt.Sprintf(" Past %.1f×, round three's backlog is cut by as much: %d issues, not %d.", maxScale, s.GitIssues, s.AskedGitIssues)
	case s.Fixed && s.Factor > maxScale:
		out += fmt.Sprintf(" Round three's backlog stays at the %d issues -git-issues asked for.", s.GitIssues)
	}
	out += fmt.Sprintf(" Each run is bounded by the fixed bound times that factor and its backlog's size against the bound's (%s for %d issues in round two, %s for %d in round three), never less: round two's runs at %s, round three's at %s; a run still closing issues at its bound runs on until none has closed for a sixth of its bound (at least 2 min), up to %d× its bound. The work waits for its merge up to %s and holds the merge lock for Gitea's test up to %s; one git collab process or request to Gitea of an agent's may take up to %s; a frozen claim's takeover is awaited up to %s.",
		dur(modeTimeout), refIssues, dur(gitModeTimeout), refGitIssues, dur(s.Bound2), dur(s.Bound3), boundCap, dur(s.MergeDeadline), dur(s.LockHold), dur(s.CallTimeout), dur(s.ZombieWait))
	return out
}

// dur is a duration in whole seconds, as minutes and seconds past one.
func dur(d time.Duration) string {
	d = d.Round(time.Second)
	if d < time.Minute {
		return fmt.Sprintf("%d s", int(d.Seconds()))
	}
	m, sec := int(d/time.Minute), int((d%time.Minute)/time.Second)
	if sec == 0 {
		return fmt.Sprintf("%d min", m)
	}
	return fmt.Sprintf("%d min %d s", m, sec)
}

// warmupRepo is the warm-up's repository, which no run uses.
const warmupRepo = "warm-up"

// measureGitea measures Gitea's speed on org/warm-up, as user (its
// token, its git over HTTP), straight to Gitea (not counted): one
// untimed round, then rounds timed rounds, one after the other, each a
// branch of main as the round found it.
func (f *fleet) measureGitea(ctx context.Context, org string, user *integration.User, rounds int) (giteaSpeed, error) {
	admin := f.g.Admin()
	repo := integration.Repo{Owner: org, Name: warmupRepo}
	if err := admin.Do(ctx, "POST", "/orgs/"+org+"/repos", map[string]any{"name": repo.Name, "default_branch": "main", "auto_init": true}, nil); err != nil {
		return giteaSpeed{}, fmt.Errorf("create %s: %w", repo.FullName(), err)
	}
	path := "/repos/" + repo.FullName()
	if err := admin.Do(ctx, "PUT", path+"/collaborators/"+user.Login, map[string]any{"permission": "write"}, nil); err != nil {
		return giteaSpeed{}, err
	}
	api := &integration.API{URL: f.g.URL, Token: user.Token, HTTP: &http.Client{Timeout: callTimeout}}
	home := filepath.Join(f.dir, "warm-up")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return giteaSpeed{}, err
	}
	dir := filepath.Join(home, repo.Name)
	env := integration.CheckoutEnv(home, f.gitBin)
	git := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir, cmd.Env = home, env
		if _, err := os.Stat(dir); err == nil {
			cmd.Dir = dir
		}
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, b)
		}
		return nil
	}
	url := strings.Replace(f.g.URL, "://", "://"+user.Login+":"+user.Token+"@", 1) + "/" + repo.FullName() + ".git"
	if err := git("clone", "-q", url, dir); err != nil {
		return giteaSpeed{}, err
	}
	for _, args := range [][]string{{"config", "user.name", user.Login}, {"config", "user.email", user.Login + "@fleet.invalid"}} {
		if err := git(args...); err != nil {
			return giteaSpeed{}, err
		}
	}
	var push, create, ready, merge []time.Duration
	for i := range rounds + 1 {
		branch := fmt.Sprintf("warm/%d", i)
		if err := git("fetch", "-q", "origin", "main"); err != nil {
			return giteaSpeed{}, err
		}
		if err := git("checkout", "-q", "-f", "-B", branch, "origin/main"); err != nil {
			return giteaSpeed{}, err
		}
		if err := os.WriteFile(filepath.Join(dir, branch[len("warm/"):]+".txt"), []byte("warm-up\n"), 0o644); err != nil {
			return giteaSpeed{}, err
		}
		if err := git("add", "-A"); err != nil {
			return giteaSpeed{}, err
		}
		if err := git("commit", "-q", "-m", "Warm up, round "+branch[len("warm/"):]); err != nil {
			return giteaSpeed{}, err
		}
		start := time.Now()
		if err := git("push", "-q", "origin", "HEAD:refs/heads/"+branch); err != nil {
			return giteaSpeed{}, err
		}
		pushed := time.Since(start)
		var pr giteaPull
		start = time.Now()
		if err := api.Do(ctx, "POST", path+"/pulls", map[string]any{"head": branch, "base": "main", "title": "Warm up"}, &pr); err != nil {
			return giteaSpeed{}, err
		}
		created := time.Now()
		took, tried, err := mergeWhenReady(ctx, api, fmt.Sprintf("%s/pulls/%d/merge", path, pr.Number), created)
		if err != nil {
			return giteaSpeed{}, err
		}
		if i == 0 {
			continue // untimed
		}
		push = append(push, pushed)
		create = append(create, created.Sub(start))
		ready = append(ready, tried.Sub(created))
		merge = append(merge, took)
	}
	return giteaSpeed{Rounds: rounds, Push: median(push), Create: median(create), Ready: median(ready), Merge: median(merge)}, nil
}

// mergeWhenReady tries the merge at path every warmupPoll until Gitea
// takes it (it answers "try again later" until it has tested the pull
// request), for up to 5 minutes from since; it returns how long the
// merge Gitea took lasted and when it was sent.
func mergeWhenReady(ctx context.Context, api *integration.API, path string, since time.Time) (time.Duration, time.Time, error) {
	for {
		start := time.Now()
		err := api.Do(ctx, "POST", path, map[string]any{"Do": "merge"}, nil)
		if err == nil {
			return time.Since(start), start, nil
		}
		var apiErr *integration.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusMethodNotAllowed || !strings.Contains(apiErr.Body, "try again later") {
			return 0, time.Time{}, err
		}
		if time.Since(since) > 5*time.Minute {
			return 0, time.Time{}, fmt.Errorf("warm-up: Gitea never tested its pull request: %w", err)
		}
		time.Sleep(warmupPoll)
	}
}

// median is the middle of ds (the mean of the two middle ones), 0 for none.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
