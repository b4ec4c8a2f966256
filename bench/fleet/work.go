package main

import (
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
// collab check` before every push and the merge, as a careful agent does.

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
}

// The kinds of Event only round three's work emits.
const (
	evCommitted  = "committed"  // it made a commit (Detail: its hash) that it means to push
	evPushed     = "pushed"     // a push was accepted (Commits: what it added to the branch; Detail: the work's PID)
	evRefused    = "refused"    // Gitea refused a push or a merge (Detail: what it said)
	evMerged     = "merged"     // its merge of the pull request was accepted (Detail: the pull request)
	evTerminated = "terminated" // it was stopped by SIGTERM (git collab run: the claim was lost)
	evWorkCPU    = "workcpu"    // its last line: its CPU time (Took) and its git collab check's (CPU)
	evSkipped    = "skipped"    // the issue was closed already: it did nothing
)

// errStale is a check that said the token is stale: the work stops and
// lands nothing more.
var errStale = errors.New("the claim's token is stale")

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
	checkCPU time.Duration
	branch   string
}

// workMain runs one piece of work and returns its exit status: 0 done,
// 4 stopped by a stale token, 1 failed.
func workMain(stdout io.Writer) int {
	var cfg workConfig
	if err := json.Unmarshal([]byte(os.Getenv(workEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fleet work: read "+workEnv+":", err)
		return 2
	}
	w := &work{cfg: cfg, n: cfg.Issue, token: os.Getenv("COLLAB_TOKEN"), out: json.NewEncoder(stdout),
		api: &integration.API{URL: cfg.API, Token: cfg.Token, HTTP: &http.Client{Timeout: callTimeout}}}
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
		w.mu.Lock() // never released: the process ends here
		w.emitLocked(Event{Kind: evTerminated, Issue: w.n})
		os.Exit(143)
	}()
	err := w.run(context.Background())
	if killedBy(err, syscall.SIGTERM) {
		select {} // the whole group was told to stop: the handler ends the process
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	cpu := selfCPU()
	w.emitLocked(Event{Kind: evWorkCPU, Issue: w.n, Took: cpu - w.checkCPU, CPU: w.checkCPU})
	switch {
	case errors.Is(err, errStale):
		return contract.ExitConflict
	case err != nil:
		w.emitLocked(Event{Kind: evError, Issue: w.n, Detail: err.Error()})
		return 1
	}
	return 0
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
	var is giteaIssue
	if err := w.api.Do(ctx, "GET", fmt.Sprintf("/repos/%s/issues/%d", w.cfg.Repo, w.n), nil, &is); err != nil {
		return err
	}
	if is.State != "open" {
		w.emit(Event{Kind: evSkipped})
		return nil
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

// check asks the sidecar whether COLLAB_TOKEN is still the live tenure's,
// when the work runs under a claim.
func (w *work) check(ctx context.Context) error {
	if !w.cfg.Check {
		return nil
	}
	cmd := exec.CommandContext(ctx, "git", "collab", "check")
	for attempt := 1; ; attempt++ {
		r, err := integration.RunCommand(cmd)
		if cmd.ProcessState != nil {
			w.checkCPU += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
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
	Number int64 `json:"number"`
	Head   struct {
		Ref string `json:"ref"`
	} `json:"head"`
}

// pullRequest opens the pull request "Fixes #n" from work/<n>, or finds
// the open one a holder before this one opened.
func (w *work) pullRequest(ctx context.Context) (int64, error) {
	var pr giteaPull
	title := fmt.Sprintf("Fixes #%d", w.n)
	err := w.api.Do(ctx, "POST", "/repos/"+w.cfg.Repo+"/pulls", map[string]any{
		"head": w.branch, "base": "main", "title": title, "body": title,
	}, &pr)
	var apiErr *integration.APIError
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusConflict {
		return w.openPull(ctx)
	}
	return pr.Number, err
}

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
	deadline := time.Now().Add(mergeDeadline)
	wait := pollMerge
	again := func(why string) error {
		if time.Now().After(deadline) {
			return fmt.Errorf("pull request #%d: not merged within %s: %s", pr, mergeDeadline, why)
		}
		time.Sleep(wait)
		wait = min(2*wait, maxPollMerge)
		return nil
	}
	if w.cfg.Check {
		head, err := w.git(ctx, "rev-parse", "HEAD")
		if err != nil {
			return err
		}
		// Wait for the required status before checking the token and
		// merging: Gitea refuses the merge until then.
		for !w.statusSuccess(ctx, head) {
			if err := again("the required status never said success"); err != nil {
				return err
			}
		}
	}
	for {
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
			// a pull request of its own, unless it is all in main already.
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
		case apiErr.Status == http.StatusMethodNotAllowed && strings.Contains(apiErr.Body, "try again later") ||
			apiErr.Status == http.StatusConflict:
			// Being tested (a push, or main moved), or main moved by
			// another merge at that instant.
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
