package models

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// The gate's decision (docs/operating.md, The gate): Gitea's pre-receive
// hook asks about every push, and the ledger answers from one read, with
// no request to the forge. A branch is fenced while it is the head branch
// of an open pull request of the same repository that is claimed, or that
// closes a claimed issue (the claims that fence it are the pull request's
// own, else those of the issues it closes: the set the push fence uses).
// A push to a fenced branch goes in when its pusher's account holds one
// of those claims and, unless that claim is a person's (no agent), one of
// its push options names the claim with its current token:
// collab-lease=<issue>:<token>. Tokens are not secrets: the account is
// what the forge vouches for, the token which of its tenures is pushing.

// GatePush is one push the gate asks about.
type GatePush struct {
	RepoID int64
	// Repo is the repository's full name, for the lines the pusher reads.
	Repo string
	// Pusher is the pushing account (ID and login; no agent: the forge
	// knows accounts only).
	Pusher Holder
	// Internal is a push the forge makes itself (a pull request's ref):
	// never fenced.
	Internal bool
	// Merge is a merge the forge makes of pull request MergeOf: where an
	// agent's claim fences the pull request, it goes in only under a
	// merge ticket of that claim's current tenure (merges.go); a person's
	// claim leaves it to the required status, as before the gate.
	Merge   bool
	MergeOf int64
	Options []string
	Refs    []GateRef
	// Paths are the paths the push's new commits change; with
	// PathsAreDirs, directories standing for everything under them.
	Paths        []string
	PathsAreDirs bool
}

// GateRef is one ref a push updates.
type GateRef struct {
	Old, New string
	Name     string // refs/heads/<branch>, …
}

// Why a ref was refused, for the metrics.
const (
	GateStale        = "stale"         // the push carries an older token of the claim
	GateNoToken      = "no_token"      // the push names no token of the claim
	GateBadToken     = "bad_token"     // a token the claim never had, or an option that is no token
	GateOtherAccount = "other_account" // the pusher's account holds none of the claims
	GateNoTicket     = "no_ticket"     // a merge of a claimed pull request, not under its claim's merge ticket
	GateReserved     = "reserved"      // the push changes a path under another holder's exclusive reservation
)

// GateVerdict is the gate's answer to one push.
type GateVerdict struct {
	Allow bool
	// Lines are what the pusher reads, one per refused ref.
	Lines []string
	// Refused are the reasons, one per refused ref (GateStale, …).
	Refused []string
	// Carried are the live claims whose current token an allowed ref of
	// the push carried (for --renew-on-push), without repeats.
	Carried []Lease
}

// gateClaim is one live claim fencing a branch, with the pull request it
// fences it through.
type gateClaim struct {
	Lease
	branch string
	pull   int64
}

// gateSQL reads, for the branches of a push, the live claims that fence
// them: each open pull request of the repository with that head branch
// (found by the branch's index), joined to the issues it is linked to
// (itself included) and their live leases, each by its primary key. The
// last argument is the read's time (readNow). The joins are CROSS JOINs
// so that SQLite reads the pull requests first, by the branch, whatever
// its statistics say (without them it read every link of the
// repository first: 1,000 pull requests made a decision 15 times
// slower); PostgreSQL orders them itself.
const gateSQL = "SELECT p.branch, p.number, l.repo_id, l.issue, l.holder, l.holder_id, l.kind, l.token, l.acquired_at, l.expires_at, l.agent, l.session, l.cap_at" +
	" FROM pull_requests p CROSS JOIN pull_links k CROSS JOIN leases l" +
	" WHERE p.branch IN ? AND p.repo_id = ? AND p.open" +
	" AND k.repo_id = p.repo_id AND k.pull = p.number" +
	" AND l.repo_id = k.repo_id AND l.issue = k.issue" +
	" AND l.holder IS NOT NULL AND (l.expires_at IS NULL OR l.expires_at > ?)"

// Gate decides whether a push goes in (rules 1 to 4 of the gate), in one
// read of the ledger (two for a merge).
func (s *Store) Gate(ctx context.Context, p GatePush) (GateVerdict, error) {
	if p.RepoID <= 0 || p.Pusher.ID < 0 {
		return GateVerdict{}, fmt.Errorf("gate %d: %w: bad repository or pusher", p.RepoID, ErrInvalid)
	}
	if p.Internal {
		return GateVerdict{Allow: true}, nil
	}
	if p.Merge {
		return s.gateMerge(ctx, p)
	}
	v, err := s.gateRefs(ctx, p)
	if err != nil || len(p.Paths) == 0 {
		return v, err
	}
	lines, err := s.gateReserved(ctx, p)
	if err != nil {
		return GateVerdict{}, fmt.Errorf("gate %d: %w", p.RepoID, err)
	}
	if len(lines) > 0 {
		v.Allow, v.Carried = false, nil
		v.Lines = append(v.Lines, lines...)
		for range lines {
			v.Refused = append(v.Refused, GateReserved)
		}
	}
	return v, nil
}

// gateRefs decides the refs of a push (rules 1 to 3).
func (s *Store) gateRefs(ctx context.Context, p GatePush) (GateVerdict, error) {
	v := GateVerdict{Allow: true}
	var branches []string
	for _, r := range p.Refs {
		if b, ok := strings.CutPrefix(r.Name, "refs/heads/"); ok && b != "" && len(b) <= MaxBranchLen {
			branches = append(branches, b)
		}
	}
	if len(branches) == 0 {
		return v, nil
	}
	slices.Sort(branches)
	branches = slices.Compact(branches)
	claims, err := s.gateClaims(ctx, p.RepoID, branches)
	if err != nil {
		return GateVerdict{}, fmt.Errorf("gate %d: %w", p.RepoID, err)
	}
	carried := parseGateOptions(p.Options)
	for _, r := range p.Refs {
		b, ok := strings.CutPrefix(r.Name, "refs/heads/")
		if !ok {
			continue
		}
		fencing := fencingClaims(claims, b)
		if len(fencing) == 0 {
			continue
		}
		admitted, line, reason := gateAdmit(p, b, fencing, carried)
		if admitted != nil {
			if t, ok := carried.tokens[admitted.Issue]; ok && t == admitted.Token && admitted.ExpiresAt != nil && admitted.Session == "" &&
				!slices.ContainsFunc(v.Carried, func(l Lease) bool { return l.Key == admitted.Key }) {
				v.Carried = append(v.Carried, admitted.Lease)
			}
			continue
		}
		v.Allow = false
		v.Lines = append(v.Lines, line)
		v.Refused = append(v.Refused, reason)
	}
	if !v.Allow {
		v.Carried = nil // nothing of a refused push goes in
	}
	return v, nil
}

// gateMergeSQL reads the live claims that fence pull request n: its own,
// and those of the issues it is linked to (the last argument is the
// read's time, readNow).
const gateMergeSQL = "SELECT l.repo_id, l.issue, l.holder, l.holder_id, l.kind, l.token, l.acquired_at, l.expires_at, l.agent, l.session, l.cap_at" +
	" FROM leases l WHERE l.repo_id = ? AND (l.issue = ? OR l.issue IN (SELECT k.issue FROM pull_links k WHERE k.repo_id = ? AND k.pull = ?))" +
	" AND l.holder IS NOT NULL AND (l.expires_at IS NULL OR l.expires_at > ?)"

// gateMerge decides a merge of pull request p.MergeOf (rule 4): the claims
// that fence it are its own if it has one, else those of the issues it
// closes; if an agent holds one, the merge goes in only when it is made
// by that agent's account under a live merge ticket of the claim's
// current token.
func (s *Store) gateMerge(ctx context.Context, p GatePush) (GateVerdict, error) {
	allow := GateVerdict{Allow: true}
	n := p.MergeOf
	if n <= 0 {
		return allow, nil // not a pull request Gitea named: nothing to look up
	}
	rows, err := s.db.WithContext(ctx).Raw(gateMergeSQL, p.RepoID, n, p.RepoID, n, s.readNow()).Rows()
	if err != nil {
		return GateVerdict{}, fmt.Errorf("gate merge %d!%d: %w", p.RepoID, n, mapDBError(err))
	}
	var claims []Lease
	for rows.Next() {
		var r leaseRow
		if err := rows.Scan(r.fields()...); err != nil {
			rows.Close()
			return GateVerdict{}, fmt.Errorf("gate merge %d!%d: %w", p.RepoID, n, mapDBError(err))
		}
		claims = append(claims, r.lease())
	}
	if err := rows.Close(); err != nil {
		return GateVerdict{}, fmt.Errorf("gate merge %d!%d: %w", p.RepoID, n, mapDBError(err))
	}
	if own := slices.IndexFunc(claims, func(l Lease) bool { return l.Issue == n }); own >= 0 {
		claims = claims[own : own+1]
	}
	claims = slices.DeleteFunc(claims, func(l Lease) bool { return l.Holder.Agent == "" })
	if len(claims) == 0 {
		return allow, nil
	}
	tickets, err := s.mergeTicketsOf(ctx, p.RepoID, n)
	if err != nil {
		return GateVerdict{}, fmt.Errorf("gate merge %d!%d: %w", p.RepoID, n, err)
	}
	for _, c := range claims {
		for _, t := range tickets {
			if t.Issue == c.Issue && t.Token == c.Token && t.HolderID == c.Holder.ID && t.Agent == c.Holder.Agent && p.Pusher.ID == c.Holder.ID {
				return allow, nil
			}
		}
	}
	return GateVerdict{
		Lines:   []string{fmt.Sprintf("collab-lease: merging %s!%d needs the current claim: merge with git collab merge", p.Repo, n)},
		Refused: []string{GateNoTicket},
	}, nil
}

// gateClaims reads the live claims that fence the branches.
func (s *Store) gateClaims(ctx context.Context, repoID int64, branches []string) ([]gateClaim, error) {
	rows, err := s.db.WithContext(ctx).Raw(gateSQL, branches, repoID, s.readNow()).Rows()
	if err != nil {
		return nil, mapDBError(err)
	}
	defer rows.Close()
	var out []gateClaim
	for rows.Next() {
		var c gateClaim
		var r leaseRow
		if err := rows.Scan(append([]any{&c.branch, &c.pull}, r.fields()...)...); err != nil {
			return nil, mapDBError(err)
		}
		c.Lease = r.lease()
		out = append(out, c)
	}
	return out, mapDBError(rows.Err())
}

// fencingClaims are the claims that fence branch: per open pull request
// with that head branch, its own claim if it has one, else those of the
// issues it closes; by issue, without repeats.
func fencingClaims(claims []gateClaim, branch string) []gateClaim {
	var out []gateClaim
	for _, c := range claims {
		if c.branch != branch {
			continue
		}
		own := slices.ContainsFunc(claims, func(o gateClaim) bool { return o.branch == branch && o.pull == c.pull && o.Issue == o.pull })
		if own && c.Issue != c.pull {
			continue
		}
		if !slices.ContainsFunc(out, func(o gateClaim) bool { return o.Issue == c.Issue }) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b gateClaim) int { return cmp.Compare(a.Issue, b.Issue) })
	return out
}

// gateOptions are the collab-lease push options of a push.
type gateOptions struct {
	tokens    map[int64]int64 // issue -> the token the push names for it
	malformed string          // the first option of the key that is no <issue>:<token>
	any       bool            // the push carries an option of the key
}

func parseGateOptions(opts []string) gateOptions {
	g := gateOptions{tokens: map[int64]int64{}}
	for _, o := range opts {
		val, ok := strings.CutPrefix(o, contract.GatePushOption+"=")
		if !ok {
			continue
		}
		g.any = true
		is, ts, ok := strings.Cut(val, ":")
		issue, err1 := strconv.ParseInt(is, 10, 64)
		token, err2 := strconv.ParseInt(ts, 10, 64)
		if !ok || err1 != nil || err2 != nil || issue <= 0 || token <= 0 {
			if g.malformed == "" {
				g.malformed = o
			}
			continue
		}
		g.tokens[issue] = token
	}
	return g
}

// gateAdmit decides one ref to a fenced branch: the claim that admits it, or
// the line and reason of its refusal.
func gateAdmit(p GatePush, branch string, fencing []gateClaim, opts gateOptions) (*gateClaim, string, string) {
	for i := range fencing {
		c := &fencing[i]
		if p.Pusher.ID <= 0 || c.Holder.ID != p.Pusher.ID {
			continue
		}
		if t, ok := opts.tokens[c.Issue]; (ok && t == c.Token) || c.Holder.Agent == "" {
			return c, "", ""
		}
	}
	// Refused: name the claim the push names a token of, else the first.
	c := fencing[0]
	for _, f := range fencing {
		if _, ok := opts.tokens[f.Issue]; ok {
			c = f
			break
		}
	}
	head := fmt.Sprintf("collab-lease: %s is claimed: %s#%d by %s (token %d); ", branch, p.Repo, c.Issue, holderName(c.Holder), c.Token)
	t, named := opts.tokens[c.Issue]
	switch {
	case c.Holder.ID != p.Pusher.ID || p.Pusher.ID <= 0:
		what := "no token"
		if named {
			what = "token " + strconv.FormatInt(t, 10)
		}
		return nil, head + fmt.Sprintf("this push is by %s, not %s (it carries %s)", cmp.Or(p.Pusher.Login, "an unknown account"), c.Holder.Login, what), GateOtherAccount
	case named && t < c.Token:
		return nil, head + fmt.Sprintf("this push carries token %d, which is stale", t), GateStale
	case named:
		return nil, head + fmt.Sprintf("this push carries token %d, which it never had", t), GateBadToken
	case opts.malformed != "":
		return nil, head + fmt.Sprintf("this push carries %q, which is no <issue>:<token>: push with -o %s=%d:%d", opts.malformed, contract.GatePushOption, c.Issue, c.Token), GateBadToken
	case len(opts.tokens) > 0:
		return nil, head + fmt.Sprintf("this push carries no token of #%d: push with -o %s=%d:%d (git collab run does it for you)", c.Issue, contract.GatePushOption, c.Issue, c.Token), GateNoToken
	default:
		return nil, head + fmt.Sprintf("this push carries no token: push with -o %s=%d:%d (git collab run does it for you)", contract.GatePushOption, c.Issue, c.Token), GateNoToken
	}
}

// holderName is how a line names a holder: its login, and " · agent".
func holderName(h Holder) string {
	if h.Agent == "" {
		return h.Login
	}
	return h.Login + " · " + h.Agent
}

// TenureTTL returns the time to live the holder last gave tenure token of
// k (the expiry its latest acquire or renewal set, less when it did), or
// false when the history has none (an open-ended or session's tenure).
func (s *Store) TenureTTL(ctx context.Context, k Key, token int64) (time.Duration, bool, error) {
	var evs []Event
	err := s.db.WithContext(ctx).Where("repo_id = ? AND issue = ? AND token = ? AND expires_at IS NOT NULL AND action IN ?",
		k.RepoID, k.Issue, token, []Action{ActionAcquire, ActionTakeover, ActionReacquire, ActionRenew, ActionHandoff}).
		Order("id DESC").Limit(1).Find(&evs).Error
	if err != nil {
		return 0, false, fmt.Errorf("ttl of %d#%d: %w", k.RepoID, k.Issue, mapDBError(err))
	}
	if len(evs) == 0 || *evs[0].ExpiresAt <= evs[0].At {
		return 0, false, nil
	}
	return time.Duration(*evs[0].ExpiresAt-evs[0].At) * time.Second, true, nil
}
