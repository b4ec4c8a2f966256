package main

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// slower is refSpeed with every part f times as long.
func slower(f float64) giteaSpeed {
	s := refSpeed
	for _, d := range []*time.Duration{&s.Push, &s.Create, &s.Ready, &s.Merge} {
		*d = time.Duration(float64(*d) * f)
	}
	return s
}

// The bounds grow with how much slower than the reference Gitea is, and
// with the backlog; past maxScale round three's backlog shrinks instead,
// down to minGitIssues, unless -git-issues was given.
func TestSizeRunsFromGiteasSpeed(t *testing.T) {
	for _, c := range []struct {
		name           string
		speed          giteaSpeed
		issues, git    int
		fixed          bool
		factor         float64
		gitIssues      int
		bound2, bound3 time.Duration
		deadline, hold time.Duration
	}{
		{"not measured", giteaSpeed{}, 200, 60, false, 1, 60, 4 * time.Minute, 6 * time.Minute, 5 * time.Minute, 3 * time.Second},
		{"as fast as the reference", slower(1), 200, 60, false, 1, 60, 4 * time.Minute, 6 * time.Minute, 5 * time.Minute, 3 * time.Second},
		{"faster: never below the fixed bounds", slower(0.5), 200, 60, false, 1, 60, 4 * time.Minute, 6 * time.Minute, 5 * time.Minute, 3 * time.Second},
		{"twice as slow", slower(2), 200, 60, false, 2, 60, 8 * time.Minute, 12 * time.Minute, 10 * time.Minute, 6 * time.Second},
		{"at maxScale the backlog stays", slower(maxScale), 200, 60, false, maxScale, 60, 10 * time.Minute, 15 * time.Minute, 750 * time.Second, 8 * time.Second},
		{"five times as slow: half the backlog", slower(5), 200, 60, false, 5, 30, 20 * time.Minute, 15 * time.Minute, 25 * time.Minute, 15 * time.Second},
		{"twenty times as slow: at least minGitIssues", slower(20), 200, 60, false, 20, minGitIssues, 80 * time.Minute, 40 * time.Minute, 100 * time.Minute, time.Minute},
		{"a backlog asked for is kept", slower(5), 200, 60, true, 5, 60, 20 * time.Minute, 30 * time.Minute, 25 * time.Minute, 15 * time.Second},
		{"a smaller backlog is never cut below itself", slower(20), 200, 10, false, 20, 10, 80 * time.Minute, 20 * time.Minute, 100 * time.Minute, time.Minute},
		{"twice the backlog, twice the bound", slower(1), 400, 120, false, 1, 120, 8 * time.Minute, 12 * time.Minute, 5 * time.Minute, 3 * time.Second},
		{"a small backlog keeps the fixed bound", slower(1), 50, 10, false, 1, 10, 4 * time.Minute, 6 * time.Minute, 5 * time.Minute, 3 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := sizeRuns(c.speed, c.issues, c.git, c.fixed)
			if d := s.Factor - c.factor; d > 1e-9 || d < -1e-9 {
				t.Errorf("factor %.3f, want %.3f", s.Factor, c.factor)
			}
			if s.GitIssues != c.gitIssues || s.AskedGitIssues != c.git {
				t.Errorf("backlog %d (asked %d), want %d (asked %d)", s.GitIssues, s.AskedGitIssues, c.gitIssues, c.git)
			}
			if s.Bound2 != c.bound2 || s.Bound3 != c.bound3 {
				t.Errorf("bounds %s and %s, want %s and %s", s.Bound2, s.Bound3, c.bound2, c.bound3)
			}
			if s.CallTimeout != time.Duration(float64(callTimeout)*c.factor) {
				t.Errorf("call timeout %s, want %s", s.CallTimeout, time.Duration(float64(callTimeout)*c.factor))
			}
			if s.MergeDeadline != c.deadline || s.LockHold != c.hold || s.ZombieWait != time.Duration(float64(zombieWait)*c.factor) {
				t.Errorf("merge deadline %s, lock hold %s, zombie wait %s; want %s, %s and %s", s.MergeDeadline, s.LockHold, s.ZombieWait,
					c.deadline, c.hold, time.Duration(float64(zombieWait)*c.factor))
			}
			if s.Measured != (c.speed.Rounds > 0) {
				t.Errorf("measured %v", s.Measured)
			}
		})
	}
}

// The report says what was measured and what was sized from it.
func TestSizingSaysWhatWasMeasured(t *testing.T) {
	sp := slower(4)
	sp.Ready = 1500 * time.Millisecond
	s := sizeRuns(sp, 200, 60, false)
	text := s.describe()
	for _, want := range []string{
		"medians of 3 rounds",
		"a push of one commit to a new branch " + ms(sp.Push) + ", a pull request from it " + ms(sp.Create) + ", Gitea's test of it until it would merge 1.5 s, the merge " + ms(sp.Merge),
		"one issue's Gitea work (two pushes, a pull request, its test and its merge) " + ms(sp.issueTime()) + ", against " + ms(refSpeed.issueTime()),
		"round three's backlog is cut by as much: " + strconv.Itoa(s.GitIssues) + " issues, not 60",
		"round three's at " + dur(s.Bound3),
		"holds the merge lock for Gitea's test up to " + dur(s.LockHold),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the sizing says\n%s\nwithout %q", text, want)
		}
	}
	if s.GitIssues >= 60 {
		t.Fatalf("a Gitea %.1f× as slow kept the whole backlog", s.Factor)
	}
	if got := sizeRuns(refSpeed, 200, 60, false).describe(); !strings.Contains(got, "(no slower: the fixed bounds hold)") {
		t.Errorf("at the reference's speed: %s", got)
	}
	if got := sizeRuns(giteaSpeed{}, 200, 60, false).describe(); !strings.Contains(got, "not measured") {
		t.Errorf("not measured: %s", got)
	}
	// The summary and the markdown both carry it.
	sum := summary{opts: options{agents: 20, issues: 200, gitIssues: 60, seed: 1}, sizing: s}
	if !strings.Contains(sum.text(), text) || !strings.Contains(sum.markdown(), text) {
		t.Error("the summary or the markdown lacks the sizing")
	}
}

func TestMedian(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var out []time.Duration
		for _, n := range ns {
			out = append(out, time.Duration(n)*time.Millisecond)
		}
		return out
	}
	for _, c := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0}, {ms(5), 5 * time.Millisecond}, {ms(9, 1, 5), 5 * time.Millisecond}, {ms(4, 1, 3, 9), 3500 * time.Microsecond},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		8 * time.Second: "8 s", 6 * time.Minute: "6 min", 750 * time.Second: "12 min 30 s", 1500 * time.Millisecond: "2 s",
	} {
		if got := dur(d); got != want {
			t.Errorf("dur(%s) = %q, want %q", d, got, want)
		}
	}
}
