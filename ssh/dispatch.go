package ssh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Ledger is what the verb needs of the lease store (models.Store).
type Ledger interface {
	Acquire(ctx context.Context, k models.Key, holder string, ttl time.Duration) (models.Lease, error)
	Renew(ctx context.Context, k models.Key, holder string, ttl time.Duration) (models.Lease, error)
	Release(ctx context.Context, k models.Key, holder string) (*models.Lease, error)
	List(ctx context.Context, repoID int64) ([]models.Lease, error)
}

var _ Ledger = (*models.Store)(nil)

// Errors of the dispatch that are not the ledger's or the forge's.
var (
	errRepoNotFound  = errors.New("repository not found")
	errIssueNotFound = errors.New("issue not found")
	errIssueClosed   = errors.New("issue is closed")
)

// writeRequiredError: the caller may read the repository, so naming it
// reveals nothing, but may not write the unit the verb changes.
type writeRequiredError struct {
	repo, unit string
}

func (e *writeRequiredError) Error() string {
	return fmt.Sprintf("write access to %s %s is required", e.repo, e.unit)
}

// dispatcher runs one parsed command for one authenticated user: ask the
// forge who may do what, then make exactly one ledger call.
type dispatcher struct {
	forge  plugin.Forge
	ledger Ledger
}

func (d *dispatcher) run(ctx context.Context, login string, cmd contract.Command) Reply {
	if cmd.Verb == contract.VerbHelp {
		return Reply{Stdout: []byte(contract.Usage), Outcome: "help"}
	}
	repo, _, err := d.lookup(ctx, login, cmd)
	if err != nil {
		return errorReply(err)
	}
	k := models.Key{RepoID: repo.ID, Issue: cmd.Issue}
	switch cmd.Verb {
	case contract.VerbAcquire:
		l, err := d.ledger.Acquire(ctx, k, login, cmd.TTL)
		if err != nil {
			return outcomeReply(repo.FullName, cmd.Issue, err)
		}
		return jsonReply(contract.ExitOK, "acquired", tenure(contract.StatusAcquired, repo.FullName, l))
	case contract.VerbRenew:
		l, err := d.ledger.Renew(ctx, k, login, cmd.TTL)
		if err != nil {
			return outcomeReply(repo.FullName, cmd.Issue, err)
		}
		return jsonReply(contract.ExitOK, "renewed", tenure(contract.StatusRenewed, repo.FullName, l))
	case contract.VerbRelease:
		if _, err := d.ledger.Release(ctx, k, login); err != nil {
			return outcomeReply(repo.FullName, cmd.Issue, err)
		}
		return jsonReply(contract.ExitOK, "released", contract.Released{Status: contract.StatusReleased, Repo: repo.FullName, Issue: cmd.Issue})
	case contract.VerbList:
		leases, err := d.ledger.List(ctx, repo.ID)
		if err != nil {
			return errorReply(err)
		}
		if leases, err = visibleLeases(ctx, d.forge, login, repo, leases); err != nil {
			return errorReply(err)
		}
		return jsonReply(contract.ExitOK, "listed", listOf(repo.FullName, leases))
	}
	return errorReply(&contract.UsageError{Detail: fmt.Sprintf("unknown verb %q", cmd.Verb)})
}

// lookup asks the forge for the repository as login sees it and, for
// acquire, for the issue (both at once: each call costs a round trip), and
// decides whether login may run cmd. Who may do what is decided here and
// nowhere else.
func (d *dispatcher) lookup(ctx context.Context, login string, cmd contract.Command) (plugin.Repo, plugin.Issue, error) {
	var (
		issue    plugin.Issue
		issueErr error
		done     chan struct{}
	)
	if cmd.Verb == contract.VerbAcquire {
		done = make(chan struct{})
		go func() {
			defer close(done)
			issue, issueErr = d.forge.Issue(ctx, login, cmd.Owner, cmd.Name, cmd.Issue)
		}()
	}
	repo, err := d.forge.Repo(ctx, login, cmd.Owner, cmd.Name)
	if done != nil {
		<-done
	}
	switch {
	case errors.Is(err, plugin.ErrNotFound):
		return repo, issue, errRepoNotFound
	case err != nil:
		return repo, issue, err
	case !repo.CanRead:
		return repo, issue, errRepoNotFound
	}
	switch cmd.Verb {
	case contract.VerbList:
		return repo, issue, nil
	case contract.VerbAcquire:
		switch {
		case errors.Is(issueErr, plugin.ErrNotFound):
			return repo, issue, errIssueNotFound
		case issueErr != nil:
			return repo, issue, issueErr
		case issue.IsPull && !repo.CanWritePulls:
			return repo, issue, &writeRequiredError{repo: repo.FullName, unit: "pulls"}
		case !issue.IsPull && !repo.CanWriteIssues:
			return repo, issue, &writeRequiredError{repo: repo.FullName, unit: "issues"}
		case issue.Closed:
			return repo, issue, errIssueClosed
		}
		return repo, issue, nil
	default:
		// Renew and release work on the ledger row alone, without asking
		// whether the number is an issue or a pull request; writing
		// either unit is enough to touch one's own lease.
		if !repo.CanWriteIssues && !repo.CanWritePulls {
			return repo, issue, &writeRequiredError{repo: repo.FullName, unit: "issues"}
		}
		return repo, issue, nil
	}
}

// visibleLeases keeps the leases on issues and pull requests login may see
// (plugin.Visible).
func visibleLeases(ctx context.Context, f plugin.Forge, login string, repo plugin.Repo, leases []models.Lease) ([]models.Lease, error) {
	numbers := make([]int64, len(leases))
	for i, l := range leases {
		numbers[i] = l.Issue
	}
	seen, err := plugin.Visible(ctx, f, login, repo, numbers)
	if err != nil {
		return nil, err
	}
	out := leases[:0]
	for _, l := range leases {
		if seen[l.Issue] {
			out = append(out, l)
		}
	}
	return out, nil
}

// tenure, listOf and leaseView render ledger rows in the contract's
// shapes.
func tenure(status, repo string, l models.Lease) contract.Tenure {
	return contract.Tenure{Status: status, Repo: repo, Issue: l.Issue, Holder: l.Holder, Token: l.Token,
		AcquiredAt: contract.Time(l.AcquiredAt), ExpiresAt: contract.TimePtr(l.ExpiresAt)}
}

func listOf(repo string, leases []models.Lease) contract.List {
	v := contract.List{Repo: repo, Leases: make([]contract.LeaseView, len(leases))}
	for i, l := range leases {
		v.Leases[i] = leaseView(l)
	}
	return v
}

func leaseView(l models.Lease) contract.LeaseView {
	return contract.LeaseView{Issue: l.Issue, Holder: l.Holder, Token: l.Token,
		AcquiredAt: contract.Time(l.AcquiredAt), ExpiresAt: contract.TimePtr(l.ExpiresAt)}
}

// outcomeReply maps a ledger refusal to its JSON (exit 4), anything else
// to an error line.
func outcomeReply(repo string, issue int64, err error) Reply {
	var held *models.HeldError
	var notHolder *models.NotHolderError
	switch {
	case errors.As(err, &held):
		return jsonReply(contract.ExitConflict, "held", contract.Conflict{Status: contract.StatusHeld, Repo: repo, Issue: issue,
			Holder: &held.Holder, ExpiresAt: contract.TimePtr(held.ExpiresAt)})
	case errors.As(err, &notHolder):
		v := contract.Conflict{Status: contract.StatusNotHolder, Repo: repo, Issue: issue, ExpiresAt: contract.TimePtr(notHolder.ExpiresAt)}
		if notHolder.Holder != "" {
			v.Holder = &notHolder.Holder
		}
		return jsonReply(contract.ExitConflict, "not_holder", v)
	}
	return errorReply(err)
}

func jsonReply(code int, outcome string, v any) Reply {
	b, err := json.Marshal(v)
	if err != nil {
		return errorReply(err)
	}
	return Reply{Stdout: append(b, '\n'), Code: code, Outcome: outcome}
}

// errorReply is the one translation of errors into the verb's exit codes
// and error lines. Nothing else in this package chooses an exit code for
// an error.
func errorReply(err error) Reply {
	var usage *contract.UsageError
	var write *writeRequiredError
	switch {
	case errors.As(err, &usage):
		return Reply{Stderr: contract.ErrorLine(usage.Error()) + "\n", Code: contract.ExitError, Outcome: "usage"}
	case errors.Is(err, errRepoNotFound):
		return Reply{Stderr: contract.LineRepoNotFound + "\n", Code: contract.ExitError, Outcome: "repo_not_found"}
	case errors.As(err, &write):
		return Reply{Stderr: contract.ErrorLine(write.Error()) + "\n", Code: contract.ExitError, Outcome: "forbidden"}
	case errors.Is(err, errIssueNotFound):
		return Reply{Stderr: contract.LineIssueNotFound + "\n", Code: contract.ExitError, Outcome: "issue_not_found"}
	case errors.Is(err, errIssueClosed):
		return Reply{Stderr: contract.LineIssueClosed + "\n", Code: contract.ExitError, Outcome: "issue_closed"}
	case errors.Is(err, plugin.ErrUnavailable), errors.Is(err, errForgeUnavailable):
		return Reply{Stderr: contract.LineForgeUnavailable + "\n", Code: contract.ExitTempFail, Outcome: "forge_unavailable"}
	case errors.Is(err, models.ErrBusy), errors.Is(err, context.DeadlineExceeded):
		return Reply{Stderr: contract.LineBusy + "\n", Code: contract.ExitTempFail, Outcome: "busy"}
	case errors.Is(err, plugin.ErrConfig):
		return Reply{Stderr: contract.ErrorLine("the sidecar is misconfigured; ask the forge admin to run collab-sidecar doctor") + "\n", Code: contract.ExitTempFail, Outcome: "config"}
	case errors.Is(err, models.ErrInvalid):
		return Reply{Stderr: contract.ErrorLine("usage: "+err.Error()) + "\n", Code: contract.ExitError, Outcome: "invalid"}
	}
	return Reply{Stderr: contract.ErrorLine("internal error") + "\n", Code: contract.ExitError, Outcome: "internal"}
}
