package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/integration"
	"github.com/collab-lease/collab-lease/plugin/clocktest"
)

// fakeLockIssue is a Gitea with one issue, o/locks#1, whose assignees a
// PATCH replaces, as Gitea's does, each request made as the account its
// token names.
type fakeLockIssue struct {
	mu        sync.Mutex
	assignees []string
	gets      map[string]int // GETs of the issue, by account
}

func (f *fakeLockIssue) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/repos/o/locks/issues/1" {
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.Method {
	case http.MethodGet:
		f.gets[r.Header.Get("Authorization")]++
	case http.MethodPatch:
		var in struct{ Assignees []string }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Assignees == nil {
			http.Error(w, "bad body", http.StatusUnprocessableEntity)
			return
		}
		f.assignees = in.Assignees
	}
	type user struct {
		Login string `json:"login"`
	}
	out := struct {
		Number    int64  `json:"number"`
		State     string `json:"state"`
		Assignees []user `json:"assignees"`
	}{Number: 1, State: "open"}
	for _, l := range f.assignees {
		out.Assignees = append(out.Assignees, user{l})
	}
	_ = json.NewEncoder(w).Encode(out)
}

func (f *fakeLockIssue) state() ([]string, map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.assignees), maps.Clone(f.gets)
}

func lockWork(url, login string) *work {
	return &work{cfg: workConfig{LockRepo: "o/locks", Lock: 1, LockWith: lockAssignee, Login: login},
		api: &integration.API{URL: url, Token: login, HTTP: &http.Client{Timeout: 10 * time.Second}}}
}

// Under two accounts the assignee lock excludes: the second waits, looking
// again, until the first lets go, and letting go leaves others assigned.
func TestAssigneeLockWaitsForAnotherAccount(t *testing.T) {
	f := &fakeLockIssue{gets: map[string]int{}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	alice, bob := lockWork(srv.URL, "alice"), lockWork(srv.URL, "bob")
	if err := alice.lock(ctx, deadline); err != nil {
		t.Fatal(err)
	}
	if who, _ := f.state(); !slices.Equal(who, []string{"alice"}) {
		t.Fatalf("assignees %v after alice took the lock", who)
	}
	got := make(chan error, 1)
	go func() { got <- bob.lock(ctx, deadline) }()
	for wait := time.Now().Add(30 * time.Second); ; {
		if _, gets := f.state(); gets["token bob"] >= 2 {
			break // bob has looked twice, and is waiting
		}
		if time.Now().After(wait) {
			t.Fatal("bob never looked at the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-got:
		t.Fatalf("bob took the lock alice holds (%v)", err)
	default:
	}
	if who, _ := f.state(); !slices.Equal(who, []string{"alice"}) {
		t.Fatalf("assignees %v while bob waits", who)
	}
	if _, ok := alice.unlock(ctx); !ok {
		t.Fatal("alice could not let go")
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("bob never took the lock alice let go")
	}
	if who, _ := f.state(); !slices.Equal(who, []string{"bob"}) {
		t.Errorf("assignees %v after bob took the lock", who)
	}
	if !bob.holdsLock() || alice.holdsLock() {
		t.Errorf("bob holds %v, alice holds %v", bob.holdsLock(), alice.holdsLock())
	}
	if _, ok := alice.unlock(ctx); ok {
		t.Error("alice let go of a lock she no longer holds")
	}
}

// Under one account every agent sees only itself assigned: the lock
// excludes nobody, which is what the one-account baseline measures.
func TestAssigneeLockUnderOneAccountExcludesNobody(t *testing.T) {
	f := &fakeLockIssue{gets: map[string]int{}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	one, two := lockWork(srv.URL, "bot"), lockWork(srv.URL, "bot")
	if err := one.lock(ctx, deadline); err != nil {
		t.Fatal(err)
	}
	if err := two.lock(ctx, deadline); err != nil {
		t.Fatal(err)
	}
	if !one.holdsLock() || !two.holdsLock() {
		t.Error("both agents of bot should hold the lock at once")
	}
}

// Two agents that assigned themselves at once and both let go can leave
// both assigned, and Gitea never lapses an assignee: a lock whose
// assignees have not changed for lockTTL is taken over, and not before.
func TestAssigneeLockTakesOverWhatNobodyLetGo(t *testing.T) {
	f := &fakeLockIssue{gets: map[string]int{}, assignees: []string{"alice", "bob"}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := clocktest.New()
	start := c.Now()
	carol := lockWork(srv.URL, "carol")
	carol.clockNow, carol.clockSleep = c.Now, c.Advance
	if err := carol.lock(context.Background(), start.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if who, _ := f.state(); !slices.Equal(who, []string{"carol"}) {
		t.Fatalf("assignees %v after carol took the lock over", who)
	}
	if waited := c.Now().Sub(start); waited < lockTTL || waited > lockTTL+maxPollMerge {
		t.Errorf("carol took the lock over after %s, want between %s and %s", waited, lockTTL, lockTTL+maxPollMerge)
	}
}

// A lock whose assignees change is held by someone: it is never taken
// over, and the wait ends at its deadline.
func TestAssigneeLockWaitsWhileItsAssigneesChange(t *testing.T) {
	f := &fakeLockIssue{gets: map[string]int{}, assignees: []string{"alice"}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := clocktest.New()
	start := c.Now()
	carol := lockWork(srv.URL, "carol")
	// Each time carol looks again, the lock has gone from alice to bob
	// or back.
	carol.clockNow, carol.clockSleep = c.Now, func(d time.Duration) {
		c.Advance(d)
		f.mu.Lock()
		defer f.mu.Unlock()
		if slices.Equal(f.assignees, []string{"alice"}) {
			f.assignees = []string{"bob"}
		} else {
			f.assignees = []string{"alice"}
		}
	}
	err := carol.lock(context.Background(), start.Add(time.Minute))
	if err == nil || !strings.Contains(err.Error(), "not free in time") {
		t.Fatalf("lock: %v, want not free in time", err)
	}
	if who, _ := f.state(); slices.Contains(who, "carol") {
		t.Errorf("assignees %v: carol took a lock that was in use", who)
	}
}

// fakePulls is a Gitea whose pull request #1 never becomes mergeable (its
// test was lost, as Gitea's in-memory queue can lose one) and whose next
// one merges; o/locks#1 is the merge lock, as fakeLockIssue serves it.
type fakePulls struct {
	lock *fakeLockIssue
	mu   sync.Mutex
	log  []string // "METHOD path" of each pull request request
	// readyAfter, if not 0: #1's test is done after that many reads of
	// it, and then it merges.
	readyAfter, reads int
}

func (f *fakePulls) ready() bool { return f.readyAfter > 0 && f.reads >= f.readyAfter }

func (f *fakePulls) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/api/v1/repos/o/locks/") {
		f.lock.ServeHTTP(w, r)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, r.Method+" "+strings.TrimPrefix(r.URL.Path, "/api/v1/repos/o/r"))
	switch r.Method + " " + r.URL.Path {
	case "GET /api/v1/repos/o/r/pulls/1":
		f.reads++
		_ = json.NewEncoder(w).Encode(map[string]any{"number": 1, "state": "open", "mergeable": f.ready()})
	case "POST /api/v1/repos/o/r/pulls/1/merge":
		if f.ready() {
			w.WriteHeader(http.StatusOK)
			return
		}
		http.Error(w, `{"message":"Please try again later"}`, http.StatusMethodNotAllowed)
	case "PATCH /api/v1/repos/o/r/pulls/1":
		_, _ = w.Write([]byte(`{"number":1,"state":"closed"}`))
	case "POST /api/v1/repos/o/r/pulls":
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"number":2,"head":{"ref":"work/7"}}`))
	case "POST /api/v1/repos/o/r/pulls/2/merge":
		w.WriteHeader(http.StatusOK)
	default:
		http.NotFound(w, r)
	}
}

// pullsWork is bot's work on o/r#7 against fakePulls, on c's clock,
// writing its events to out.
func pullsWork(url string, c *clocktest.Clock, out io.Writer) *work {
	w := lockWork(url, "bot")
	w.cfg.Repo, w.n, w.branch, w.out = "o/r", 7, "work/7", json.NewEncoder(out)
	w.clockNow, w.clockSleep = c.Now, c.Advance
	return w
}

// A pull request that stays "try again later" while its work holds the
// merge lock for lockHold is one Gitea no longer tests: the work lets the
// lock go, replaces the pull request with another of the same branch, and
// merges that one, holding the lock again.
func TestMergeReplacesAPullRequestGiteaNoLongerTests(t *testing.T) {
	f := &fakePulls{lock: &fakeLockIssue{gets: map[string]int{}}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := clocktest.New()
	var events strings.Builder
	w := pullsWork(srv.URL, c, &events)
	start := c.Now()
	if err := w.merge(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	log := slices.Clone(f.log)
	f.mu.Unlock()
	if i := slices.Index(log, "PATCH /pulls/1"); i < 0 || !slices.Equal(log[i:], []string{"PATCH /pulls/1", "POST /pulls", "POST /pulls/2/merge"}) {
		t.Fatalf("requests %q: want #1 closed, another opened and merged", log)
	}
	if held := c.Now().Sub(start); held < lockHold || held > lockHold+maxPollMerge {
		t.Errorf("replaced after %s, want between %s and %s", held, lockHold, lockHold+maxPollMerge)
	}
	var kinds []string
	for _, line := range strings.Split(strings.TrimSpace(events.String()), "\n") {
		var e Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, e.Kind)
		if e.Kind == evReplaced && e.Detail != "#1 by #2" {
			t.Errorf("replaced event says %q", e.Detail)
		}
	}
	if want := []string{evLocked, evUnlocked, evReplaced, evLocked, evMerged, evClosed, evUnlocked}; !slices.Equal(kinds, want) {
		t.Errorf("events %q, want %q", kinds, want)
	}
	if who, _ := f.lock.state(); len(who) != 0 {
		t.Errorf("the lock is still assigned to %v", who)
	}
}

// Holding the lock, a work whose merge is "not yet" reads the pull
// request until Gitea's test is done, and merges then: one more merge
// request, no replacement.
func TestMergeWaitsForTheTestHoldingTheLock(t *testing.T) {
	f := &fakePulls{lock: &fakeLockIssue{gets: map[string]int{}}, readyAfter: 4}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := clocktest.New()
	w := pullsWork(srv.URL, c, io.Discard)
	if err := w.merge(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	want := []string{"POST /pulls/1/merge", "GET /pulls/1", "GET /pulls/1", "GET /pulls/1", "GET /pulls/1", "POST /pulls/1/merge"}
	if !slices.Equal(f.log, want) {
		t.Fatalf("requests %q, want %q", f.log, want)
	}
}

// gitIn runs git in dir and fails the test if it fails.
func gitIn(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, b)
	}
}

// The gate's line, as the gate's hook writes it, reaches the pusher as
// a remote: line, which git pads with blanks; a refusal by another hook
// (Gitea's own, a protected branch) or a push that lost a race is not
// the gate's.
func TestGateRefusal(t *testing.T) {
	line := "collab-lease: work/42 is claimed: fleet/b#42 by bot · fleet08 (token 8); this push carries token 7, which is stale"
	for msg, want := range map[string]string{
		"git push -q origin HEAD:refs/heads/work/42: exit status 1: remote: " + line + "        \nTo http://127.0.0.1:3000/fleet/b.git\n ! [remote rejected] HEAD -> work/42 (pre-receive hook declined)\nerror: failed to push some refs": line,
		"remote: error: Not allowed to push to protected branch work/42\n ! [remote rejected] HEAD -> work/42 (pre-receive hook declined)":                                                                                                 "",
		" ! [rejected] HEAD -> work/42 (fetch first)": "",
		"remote: " + line: "", // no refusal: a line of an allowed push
	} {
		got, ok := gateRefusal(msg)
		if got != want || ok != (want != "") {
			t.Errorf("gateRefusal(%q) = %q, %v; want %q", msg, got, ok, want)
		}
	}
}

// A bare work checks no token before it pushes (there is no git collab
// here: a check would fail), and a push the gate refuses ends it with
// errGated and the gate's line, as a real git push to a repository
// whose pre-receive hook refuses shows it.
func TestBareWorkPushesUncheckedUntilTheGateRefuses(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", os.DevNull)
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	dir := t.TempDir()
	remote, co := filepath.Join(dir, "remote.git"), filepath.Join(dir, "checkout")
	line := "collab-lease: work/7 is claimed: o/r#7 by bot · fleet02 (token 4); this push carries token 3, which is stale"
	gitIn(t, dir, "init", "-q", "--bare", "-b", "main", remote)
	hook := "#!/bin/sh\nif [ -e refuse ]; then echo '" + line + "' >&2; exit 1; fi\n"
	if err := os.WriteFile(filepath.Join(remote, "hooks", "pre-receive"), []byte(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	gitIn(t, dir, "init", "-q", "-b", "main", co)
	for _, args := range [][]string{
		{"config", "user.name", "fleet01"}, {"config", "user.email", "fleet01@fleet.invalid"},
		{"commit", "-q", "--allow-empty", "-m", "First"}, {"remote", "add", "origin", remote},
		{"push", "-q", "origin", "main"}, {"fetch", "-q", "origin"}, {"checkout", "-q", "-b", "work/7"},
	} {
		gitIn(t, co, args...)
	}
	t.Chdir(co)
	var out strings.Builder
	w := &work{cfg: workConfig{Agent: 1, Check: true, Bare: true}, n: 7, branch: "work/7", out: json.NewEncoder(&out)}
	if err := w.commitAndPush(context.Background(), 1); err != nil {
		t.Fatalf("the first push: %v", err)
	}
	if err := os.WriteFile(filepath.Join(remote, "refuse"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.commitAndPush(context.Background(), 2); !errors.Is(err, errGated) {
		t.Fatalf("the second push: %v, want errGated", err)
	}
	var kinds []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var e Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, e.Kind)
		if e.Kind == evGated && e.Detail != line {
			t.Errorf("the gated event says %q, want %q", e.Detail, line)
		}
	}
	if want := []string{evCommitted, evPushed, evCommitted, evGated}; !slices.Equal(kinds, want) {
		t.Errorf("events %q, want %q", kinds, want)
	}
}

// fakeUnstatused is a Gitea where the work's HEAD never gets the
// required status (a zombie's commit that the holder after it pushed on
// top of), issue o/r#7 closes after closeAfter reads of it, and merging
// pull request #1 is refused for the required status.
type fakeUnstatused struct {
	mu         sync.Mutex
	closeAfter int
	reads      map[string]int // requests by "METHOD route"
}

func (f *fakeUnstatused) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	path := strings.TrimPrefix(r.URL.Path, "/api/v1/repos/o/r")
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/statuses/"):
		f.reads["GET statuses"]++
		_, _ = w.Write([]byte(`[]`))
	case r.Method == http.MethodGet && path == "/issues/7":
		f.reads["GET issue"]++
		state := "open"
		if f.reads["GET issue"] > f.closeAfter {
			state = "closed"
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"number": 7, "state": state})
	case r.Method == http.MethodPost && path == "/pulls/1/merge":
		f.reads["POST merge"]++
		http.Error(w, `{"message":"Not all required status checks successful","url":"…"}`, http.StatusMethodNotAllowed)
	default:
		http.NotFound(w, r)
	}
}

// statuslessWork is a work on o/r#7 against f, in a checkout of its own
// (it reads its HEAD), on c's clock, its events in out.
func statuslessWork(t *testing.T, f *fakeUnstatused, c *clocktest.Clock, bare bool, out io.Writer) *work {
	t.Helper()
	t.Setenv("GIT_CONFIG_GLOBAL", os.DevNull)
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	co := t.TempDir()
	gitIn(t, co, "init", "-q", "-b", "work/7")
	gitIn(t, co, "-c", "user.name=fleet01", "-c", "user.email=fleet01@fleet.invalid", "commit", "-q", "--allow-empty", "-m", "Work")
	t.Chdir(co)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	w := &work{cfg: workConfig{Agent: 1, Repo: "o/r", Check: true, Bare: bare}, n: 7, branch: "work/7", out: json.NewEncoder(out),
		api: &integration.API{URL: srv.URL, Token: "bot", HTTP: &http.Client{Timeout: 10 * time.Second}}}
	w.clockNow, w.clockSleep = c.Now, c.Advance
	return w
}

// A bare work whose HEAD never gets the required status stops waiting
// for it once its issue is closed, and tries the merge, which Gitea
// refuses for the status: the work ends with errFenced, not an error.
func TestBareWorkStopsWaitingForTheStatusOnceItsIssueClosed(t *testing.T) {
	f := &fakeUnstatused{closeAfter: 2, reads: map[string]int{}}
	c := clocktest.New()
	var out strings.Builder
	w := statuslessWork(t, f, c, true, &out)
	start := c.Now()
	if err := w.merge(context.Background(), 1); !errors.Is(err, errFenced) {
		t.Fatalf("merge: %v, want errFenced", err)
	}
	// The status is asked after each wait, 250 ms doubling to 2 s; the
	// issue once the wait is 2 s.
	if waited, want := c.Now().Sub(start), 5750*time.Millisecond; waited != want {
		t.Errorf("it waited %s for the status, want %s", waited, want)
	}
	if want := map[string]int{"GET statuses": 6, "GET issue": 3, "POST merge": 1}; !maps.Equal(f.reads, want) {
		t.Errorf("requests %v, want %v", f.reads, want)
	}
	var e Event
	if err := json.Unmarshal([]byte(strings.TrimSpace(out.String())), &e); err != nil || e.Kind != evFenced || !strings.Contains(e.Detail, "required status checks") {
		t.Errorf("events %q: want one %s", out.String(), evFenced)
	}
}

// A work with its defenses on never asks about its issue while it waits
// for the status: it waits until the merge's deadline.
func TestWorkWaitsForTheStatusUntilItsDeadline(t *testing.T) {
	f := &fakeUnstatused{closeAfter: 0, reads: map[string]int{}}
	c := clocktest.New()
	w := statuslessWork(t, f, c, false, io.Discard)
	err := w.merge(context.Background(), 1)
	if err == nil || !strings.Contains(err.Error(), "the required status never said success") {
		t.Fatalf("merge: %v, want the deadline", err)
	}
	if f.reads["GET issue"] != 0 || f.reads["POST merge"] != 0 {
		t.Errorf("requests %v: want statuses only", f.reads)
	}
}

// fakeMerge is git collab merge as a test scripts it: its replies in
// turn, each an exit status and a JSON line; on a busy reply it moves
// the clock on by the --wait it was given, as the sidecar waits that
// long for the turn that did not come.
type fakeMerge struct {
	c       *clocktest.Clock
	replies []integration.SSHResult
	calls   [][]string
}

func (f *fakeMerge) run(_ context.Context, args ...string) (integration.SSHResult, error) {
	f.calls = append(f.calls, args)
	r := f.replies[0]
	f.replies = f.replies[1:]
	if strings.Contains(r.Stdout, `"busy"`) {
		if i := slices.Index(args, "--wait"); i >= 0 {
			d, err := time.ParseDuration(args[i+1])
			if err != nil {
				return r, err
			}
			f.c.Advance(d)
		}
	}
	return r, nil
}

func reply(code int, line string) integration.SSHResult {
	return integration.SSHResult{Code: code, Stdout: line + "\n"}
}

// verbWork is bot's work on o/r#7 with token 3, merging with git collab
// merge as f scripts it, on c's clock, writing its events to out; its
// agent's checks are off (there is no sidecar here to check with).
func verbWork(f *fakeMerge, out io.Writer) *work {
	w := &work{cfg: workConfig{Agent: 2, Repo: "o/r", MergeVerb: true}, n: 7, token: "3", branch: "work/7", out: json.NewEncoder(out)}
	w.clockNow, w.clockSleep, w.runMerge = f.c.Now, f.c.Advance, f.run
	return w
}

// events reads a work's events.
func events(t *testing.T, out string) []Event {
	t.Helper()
	var es []Event
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var e Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("event %q: %v", l, err)
		}
		es = append(es, e)
	}
	return es
}

func kindsOf(es []Event) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Kind+":"+e.Detail)
	}
	return out
}

// With git collab merge, one call merges: no lock, no request to Gitea
// of its own; the call carries the pull request, the wait up to the
// merge's deadline and the claim's token, and the merge closes the issue.
func TestMergeWithTheVerbTakesOneCall(t *testing.T) {
	f := &fakeMerge{c: clocktest.New(), replies: []integration.SSHResult{
		reply(0, `{"status":"merged","repo":"o/r","pull":12,"sha":"abc","token":3}`)}}
	var out strings.Builder
	if err := verbWork(f, &out).merge(context.Background(), 12); err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"merge", "12", "--wait", "5m0s", "--json", "--token", "3"}}; !reflect.DeepEqual(f.calls, want) {
		t.Errorf("calls %q, want %q", f.calls, want)
	}
	es := events(t, out.String())
	if want := []string{"mergecall:merged", "merged:12", "closed:"}; !slices.Equal(kindsOf(es), want) {
		t.Errorf("events %q, want %q", kindsOf(es), want)
	}
	r := summarize(7, 3, time.Minute, es)
	if r.MergeCalls != 1 || r.MergeReplies["merged"] != 1 || r.Closed != 1 || len(r.Replaced) != 0 || r.Locks != 0 {
		t.Errorf("report: %d merge calls %v, %d closed, %d replaced, %d locks", r.MergeCalls, r.MergeReplies, r.Closed, len(r.Replaced), r.Locks)
	}
}

// A claim lost before the merge's turn: the sidecar says stale (or
// not_holder), and the work lands nothing more.
func TestMergeWithTheVerbStopsWhenStale(t *testing.T) {
	for _, status := range []string{"stale", "not_holder"} {
		f := &fakeMerge{c: clocktest.New(), replies: []integration.SSHResult{reply(4, `{"status":"`+status+`","repo":"o/r","pull":12}`)}}
		var out strings.Builder
		if err := verbWork(f, &out).merge(context.Background(), 12); !errors.Is(err, errStale) {
			t.Fatalf("%s: merge %v, want errStale", status, err)
		}
		if want := []string{"mergecall:" + status, "mergestale:" + status}; !slices.Equal(kindsOf(events(t, out.String())), want) {
			t.Errorf("%s: events %q, want %q", status, kindsOf(events(t, out.String())), want)
		}
	}
}

// Exit 75 (Gitea or the sidecar unreachable) is tried again, and so are
// Gitea's "try again later" and a turn that ran out before Gitea merged;
// each call counts.
func TestMergeWithTheVerbTriesAgain(t *testing.T) {
	f := &fakeMerge{c: clocktest.New(), replies: []integration.SSHResult{
		{Code: 75, Stderr: "git-collab: forge unavailable, try again\n"},
		reply(4, `{"status":"refused","repo":"o/r","pull":12,"reason":"Please try again later"}`),
		reply(4, `{"status":"refused","repo":"o/r","pull":12,"reason":"Gitea did not merge the pull request while its merge ticket lasted (until 2026-12-07T18:47:39Z)"}`),
		reply(0, `{"status":"merged","repo":"o/r","pull":12,"sha":"abc","token":3}`)}}
	var out strings.Builder
	w := verbWork(f, &out)
	start := f.c.Now()
	if err := w.merge(context.Background(), 12); err != nil {
		t.Fatal(err)
	}
	if want := []string{"mergecall:exit 75", "mergecall:refused", "mergecall:refused", "mergecall:merged", "merged:12", "closed:"}; !slices.Equal(kindsOf(events(t, out.String())), want) {
		t.Errorf("events %q, want %q", kindsOf(events(t, out.String())), want)
	}
	if waited := f.c.Now().Sub(start); waited != 100*time.Millisecond+3*pollMerge {
		t.Errorf("waited %s between the calls, want %s", waited, 100*time.Millisecond+3*pollMerge)
	}
	if len(f.calls) != 4 || f.calls[3][3] != "4m59s" {
		t.Errorf("calls %q: the last one waits for what is left of the deadline", f.calls)
	}
}

// A turn that never comes within the merge's deadline (busy), and a
// refusal that is not Gitea's "not yet" (a conflict), end the work with
// an error; a refusal for the required status is the fence's.
func TestMergeWithTheVerbGivesUp(t *testing.T) {
	f := &fakeMerge{c: clocktest.New(), replies: []integration.SSHResult{reply(4, `{"status":"busy","repo":"o/r","pull":12,"ahead":3}`)}}
	var out strings.Builder
	err := verbWork(f, &out).merge(context.Background(), 12)
	if err == nil || !strings.Contains(err.Error(), "not merged within 5m0s: git collab merge said busy") {
		t.Errorf("busy: %v", err)
	}
	f = &fakeMerge{c: clocktest.New(), replies: []integration.SSHResult{reply(4, `{"status":"refused","repo":"o/r","pull":12,"reason":"Merge conflict"}`)}}
	if err := verbWork(f, io.Discard).merge(context.Background(), 12); err == nil || !strings.Contains(err.Error(), "refused: Merge conflict") {
		t.Errorf("a conflict: %v", err)
	}
	f = &fakeMerge{c: clocktest.New(), replies: []integration.SSHResult{reply(4, `{"status":"refused","repo":"o/r","pull":12,"reason":"Not all required status checks successful"}`)}}
	if err := verbWork(f, io.Discard).merge(context.Background(), 12); !errors.Is(err, errFenced) {
		t.Errorf("the required status: %v", err)
	}
	f = &fakeMerge{c: clocktest.New(), replies: []integration.SSHResult{reply(4, `{"status":"merged","repo":"o/r","pull":12}`)}}
	if err := verbWork(f, io.Discard).merge(context.Background(), 12); err == nil || !strings.Contains(err.Error(), "exit 4 with the reply") {
		t.Errorf("a reply at odds with its exit status: %v", err)
	}
}

// git collab run stops the work (SIGTERM) when the merge's end of the
// claim reaches it, which can be before the merge's reply reaches the
// work: the work's stop waits for the reply and its events first.
func TestAStopWaitsForTheMergesReply(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var out strings.Builder
	w := &work{cfg: workConfig{Agent: 2, MergeVerb: true}, n: 7, token: "3", out: json.NewEncoder(&out)}
	w.runMerge = func(context.Context, ...string) (integration.SSHResult, error) {
		close(started)
		<-release
		return reply(0, `{"status":"merged","repo":"o/r","pull":12,"sha":"abc","token":3}`), nil
	}
	merged := make(chan error, 1)
	go func() {
		_, err := w.collabMerge(context.Background(), 12, time.Minute)
		merged <- err
	}()
	<-started
	stopped := make(chan struct{})
	go func() { // as the SIGTERM handler does
		w.awaitMerge(time.Hour)
		w.mu.Lock()
		w.emitLocked(Event{Kind: evTerminated})
		w.mu.Unlock()
		close(stopped)
	}()
	close(release)
	<-stopped
	if err := <-merged; err != nil {
		t.Fatal(err)
	}
	if want := []string{"mergecall:merged", "merged:12", "closed:", "terminated:"}; !slices.Equal(kindsOf(events(t, out.String())), want) {
		t.Errorf("events %q, want %q", kindsOf(events(t, out.String())), want)
	}
}

// A request to open the pull request that gets no answer (Gitea, busy,
// may have opened it all the same) is sent again: Gitea answers that it
// exists, and the work finds it.
func TestPullRequestAskedAgainAfterNoAnswer(t *testing.T) {
	var mu sync.Mutex
	var log []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		log = append(log, r.Method+" "+strings.TrimPrefix(r.URL.Path, "/api/v1/repos/o/r"))
		n := len(log)
		mu.Unlock()
		switch {
		case r.Method == http.MethodPost && n == 1:
			// Created, but the answer never comes: the connection drops.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		case r.Method == http.MethodPost:
			http.Error(w, `{"message":"pull request already exists"}`, http.StatusConflict)
		default:
			_, _ = w.Write([]byte(`[{"number":9,"state":"open","head":{"ref":"work/7"}}]`))
		}
	}))
	defer srv.Close()
	var out strings.Builder
	w := &work{cfg: workConfig{Agent: 1, Repo: "o/r"}, n: 7, branch: "work/7", out: json.NewEncoder(&out),
		api: &integration.API{URL: srv.URL, Token: "bot", HTTP: &http.Client{Timeout: 10 * time.Second}}}
	n, err := w.pullRequest(context.Background())
	if err != nil || n != 9 {
		t.Fatalf("pull request #%d, %v; want #9", n, err)
	}
	if want := []string{"POST /pulls", "POST /pulls", "GET /pulls"}; !slices.Equal(log, want) {
		t.Errorf("requests %q, want %q", log, want)
	}
	if es := events(t, out.String()); len(es) != 1 || es[0].Kind != evRetry {
		t.Errorf("events %q, want one retry", out.String())
	}
}
