package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/collab-lease/collab-lease/integration"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/fence"
)

// The work of round three: what an agent does to one issue, as a process
// of its own (this program, re-run with workCommand) so that `git collab
// run` can start it, stop it when the claim is lost, and the coordinator
// can freeze it. It fetches, commits to the branch work/<issue>, pushes,
// opens a pull request "Fixes #<issue>", works for its work time, commits
// and pushes again, and merges through Gitea's API, which closes the
// issue. Under a claim (FLEET_WORK's Check) it checks its token with `git
// collab check` before every push and the merge, as a careful agent does;
// with the agent's own defenses off (Bare) it checks nothing and is not
// stopped when the claim is lost (detach.go).

// workCommand, as the first argument, makes this program one piece of
// work, configured by the JSON in the environment variable workEnv.
const (
	workCommand = "work"
	workEnv     = "FLEET_WORK"
)

// workConfig is what the agent tells its work.
type workConfig struct {
	Agent int
	Seed  int64
	Repo  string // owner/name
	API   string // Gitea's base URL, through the counting proxy
	Token string // the agent's account's Gitea token
	// Issue is the issue to work on; 0 under `git collab run`, which
	// says it in COLLAB_ISSUE.
	Issue int64
	// Check: check COLLAB_TOKEN before every push and the merge, and
	// merge only once the required status says success.
	Check bool
	// Bare switches the agent's own defenses off, for the runs that show
	// what the forge itself refuses: no git collab check before a push
	// or the merge, whatever Check says (the wait for the required
	// status stays: Gitea refuses the merge before it anyway), and the
	// work goes on when git collab run stops it for a lost claim
	// (detach.go).
	Bare bool
	// The merge lock: the work holds issue Lock of the repository
	// LockRepo while it merges, taken the way its agent claims issues
	// (LockWith: lockClaim or lockAssignee); 0 none. Login is the
	// agent's account, the assignee it sets.
	Lock     int64
	LockRepo string
	LockWith string
	Login    string
	// MergeDeadline, LockHold and CallTimeout (one API request) are
	// mergeDeadline, lockHold and callTimeout sized from Gitea's speed
	// (sizing.go); 0 is the constant.
	MergeDeadline, LockHold, CallTimeout time.Duration
	// MergeVerb: merge with `git collab merge` (the sidecar takes the
	// turn to merge into main, merges as the holder, and ends the claim)
	// instead of holding the merge lock and asking Gitea's API.
	MergeVerb bool
}

// The kinds of Event only round three's work emits.
const (
	evCommitted  = "committed"  // it made a commit (Detail: its hash) that it means to push
	evPushed     = "pushed"     // a push was accepted (Commits: what it added to the branch; Detail: the work's PID)
	evRefused    = "refused"    // Gitea refused a push or a merge (Detail: what it said)
	evGated      = "gated"      // Gitea's gate refused a push (Detail: the gate's line)
	evFenced     = "fenced"     // Gitea refused a merge: the required status does not say success (Detail: what it said)
	evMerged     = "merged"     // its merge of the pull request was accepted (Detail: the pull request)
	evTerminated = "terminated" // it was stopped by SIGTERM (git collab run: the claim was lost)
	evWorkCPU    = "workcpu"    // its last line: its CPU time (Took) and its git collab check's (CPU)
	evSkipped    = "skipped"    // the issue was closed already: it did nothing
	evLocked     = "locked"     // it took the merge lock (Took: how long it waited)
	evUnlocked   = "unlocked"   // it let the merge lock go (Took: how long it held it)
	evReplaced   = "replaced"   // it replaced a pull request Gitea no longer tested (Detail: "#old by #new")
	evMergeCall  = "mergecall"  // it ran git collab merge (Detail: the reply's status, or "exit N"; Took: how long)
	evMergeStale = "mergestale" // git collab merge refused: the token is stale, or the work holds no claim (Detail: the status)
)

// errStale is a check that said the token is stale: the work stops and
// lands nothing more.
var errStale = errors.New("the claim's token is stale")

// errGated is a push Gitea's gate refused (serve --gate): the token the
// work pushes with is not the claim's current one, so it lands nothing
// more.
var errGated = errors.New("the gate in Gitea refused the push")

// errFenced is a merge Gitea refused because the required status of
// fenced merges does not say success: the work merges nothing.
var errFenced = errors.New("the required status refused the merge")

// gitWorkTime is how long the work on issue n takes between its two
// pushes: 1–8 s, from the seed and the issue alone.
func gitWorkTime(seed, n int64) time.Duration {
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(n)+gitWorkStream))
	return time.Second + time.Duration(rng.Int64N(int64(7*time.Second)+1))
}

// gitWorkStream keeps the work times of round three apart from round two's.
const gitWorkStream = 1 << 61

type work struct {
	cfg   workConfig
	n     int64
	token string // COLLAB_TOKEN, "" without a claim
	api   *integration.API
	// mu makes an outcome and its event one step: a SIGTERM waits for
	// the event of a push or merge already accepted.
	mu       sync.Mutex
	out      *json.Encoder
	checkCPU time.Duration // guarded by mu
	branch   string
	// lockMu makes letting the merge lock go one step at a time: the
	// SIGTERM handler lets go of a lock the work still holds, after
	// whatever letting go was under way when the signal came.
	lockMu   sync.Mutex
	lockedAt time.Time // when it took the merge lock; zero: not held
	// A test's clock (nil: the real one): sleeping moves it on.
	clockNow   func() time.Time
	clockSleep func(time.Duration)

	// The git collab merge in flight, if any (mergeMu guards them):
	// mergeDone is closed once its reply has been read and its events
	// written, mergeProc is its process, and stopping says that the
	// SIGTERM handler gave up waiting for it and killed it.
	mergeMu   sync.Mutex
	mergeDone chan struct{}
	mergeProc *os.Process
	stopping  bool
	// runMerge runs git collab with args for a merge (nil: the real
	// one, a process of its own); tests set it.
	runMerge func(ctx context.Context, args ...string) (integration.SSHResult, error)
}

// workMain runs one piece of work and returns its exit status: 0 done,
// 4 stopped by a stale token, 1 failed.
func workMain(stdout io.Writer) int {
	var cfg workConfig
	if err := json.Unmarshal([]byte(os.Getenv(workEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fleet work: read "+workEnv+":", err)
		return 2
	}
	if cfg.Bare && os.Getenv(detachedEnv) == "" {
		return runDetached()
	}
	w := &work{cfg: cfg, n: cfg.Issue, token: os.Getenv("COLLAB_TOKEN"), out: json.NewEncoder(stdout),
		api: &integration.API{URL: cfg.API, Token: cfg.Token, HTTP: &http.Client{Timeout: cmp.Or(cfg.CallTimeout, callTimeout)}}}
	if w.n == 0 {
		n, err := strconv.ParseInt(os.Getenv("COLLAB_ISSUE"), 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleet work: no issue: COLLAB_ISSUE", err)
			return 2
		}
		w.n = n
	}
	w.branch = fmt.Sprintf("work/%d", w.n)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() {
		<-term
		// A git collab merge that ended the claim makes run stop the
		// work while the merge's reply is on its way: its events first.
		w.awaitMerge(mergeGrace)
		w.mu.Lock() // never released: the process ends here
		w.emitLocked(Event{Kind: evTerminated, Issue: w.n})
		// The merge that closed the issue ends the claim, and with it
		// the work, a moment after it: often while the work lets the
		// merge lock go, whose git collab the same signal stopped.
		if held, ok := w.unlock(context.Background()); ok {
			w.emitLocked(Event{Kind: evUnlocked, Issue: w.n, Took: held})
		}
		// Its CPU is the work's too: git collab run stops most pieces
		// of work this way (the merge's close ends the claim a moment
		// before the work ends), and what a work does not report the
		// report counts as claiming.
		w.emitCPU()
		os.Exit(143)
	}()
	err := w.run(context.Background())
	if killedBy(err, syscall.SIGTERM) {
		select {} // the whole group was told to stop: the handler ends the process
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.emitCPU()
	switch {
	case errors.Is(err, errStale), errors.Is(err, errGated), errors.Is(err, errFenced):
		return contract.ExitConflict
	case err != nil:
		w.emitLocked(Event{Kind: evError, Issue: w.n, Detail: err.Error()})
		return 1
	}
	return 0
}

// emitCPU reports the work's CPU time so far, its checks' apart, as its
// last event; w.mu is held.
func (w *work) emitCPU() {
	w.emitLocked(Event{Kind: evWorkCPU, Issue: w.n, Took: selfCPU() - w.checkCPU, CPU: w.checkCPU})
}

func (w *work) emit(e Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.emitLocked(e)
}

func (w *work) emitLocked(e Event) {
	e.Agent = w.cfg.Agent
	if e.Issue == 0 {
		e.Issue = w.n
	}
	if tok, err := strconv.ParseInt(w.token, 10, 64); err == nil {
		e.Token = tok
	}
	_ = w.out.Encode(e)
}

func (w *work) run(ctx context.Context) error {
	w.emit(Event{Kind: evClaimed, Detail: strconv.Itoa(os.Getpid())})
	// Claimed between the merge that closed it and the webhook that
	// tells the sidecar: nothing to do.
	if open, err := w.issueOpen(ctx); err != nil || !open {
		if err == nil {
			w.emit(Event{Kind: evSkipped})
		}
		return err
	}
	w.emit(Event{Kind: evWork})
	start := time.Now()
	if err := w.startBranch(ctx); err != nil {
		return err
	}
	if err := w.commitAndPush(ctx, 1); err != nil {
		return err
	}
	pr, err := w.pullRequest(ctx)
	if err != nil {
		return err
	}
	time.Sleep(gitWorkTime(w.cfg.Seed, w.n))
	if err := w.commitAndPush(ctx, 2); err != nil {
		return err
	}
	w.emit(Event{Kind: evWorked, Took: time.Since(start)})
	return w.merge(ctx, pr)
}

// issueOpen says whether the work's issue is still open in Gitea.
func (w *work) issueOpen(ctx context.Context) (bool, error) {
	var is giteaIssue
	if err := w.api.Do(ctx, "GET", fmt.Sprintf("/repos/%s/issues/%d", w.cfg.Repo, w.n), nil, &is); err != nil {
		return false, err
	}
	return is.State == "open", nil
}

// git runs git in the checkout (the working directory) and returns its
// output, trimmed.
func (w *work) git(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	var out, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// startBranch fetches and checks out work/<n>: where someone left it (a
// holder before this one), else new from main.
func (w *work) startBranch(ctx context.Context) error {
	if _, err := w.git(ctx, "fetch", "-q", "--prune", "origin"); err != nil {
		return err
	}
	base := "origin/main"
	if _, err := w.git(ctx, "rev-parse", "-q", "--verify", "refs/remotes/origin/"+w.branch); err == nil {
		base = "origin/" + w.branch
	}
	_, err := w.git(ctx, "checkout", "-q", "-f", "-B", w.branch, base)
	return err
}

// commitAndPush commits part of the work and pushes the branch; when the
// branch moved meanwhile (someone else pushed), it rebases onto it and
// pushes again.
func (w *work) commitAndPush(ctx context.Context, part int) error {
	file := filepath.Join("work", strconv.FormatInt(w.n, 10), fmt.Sprintf("%s-%d-%d.txt", agentLogin(w.cfg.Agent), os.Getpid(), part))
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(file, fmt.Appendf(nil, "part %d of #%d by %s\n", part, w.n, agentLogin(w.cfg.Agent)), 0o644); err != nil {
		return err
	}
	if _, err := w.git(ctx, "add", file); err != nil {
		return err
	}
	if _, err := w.git(ctx, "commit", "-q", "-m", fmt.Sprintf("Work on #%d, part %d", w.n, part)); err != nil {
		return err
	}
	head, err := w.git(ctx, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	w.emit(Event{Kind: evCommitted, Detail: head})
	for attempt := 1; ; attempt++ {
		if err := w.check(ctx); err != nil {
			return err
		}
		base := "origin/main"
		if _, err := w.git(ctx, "rev-parse", "-q", "--verify", "refs/remotes/origin/"+w.branch); err == nil {
			base = "origin/" + w.branch
		}
		added, err := w.git(ctx, "rev-list", "HEAD", "^"+base)
		if err != nil {
			return err
		}
		w.mu.Lock()
		_, err = w.git(ctx, "push", "-q", "origin", "HEAD:refs/heads/"+w.branch)
		if err == nil {
			w.emitLocked(Event{Kind: evPushed, Commits: strings.Fields(added), Detail: strconv.Itoa(os.Getpid())})
		}
		w.mu.Unlock()
		if err == nil {
			return nil
		}
		if line, ok := gateRefusal(err.Error()); ok {
			w.emit(Event{Kind: evGated, Detail: line})
			return errGated
		}
		if !branchMoved(err.Error()) || attempt == maxAttempts {
			w.emit(Event{Kind: evRefused, Detail: lastLine(err.Error())})
			return err
		}
		// The branch moved: take what is there, and put this work on top.
		if _, err := w.git(ctx, "fetch", "-q", "origin", w.branch); err != nil {
			return err
		}
		if _, err := w.git(ctx, "rebase", "-q", "origin/"+w.branch); err != nil {
			return err
		}
	}
}

// branchMoved says whether git push's error is the branch having moved
// since the fetch: behind it ("fetch first", "non-fast-forward"), or
// another push updating it at the same instant ("cannot lock ref").
func branchMoved(msg string) bool {
	for _, s := range []string{"fetch first", "non-fast-forward", "cannot lock ref"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// gateRefusal says whether git push's error is Gitea's gate refusing
// the push, and returns the gate's line ("collab-lease: work/42 is
// claimed: … which is stale"). The gate's hook prints it on stderr,
// which reaches the pusher as a "remote:" line (git pads it with blanks).
func gateRefusal(msg string) (string, bool) {
	if !strings.Contains(msg, "pre-receive hook declined") {
		return "", false
	}
	for _, l := range strings.Split(msg, "\n") {
		if i := strings.Index(l, "remote: "+contract.GatePushOption+": "); i >= 0 {
			return strings.TrimSpace(l[i+len("remote: "):]), true
		}
	}
	return "", false
}

// check asks the sidecar whether COLLAB_TOKEN is still the live tenure's,
// when the work runs under a claim and its agent's defenses are on.
func (w *work) check(ctx context.Context) error {
	if !w.cfg.Check || w.cfg.Bare {
		return nil
	}
	cmd := exec.CommandContext(ctx, "git", "collab", "check")
	for attempt := 1; ; attempt++ {
		r, err := integration.RunCommand(cmd)
		if cmd.ProcessState != nil {
			w.mu.Lock()
			w.checkCPU += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
			w.mu.Unlock()
		}
		if err != nil {
			return err
		}
		switch {
		case r.Code == contract.ExitOK:
			return nil
		case r.Code == contract.ExitConflict:
			w.emit(Event{Kind: evStale})
			return errStale
		case (r.Code == contract.ExitTempFail || r.Code == exitSSH) && attempt < maxAttempts:
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
			cmd = exec.CommandContext(ctx, "git", "collab", "check")
		default:
			return fmt.Errorf("git collab check: exit %d: %s", r.Code, strings.TrimSpace(r.Stderr))
		}
	}
}

// giteaPull is what the work reads of a pull request.
type giteaPull struct {
	Number    int64  `json:"number"`
	State     string `json:"state"`
	Mergeable bool   `json:"mergeable"`
	Merged    bool   `json:"merged"`
	Head      struct {
		Ref string `json:"ref"`
	} `json:"head"`
}

// pullRequest opens the pull request "Fixes #n" from work/<n>, or finds
// the open one a holder before this one opened.
//
// A request that got no answer in time (Gitea creates a pull request
// slowly on a busy machine, and may have created it all the same) is
// sent again, up to pullAttempts in all: Gitea then answers that it
// exists, or creates it.
func (w *work) pullRequest(ctx context.Context) (int64, error) {
	title := fmt.Sprintf("Fixes #%d", w.n)
	for attempt := 1; ; attempt++ {
		var pr giteaPull
		err := w.api.Do(ctx, "POST", "/repos/"+w.cfg.Repo+"/pulls", map[string]any{
			"head": w.branch, "base": "main", "title": title, "body": title,
		}, &pr)
		var apiErr *integration.APIError
		switch {
		case errors.As(err, &apiErr) && apiErr.Status == http.StatusConflict:
			return w.openPull(ctx)
		case err != nil && apiErr == nil && ctx.Err() == nil && attempt < pullAttempts:
			w.emit(Event{Kind: evRetry, Detail: "POST /repos/{o}/{r}/pulls: " + err.Error()})
			continue
		}
		return pr.Number, err
	}
}

// pullAttempts bounds the requests to open one pull request that get no
// answer.
const pullAttempts = 3

// openPull finds the open pull request from work/<n>.
func (w *work) openPull(ctx context.Context) (int64, error) {
	for page := 1; ; page++ {
		var pulls []giteaPull
		if err := w.api.Do(ctx, "GET", fmt.Sprintf("/repos/%s/pulls?state=open&limit=%d&page=%d", w.cfg.Repo, pageSize, page), nil, &pulls); err != nil {
			return 0, err
		}
		for _, p := range pulls {
			if p.Head.Ref == w.branch {
				return p.Number, nil
			}
		}
		if len(pulls) < pageSize {
			return 0, fmt.Errorf("no open pull request from %s, although creating one said it exists", w.branch)
		}
	}
}

// awaitMergeable reads pull request pr every pollMerge until Gitea says
// it is mergeable (or merged, or closed: the merge's answer will say), for
// at most budget; false when the budget ran out first.
func (w *work) awaitMergeable(ctx context.Context, pr int64, budget time.Duration) (bool, error) {
	end := w.now().Add(budget)
	for w.now().Before(end) {
		w.sleep(pollMerge)
		var p giteaPull
		if err := w.api.Do(ctx, "GET", fmt.Sprintf("/repos/%s/pulls/%d", w.cfg.Repo, pr), nil, &p); err != nil {
			return false, err
		}
		if p.Mergeable || p.Merged || p.State != "open" {
			return true, nil
		}
	}
	return false, nil
}

// replacePull closes pull request pr and opens another from the same
// branch. Gitea's in-memory queue of mergeability tests (the fleet's
// Gitea runs its queues in memory) can lose a pull request for good: its
// PushItem (modules/queue/base_channel.go, Gitea 1.26) hands an item to a
// worker and only then adds it to its set of queued items, so a worker
// that takes it at once leaves it in the set, and every later test of that
// pull request is dropped as already queued. Its merge then answers "try
// again later" whatever is pushed, until the pull request is replaced.
func (w *work) replacePull(ctx context.Context, pr int64) (int64, error) {
	path := fmt.Sprintf("/repos/%s/pulls/%d", w.cfg.Repo, pr)
	if err := w.api.Do(ctx, "PATCH", path, map[string]any{"state": "closed"}, nil); err != nil {
		return 0, fmt.Errorf("close pull request #%d, which Gitea no longer tests: %w", pr, err)
	}
	next, err := w.pullRequest(ctx)
	if err != nil {
		return 0, err
	}
	w.emit(Event{Kind: evReplaced, Detail: fmt.Sprintf("#%d by #%d", pr, next)})
	return next, nil
}

// mergeDeadline bounds the wait for a pull request to become mergeable
// (its required status posted, Gitea's test of its merge done). Gitea
// tests the open pull requests again after every merge into main, and
// under twenty agents one can wait minutes for its turn; work that gave
// up would leave its issue to be worked again.
const mergeDeadline = 5 * time.Minute

// merge merges pull request pr: under a claim once the required status
// says success and the token checks out; if someone merged it first, the
// work's later commits go in a pull request of their own.
//
// It never polls the pull request itself: Gitea 1.26 answers a GET of one
// pull request that is being tested for mergeability by queueing the test
// again, and drops the result of a test whose pull request is queued
// again, so twenty agents polling keep every pull request "checking".
// The merge's own answer says what the pull request's state is ("Please
// try again later" while it is tested; "already merged"; 404 once closed).
func (w *work) merge(ctx context.Context, pr int64) error {
	deadline := w.now().Add(w.mergeDeadline())
	wait := pollMerge
	again := func(why string) error {
		if w.now().After(deadline) {
			return fmt.Errorf("pull request #%d: not merged within %s: %s", pr, w.mergeDeadline(), why)
		}
		w.sleep(wait)
		wait = min(2*wait, maxPollMerge)
		return nil
	}
	// Under a claim, wait for the required status on the head before
	// checking the token and merging: Gitea refuses the merge until then.
	awaitStatus := func() error {
		if !w.cfg.Check {
			return nil
		}
		head, err := w.git(ctx, "rev-parse", "HEAD")
		if err != nil {
			return err
		}
		for !w.statusSuccess(ctx, head) {
			if w.cfg.Bare && wait == maxPollMerge {
				// With its agent's defenses off, a zombie's work shares
				// its branch with the holder that took its claim over,
				// and a commit pushed on top of its HEAD leaves HEAD
				// without the status for good. Once that holder's merge
				// has closed the issue, the merge's answer says what is
				// left to do. (Asked only once the status is late: it
				// comes within the first waits as a rule.)
				open, err := w.issueOpen(ctx)
				if err != nil {
					return err
				}
				if !open {
					break
				}
			}
			if err := again("the required status never said success"); err != nil {
				return err
			}
		}
		wait = pollMerge
		return nil
	}
	if err := awaitStatus(); err != nil {
		return err
	}
	if w.cfg.MergeVerb {
		return w.mergeThroughSidecar(ctx, pr, deadline)
	}
	if w.cfg.Lock != 0 {
		defer w.letGo(ctx)
	}
	for {
		if w.cfg.Lock != 0 && !w.holdsLock() {
			if err := w.takeLock(ctx, deadline); err != nil {
				w.emit(Event{Kind: evRefused, Detail: err.Error()})
				return err
			}
		}
		if err := w.check(ctx); err != nil {
			return err
		}
		path := fmt.Sprintf("/repos/%s/pulls/%d", w.cfg.Repo, pr)
		w.mu.Lock()
		err := w.api.Do(ctx, "POST", path+"/merge", map[string]any{"Do": "merge"}, nil)
		if err == nil {
			w.emitLocked(Event{Kind: evMerged, Detail: strconv.FormatInt(pr, 10)})
			w.emitLocked(Event{Kind: evClosed})
		}
		w.mu.Unlock()
		if err == nil {
			return nil
		}
		var apiErr *integration.APIError
		switch {
		case !errors.As(err, &apiErr):
			return err
		case apiErr.Status == http.StatusMethodNotAllowed && strings.Contains(apiErr.Body, "already merged"):
			// Merged by someone else; what this work pushed since needs
			// a pull request of its own, unless it is all in main already
			// (Gitea opens a pull request of a branch main holds, and
			// answers its merge "try again later" for good).
			if in, err := w.inMain(ctx); err != nil || in {
				if in {
					w.emit(Event{Kind: evClosed, Detail: "merged by another"})
				}
				return err
			}
			next, err := w.pullRequest(ctx)
			if errors.As(err, &apiErr) && apiErr.Status == http.StatusUnprocessableEntity {
				w.emit(Event{Kind: evClosed, Detail: "merged by another"})
				return nil
			}
			if err != nil {
				return err
			}
			pr, wait = next, pollMerge
		case apiErr.Status == http.StatusNotFound:
			return fmt.Errorf("pull request #%d was closed unmerged", pr)
		case apiErr.Status == http.StatusMethodNotAllowed && strings.Contains(apiErr.Body, "required status checks"):
			// Fenced merges: the status says the pull request's claim is
			// not its author's (the claim is lost, or its issue closed).
			w.emit(Event{Kind: evFenced, Detail: lastLine(apiErr.Body)})
			return errFenced
		case apiErr.Status == http.StatusMethodNotAllowed && strings.Contains(apiErr.Body, "try again later") ||
			apiErr.Status == http.StatusConflict:
			// Being tested (a push, or main moved), or main moved by
			// another merge at that instant. Holding the merge lock,
			// the test is the one the last merge began, and the answer
			// costs Gitea a read: look again soon; but a pull request
			// that will not merge must not keep the others waiting, so
			// past lockHold the lock goes to them and this work queues
			// again.
			if held, ok := w.heldFor(); ok {
				wait = pollMerge
				// Wait for the test reading the pull request, a read
				// for Gitea, where another try would be a check and a
				// merge Gitea refuses.
				ready, err := w.awaitMergeable(ctx, pr, w.lockHold()-held)
				if err != nil {
					return err
				}
				if !ready {
					// Gitea tests it late, or has stopped testing it
					// (see replacePull): let the others merge, and
					// queue again with a pull request of the same
					// branch, whose test runs meanwhile.
					w.letGo(ctx)
					next, err := w.replacePull(ctx, pr)
					if err != nil {
						return err
					}
					pr = next
					continue
				}
			}
			if err := again(err.Error()); err != nil {
				w.emit(Event{Kind: evRefused, Detail: err.Error()})
				return err
			}
		default:
			w.emit(Event{Kind: evRefused, Detail: err.Error()})
			return err
		}
	}
}

// mergeDeadline is the work's bound on the wait for its merge, sized
// from Gitea's speed.
func (w *work) mergeDeadline() time.Duration { return cmp.Or(w.cfg.MergeDeadline, mergeDeadline) }

// lockHold is how long the work holds the merge lock while Gitea answers
// its merge "not yet", sized from Gitea's speed.
func (w *work) lockHold() time.Duration { return cmp.Or(w.cfg.LockHold, lockHold) }

// The statuses of git collab merge's replies (one JSON line on stdout;
// exit 0 for merged, 4 for the others).
const (
	mergedReply    = "merged"     // merged: its merge commit and the claim's token
	refusedReply   = "refused"    // Gitea would not merge: its words in reason
	busyReply      = "busy"       // the turn to merge into the base did not come within --wait
	staleReply     = "stale"      // the token is not the claim's current one
	notHolderReply = "not_holder" // the caller holds neither the pull request's claim nor that of an issue it closes
)

// mergeReply is git collab merge's reply.
type mergeReply struct {
	Status string `json:"status"`
	Repo   string `json:"repo"`
	Pull   int64  `json:"pull"`
	SHA    string `json:"sha,omitempty"`
	Token  int64  `json:"token,omitempty"`
	Reason string `json:"reason,omitempty"`
	Ahead  int    `json:"ahead,omitempty"`
}

// mergeGrace is how long a work that git collab run stops waits for the
// reply of its git collab merge in flight before it kills it: less than
// the 10 s run gives its command before SIGKILL.
const mergeGrace = 5 * time.Second

// mergeThroughSidecar merges pull request pr with `git collab merge`:
// the sidecar checks the claim and its token, waits for the turn to merge
// into main (first come, first served), asks Gitea to merge as the
// holder, waits while Gitea tests the pull request, and ends the claim
// before it replies. So there is no merge lock to take and no pull
// request to replace here. The work still checks its token first, as
// before every fenced action (unless its defenses are off), and waits for
// its turn up to the merge's deadline.
func (w *work) mergeThroughSidecar(ctx context.Context, pr int64, deadline time.Time) error {
	wait := pollMerge
	for {
		if err := w.check(ctx); err != nil {
			return err
		}
		turn := max(deadline.Sub(w.now()).Truncate(time.Second), time.Second)
		rep, err := w.collabMerge(ctx, pr, turn)
		if err != nil {
			w.emit(Event{Kind: evRefused, Detail: err.Error()})
			return err
		}
		switch reason := strings.ToLower(rep.Reason); {
		case rep.Status == mergedReply:
			return nil // collabMerge said so
		case rep.Status == staleReply, rep.Status == notHolderReply:
			w.emit(Event{Kind: evMergeStale, Detail: rep.Status})
			return errStale
		case rep.Status == busyReply:
			// Its turn did not come within the wait, which ran to the
			// deadline: below, it gives up.
		case rep.Status == refusedReply && strings.Contains(reason, "already merged"):
			// Merged by someone else: as after Gitea's own answer.
			if in, err := w.inMain(ctx); err != nil || in {
				if in {
					w.emit(Event{Kind: evClosed, Detail: "merged by another"})
				}
				return err
			}
			next, err := w.pullRequest(ctx)
			var apiErr *integration.APIError
			if errors.As(err, &apiErr) && apiErr.Status == http.StatusUnprocessableEntity {
				w.emit(Event{Kind: evClosed, Detail: "merged by another"})
				return nil
			}
			if err != nil {
				return err
			}
			pr, wait = next, pollMerge
			continue
		case rep.Status == refusedReply && strings.Contains(reason, "required status"):
			w.emit(Event{Kind: evFenced, Detail: rep.Reason})
			return errFenced
		case rep.Status == refusedReply && (strings.Contains(reason, "try again later") || strings.Contains(reason, "out of date") ||
			strings.Contains(reason, "cannot lock ref") || strings.Contains(reason, "moved during the merge") ||
			strings.Contains(reason, "while its merge ticket lasted")):
			// Gitea still testing, main moved under the merge, or the
			// turn ran out before Gitea merged (a turn lasts at most
			// until the claim's expiry, which under a session is a grace
			// away): nothing to fix but time; the sidecar waited already,
			// and Gitea's test it waited for is done or under way. Merge
			// again.
		default:
			err := fmt.Errorf("git collab merge %d: %s: %s", pr, rep.Status, rep.Reason)
			w.emit(Event{Kind: evRefused, Detail: err.Error()})
			return err
		}
		if !w.now().Before(deadline) {
			err := fmt.Errorf("pull request #%d: not merged within %s: git collab merge said %s %s", pr, w.mergeDeadline(), rep.Status, rep.Reason)
			w.emit(Event{Kind: evRefused, Detail: err.Error()})
			return err
		}
		w.sleep(wait)
		wait = min(2*wait, maxPollMerge)
	}
}

// collabMerge asks the sidecar to merge pull request pr, waiting up to
// turn for its turn: `git collab merge <pr> --wait <turn> --json [--token <t>]`
// (the repository is the checkout's; under git collab run it acts as
// run's agent, and otherwise as COLLAB_AGENT's), trying again after exit
// 75 (Gitea or the sidecar unreachable) or 255 (ssh). Each call is an
// evMergeCall (Detail: the reply's status, or the exit status); a merge
// is evMerged and evClosed at once, written with the reply, before a
// SIGTERM's evTerminated (awaitMerge).
func (w *work) collabMerge(ctx context.Context, pr int64, turn time.Duration) (mergeReply, error) {
	args := []string{"merge", strconv.FormatInt(pr, 10), "--wait", turn.String(), "--json"}
	if w.token != "" {
		args = append(args, "--token", w.token)
	}
	for attempt := 1; ; attempt++ {
		start := w.now()
		done := make(chan struct{})
		w.mergeMu.Lock()
		w.mergeDone = done
		w.mergeMu.Unlock()
		r, err := w.mergeOnce(ctx, args...)
		w.mergeMu.Lock()
		stopped := w.stopping
		w.mergeMu.Unlock()
		if stopped {
			select {} // killed by the SIGTERM handler, which ends the process
		}
		w.mu.Lock()
		w.mergeMu.Lock()
		w.mergeDone, w.mergeProc = nil, nil
		w.mergeMu.Unlock()
		close(done)
		rep, code, err := readMergeReply(r, err)
		took := w.now().Sub(start)
		switch {
		case err != nil:
			w.emitLocked(Event{Kind: evMergeCall, Detail: fmt.Sprintf("exit %d", code), Took: took})
		default:
			w.emitLocked(Event{Kind: evMergeCall, Detail: rep.Status, Took: took})
			if rep.Status == mergedReply {
				w.emitLocked(Event{Kind: evMerged, Detail: strconv.FormatInt(pr, 10)})
				w.emitLocked(Event{Kind: evClosed})
			}
		}
		w.mu.Unlock()
		temporary := code == contract.ExitTempFail || code == exitSSH
		if err == nil || !temporary || attempt == maxAttempts {
			return rep, err
		}
		w.sleep(time.Duration(attempt) * 100 * time.Millisecond)
	}
}

// readMergeReply reads git collab merge's answer: its reply on exit 0
// or 4, an error otherwise (with the exit status, -1 when it did not
// run).
func readMergeReply(r integration.SSHResult, err error) (mergeReply, int, error) {
	if err != nil {
		return mergeReply{}, -1, fmt.Errorf("git collab merge: %w", err)
	}
	if r.Code != contract.ExitOK && r.Code != contract.ExitConflict {
		return mergeReply{}, r.Code, fmt.Errorf("git collab merge: exit %d: %s", r.Code, lastLine(r.Stderr))
	}
	var rep mergeReply
	if err := json.Unmarshal([]byte(lastLine(r.Stdout)), &rep); err != nil || rep.Status == "" {
		return mergeReply{}, r.Code, fmt.Errorf("git collab merge: exit %d, an unreadable reply %q: %v", r.Code, strings.TrimSpace(r.Stdout), err)
	}
	if (r.Code == contract.ExitOK) != (rep.Status == mergedReply) {
		return mergeReply{}, r.Code, fmt.Errorf("git collab merge: exit %d with the reply %q", r.Code, strings.TrimSpace(r.Stdout))
	}
	return rep, r.Code, nil
}

// mergeOnce runs git collab with args once: runMerge in a test, else a
// process in a group of its own, which git collab run's stop does not
// reach (awaitMerge waits for it instead).
func (w *work) mergeOnce(ctx context.Context, args ...string) (integration.SSHResult, error) {
	if w.runMerge != nil {
		return w.runMerge(ctx, args...)
	}
	cmd := exec.CommandContext(ctx, "git", append([]string{"collab"}, args...)...)
	mergeProcess(cmd)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return integration.SSHResult{}, err
	}
	w.mergeMu.Lock()
	w.mergeProc = cmd.Process
	w.mergeMu.Unlock()
	err := cmd.Wait()
	r := integration.SSHResult{Stdout: out.String(), Stderr: errb.String()}
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() >= 0 {
		r.Code, err = exit.ExitCode(), nil
	}
	return r, err
}

// awaitMerge waits up to grace for the git collab merge in flight, if
// any, to have its reply read and its events written; past grace it
// kills it (its claim is gone: the sidecar would refuse it at its turn)
// and the work writes nothing more of it.
func (w *work) awaitMerge(grace time.Duration) {
	w.mergeMu.Lock()
	done := w.mergeDone
	w.mergeMu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-time.After(grace):
		w.mergeMu.Lock()
		w.stopping = true
		if w.mergeProc != nil {
			killGroup(w.mergeProc.Pid)
		}
		w.mergeMu.Unlock()
	}
}

// pollMerge is the first wait before a merge that cannot happen yet is
// tried again; each wait doubles, up to maxPollMerge.
const (
	pollMerge    = 250 * time.Millisecond
	maxPollMerge = 2 * time.Second
)

// statusSuccess says whether the latest required status on sha says
// success. It reads the list of statuses, which Gitea answers from its
// database alone (the combined status reads the commit with git).
func (w *work) statusSuccess(ctx context.Context, sha string) bool {
	var st []struct {
		ID      int64  `json:"id"`
		Context string `json:"context"`
		Status  string `json:"status"`
	}
	if err := w.api.Do(ctx, "GET", fmt.Sprintf("/repos/%s/statuses/%s?limit=50", w.cfg.Repo, sha), nil, &st); err != nil {
		return false
	}
	latest, state := int64(-1), ""
	for _, s := range st {
		if s.Context == fence.StatusContext && s.ID > latest {
			latest, state = s.ID, s.Status
		}
	}
	return state == "success"
}

// The merge lock. Gitea merges a pull request by building the merge in a
// temporary repository and pushing it to main; when two merges into main
// overlap, the later push is refused ("merge push out of date", 409) and
// its work is wasted, and every open pull request is tested again after
// each merge that lands. Twenty agents that merge whenever they are ready
// spend most of Gitea's time on merges that lose. So the work takes its
// repository's merge lock, an issue of a repository of its own, before it
// merges, and lets it go after: taken the way its agent claims issues (a
// collab-lease claim with --wait, or Gitea's assignee), the lock only
// spares Gitea merges that would lose; what keeps a merge safe is the
// fence, as before.
const (
	lockClaim    = "claim"    // git collab claim --wait, through the checkout's remote "locks"
	lockAssignee = "assignee" // assign oneself, read again, let go if someone else is assigned too
	lockRemote   = "locks"
	// lockTTL bounds a claim of the lock whose holder died before it let
	// go; the merge under it takes a second or two.
	lockTTL = 20 * time.Second
	// lockHold is how long a work holds the lock while Gitea answers
	// its merge "not yet". The merge before it sent every open pull
	// request back to Gitea's test, this one among them, which takes a
	// second or two; a test still not done by then is far behind in
	// Gitea's queue or lost (replacePull). The work lets the others go
	// first and queues again with a pull request of the same branch,
	// whose test runs while it waits for its turn.
	lockHold = 3 * time.Second
)

// takeLock takes the merge lock, waiting for its turn until deadline,
// and says so.
func (w *work) takeLock(ctx context.Context, deadline time.Time) error {
	start := w.now()
	if err := w.lock(ctx, deadline); err != nil {
		return err
	}
	w.emit(Event{Kind: evLocked, Took: w.now().Sub(start)})
	return nil
}

// letGo lets the merge lock go if the work holds it, and says so.
func (w *work) letGo(ctx context.Context) {
	if held, ok := w.unlock(ctx); ok {
		w.emit(Event{Kind: evUnlocked, Took: held})
	}
}

// lock takes the merge lock, waiting for its turn until deadline.
func (w *work) lock(ctx context.Context, deadline time.Time) error {
	var err error
	switch w.cfg.LockWith {
	case lockClaim:
		err = w.claimLock(ctx, deadline)
	case lockAssignee:
		err = w.assignLock(ctx, deadline)
	default:
		err = fmt.Errorf("unknown merge lock %q", w.cfg.LockWith)
	}
	if err != nil {
		return fmt.Errorf("merge lock %s#%d: %w", w.cfg.LockRepo, w.cfg.Lock, err)
	}
	w.lockMu.Lock()
	w.lockedAt = w.now()
	w.lockMu.Unlock()
	return nil
}

func (w *work) holdsLock() bool {
	_, ok := w.heldFor()
	return ok
}

// heldFor says how long the work has held the merge lock, if it does.
func (w *work) heldFor() (time.Duration, bool) {
	w.lockMu.Lock()
	defer w.lockMu.Unlock()
	if w.lockedAt.IsZero() {
		return 0, false
	}
	return w.now().Sub(w.lockedAt), true
}

// unlock lets the merge lock go if the work holds it, and says how long
// it held it; ok is false if it did not hold it or could not let go. The
// work counts itself let go either way: a claim it could not let go
// lapses after lockTTL, an assignee it could not take off is taken over
// after as long, and either way the work takes the lock anew before it
// merges again.
func (w *work) unlock(ctx context.Context) (held time.Duration, ok bool) {
	w.lockMu.Lock()
	defer w.lockMu.Unlock()
	if w.lockedAt.IsZero() {
		return 0, false
	}
	var err error
	switch w.cfg.LockWith {
	case lockClaim:
		err = w.collabLock(ctx, "unclaim")
	case lockAssignee:
		err = w.unassignLock(ctx)
	}
	held = w.now().Sub(w.lockedAt)
	w.lockedAt = time.Time{}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleet work: let go of merge lock %s#%d: %v\n", w.cfg.LockRepo, w.cfg.Lock, err)
		return 0, false
	}
	return held, true
}

// claimLock claims the lock with collab-lease, waiting in the sidecar,
// which hands it to its waiters first come, first served.
func (w *work) claimLock(ctx context.Context, deadline time.Time) error {
	wait := max(deadline.Sub(w.now()).Truncate(time.Second), time.Second)
	return w.collabLock(ctx, "claim", "--ttl", lockTTL.String(), "--wait", wait.String())
}

// collabLock runs git collab <verb> on the lock issue as the work's
// agent; a claim succeeds with exit 0, and letting go with exit 4 too
// (the claim lapsed already).
func (w *work) collabLock(ctx context.Context, verb string, flags ...string) error {
	args := append([]string{"collab", verb, strconv.FormatInt(w.cfg.Lock, 10), "--remote", lockRemote,
		"--agent", agentLogin(w.cfg.Agent)}, flags...)
	r, err := integration.RunCommand(exec.CommandContext(ctx, "git", args...))
	switch {
	case err != nil:
		return err
	case r.Code == contract.ExitOK, verb == "unclaim" && r.Code == contract.ExitConflict:
		return nil
	}
	return fmt.Errorf("git collab %s: exit %d: %s", verb, r.Code, lastLine(r.Stderr))
}

// lockPath is the lock issue's API path.
func (w *work) lockPath() string {
	return fmt.Sprintf("/repos/%s/issues/%d", w.cfg.LockRepo, w.cfg.Lock)
}

// assignLock takes the lock the way the assignees loop takes an issue:
// free (nobody assigned, or only its own account), assign itself, read
// again, and let go if someone else is assigned too. Under one account
// every agent sees only itself, so nothing waits. Gitea's assignees
// never lapse, and two agents that assign themselves at once can both
// stay assigned after both let go; so, as an agent author would, it
// takes over a lock whose assignees have not changed for lockTTL.
func (w *work) assignLock(ctx context.Context, deadline time.Time) error {
	me := []string{w.cfg.Login}
	pause := pollMerge
	var seen []string // the assignees other than it, and since when unchanged
	var since time.Time
	for {
		var is giteaIssue
		if err := w.api.Do(ctx, "GET", w.lockPath(), nil, &is); err != nil {
			return err
		}
		who := is.assignees()
		free := len(who) == 0 || slices.Equal(who, me)
		if !free && (seen == nil || !slices.Equal(who, seen)) {
			seen, since = who, w.now()
		} else if !free && w.now().Sub(since) >= lockTTL {
			free = true // nobody has let go of it for that long
		}
		if free {
			if err := w.api.Do(ctx, "PATCH", w.lockPath(), map[string]any{"assignees": me}, nil); err != nil {
				return err
			}
			if err := w.api.Do(ctx, "GET", w.lockPath(), nil, &is); err != nil {
				return err
			}
			if slices.Equal(is.assignees(), me) {
				return nil
			}
			if err := w.unassignLock(ctx); err != nil {
				return err
			}
			seen = nil
		}
		if w.now().After(deadline) {
			return errors.New("not free in time")
		}
		w.sleep(pause)
		pause = min(2*pause, maxPollMerge)
	}
}

// now and sleep are the work's clock: the real one unless a test sets
// clockNow and clockSleep.
func (w *work) now() time.Time {
	if w.clockNow != nil {
		return w.clockNow()
	}
	return time.Now()
}

func (w *work) sleep(d time.Duration) {
	if w.clockSleep != nil {
		w.clockSleep(d)
		return
	}
	time.Sleep(d)
}

// unassignLock takes its account off the lock issue's assignees.
func (w *work) unassignLock(ctx context.Context) error {
	var is giteaIssue
	if err := w.api.Do(ctx, "GET", w.lockPath(), nil, &is); err != nil {
		return err
	}
	others := slices.DeleteFunc(is.assignees(), func(l string) bool { return l == w.cfg.Login })
	if others == nil {
		others = []string{}
	}
	return w.api.Do(ctx, "PATCH", w.lockPath(), map[string]any{"assignees": others}, nil)
}

// inMain says whether main holds the work's HEAD: everything it pushed
// has been merged.
func (w *work) inMain(ctx context.Context) (bool, error) {
	if _, err := w.git(ctx, "fetch", "-q", "origin", "main"); err != nil {
		return false, err
	}
	err := exec.CommandContext(ctx, "git", "merge-base", "--is-ancestor", "HEAD", "origin/main").Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return false, nil
	}
	return false, fmt.Errorf("git merge-base --is-ancestor HEAD origin/main: %w", err)
}
