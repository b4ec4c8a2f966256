package main

import (
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSummarizeFromEvents(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	events := []Event{
		// Issue 1: agent 0 claims, works and closes it.
		{Agent: 0, Kind: evClaimed, Issue: 1, Token: 1, At: ms(10)},
		{Agent: 0, Kind: evWork, Issue: 1, At: ms(10)},
		{Agent: 0, Kind: evWorked, Issue: 1, Took: ms(100), At: ms(110)},
		{Agent: 0, Kind: evClosed, Issue: 1, At: ms(120)},
		// Issue 2: agents 1 and 2 both work it (assignees race); both close.
		{Agent: 1, Kind: evWorked, Issue: 2, Took: ms(200), At: ms(220)},
		{Agent: 2, Kind: evWorked, Issue: 2, Took: ms(200), At: ms(230)},
		{Agent: 1, Kind: evClosed, Issue: 2, At: ms(240)},
		{Agent: 2, Kind: evClosed, Issue: 2, At: ms(250)},
		// Issue 3: agent 1 is killed working on it; agent 2 takes it over
		// after expiry and closes it: worked once, not a duplicate.
		{Agent: 1, Kind: evClaimed, Issue: 3, Token: 1, At: ms(300)},
		{Agent: 1, Kind: evDoomed, Issue: 3, Token: 1, At: ms(300)},
		{Agent: 1, Kind: evKilled, Issue: 3, Token: 1, At: ms(310)},
		{Agent: 2, Kind: evClaimed, Issue: 3, Token: 2, At: ms(10310)},
		{Agent: 2, Kind: evWorked, Issue: 3, Took: ms(50), At: ms(10360)},
		{Agent: 2, Kind: evClosed, Issue: 3, At: ms(10370)},
		// Issue 4: worked, but check said stale, so never closed; issue 5
		// never claimed at all.
		{Agent: 0, Kind: evWorked, Issue: 4, Took: ms(150), At: ms(400)},
		{Agent: 0, Kind: evStale, Issue: 4, At: ms(410)},
		{Agent: 0, Kind: evRetry, Detail: "git collab next: exit 75: error: forge unavailable, try again"},
		{Agent: 2, Kind: evRetry, Detail: "git collab check: exit 255: could not reach 127.0.0.1:4242"},
		{Agent: 0, Kind: evDone, Calls: map[string]*CallStat{"git collab next": {N: 3, Total: ms(90), Max: ms(50)}}},
		{Agent: 2, Kind: evDone, Calls: map[string]*CallStat{"git collab next": {N: 1, Total: ms(10), Max: ms(10)}}},
		{Agent: 2, Kind: evError, Detail: "git collab next: exit 1: error: repository not found"},
	}
	r := summarize(5, 3, time.Second, events)

	if want := []Duplicate{{Issue: 2, Agents: []int{1, 2}}}; !reflect.DeepEqual(r.Duplicates, want) {
		t.Errorf("duplicates %+v, want %+v", r.Duplicates, want)
	}
	if want := []int64{4, 5}; !reflect.DeepEqual(r.Unclosed, want) {
		t.Errorf("unclosed %v, want %v", r.Unclosed, want)
	}
	if r.Closed != 3 || r.LastClose != ms(10370) {
		t.Errorf("closed %d, last at %s; want 3 at 10.37s", r.Closed, r.LastClose)
	}
	if r.Working != ms(700) || r.NotWorking != 3*time.Second-ms(700) {
		t.Errorf("working %s, not working %s; want 700ms and 2.3s", r.Working, r.NotWorking)
	}
	if r.Stale != 1 || r.Retries != 2 || len(r.RetryReasons) != 2 {
		t.Errorf("stale %d, retries %d %v", r.Stale, r.Retries, r.RetryReasons)
	}
	if n := r.RetryReasons["git collab check: exit N: could not reach N.N.N.N:N"]; n != 1 {
		t.Errorf("retry reasons %v: numbers are not folded", r.RetryReasons)
	}
	if c := r.Calls["git collab next"]; c == nil || c.N != 4 || c.Total != ms(100) || c.Max != ms(50) || r.InCalls != ms(100) {
		t.Errorf("calls %+v, in calls %s", r.Calls, r.InCalls)
	}
	if len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "repository not found") {
		t.Errorf("errors %q", r.Errors)
	}
	want := []Abandoned{{Issue: 3, Agent: 1, Token: 1, By: 2, ByToken: 2, ClaimedAfter: 10 * time.Second, ClosedByOther: true}}
	if !reflect.DeepEqual(r.Abandoned, want) {
		t.Errorf("abandoned %+v, want %+v", r.Abandoned, want)
	}
}

// A clean run: every issue worked once and closed.
func TestSummarizeCleanRun(t *testing.T) {
	var events []Event
	for n := int64(1); n <= 4; n++ {
		events = append(events,
			Event{Agent: int(n % 2), Kind: evWorked, Issue: n, Took: time.Millisecond},
			Event{Agent: int(n % 2), Kind: evClosed, Issue: n})
	}
	r := summarize(4, 2, time.Second, events)
	if len(r.Duplicates) != 0 || len(r.Unclosed) != 0 || r.Closed != 4 || len(r.Abandoned) != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestPlanIsDeterministic(t *testing.T) {
	a, b := planBacklog(7, 200), planBacklog(7, 200)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed planned two backlogs")
	}
	if reflect.DeepEqual(a, planBacklog(8, 200)) {
		t.Fatal("another seed planned the same backlog")
	}
	if len(a.Blocked) == 0 || len(a.Labels) == 0 {
		t.Fatalf("no labels or dependencies: %+v", a)
	}
	for n, by := range a.Blocked {
		if by <= n || by > 200 {
			t.Errorf("#%d is blocked by #%d: not a newer issue of the backlog", n, by)
		}
	}
	for n := int64(1); n <= 200; n++ {
		if w := workTime(7, n); w != workTime(7, n) || w < 50*time.Millisecond || w > 500*time.Millisecond {
			t.Fatalf("work time of #%d: %s", n, w)
		}
	}
	if f := faults(7, 20); !reflect.DeepEqual(f, faults(7, 20)) || len(f) != 2 {
		t.Fatalf("faults %v", f)
	}
	if len(faults(7, 1)) != 0 {
		t.Fatal("the only agent is killed: nobody would finish its issue")
	}
}

func TestRoute(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/repos/fleet/backlog-lease/issues/17/dependencies":  "/repos/{o}/{r}/issues/{n}/dependencies",
		"/api/v1/repos/fleet/backlog-lease/issues":                  "/repos/{o}/{r}/issues",
		"/api/v1/repos/fleet/backlog-lease/collaborators/fleet03/x": "/repos/{o}/{r}/collaborators/{agent}/x",
		"/api/v1/user/keys": "/user/keys",
		"/api/v1/repos/fleet/backlog-zombies/commits/afbe89d929de7af6790c0df36970eb9e414413a5/status": "/repos/{o}/{r}/commits/{sha}/status",
		"/api/v1/repos/fleet/backlog-lease/issues/17/labels/3":                                        "/repos/{o}/{r}/issues/{n}/labels/{n}",
	} {
		if got := route(path); got != want {
			t.Errorf("route(%q) = %q, want %q", path, got, want)
		}
	}
}

// Round three: a zombie froze after its first push of #7; once woken, one
// of its late commits reached Gitea and it merged, and a live holder's
// commit never reached main. Each is counted once, however often it is
// reported.
func TestJudgeGit(t *testing.T) {
	events := []Event{
		{Agent: 1, Kind: evCommitted, Issue: 7, Detail: "a1"},
		{Agent: 1, Kind: evPushed, Issue: 7, Commits: []string{"a1"}}, // the push it froze after: live
		{Agent: 2, Kind: evPushed, Issue: 7, Commits: []string{"b1", "a1"}},
		{Agent: 1, Kind: evCommitted, Issue: 7, Detail: "z1"},
		{Agent: 1, Kind: evPushed, Issue: 7, Commits: []string{"z1"}},
		{Agent: 1, Kind: evCommitted, Issue: 7, Detail: "z2"},
		{Agent: 1, Kind: evStale, Issue: 7},
		{Agent: 1, Kind: evMerged, Issue: 7, Detail: "12"},
		{Agent: 1, Kind: evPushed, Issue: 8, Commits: []string{"c1"}}, // its next claim: live again
		{Agent: 3, Kind: evPushed, Issue: 9, Commits: []string{"lost"}},
	}
	zombies := []zombie{{Agent: 1, Issue: 7, Token: 3, trigger: 1}, {Agent: 4, Issue: 2, trigger: 0}}
	inMain := map[string]bool{"a1": true, "b1": true, "c1": true, "z1": true}
	inGitea := map[string]bool{"a1": true, "b1": true, "c1": true, "z1": true, "lost": true}
	o := judgeGit(events, zombies, func(s string) bool { return inMain[s] }, func(s string) bool { return inGitea[s] })
	want := gitOutcome{Pushes: 5, Lost: []string{"lost"}, ZombiePushes: []string{"z1"}, ZombieMerges: []string{"12"},
		Zombies: []zombieOutcome{{Stop: evStale, Landed: []string{"z1"}, Merged: []string{"12"}}, {}}}
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("judged %+v, want %+v", o, want)
	}
	// Nothing late: nothing of a zombie's landed, nothing lost.
	o = judgeGit(events[:3], zombies, func(string) bool { return true }, func(string) bool { return true })
	if len(o.Lost)+len(o.ZombiePushes)+len(o.ZombieMerges) != 0 || o.Pushes != 2 {
		t.Fatalf("judged %+v", o)
	}
}

func TestRoundThreePlan(t *testing.T) {
	z := pickZombies(7, 20)
	if len(z) != zombieCount || !reflect.DeepEqual(z, pickZombies(7, 20)) {
		t.Fatalf("zombies %v", z)
	}
	if len(pickZombies(7, 2)) != 1 {
		t.Fatal("every agent of two is a zombie: nobody would take their claims over")
	}
	for n := int64(1); n <= 60; n++ {
		if w := gitWorkTime(7, n); w != gitWorkTime(7, n) || w < time.Second || w > 8*time.Second {
			t.Fatalf("work time of #%d: %s", n, w)
		}
	}
	for msg, want := range map[string]bool{
		"! [rejected] HEAD -> work/4 (fetch first)":                                  true,
		"! [rejected] HEAD -> work/4 (non-fast-forward)":                             true,
		"remote: error: cannot lock ref 'refs/heads/work/4': is at 1 but expected 2": true,
		"remote: error: Not allowed to push to protected branch work/4":              false,
	} {
		if branchMoved(msg) != want {
			t.Errorf("branchMoved(%q) = %v", msg, !want)
		}
	}
}

// The merge lock's waits and holds add up per mode; a lock taken and
// never let go (the work killed) counts its wait and no hold.
func TestSummarizeCountsTheMergeLock(t *testing.T) {
	s := func(n int) time.Duration { return time.Duration(n) * time.Second }
	r := summarize(2, 2, s(10), []Event{
		{Agent: 0, Kind: evLocked, Issue: 1, Took: s(3)},
		{Agent: 0, Kind: evUnlocked, Issue: 1, Took: s(1)},
		{Agent: 1, Kind: evLocked, Issue: 2, Took: s(5)},
	})
	if r.Locks != 2 || r.Unlocks != 1 || r.LockWait != s(8) || r.LockHeld != s(1) {
		t.Errorf("locks %d, unlocks %d, wait %s, held %s; want 2, 1, 8s, 1s", r.Locks, r.Unlocks, r.LockWait, r.LockHeld)
	}
}

// The bare zombies: one woken zombie's push is refused by the gate (and
// its work then fails), another's lands and it merges, a third's merge
// is refused for the required status; a live agent's refused push counts
// among the gate's refusals, not the zombies'.
func TestJudgeGitBareZombies(t *testing.T) {
	said := "collab-lease: work/7 is claimed: o/r#7 by bot · fleet02 (token 4); this push carries token 3, which is stale"
	events := []Event{
		{Agent: 1, Kind: evPushed, Issue: 7, Commits: []string{"a1"}}, // 0: zombie 1 froze after this
		{Agent: 4, Kind: evPushed, Issue: 9, Commits: []string{"d1"}}, // 1: zombie 4 froze after this
		{Agent: 2, Kind: evPushed, Issue: 7, Commits: []string{"b1"}},
		{Agent: 1, Kind: evCommitted, Issue: 7, Detail: "z1"},
		{Agent: 1, Kind: evGated, Issue: 7, Detail: said},
		{Agent: 1, Kind: evError, Issue: 7, Detail: "pull request #3: gone"},
		{Agent: 4, Kind: evCommitted, Issue: 9, Detail: "y1"},
		{Agent: 4, Kind: evPushed, Issue: 9, Commits: []string{"y1"}},
		{Agent: 4, Kind: evMerged, Issue: 9, Detail: "5"},
		{Agent: 5, Kind: evGated, Issue: 11, Detail: said},
		{Agent: 5, Kind: evError, Issue: 11, Detail: "a live agent's failure"},
		{Agent: 6, Kind: evPushed, Issue: 13, Commits: []string{"e1"}}, // 11: zombie 6 froze after this
		{Agent: 6, Kind: evFenced, Issue: 13, Detail: "Not all required status checks successful"},
	}
	zombies := []zombie{{Agent: 1, Issue: 7, Token: 3, trigger: 0}, {Agent: 4, Issue: 9, Token: 2, trigger: 1}, {Agent: 6, Issue: 13, trigger: 11}}
	inGitea := map[string]bool{"a1": true, "b1": true, "d1": true, "y1": true, "e1": true}
	o := judgeGit(events, zombies, func(s string) bool { return inGitea[s] }, func(s string) bool { return inGitea[s] })
	want := gitOutcome{Pushes: 5, Gated: 2, ZombieGated: 1, ZombiePushes: []string{"y1"}, ZombieMerges: []string{"5"},
		Zombies: []zombieOutcome{
			{Stop: evGated, Said: said},
			{Landed: []string{"y1"}, Merged: []string{"5"}},
			{Stop: evFenced, Said: "Not all required status checks successful"},
		},
		ZombieErrors: []string{"agent 1: pull request #3: gone"}}
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("judged %+v\nwant   %+v", o, want)
	}
	errs := summarize(13, 7, time.Second, events).Errors
	if live := without(errs, o.ZombieErrors); !reflect.DeepEqual(live, []string{"agent 5: a live agent's failure"}) {
		t.Errorf("errors but the zombies' %q", live)
	}
}

func TestWithout(t *testing.T) {
	got := without([]string{"a", "b", "a", "c"}, []string{"a", "c", "x"})
	if want := []string{"b", "a"}; !reflect.DeepEqual(got, want) {
		t.Errorf("without = %q, want %q", got, want)
	}
}

// What fails each run: with the gate, a zombie's commit that landed, an
// issue left open or a commit lost, not its merges (rule 4 is not built);
// without the gate, nothing: it measures what lands.
func TestVerdictOfTheBareZombieRuns(t *testing.T) {
	gate := modeSpec{Key: "zombies-bare-gate", Title: "gate", Mode: modeSession, Round3: true, Bare: true, Gate: true}
	nogate := modeSpec{Key: "zombies-bare-nogate", Title: "no gate", Mode: modeSession, Round3: true, Bare: true}
	defended := modeSpec{Key: "zombies", Title: "zombies", Mode: modeSession, Round3: true}
	merged := ModeResult{Git: gitOutcome{ZombieMerges: []string{"5"}}, Report: Report{Duplicates: []Duplicate{{Issue: 9, Agents: []int{4, 2}}}}}
	pushed := ModeResult{Git: gitOutcome{ZombiePushes: []string{"y1"}}}
	open := ModeResult{Report: Report{Unclosed: []int64{3}}}
	for _, c := range []struct {
		spec modeSpec
		r    ModeResult
		fail bool
	}{
		{gate, merged, false}, {gate, pushed, true}, {gate, open, true},
		{nogate, merged, false}, {nogate, pushed, false}, {nogate, open, false},
		{defended, merged, true}, {defended, pushed, true},
	} {
		c.r.Spec = c.spec
		if err := c.r.verdict(); (err != nil) != c.fail {
			t.Errorf("%s with %+v: verdict %v, want failure %v", c.spec.Key, c.r.Git, err, c.fail)
		}
	}
}

// The report of the bare zombie runs: the gate's refusals, the checks
// switched off, each zombie's story and what landed with and without
// the gate.
func TestReportOfTheBareZombieRuns(t *testing.T) {
	said := "collab-lease: work/7 is claimed: fleet/backlog-zombies-bare-gate#7 by bot · fleet02 (token 4); this push carries token 3, which is stale"
	z := zombie{Agent: 1, Issue: 7, Token: 3, Frozen: 4 * time.Second, TakenOver: 20 * time.Second, Woke: 20 * time.Second, ByToken: 4, ByAgent: "fleet02"}
	gate := ModeResult{Spec: modeSpec{Key: "zombies-bare-gate", Title: "3 zombies, defenses off, gate", Round3: true, Bare: true, Gate: true,
		Zombies: map[int]bool{1: true}},
		Report: Report{Closed: 60}, UsesSidecar: true, Zombies: []zombie{z},
		Git: gitOutcome{Pushes: 120, Gated: 1, ZombieGated: 1, Zombies: []zombieOutcome{{Stop: evGated, Said: said}}}}
	nogate := ModeResult{Spec: modeSpec{Key: "zombies-bare-nogate", Title: "3 zombies, defenses off, no gate", Round3: true, Bare: true,
		Zombies: map[int]bool{1: true}},
		Report: Report{Closed: 60, Duplicates: []Duplicate{{Issue: 7, Agents: []int{2, 1}}}}, UsesSidecar: true, Zombies: []zombie{z},
		Git: gitOutcome{Pushes: 121, ZombiePushes: []string{"y1"}, ZombieMerges: []string{"12"},
			Zombies: []zombieOutcome{{Landed: []string{"y1"}, Merged: []string{"12"}}}}}
	s := summary{opts: options{agents: 20, issues: 200, gitIssues: 60, seed: 1}, results: []ModeResult{gate, nogate}}
	text := s.text()
	row := func(label string) []string {
		for _, l := range strings.Split(text, "\n") {
			if rest, ok := strings.CutPrefix(l, label); ok {
				return strings.Fields(rest)
			}
		}
		return nil
	}
	if got := row("pushes Gitea's gate refused (of them zombies')"); !reflect.DeepEqual(got, []string{"1", "(1)", "no", "gate"}) {
		t.Errorf("the gate's row says %q", got)
	}
	if got := row("of it, git collab check before each push and the merge"); !reflect.DeepEqual(got, strings.Fields("none (switched off) none (switched off)")) {
		t.Errorf("the checks' row says %q", got)
	}
	for _, want := range []string{
		"its next push carried its old token 3, and Gitea's gate refused it: \"" + said + "\"; none of its late commits reached Gitea and it merged nothing.",
		"nothing stopped it: 1 of its late commits reached Gitea (y1) and it merged pull request #12.",
		"with the gate, 0 zombie commits (goal: 0; it refused 1 of the zombies' pushes) and 0 zombie merges landed, 0 commits of live holders lost, 0 issues worked more than once; without it, 1 zombie commits and 1 zombie merges landed, 0 commits of live holders lost, 1 issues worked more than once.",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the report lacks %q:\n%s", want, text)
		}
	}
	if md := s.markdown(); !strings.Contains(md, "| pushes Gitea's gate refused (of them zombies') | 1 (1) | no gate |") {
		t.Errorf("the markdown lacks the gate's row:\n%s", md)
	}
}

// At the bound, a commit main lacks is in flight if its issue's branch
// still holds it and its work had not finished (the issue open, or the
// work that pushed it not ended); otherwise it is lost. A run that ended
// by itself has nothing in flight.
func TestInFlightAtTheBoundIsNotLost(t *testing.T) {
	events := []Event{
		// #1: pushed, merged, closed and ended: all in main.
		{Agent: 0, Kind: evPushed, Issue: 1, Commits: []string{"a1", "a2"}},
		{Agent: 0, Kind: evMerged, Issue: 1, Detail: "61"},
		{Agent: 0, Kind: evClosed, Issue: 1},
		{Agent: 0, Kind: evWorkCPU, Issue: 1},
		// #2: pushed, then the bound came (killed: no last line).
		{Agent: 1, Kind: evPushed, Issue: 2, Commits: []string{"b1"}},
		// #3: its first work gave up and ended; the next holder pushed
		// on top of it and was still at work when the bound came.
		{Agent: 2, Kind: evPushed, Issue: 3, Commits: []string{"c1"}},
		{Agent: 2, Kind: evError, Issue: 3, Detail: "pull request #63: not merged within 5m0s"},
		{Agent: 2, Kind: evWorkCPU, Issue: 3},
		{Agent: 3, Kind: evPushed, Issue: 3, Commits: []string{"c2"}},
		// #4: its branch no longer holds what was pushed: overwritten.
		{Agent: 4, Kind: evPushed, Issue: 4, Commits: []string{"d1"}},
		// #5: merged, closed and ended, yet main lacks a commit of it.
		{Agent: 5, Kind: evPushed, Issue: 5, Commits: []string{"e1"}},
		{Agent: 5, Kind: evMerged, Issue: 5, Detail: "65"},
		{Agent: 5, Kind: evClosed, Issue: 5},
		{Agent: 5, Kind: evWorkCPU, Issue: 5},
		// #6: closed by another's merge while its work still pushed.
		{Agent: 6, Kind: evPushed, Issue: 6, Commits: []string{"f1"}},
		{Agent: 7, Kind: evMerged, Issue: 6, Detail: "66"},
		{Agent: 7, Kind: evClosed, Issue: 6},
		{Agent: 7, Kind: evWorkCPU, Issue: 6},
		{Agent: 6, Kind: evPushed, Issue: 6, Commits: []string{"f2"}},
	}
	inMain := map[string]bool{"a1": true, "a2": true, "f1": true}
	branches := map[int64][]string{2: {"b1"}, 3: {"c1", "c2"}, 4: {"x9"}, 5: {"e1"}, 6: {"f2"}}
	onBranch := func(n int64, sha string) bool { return slices.Contains(branches[n], sha) }
	all := func(string) bool { return true }
	o := judgeGit(events, nil, func(s string) bool { return inMain[s] }, all)
	if want := []string{"b1", "c1", "c2", "d1", "e1", "f2"}; !reflect.DeepEqual(o.Lost, want) || len(o.InFlight) != 0 {
		t.Fatalf("before the bound is taken into account: lost %v, in flight %v; want lost %v", o.Lost, o.InFlight, want)
	}
	o = o.inFlightAtBound(events, onBranch)
	if want := []string{"b1", "c1", "c2", "f2"}; !reflect.DeepEqual(o.InFlight, want) {
		t.Errorf("in flight %v, want %v", o.InFlight, want)
	}
	if want := []string{"d1", "e1"}; !reflect.DeepEqual(o.Lost, want) {
		t.Errorf("lost %v, want %v", o.Lost, want)
	}
	if o.Pushes != 8 {
		t.Errorf("%d pushes, want 8", o.Pushes)
	}
}

// Only commits lost fail a run, and a collab-lease run stopped at its
// bound fails for that (its bound was sized to let it finish), not for
// the commits it had in flight or the issues it left open then; the
// baselines are measured wherever their bound stopped them.
func TestVerdictTellsInFlightFromLost(t *testing.T) {
	sessions := modeSpec{Key: "sessions", Title: "collab-lease, one account", Mode: modeSession, Round3: true}
	baseline := modeSpec{Key: "assignees-bot", Title: "assignees only, one account", Mode: modeAssignees, Round3: true}
	stopped := func(spec modeSpec, lost ...string) ModeResult {
		return ModeResult{Spec: spec, Bound: 6 * time.Minute, StoppedAt: 6 * time.Minute, Report: Report{Unclosed: []int64{7, 9}},
			Git: gitOutcome{InFlight: []string{"b1", "c2"}, Lost: lost}}
	}
	err := stopped(sessions).verdict()
	if err == nil || !strings.Contains(err.Error(), "stopped at its bound, 6 min, with no issue closed in the 2 min before it, with 2 issues open and 2 commits of work in flight") {
		t.Errorf("stopped at its bound: %v", err)
	}
	if err != nil && strings.Contains(err.Error(), "commits lost") {
		t.Errorf("commits in flight were counted lost: %v", err)
	}
	if err := stopped(sessions, "d1").verdict(); err == nil || !strings.Contains(err.Error(), "1 commits lost") {
		t.Errorf("a commit lost at the bound: %v", err)
	}
	finished := ModeResult{Spec: sessions, Git: gitOutcome{Pushes: 120}}
	if err := finished.verdict(); err != nil {
		t.Errorf("a clean run: %v", err)
	}
	if err := stopped(baseline, "d1").verdict(); err != nil {
		t.Errorf("a baseline stopped at its bound: %v", err)
	}
	// The report shows both, apart.
	s := summary{opts: options{agents: 20, issues: 200, gitIssues: 60, seed: 1},
		results: []ModeResult{stopped(sessions), finished, stopped(baseline, "d1")}}
	s.results[1].Spec.Title = "finished"
	text := s.text()
	for _, want := range []string{
		"collab-lease, one account: its agents were stopped (SIGKILL) at its bound, 6 min, with no issue closed in the 2 min before it, with 0 issues still open and 2 commits of work in flight (still on their issue's branch, that work unfinished: not counted as lost).",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the report lacks %q:\n%s", want, text)
		}
	}
	md := s.markdown()
	for _, want := range []string{
		"| commits lost (pushed by a live holder, not in main, not in flight) | **0 (of 0 pushes)** | **0 (of 120 pushes)** | **1 (of 0 pushes)** |",
		"| issues never closed | **2 (stopped at 6 min, its bound 6 min)** | **0** | **2 (stopped at 6 min, its bound 6 min)** |",
		"| commits in flight when the run was stopped (on their issue's branch, its work unfinished) | 2 | none (not stopped) | 2 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the markdown lacks %q:\n%s", want, md)
		}
	}
}

// A run's bound is no deadline while it still closes issues: it runs on
// until no issue has closed for its stall window, or until boundCap
// times its bound; and the report says which stopped it.
func TestARunStillClosingIssuesRunsOnPastItsBound(t *testing.T) {
	m := func(n int) time.Duration { return time.Duration(n) * time.Minute }
	s := func(n int) time.Duration { return time.Duration(n) * time.Second }
	for _, c := range []struct {
		bound, elapsed, since time.Duration
		next                  time.Duration
		on                    bool
	}{
		{m(6), m(6), s(30), s(90), true},      // closed 30 s ago: asked again once 2 min have passed since
		{m(6), m(6), m(2), 0, false},          // nothing for 2 min: stopped
		{m(6), m(17), s(10), m(1), true},      // its cap is near
		{m(6), m(18), s(1), 0, false},         // at its cap
		{m(24), m(24), m(3), m(1), true},      // a longer bound, a longer window: 4 min
		{m(24), m(24), m(4) + s(1), 0, false}, // nothing for 4 min
	} {
		next, on := runOn(c.bound, c.elapsed, c.since)
		if next != c.next || on != c.on {
			t.Errorf("runOn(%s, %s, %s) = %s, %v; want %s, %v", c.bound, c.elapsed, c.since, next, on, c.next, c.on)
		}
	}
	for r, want := range map[*ModeResult]string{
		{Bound: m(6), StoppedAt: m(6)}:                             "at its bound, 6 min, with no issue closed in the 2 min before it",
		{Bound: m(6), StoppedAt: m(9) + s(20), RanOn: true}:        "at 9 min 20 s, 3 min 20 s past its bound of 6 min, once no issue had closed for 2 min",
		{Bound: m(6), StoppedAt: m(18), RanOn: true, Capped: true}: "at 18 min, 3× its bound of 6 min, while it still closed issues",
		{Bound: m(6), StoppedAt: m(2), Interrupted: true}:          "at 2 min, interrupted",
		{Bound: m(6)}: "",
	} {
		if got := r.stopped(); got != want {
			t.Errorf("stopped() = %q, want %q", got, want)
		}
	}
}

// Round three's merging, side by side: the merge requests per closed
// issue (git collab merge calls, by reply, or Gitea merge API calls),
// the pull requests replaced and the wall time against the 20-account
// assignees run, each beside its goal.
func TestMergeRowsAndGoals(t *testing.T) {
	s := func(n int) time.Duration { return time.Duration(n) * time.Second }
	verb := ModeResult{Spec: modeSpec{Key: "sessions", Title: "collab-lease, one account", Mode: modeSession, Round3: true, MergeVerb: true},
		UsesSidecar: true, Report: Report{Closed: 60, LastClose: s(60), MergeCalls: 63, MergeReplies: map[string]int{"merged": 60, "busy": 3}, MergeCallTime: s(126)},
		Traffic: traffic{Merges: map[int]*CallStat{http.StatusOK: {N: 60}, http.StatusConflict: {N: 6}}}}
	lock := ModeResult{Spec: modeSpec{Key: "sessions-lock", Title: "collab-lease, one account, merge lock", Mode: modeSession, Round3: true},
		UsesSidecar: true, Report: Report{Closed: 60, LastClose: s(130), Replaced: []string{"#61 by #70", "#62 by #71"}, Locks: 70, Unlocks: 70, LockWait: s(700), LockHeld: s(70)},
		Traffic: traffic{Merges: map[int]*CallStat{http.StatusOK: {N: 60}, http.StatusMethodNotAllowed: {N: 12}}}}
	base := ModeResult{Spec: modeSpec{Key: "assignees-accounts", Title: "assignees only, 20 accounts", Mode: modeAssignees, Round3: true},
		Report: Report{Closed: 60, LastClose: s(150)}, Traffic: traffic{Merges: map[int]*CallStat{http.StatusOK: {N: 60}, http.StatusMethodNotAllowed: {N: 48}}}}
	sum := summary{opts: options{agents: 20, issues: 200, gitIssues: 60, seed: 1}, results: []ModeResult{verb, lock, base}}
	md := sum.markdown()
	for _, want := range []string{
		"| merge requests per closed issue: git collab merge calls where the work merges with it, Gitea merge API calls where it merges itself (goal ≤ 1.1) | 1.05 (1.00 merged + 0.05 busy) | 1.20 (Gitea's API) | 1.80 (Gitea's API) |",
		"| pull requests the agents replaced (goal 0 with git collab merge) | 0 | 2 | 0 |",
		"| wall time to the last close ÷ assignees only, 20 accounts (goal ≤ 0.5×) | 0.40× | 0.87× | 1.00× |",
		"| Gitea merge API calls per closed issue, the sidecar's or the agents' (merged + main moved meanwhile + not yet, + other answers) | 1.1 (1.0 + 0.1 + 0.0) | 1.2 (1.0 + 0.0 + 0.2) | 1.8 (1.0 + 0.0 + 0.8) |",
		"| merge lock: mean wait / mean hold | none: git collab merge, 2.0 s a call | 10.0 s / 1.00 s | not taken |",
		"- collab-lease, one account, merging with git collab merge: wall time to the last close against assignees only, 20 accounts: 60.0 s against 150.0 s, 0.40× (goal ≤ 0.5×: met); 63 git collab merge calls for 60 closed issues, 1.05 per closed issue (goal ≤ 1.1: met); 0 pull requests replaced (goal 0: met).",
		"- collab-lease, one account, merge lock, merging through Gitea's API holding the merge lock: wall time to the last close against assignees only, 20 accounts: 130.0 s against 150.0 s, 0.87× (goal ≤ 0.5×: not met); 72 Gitea merge API calls for 60 closed issues, 1.20 per closed issue (goal ≤ 1.1: not met); 2 pull requests replaced (goal 0: not met).",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the markdown lacks %q:\n%s", want, md)
		}
	}
	// Replacing a pull request fails a run that merges with the verb.
	verb.Report.Replaced = []string{"#61 by #70"}
	if err := verb.verdict(); err == nil || !strings.Contains(err.Error(), "1 pull requests replaced") {
		t.Errorf("verdict %v", err)
	}
	if err := lock.verdict(); err != nil {
		t.Errorf("the merge-lock run replaces what Gitea does not test: %v", err)
	}
}
