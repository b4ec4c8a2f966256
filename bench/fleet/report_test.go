package main

import (
	"reflect"
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
		ZombieStops: []string{evStale, ""}}
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
