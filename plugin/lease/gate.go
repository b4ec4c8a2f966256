package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// The gate (docs/operating.md, The gate): Gitea's pre-receive hook asks
// about every push, and the ledger decides (models.Store.Gate), from one
// read and with no request to the forge, since the hook holds Gitea's
// push while it waits. The question's account and repository are Gitea's
// own words, which the hook's secret vouches for (routes/gate.go).

// MergeTrigger is GITEA_PUSH_TRIGGER of a merge Gitea makes.
const MergeTrigger = "pr-merge-to-base"

// WithRenewOnPush makes an allowed push carrying a claim's current token
// renew that claim by the TTL its holder last gave it (serve
// --renew-on-push). A session's claims need none; open-ended ones have
// none.
func WithRenewOnPush(on bool) Option { return func(s *Service) { s.renewOnPush = on } }

// GateResult is what the gate did about one push, for the metrics and
// the log.
type GateResult struct {
	// Refused are the reasons of the refused refs (models.GateStale, …).
	Refused []string
	// Renewed counts the claims the push renewed (--renew-on-push).
	Renewed int
	// RenewErr is why a renewal failed; the push's answer stands.
	RenewErr error
}

// Gate answers the hook's question about one push.
func (s *Service) Gate(ctx context.Context, q contract.GateQuestion) (contract.GateAnswer, GateResult, error) {
	if err := validGateQuestion(q); err != nil {
		return contract.GateAnswer{}, GateResult{}, err
	}
	p := models.GatePush{
		RepoID:   q.RepoID,
		Repo:     q.Owner + "/" + q.Repo,
		Pusher:   models.Holder{ID: q.PusherID, Login: q.Pusher},
		Internal: q.Internal,
		Merge:    q.Trigger == MergeTrigger,
		MergeOf:  q.PullIndex,
		Options:  q.Options,
		Paths:    q.Paths, PathsAreDirs: q.PathsAreDirs,
	}
	for _, r := range q.Refs {
		p.Refs = append(p.Refs, models.GateRef{Old: r.Old, New: r.New, Name: r.Name})
	}
	v, err := s.ledger.Gate(ctx, p)
	if err != nil {
		return contract.GateAnswer{}, GateResult{}, err
	}
	if v.Allow {
		s.boardPushes.saw(v.Carried, q.Refs, s.now())
	}
	res := GateResult{Refused: v.Refused}
	if v.Allow && s.renewOnPush {
		res.Renewed, res.RenewErr = s.renewCarried(ctx, v.Carried)
	}
	return contract.GateAnswer{Allow: v.Allow, Lines: append([]string{}, v.Lines...)}, res, nil
}

// renewCarried renews each claim by the TTL its holder last gave it. A
// claim that ended or changed hands since the gate read it is left alone.
func (s *Service) renewCarried(ctx context.Context, carried []models.Lease) (int, error) {
	renewed := 0
	var errs []error
	for _, l := range carried {
		ttl, ok, err := s.ledger.TenureTTL(ctx, l.Key, l.Token)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			continue
		}
		_, err = s.ledger.RenewTenure(ctx, l.Key, l.Holder, l.Token, ttl)
		var nh *models.NotHolderError
		switch {
		case errors.As(err, &nh):
		case err != nil:
			errs = append(errs, err)
		default:
			renewed++
		}
	}
	return renewed, errors.Join(errs...)
}

// validGateQuestion refuses a question no hook of ours asks.
func validGateQuestion(q contract.GateQuestion) error {
	switch {
	case q.RepoID <= 0:
		return fmt.Errorf("%w: the gate's question names no repository", ErrInvalid)
	case q.PusherID < 0:
		return fmt.Errorf("%w: the gate's question names pusher %d", ErrInvalid, q.PusherID)
	case len(q.Refs) > contract.MaxGateRefs || len(q.Options) > contract.MaxGateOptions || len(q.Paths) > contract.MaxGatePaths:
		return fmt.Errorf("%w: the gate's question has %d refs, %d push options and %d paths", ErrInvalid, len(q.Refs), len(q.Options), len(q.Paths))
	}
	for _, r := range q.Refs {
		if !strings.HasPrefix(r.Name, "refs/") {
			return fmt.Errorf("%w: the gate's question has ref %q", ErrInvalid, r.Name)
		}
	}
	return nil
}
