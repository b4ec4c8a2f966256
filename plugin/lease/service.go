package lease

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/live"
)

// Ledger is what the lease service needs of the lease store (models.Store).
type Ledger interface {
	Acquire(ctx context.Context, k models.Key, h models.Holder, ttl time.Duration, obs models.Observed) (models.Lease, error)
	Renew(ctx context.Context, k models.Key, h models.Holder, ttl time.Duration) (models.Lease, error)
	Release(ctx context.Context, k models.Key, h models.Holder) (*models.Lease, error)
	AcquireFirst(ctx context.Context, repoID int64, cands []models.Candidate, h models.Holder, ttl time.Duration) (models.Lease, error)
	ForceRelease(ctx context.Context, k models.Key, by models.Holder) (*models.Lease, error)
	Handoff(ctx context.Context, k models.Key, by, to models.Holder, force bool) (models.Lease, models.Lease, error)
	Tenures(ctx context.Context, k models.Key, limit int) ([]models.Tenure, error)
	InvoluntaryEnds(ctx context.Context, repoID int64, since time.Time, limit int) ([]models.Involuntary, error)
	Current(ctx context.Context, k models.Key) (*models.Lease, error)
	List(ctx context.Context, repoID int64) ([]models.Lease, error)
	ListPage(ctx context.Context, p models.Page) ([]models.Lease, int, error)
	// The forge's state of issues (events.go).
	Issue(ctx context.Context, k models.Key) (*models.IssueState, error)
	EndIssue(ctx context.Context, k models.Key, why models.Reason, version int64, delivery string) (models.Ended, error)
	ReopenIssue(ctx context.Context, k models.Key, version int64, delivery string) (models.Ended, error)
	EndRepo(ctx context.Context, repoID int64, delivery string) (models.Ended, error)
	LiveRepos(ctx context.Context) ([]int64, error)
	// Pull requests and their links, for fenced merges (plugin/fence).
	RecordPull(ctx context.Context, p models.Pull, delivery string) (bool, error)
	PullsLinkedTo(ctx context.Context, repoID, n int64) ([]models.Pull, error)
	PullOf(ctx context.Context, repoID, number int64) (*models.Pull, error)
	OpenPulls(ctx context.Context) ([]models.Pull, error)
	Leases(ctx context.Context, repoID int64, issues []int64) ([]models.Lease, error)
	// Browser sessions' epochs (identity.go).
	SessionEpoch(ctx context.Context, userID int64) (int64, error)
	EndSessions(ctx context.Context, userID int64) (int64, error)
	// Agent sessions (agentsessions.go in models).
	OpenSession(ctx context.Context, h models.Holder, grace time.Duration, max int) (models.SessionRef, error)
	ResumeSession(ctx context.Context, id string, h models.Holder) (models.SessionRef, []models.Lease, error)
	Heartbeat(ctx context.Context, ref models.SessionRef, h models.Holder, left time.Duration) (int, error)
	EndSession(ctx context.Context, ref models.SessionRef, h models.Holder) ([]models.Lease, error)
	SessionLeases(ctx context.Context, id string) ([]models.Lease, error)
	// The gate's decision about a push, and --renew-on-push (gate.go).
	Gate(ctx context.Context, p models.GatePush) (models.GateVerdict, error)
	TenureTTL(ctx context.Context, k models.Key, token int64) (time.Duration, bool, error)
	RenewTenure(ctx context.Context, k models.Key, h models.Holder, token int64, ttl time.Duration) (models.Lease, error)
	// Merge tickets: the turn to merge into a base branch (merge.go).
	TakeMergeTicket(ctx context.Context, t models.MergeTicket, bound time.Duration) (models.MergeTicket, error)
	DropMergeTicket(ctx context.Context, repoID int64, base, id string) error
	// Path reservations (reserve.go).
	Reserve(ctx context.Context, r models.Reserve) ([]models.Reservation, error)
	Unreserve(ctx context.Context, repoID int64, h models.Holder, globs []string, issue int64, force bool) ([]models.Reservation, error)
	Reservations(ctx context.Context, repoID int64, path string) ([]models.Reservation, error)
	ClaimReservations(ctx context.Context, k models.Key) ([]models.Reservation, error)
	PruneReservations(ctx context.Context) (int64, error)
	// The board's list of quarantined issues (board.go).
	Quarantined(ctx context.Context, repoID int64) ([]int64, error)
	// Quarantine (quarantine.go; models' quarantine.go).
	AcquireForced(ctx context.Context, k models.Key, h models.Holder, ttl time.Duration, obs models.Observed) (models.Lease, error)
	QuarantineOf(ctx context.Context, k models.Key) (models.Quarantine, error)
	RecordQuarantine(ctx context.Context, k models.Key) (models.Quarantine, bool, error)
	LiftQuarantine(ctx context.Context, k models.Key, labelGone bool) (bool, error)
	MarkQuarantineForged(ctx context.Context, k models.Key, token int64, labeled bool) error
	QuarantinesToForge(ctx context.Context) ([]models.Key, error)
	LapsedUnquarantined(ctx context.Context) ([]models.Key, error)
}

var _ Ledger = (*models.Store)(nil)

// Viewer is who asks: a forge account, or anonymous (the zero Viewer).
type Viewer struct {
	forge.User
	// Token is the API token an HTTP caller authenticated with; such a
	// viewer sees only what the token's scopes allow. "" for SSH and for
	// signed-in browsers.
	Token string
	// Agent is which of the account's agents asks (--agent); "" the
	// account itself. Agents of one account are distinct holders; any of
	// them may release the others' claims.
	Agent string
	// Session, when set, is the agent session the viewer's commands run
	// in: what they claim, the session keeps alive (sessions.go).
	Session *Session
}

// Anonymous reports whether v is nobody in particular.
func (v Viewer) Anonymous() bool { return v.ID == 0 }

func (v Viewer) holder() models.Holder {
	h := models.Holder{ID: v.ID, Login: v.Login, Agent: v.Agent}
	if v.Session != nil {
		ref := v.Session.Ref()
		h.Session = &ref
	}
	return h
}

// Service is the lease service every transport calls: for a viewer, a
// repository and an issue it decides who may do what (access.go), asks the
// forge only what it cannot know, makes the one ledger call and returns
// the reply of the contract, or a sentinel error (errors.go). What each
// verb does is in leases.go; who is asking, in identity.go.
//
// It never writes the ledger except through its committed Ledger
// (committed.go), which publishes every write on the change bus, and it
// makes no network call while a ledger call is in progress.
type Service struct {
	forge     Forge
	ledger    committed
	now       func() time.Time
	after     func(time.Duration) (<-chan time.Time, func() bool)
	issueTTL  time.Duration
	waits     *waits[models.Key]
	nextWaits *waits[nextKey] // next --wait
	next      *nextCache
	bus       *changes.Bus
	hub       *live.Hub
	// recheck is how often a stream asks the forge again about its
	// viewer (the hub's live.Options.Recheck).
	recheck time.Duration
	// priorities are the labels next prefers, highest first
	// (WithPriorityLabels).
	priorities []string
	// observeNext, if set, is told what each next cost (metrics).
	observeNext func(NextStats)
	// renewOnPush: the gate renews the claims a push carries (gate.go).
	renewOnPush bool
	// maxSessions caps the agent sessions of one account
	// (WithMaxSessionsPerAccount).
	maxSessions int
	// sessionsOpen and heartbeats count this process's agent sessions
	// open now and the heartbeats they wrote (SessionCounts).
	sessionsOpen, heartbeats atomic.Int64
	// sessions hands the bus's changes to the sessions they touch.
	sessions *sessionIndex
	// openIssues spares an acquire the read of an issue's record that
	// an acquire of it read lately.
	openIssues *openIssues
	// Merges (merge.go): the callers of this sidecar waiting for their
	// turn at a base branch, the conflict test, the bound of a merge
	// ticket and how often a waiting merge looks again.
	mergeWaits   *waits[mergeKey]
	conflictTest ConflictTest
	mergeBound   time.Duration
	mergeRecheck time.Duration
	// quarantine is the worker that tells the forge of quarantines
	// (quarantine.go), fed by the bus while RunQuarantine runs.
	quarantine *quarantineWork
	// The board (board.go): the last push the gate let in under each
	// claim, and repositories' names for the board of all.
	boardPushes boardPushes
	boardNames  boardNames
}

// DefaultIssueTTL is how long the ledger's record of an issue's state is
// trusted without asking the forge again (docs/operating.md, When issues close: webhooks keep it
// current; this bounds how long a missed delivery can mislead).
const DefaultIssueTTL = 10 * time.Minute

// Option configures NewService.
type Option func(*Service)

// WithClock sets the clock that tells whether the ledger's record of an
// issue is fresh (default time.Now).
func WithClock(now func() time.Time) Option { return func(s *Service) { s.now = now } }

// WithTimer sets the service's timers: the deadlines of acquire --wait
// and next --wait, and the streams' rechecks (the bus and the hub run on
// the timers they were built with). after(d) returns a channel that
// receives once d has passed on the service's clock, and a function that
// stops it (default time.NewTimer; a fake clock's After in tests).
func WithTimer(after func(time.Duration) (<-chan time.Time, func() bool)) Option {
	return func(s *Service) { s.after = after }
}

// WithPriorityLabels has next take the oldest candidate carrying the
// first of these labels, then the oldest carrying the second, and so on,
// and only then the oldest carrying none of them (next --oldest ignores
// them). Default none: oldest first.
func WithPriorityLabels(labels ...string) Option {
	return func(s *Service) { s.priorities = slices.Clone(labels) }
}

// WithNextObserver has every next report what it cost (for metrics).
func WithNextObserver(f func(NextStats)) Option { return func(s *Service) { s.observeNext = f } }

// WithIssueTTL sets how long the ledger's record of an issue's state is
// trusted (default DefaultIssueTTL); 0 or less: always ask the forge.
func WithIssueTTL(d time.Duration) Option { return func(s *Service) { s.issueTTL = d } }

// NewService returns the lease service over forge and ledger. It
// publishes its changes on bus and hears of them there; its streams
// (Watch) come from hub, which reads the same ledger and hears the same
// bus. Replicas, the live feeds and the fence worker of one process share
// that one bus. The caller builds the bus and the hub (serve, and
// leasetest for the tests), the hub before the service: the bus calls its
// subscribers in the order they subscribed, so the live feeds hear each
// change before the service's waiters do.
func NewService(forge Forge, ledger Ledger, bus *changes.Bus, hub *live.Hub, opts ...Option) (*Service, error) {
	if forge == nil || ledger == nil || bus == nil || hub == nil {
		return nil, errors.New("lease: the service needs a forge, a ledger, a change bus and a live hub")
	}
	s := &Service{forge: forge, bus: bus, hub: hub, recheck: hub.Options().Recheck, now: time.Now, after: changes.RealAfter, issueTTL: DefaultIssueTTL,
		waits: newWaits(DefaultWaitersPerIssue, DefaultWaiters), nextWaits: newNextWaits(DefaultWaiters), next: newNextCache(DefaultNextListTTL, DefaultNextCacheTTL),
		maxSessions: DefaultMaxSessionsPerAccount, sessions: newSessionIndex(), openIssues: newOpenIssues(defaultOpenIssues),
		mergeWaits: newMergeWaits(DefaultWaiters), mergeBound: contract.MergeTicketMax, mergeRecheck: MergeRecheck,
		quarantine: newQuarantineWork()}
	for _, o := range opts {
		o(s)
	}
	s.ledger = committed{Ledger: ledger, bus: s.bus}
	s.next.now, s.next.forge = s.now, s.forge
	// next's note of ended claims first: a waiter woken by a release
	// must find it noted (the bus calls its subscribers in this order).
	s.bus.Subscribe(s.next.heard)
	s.bus.Subscribe(s.waits.heard)
	s.bus.Subscribe(s.nextWaits.heard)
	s.bus.Subscribe(s.sessions.heard)
	s.bus.Subscribe(s.quarantine.heard)
	return s, nil
}
