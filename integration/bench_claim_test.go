package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// claimSamples is how many claims each way BenchmarkClaimSidecarVsGitea
// times per connection style.
const claimSamples = 50

// raceAgents is how many agents race for one issue each way.
const raceAgents = 20

// BenchmarkClaimSidecarVsGitea compares claiming an issue through the
// sidecar (`collab-lease acquire`) with claiming it the way Gitea offers:
// setting oneself as the assignee (PATCH /repos/{o}/{r}/issues/{n} with
// {"assignees":[login]} and the agent's own token). Both are timed
// interleaved, each claim undone untimed before the next (release; PATCH
// with no assignees), once over persistent connections (SSH connection,
// HTTP keep-alive) and once over a fresh connection per claim.
//
// Then 20 agents race for one issue each way. Through the sidecar exactly
// one is told it won; through Gitea every PATCH succeeds, so every agent
// believes it won, and the issue ends up with whoever wrote last.
func BenchmarkClaimSidecarVsGitea(b *testing.B) {
	g, w, bin := sharedB(b)
	agents := agentsB(b, g, w, raceAgents)
	me := agents[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := startBenchSidecar(b, ctx, g, bin, b.TempDir())
	cfg, err := clientConfig(s, me)
	if err != nil {
		b.Fatal(err)
	}
	keepAlive := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: raceAgents + 4}}
	b.Cleanup(keepAlive.CloseIdleConnections)
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for b.Loop() {
		// Issues 0-3: the claims (two styles, two ways); 4-5: the races.
		issues := openIssuesB(b, g, w, 6, "Claim")
		persistent := dialB(b, s, me)
		sidecarWay := func(is int64, dial bool) func() (time.Duration, error) {
			acquire := fmt.Sprintf("collab-lease acquire %s %d --ttl 1h", w.Widgets.FullName(), is)
			release := fmt.Sprintf("collab-lease release %s %d", w.Widgets.FullName(), is)
			return func() (time.Duration, error) {
				start := time.Now()
				c := persistent
				if dial {
					var err error
					if c, err = ssh.Dial("tcp", s.SSHAddr, cfg); err != nil {
						return 0, err
					}
					defer c.Close()
				}
				r, err := runOn(c, acquire)
				d := time.Since(start)
				if err == nil && r.Code != 0 {
					err = fmt.Errorf("%s: %+v", acquire, r)
				}
				if err != nil {
					return 0, err
				}
				if r, err := runOn(persistent, release); err != nil || r.Code != 0 {
					return 0, fmt.Errorf("%s: %+v %v", release, r, err)
				}
				return d, nil
			}
		}
		giteaWay := func(is int64, hc *http.Client) func() (time.Duration, error) {
			return func() (time.Duration, error) {
				start := time.Now()
				code, _, err := patchAssignees(ctx, hc, g, w.Widgets, me, is, []string{me.Login})
				d := time.Since(start)
				if err == nil && code/100 != 2 {
					err = fmt.Errorf("PATCH issue %d as %s: HTTP %d", is, me.Login, code)
				}
				if err != nil {
					return 0, err
				}
				if code, _, err := patchAssignees(ctx, keepAlive, g, w.Widgets, me, is, []string{}); err != nil || code/100 != 2 {
					return 0, fmt.Errorf("unassign issue %d: HTTP %d %v", is, code, err)
				}
				return d, nil
			}
		}
		styles := []struct {
			name           string
			sidecar, gitea func() (time.Duration, error)
		}{
			{"persistent", sidecarWay(issues[0], false), giteaWay(issues[1], keepAlive)},
			{"fresh", sidecarWay(issues[2], true), giteaWay(issues[3], fresh)},
		}
		for _, st := range styles {
			var side, gt []time.Duration
			// One untimed round warms caches and connections.
			for i := range claimSamples + 1 {
				ds, err := st.sidecar()
				if err != nil {
					b.Fatal(err)
				}
				dg, err := st.gitea()
				if err != nil {
					b.Fatal(err)
				}
				if i > 0 {
					side, gt = append(side, ds), append(gt, dg)
				}
			}
			ms, mg := median(side), median(gt)
			reportMs(b, st.name+"-sidecar-p50-ms", ms)
			reportMs(b, st.name+"-gitea-p50-ms", mg)
			b.ReportMetric(float64(ms)/float64(mg), st.name+"-sidecar/gitea")
			b.ReportMetric(float64(len(side)), st.name+"-samples-each")
			b.Logf("claim over %s connections: sidecar acquire p50 %s, Gitea assignee PATCH p50 %s (%d each)",
				st.name, ms.Round(10*time.Microsecond), mg.Round(10*time.Microsecond), len(side))
		}

		wins, winner := raceSidecar(b, ctx, s, w, agents, issues[4])
		b.ReportMetric(raceAgents, "race-agents")
		b.ReportMetric(float64(wins), "sidecar-race-winners")
		b.Logf("race through the sidecar: %d agents, %d told they won (%s), the others were told who holds it",
			raceAgents, wins, winner)
		ok, final, last := raceGitea(b, ctx, keepAlive, g, w, agents, issues[5])
		b.ReportMetric(float64(ok), "gitea-race-winners")
		b.ReportMetric(float64(len(final)), "gitea-race-final-assignees")
		b.Logf("race through Gitea: %d agents, %d PATCHes succeeded (each agent believes it won); the issue ends up assigned to %v; the last PATCH to complete was %s's",
			raceAgents, ok, final, last)
	}
}

// raceSidecar has every agent acquire issue n at once, each over its own
// warm persistent connection, and returns how many were told they won and
// the winner's name.
func raceSidecar(b *testing.B, ctx context.Context, s *Sidecar, w *World, agents []*User, n int64) (int, string) {
	b.Helper()
	conns := make([]*ssh.Client, len(agents))
	for i, u := range agents {
		conns[i] = dialB(b, s, u)
		defer conns[i].Close()
		if r, err := runOn(conns[i], "collab-lease list "+w.Widgets.FullName()); err != nil || r.Code != 0 {
			b.Fatalf("warm-up list as %s: %+v %v", u.Login, r, err)
		}
	}
	cmd := fmt.Sprintf("collab-lease acquire %s %d --ttl 1h", w.Widgets.FullName(), n)
	results := make([]SSHResult, len(agents))
	errs := make([]error, len(agents))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range agents {
		wg.Go(func() {
			<-start
			results[i], errs[i] = runOn(conns[i], cmd)
		})
	}
	close(start)
	wg.Wait()
	wins, winner := 0, ""
	for i, r := range results {
		var out struct{ Status, Holder string }
		_ = json.Unmarshal([]byte(r.Stdout), &out)
		switch {
		case errs[i] != nil:
			b.Fatalf("%s: %v", agents[i].Login, errs[i])
		case r.Code == 0 && out.Status == "acquired":
			wins++
			winner = out.Holder
		case r.Code == 4 && out.Status == "held":
		default:
			b.Fatalf("%s: unexpected answer %+v", agents[i].Login, r)
		}
	}
	if wins != 1 {
		b.Fatalf("%d agents were told they won the same issue through the sidecar", wins)
	}
	return wins, winner
}

// raceGitea has every agent set itself as the assignee of issue n at once
// (Gitea's only notion of a claim) and returns how many PATCHes succeeded,
// whom the issue is assigned to afterwards and whose PATCH completed last.
func raceGitea(b *testing.B, ctx context.Context, hc *http.Client, g *Gitea, w *World, agents []*User, n int64) (int, []string, string) {
	b.Helper()
	// Warm each agent's connection and token.
	for _, u := range agents {
		if err := (&API{URL: g.URL, Token: u.Token, HTTP: hc}).Do(ctx, "GET",
			fmt.Sprintf("/repos/%s/issues/%d", w.Widgets.FullName(), n), nil, nil); err != nil {
			b.Fatal(err)
		}
	}
	codes := make([]int, len(agents))
	errs := make([]error, len(agents))
	var mu sync.Mutex
	var order []string
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, u := range agents {
		wg.Go(func() {
			<-start
			codes[i], _, errs[i] = patchAssignees(ctx, hc, g, w.Widgets, u, n, []string{u.Login})
			mu.Lock()
			order = append(order, u.Login)
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	ok := 0
	for i, c := range codes {
		if errs[i] != nil {
			b.Fatalf("%s: %v", agents[i].Login, errs[i])
		}
		if c/100 == 2 {
			ok++
		} else {
			b.Logf("%s: HTTP %d", agents[i].Login, c)
		}
	}
	var is struct{ Assignees []struct{ Login string } }
	if err := g.Admin().Do(ctx, "GET", fmt.Sprintf("/repos/%s/issues/%d", w.Widgets.FullName(), n), nil, &is); err != nil {
		b.Fatal(err)
	}
	var final []string
	for _, a := range is.Assignees {
		final = append(final, a.Login)
	}
	slices.Sort(final)
	return ok, final, order[len(order)-1]
}

// patchAssignees sets the assignees of issue n of repo as u, with u's own
// token, and returns the HTTP status and body.
func patchAssignees(ctx context.Context, hc *http.Client, g *Gitea, repo Repo, u *User, n int64, logins []string) (int, string, error) {
	body, err := json.Marshal(map[string]any{"assignees": logins})
	if err != nil {
		return 0, "", err
	}
	url := fmt.Sprintf("%s/api/v1/repos/%s/issues/%d", strings.TrimRight(g.URL, "/"), repo.FullName(), n)
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "token "+u.Token)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out), err
}
