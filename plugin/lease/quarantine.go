package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// Quarantine (docs/operating.md, Quarantine): an issue whose last n claims
// each ended involuntarily (expired or session_lost) is one agents keep
// failing at. The ledger decides it (models' quarantine.go): from the
// instant the nth claim lapsed, acquire answers quarantined and next skips
// the issue. What this file adds is the forge's side and the ways out:
//
//   - RunQuarantine is the worker that tells the forge: the label
//     QuarantineLabel on the issue (made in the repository if missing)
//     and one comment naming the tenures, within a second of the nth
//     ending. It hears the bus: a committed or announced change of an
//     issue, and the expiry instant of every live claim, which it puts on
//     the bus's one expiry queue itself. It reads the ledger's quarantine
//     of the issue, records it (once, whichever replica is first), and
//     tells the forge in the issue's chore (models.ChoreOfQuarantine: one
//     replica at a time), rereading the ledger there, so that of several
//     replicas one labels and comments, once; the comment carries a mark,
//     so a retry after a lost answer does not post it twice.
//   - Unquarantine (a repository admin) lifts it; so does removing the
//     label in Gitea (Apply of a forge.EventLabels). Lifted by the verb,
//     the worker takes the label off.
//   - acquire --force (a repository admin) takes the issue regardless,
//     and leaves it quarantined (leases.go, wait.go).

// QuarantineLabel is the label a quarantined issue carries in the forge.
const QuarantineLabel = "collab-lease/quarantined"

// quarantineLabel is the label as the sidecar makes it.
var quarantineLabel = forge.Label{Name: QuarantineLabel, Color: "#b60205",
	Description: "collab-lease: its last claims each lapsed; next skips it until this label is removed"}

// Backoff of a failed turn at the forge: doubling from quarantineRetryMin
// up to quarantineRetryMax.
const (
	quarantineRetryMin = time.Second
	quarantineRetryMax = 5 * time.Minute
)

// Unquarantine lifts the quarantine of issue n of owner/name; only a
// repository admin may. Lifting one that is not quarantined succeeds
// (Lifted false). The label, if the sidecar put it on, is taken off by
// the quarantine worker.
func (s *Service) Unquarantine(ctx context.Context, v Viewer, owner, name string, n int64) (contract.Unquarantined, error) {
	if v.Anonymous() {
		return contract.Unquarantined{}, fmt.Errorf("unquarantine: %w: no account", ErrInvalid)
	}
	r, err := s.repo(ctx, v, owner, name)
	if err != nil {
		return contract.Unquarantined{}, err
	}
	if err := mayForce(r); err != nil {
		return contract.Unquarantined{}, err
	}
	lifted, err := s.ledger.LiftQuarantine(ctx, models.Key{RepoID: r.ID, Issue: n}, false)
	if err != nil {
		return contract.Unquarantined{}, err
	}
	return contract.Unquarantined{Status: contract.StatusUnquarantined, Repo: r.FullName, Issue: n, Lifted: lifted}, nil
}

// labelsChanged applies an EventLabels: the quarantine's label gone from
// an issue the sidecar put it on lifts the quarantine. The delivery may
// be older than the sidecar's own labelling, so the forge is asked
// whether the label is on now before anything is lifted.
func (s *Service) labelsChanged(ctx context.Context, e forge.Event) error {
	if slices.Contains(e.Labels, QuarantineLabel) {
		return nil
	}
	k := models.Key{RepoID: e.RepoID, Issue: e.Number}
	q, err := s.ledger.QuarantineOf(ctx, k)
	if err != nil || !q.Labeled {
		return err
	}
	full := e.Repo
	if full == "" {
		if full, err = s.forge.RepoName(ctx, e.RepoID); err != nil {
			return err
		}
	}
	owner, name, _ := strings.Cut(full, "/")
	labels, err := s.forge.IssueLabels(ctx, owner, name, e.Number)
	if err != nil || slices.Contains(labels, QuarantineLabel) {
		return err
	}
	_, err = s.ledger.LiftQuarantine(ctx, k, true)
	return err
}

// quarantineWork is what the quarantine worker has to look at: the issues
// the bus said changed while it runs.
type quarantineWork struct {
	mu      sync.Mutex
	running bool
	keys    map[models.Key]struct{}
	all     bool // a change of every issue (a replica's reconnect): sweep
	wake    chan struct{}
}

func newQuarantineWork() *quarantineWork {
	return &quarantineWork{keys: map[models.Key]struct{}{}, wake: make(chan struct{}, 1)}
}

// heard is the worker's subscription to the bus: it takes note of the
// issues, while the worker runs.
func (w *quarantineWork) heard(set changes.Set) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.running {
		return
	}
	for _, c := range set.Changes {
		switch {
		case c.Pull || c.Reservations:
		case c.Key.Issue != 0:
			w.keys[c.Key] = struct{}{}
		case c.Key.RepoID == 0:
			w.all = true
		}
	}
	w.signal()
}

func (w *quarantineWork) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *quarantineWork) take() (map[models.Key]struct{}, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ks, all := w.keys, w.all
	w.keys, w.all = map[models.Key]struct{}{}, false
	return ks, all
}

func (w *quarantineWork) setRunning(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running = on
}

// QuarantineOptions configure RunQuarantine.
type QuarantineOptions struct {
	// Observe, if set, is told what became of each turn at the forge:
	// "quarantined" (labelled and commented), "unlabelled" or "failed".
	Observe func(outcome string)
	// Log, if set, is told of failures.
	Log func(msg string, args ...any)
}

// retry is when a key is looked at again after a failed turn.
type retry struct {
	at   time.Time
	wait time.Duration
}

// RunQuarantine runs the quarantine worker until ctx ends, then returns
// nil (see the top of this file). At start it looks at every issue whose
// quarantine the forge has not been told of, every lapsed claim that may
// have quarantined its issue while no sidecar ran, and puts the expiry of
// every live claim on the bus's queue.
func (s *Service) RunQuarantine(ctx context.Context, o QuarantineOptions) error {
	w := s.quarantine
	w.setRunning(true)
	defer w.setRunning(false)
	w.mu.Lock()
	w.all = true
	w.mu.Unlock()
	w.signal()
	retries := map[models.Key]retry{}
	var timer <-chan time.Time
	stop := func() bool { return false }
	defer func() { stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.wake:
		case <-timer:
		}
		keys, all := w.take()
		if all {
			if err := s.quarantineSweep(ctx, keys); err != nil {
				s.quarantineFailed(o, "looking over the claims and quarantines failed; retrying", err)
				w.mu.Lock()
				w.all = true
				w.mu.Unlock()
				retries[models.Key{}] = retry{at: s.now().Add(quarantineRetryMin)}
			}
		}
		now := s.now()
		for k, r := range retries {
			if !r.at.After(now) && k != (models.Key{}) {
				keys[k] = struct{}{}
			}
		}
		if r, ok := retries[models.Key{}]; ok && !r.at.After(now) {
			delete(retries, models.Key{})
			w.mu.Lock()
			w.all = true
			w.mu.Unlock()
			w.signal()
		}
		for k := range keys {
			if ctx.Err() != nil {
				return nil
			}
			if r, ok := retries[k]; ok && r.at.After(now) {
				continue // its backoff first
			}
			err := s.quarantineStep(ctx, k, o)
			if err == nil {
				delete(retries, k)
				continue
			}
			r := retries[k]
			r.wait = min(max(2*r.wait, quarantineRetryMin), quarantineRetryMax)
			r.at = s.now().Add(r.wait)
			retries[k] = r
			s.quarantineFailed(o, "telling the forge of a quarantine failed; retrying", err, "repo_id", k.RepoID, "issue", k.Issue, "in", r.wait)
		}
		stop()
		timer, stop = nil, func() bool { return false }
		if len(retries) > 0 {
			next := time.Time{}
			for _, r := range retries {
				if next.IsZero() || r.at.Before(next) {
					next = r.at
				}
			}
			timer, stop = s.after(max(next.Sub(s.now()), 0))
		}
	}
}

func (s *Service) quarantineFailed(o QuarantineOptions, msg string, err error, args ...any) {
	if o.Observe != nil {
		o.Observe("failed")
	}
	if o.Log != nil {
		o.Log(msg, append([]any{"err", err}, args...)...)
	}
}

// quarantineSweep adds to keys every issue to look at when the worker
// starts (or a replica reconnects), and puts every live claim's expiry on
// the bus's queue.
func (s *Service) quarantineSweep(ctx context.Context, keys map[models.Key]struct{}) error {
	toForge, err := s.ledger.QuarantinesToForge(ctx)
	if err != nil {
		return err
	}
	lapsed, err := s.ledger.LapsedUnquarantined(ctx)
	if err != nil {
		return err
	}
	for _, k := range append(toForge, lapsed...) {
		keys[k] = struct{}{}
	}
	repos, err := s.ledger.LiveRepos(ctx)
	if err != nil {
		return err
	}
	for _, id := range repos {
		ls, err := s.ledger.List(ctx, id)
		if err != nil {
			return err
		}
		for _, l := range ls {
			if l.ExpiresAt != nil {
				s.bus.ExpireAt(l.Key, *l.ExpiresAt)
			}
		}
	}
	return nil
}

// quarantineStep looks at issue k: puts its live claim's expiry on the
// bus's queue, records its quarantine if the ledger works one out, and
// tells the forge what it was not told yet.
func (s *Service) quarantineStep(ctx context.Context, k models.Key, o QuarantineOptions) error {
	q, err := s.ledger.QuarantineOf(ctx, k)
	if err != nil {
		return err
	}
	if q.Expires != nil {
		at := *q.Expires
		if now := s.now(); !at.After(now) {
			// The ledger's clock (PostgreSQL's) is a little behind
			// this process's: look again shortly, not at once and again.
			at = now.Add(250 * time.Millisecond)
		}
		s.bus.ExpireAt(k, at)
	}
	if q.Since != nil && !q.Recorded {
		if q, _, err = s.ledger.RecordQuarantine(ctx, k); err != nil {
			return err
		}
	}
	if !forgeOwed(q) {
		return nil
	}
	c, ok := s.ledger.chores()
	if !ok {
		return s.tellForge(ctx, k, o)
	}
	ran, err := c.Exclusive(ctx, models.ChoreOfQuarantine(k), func(ctx context.Context) error { return s.tellForge(ctx, k, o) })
	if err == nil && !ran {
		err = errQuarantineBusy // another replica tells it now: look again later
	}
	return err
}

// errQuarantineBusy: another replica has the issue's turn at the forge.
var errQuarantineBusy = errors.New("another replica tells the forge of this quarantine now")

// forgeOwed says whether the forge is owed something of q: the label and
// comment of a quarantine, or the removal of a lifted one's label.
func forgeOwed(q models.Quarantine) bool {
	return q.Since != nil && !q.Forged || q.Since == nil && q.Labeled
}

// tellForge tells the forge what it is owed of k's quarantine, as the
// ledger has it now (read again in the issue's turn).
func (s *Service) tellForge(ctx context.Context, k models.Key, o QuarantineOptions) error {
	q, err := s.ledger.QuarantineOf(ctx, k)
	if err != nil || !forgeOwed(q) {
		return err
	}
	full, err := s.forge.RepoName(ctx, k.RepoID)
	if errors.Is(err, forge.ErrNotFound) {
		return s.ledger.MarkQuarantineForged(ctx, k, q.Token, false) // gone: nothing to tell
	}
	if err != nil {
		return err
	}
	owner, name, _ := strings.Cut(full, "/")
	outcome := "quarantined"
	if q.Since == nil {
		outcome = "unlabelled"
		if err := s.forge.UnlabelIssue(ctx, owner, name, k.Issue, QuarantineLabel); err != nil && !errors.Is(err, forge.ErrNotFound) {
			return err
		}
		err = s.ledger.MarkQuarantineForged(ctx, k, 0, false)
	} else {
		err = s.forge.LabelIssue(ctx, owner, name, k.Issue, quarantineLabel)
		if err == nil {
			err = s.forge.CommentOnce(ctx, owner, name, k.Issue, quarantineMark(q.Token), quarantineComment(full, k.Issue, q))
		}
		if errors.Is(err, forge.ErrNotFound) {
			outcome, err = "gone", nil // the issue is gone: nothing to label
		}
		if err == nil {
			err = s.ledger.MarkQuarantineForged(ctx, k, q.Token, outcome == "quarantined")
		}
	}
	if err == nil && o.Observe != nil {
		o.Observe(outcome)
	}
	return err
}

// quarantineMark is what marks the comment of the quarantine whose last
// tenure is token.
func quarantineMark(token int64) string {
	return fmt.Sprintf("<!-- collab-lease quarantine %d -->", token)
}

// quarantineComment is the comment of quarantine q on issue n of repo
// ("owner/name"): the tenures that quarantined it, and how to lift it.
func quarantineComment(repo string, n int64, q models.Quarantine) string {
	var b strings.Builder
	fmt.Fprintf(&b, "collab-lease quarantined this issue: its last %d claims each ended without being released, so `next` skips it and `acquire` refuses it.\n\n", len(q.Tenures))
	b.WriteString("| token | holder · agent | ended |\n|---|---|---|\n")
	for _, t := range q.Tenures {
		who := t.Holder.Login
		if t.Holder.Agent != "" {
			who += " · " + t.Holder.Agent
		}
		ended := string(t.EndedBy)
		if t.EndedBy == models.EndTakenOver {
			ended = string(models.EndExpired) // it lapsed; taken over after
		}
		if t.EndedAt != nil {
			ended += " at " + t.EndedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(&b, "| %d | %s | %s |\n", t.Token, who, ended)
	}
	fmt.Fprintf(&b, "\nTo lift the quarantine, remove the label `%s` (anyone who may edit this issue's labels), or a repository admin runs `collab-lease unquarantine %s %d`.\n\n%s\n",
		QuarantineLabel, repo, n, quarantineMark(q.Token))
	return b.String()
}
