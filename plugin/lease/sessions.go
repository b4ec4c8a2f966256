package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/collab-lease/collab-lease/internal/shallow"
	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/live"
)

// Agent sessions (docs/ssh.md, Sessions): one connection of an agent
// whose claims live as long as it does. The ledger decides (models,
// agentsessions.go); a Session is the connection's side of it: it keeps
// the session heard from (Run: a keepalive every grace/3, and a
// heartbeat write after each answer), it knows which claims are the
// session's, and it tells the connection, as a Lost line, the moment one
// of them ends by anything but the session's own release.

// DefaultMaxSessionsPerAccount caps the sessions one account has alive
// (WithMaxSessionsPerAccount).
const DefaultMaxSessionsPerAccount = 64

// IdleSession is how long a session may hold no claim before it ends
// cleanly.
const IdleSession = time.Hour

// WithMaxSessionsPerAccount caps the sessions one account has alive, on
// every replica of the ledger together (default
// DefaultMaxSessionsPerAccount; 0: no cap).
func WithMaxSessionsPerAccount(n int) Option { return func(s *Service) { s.maxSessions = n } }

// Session is one agent session, held by the connection that opened or
// resumed it. Its methods are safe for concurrent use.
type Session struct {
	s   *Service
	who Viewer // the holder, without the session
	// lost holds the lost lines not yet taken (TakeLost), never blocking
	// Run; told is signalled when one is added.
	told chan struct{}
	// due is signalled when the Keeper has work (Keeper.Due): a look at
	// the claims (looking), a sign of life to write down (alive), a
	// keepalive answered (Keeper.answered).
	due     chan struct{}
	looking atomic.Bool
	alive   atomic.Bool
	unsub   func()
	done    sync.Once // close

	mu     sync.Mutex
	lost   []contract.Lost
	own    map[models.Key]int // keys the session's own commands are writing (writing)
	ref    models.SessionRef
	claims map[models.Key]*claim
	seen   time.Time // the last sign of life
	beaten time.Time // the sign of life the last heartbeat recorded
	okAt   time.Time // when the ledger last heard from it
	idle   time.Time // since when it has held no claim (zero: it holds some)
}

// claim is one claim of the session: its repository as the session named
// it, its token, and whether the session itself is ending it.
type claim struct {
	repo    string
	token   int64
	leaving bool
}

// OpenSession opens an agent session for v (docs/ssh.md, Sessions), with
// this grace (0: models.DefaultGrace), or resumes session resume if it is
// alive and v's. The first line of the session is its reply. A resume of
// a session that is not alive is a *ConflictError with a
// contract.SessionGone.
func (s *Service) OpenSession(ctx context.Context, v Viewer, grace time.Duration, resume string) (*Session, contract.SessionOpened, error) {
	if v.Anonymous() {
		return nil, contract.SessionOpened{}, fmt.Errorf("session: %w: no account", ErrInvalid)
	}
	v.Session = nil
	if grace == 0 {
		grace = models.DefaultGrace
	}
	ss := &Session{s: s, who: v, told: make(chan struct{}, 1), due: make(chan struct{}, 1),
		claims: map[models.Key]*claim{}, own: map[models.Key]int{}}
	var leases []models.Lease
	var err error
	if resume != "" {
		ss.ref, leases, err = s.ledger.ResumeSession(ctx, resume, v.holder())
		if errors.Is(err, models.ErrSessionGone) {
			return nil, contract.SessionOpened{}, &ConflictError{Reply: contract.SessionGone{Status: contract.StatusSessionGone, Session: resume}}
		}
	} else {
		ss.ref, err = s.ledger.OpenSession(ctx, v.holder(), grace, s.maxSessions)
	}
	if err != nil {
		return nil, contract.SessionOpened{}, err
	}
	now := s.now()
	ss.seen, ss.beaten, ss.okAt = now, now, now
	out := contract.SessionOpened{Status: contract.StatusSession, Session: ss.ref.ID, Holder: v.Login, Agent: contract.AgentPtr(v.Agent),
		GraceSeconds: int64(ss.ref.Grace / time.Second)}
	if resume != "" {
		kept := []contract.SessionLease{}
		names := map[int64]string{}
		for _, l := range leases {
			name, ok := names[l.RepoID]
			if !ok {
				name = s.repoNameFor(ctx, v, l.RepoID)
				names[l.RepoID] = name
			}
			ss.claims[l.Key] = &claim{repo: name, token: l.Token}
			kept = append(kept, contract.SessionLease{Repo: name, LeaseView: live.View(l)})
		}
		out.Leases = &kept
	}
	if len(ss.claims) == 0 {
		ss.idle = now
	}
	keys := make([]models.Key, 0, len(ss.claims))
	for k := range ss.claims {
		keys = append(keys, k)
	}
	s.sessions.opened(ss, keys)
	ss.unsub = func() { s.sessions.closed(ss) }
	s.sessionsOpen.Add(1)
	return ss, out, nil
}

// SessionCounts are the agent sessions this process holds open now, and
// the heartbeats they have written to the ledger (for metrics).
func (s *Service) SessionCounts() (open, heartbeats int64) {
	return s.sessionsOpen.Load(), s.heartbeats.Load()
}

// repoNameFor is the name of repository id as v may see it: its full
// name if v may still read it, else only "#<id>" (the claim is still the
// session's, but a repository v can no longer see, or one renamed
// since, is not named to it).
func (s *Service) repoNameFor(ctx context.Context, v Viewer, id int64) string {
	if full, err := s.forge.RepoName(ctx, id); err == nil {
		if owner, name, ok := strings.Cut(full, "/"); ok {
			if r, err := s.repo(ctx, v, owner, name); err == nil && r.ID == id {
				return r.FullName
			}
		}
	}
	return fmt.Sprintf("#%d", id)
}

// Ref is the session as the ledger knows it.
func (ss *Session) Ref() models.SessionRef {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.ref
}

// Grace is how long the session's claims outlive its last sign of life.
func (ss *Session) Grace() time.Duration { return ss.ref.Grace }

// Viewer is who the session's commands run as: its holder, in it.
func (ss *Session) Viewer() Viewer {
	v := ss.who
	v.Session = ss
	return v
}

// Told is signalled whenever a claim of the session has ended by
// anything but its own release: TakeLost then has its line.
func (ss *Session) Told() <-chan struct{} { return ss.told }

// TakeLost returns the lost lines not taken yet, oldest first.
func (ss *Session) TakeLost() []contract.Lost {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	out := ss.lost
	ss.lost = nil
	return out
}

// Close lets the session go on this connection, whatever ended it (End
// and Lose close it too); idempotent.
func (ss *Session) Close() { ss.close() }

// Alive records a sign of life of the session's connection (an answer to
// a keepalive, a line it sent).
func (ss *Session) Alive() {
	ss.mu.Lock()
	ss.seen = ss.s.now()
	ss.mu.Unlock()
	ss.alive.Store(true)
	ss.signal()
}

// signal tells the Keeper it has work (Due).
func (ss *Session) signal() {
	select {
	case ss.due <- struct{}{}:
	default:
	}
}

// Run keeps the session heard from until ctx ends or the session does:
// every interval (at most grace/3) it sends keepalive, which returns once
// the connection has answered it, and after an answer (or a line, Alive)
// writes a heartbeat to the ledger, at most one per grace/3. It returns
// ErrSessionLost once the connection has not answered for a whole grace,
// ErrSessionMoved or ErrSessionGone if the ledger says so,
// ErrSessionIdle after IdleSession without a claim, or ctx's error.
// Meanwhile it watches the session's claims (Told). It is the Keeper's
// loop on a goroutine of its own; a transport with a loop of its own
// runs the Keeper in it instead.
func (ss *Session) Run(ctx context.Context, every time.Duration, keepalive func() error) error {
	k := ss.Keeper(every, keepalive)
	defer k.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-k.Due():
			err = k.Step(ctx, ctx, false)
		case <-k.Tick():
			err = k.Step(ctx, ctx, true)
		}
		if err != nil {
			return err
		}
	}
}

// Keeper keeps a session heard from, driven by a loop that waits on its
// two channels, Due and Tick (Tick's channel changes at each tick, so
// ask for it each time round), and calls Step when either receives, one
// step at a time. A thousand idle sessions each with a goroutine of
// their own for it would cost as much again; so a transport whose
// session has a loop already runs the Keeper in it, and Run is that loop
// for one that has none.
type Keeper struct {
	ss        *Session
	every     time.Duration
	keepalive func() error
	tick      <-chan time.Time
	stop      func() bool
	asking    bool
	answered  atomic.Bool // the keepalive was answered (Due)
}

// Keeper arms the session's keepalives, every interval (at most grace/3).
func (ss *Session) Keeper(every time.Duration, keepalive func() error) *Keeper {
	k := &Keeper{ss: ss, every: min(every, ss.ref.Grace/3), keepalive: keepalive}
	k.tick, k.stop = ss.s.after(k.every)
	return k
}

// Stop disarms the keeper.
func (k *Keeper) Stop() { k.stop() }

// Tick receives when a keepalive is due: call Step with ticked.
func (k *Keeper) Tick() <-chan time.Time { return k.tick }

// Due receives when the keeper has work: the session's claims to look
// at, a keepalive answered, a sign of life to write down. Call Step.
func (k *Keeper) Due() <-chan struct{} { return k.ss.due }

// Step does what is due, ticked saying whether Tick received: it looks
// at the session's claims, telling the lost ones (in look, the context
// of the session's commands); records a keepalive's answer as a sign of
// life; writes a heartbeat if one is due; and at a tick, takes a
// keepalive's turn (onTick). The ledger's calls run in ctx. An error
// means the session is over (Run says which).
func (k *Keeper) Step(ctx, look context.Context, ticked bool) error {
	ss := k.ss
	if ss.looking.Swap(false) {
		shallow.Run(func() { ss.check(look) })
	}
	if k.answered.Swap(false) {
		k.asking = false
		ss.Alive()
	}
	if ss.alive.Swap(false) {
		if err := ss.beat(ctx); err != nil {
			return err
		}
	}
	if ticked {
		return k.onTick(ctx)
	}
	return nil
}

// onTick is a keepalive's turn: the session is lost after a whole grace
// without a sign of life, ends after IdleSession without a claim; else
// it writes a heartbeat if one is due, and sends a keepalive unless one
// is still unanswered.
func (k *Keeper) onTick(ctx context.Context) error {
	ss := k.ss
	k.tick, k.stop = ss.s.after(k.every)
	ss.mu.Lock()
	silent, idle := ss.s.now().Sub(ss.seen), ss.idleFor()
	ss.mu.Unlock()
	switch {
	case silent >= ss.ref.Grace:
		return ErrSessionLost
	case idle >= IdleSession:
		return ErrSessionIdle
	}
	if err := ss.beat(ctx); err != nil {
		return err
	}
	if !k.asking {
		k.asking = true
		go func() {
			if k.keepalive() == nil {
				k.answered.Store(true)
				k.ss.signal()
			}
		}()
	}
	return nil
}

func (ss *Session) idleFor() time.Duration {
	if ss.idle.IsZero() {
		return 0
	}
	return ss.s.now().Sub(ss.idle)
}

// beat writes a heartbeat if the session was heard from since the last
// one and about grace/3 has passed since it (a keepalive answered a
// little early must not skip a whole round). A heartbeat that fails is
// tried again at the next chance; once the ledger has not heard from the
// session for a whole grace, its claims have lapsed.
func (ss *Session) beat(ctx context.Context) error {
	ss.mu.Lock()
	now, seen, beaten, okAt, ref := ss.s.now(), ss.seen, ss.beaten, ss.okAt, ss.ref
	ss.mu.Unlock()
	if !seen.After(beaten) || now.Sub(okAt) < ref.Grace*3/10 {
		return nil
	}
	left := ref.Grace - now.Sub(seen)
	if left <= 0 {
		return nil
	}
	var err error
	kept := 0
	shallow.Run(func() { kept, err = ss.s.ledger.Heartbeat(ctx, ref, ss.who.holder(), left) })
	switch {
	case err == nil:
		ss.s.heartbeats.Add(1)
		ss.mu.Lock()
		ss.beaten, ss.okAt = seen, now
		claims := 0
		for _, c := range ss.claims {
			if !c.leaving {
				claims++
			}
		}
		ss.mu.Unlock()
		if kept < claims {
			// One lapsed with nothing published (its cap came), or
			// left the session: look.
			ss.poke()
		}
		return nil
	case errors.Is(err, models.ErrSessionMoved):
		return ErrSessionMoved
	case errors.Is(err, models.ErrSessionGone):
		ss.loseAll(ctx)
		return ErrSessionGone
	case now.Sub(okAt) >= ref.Grace:
		ss.loseAll(ctx)
		return fmt.Errorf("%w: %w", ErrSessionGone, err)
	}
	return nil // tried again at the next chance
}

// Lose records, once the connection is gone, how long the session's
// claims have left: until a grace after its last sign of life. A --resume
// within that grace takes them over; otherwise they lapse then.
func (ss *Session) Lose(ctx context.Context) {
	defer ss.close()
	ss.mu.Lock()
	seen, beaten, ref := ss.seen, ss.beaten, ss.ref
	ss.mu.Unlock()
	left := ref.Grace - ss.s.now().Sub(seen)
	if !seen.After(beaten) || left <= 0 {
		return
	}
	if _, err := ss.s.ledger.Heartbeat(ctx, ref, ss.who.holder(), left); err == nil {
		ss.s.heartbeats.Add(1)
	}
}

// End ends the session cleanly: its claims are released. A session
// another connection resumed is left to it.
func (ss *Session) End(ctx context.Context) error {
	defer ss.close()
	ss.mu.Lock()
	for _, c := range ss.claims {
		c.leaving = true
	}
	ref := ss.ref
	ss.mu.Unlock()
	_, err := ss.s.ledger.EndSession(ctx, ref, ss.who.holder())
	return err
}

func (ss *Session) close() {
	ss.done.Do(func() {
		ss.unsub()
		ss.s.sessionsOpen.Add(-1)
	})
}

// track records that l, of repository repo, is the session's (ss nil:
// a command outside any session).
func (ss *Session) track(repo string, l models.Lease) {
	if ss == nil || l.Session != ss.ref.ID {
		return
	}
	ss.mu.Lock()
	ss.claims[l.Key] = &claim{repo: repo, token: l.Token}
	ss.s.sessions.add(ss, l.Key)
	ss.idle = time.Time{}
	ss.mu.Unlock()
	// Anything that ended it before it was tracked was published before:
	// the next heartbeat keeps fewer claims than the session has, and
	// has it look (beat).
}

// writing marks k as being written by the session's own command (an
// acquire, a renew): the change that write publishes is the session's
// own, which it need not look at; done unmarks it. A foreign change
// published meanwhile is caught at the next heartbeat (beat).
func (ss *Session) writing(k models.Key) (done func()) {
	if ss == nil {
		return func() {}
	}
	ss.mu.Lock()
	ss.own[k]++
	ss.mu.Unlock()
	return func() {
		ss.mu.Lock()
		if ss.own[k]--; ss.own[k] <= 0 {
			delete(ss.own, k)
		}
		ss.mu.Unlock()
	}
}

// leaving marks k as being ended by the session itself (its release);
// done says whether it was: then k is no longer the session's.
func (ss *Session) leaving(k models.Key) (done func(ok bool)) {
	if ss == nil {
		return func(bool) {}
	}
	ss.mu.Lock()
	c := ss.claims[k]
	if c != nil {
		c.leaving = true
	}
	ss.mu.Unlock()
	return func(ok bool) {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		if c == nil || ss.claims[k] != c {
			return
		}
		if !ok {
			c.leaving = false
			return
		}
		delete(ss.claims, k)
		ss.s.sessions.remove(ss, k)
		if len(ss.claims) == 0 {
			ss.idle = ss.s.now()
		}
	}
}

func (ss *Session) poke() {
	ss.looking.Store(true)
	ss.signal()
}

// heard is how the session hears the bus, through the service's index
// (sessionIndex): a change of one of its claims has it look again.
func (ss *Session) heard(set changes.Set) {
	ss.mu.Lock()
	mine := false
	for _, c := range set.Changes {
		if c.Key == models.Everything {
			mine = len(ss.claims) > 0
			break
		}
		if ss.own[c.Key] > 0 && !c.Ended {
			continue // the session's own acquire or renew
		}
		for k := range ss.claims {
			if k == c.Key || (c.Key.Issue == 0 && k.RepoID == c.Key.RepoID) {
				mine = true
				break
			}
		}
		if mine {
			break
		}
	}
	ss.mu.Unlock()
	if mine {
		ss.poke()
	}
}

// check looks again at the session's claims: each that is no longer its
// live lease has ended, and is told to the connection. Only a claim that
// was the session's before the ledger was read is judged by that read: a
// claim tracked since (the session released the issue and claimed it
// again meanwhile) is newer than what the read saw, and track has poked
// another look at it.
func (ss *Session) check(ctx context.Context) {
	ss.mu.Lock()
	before := make(map[models.Key]*claim, len(ss.claims))
	for k, c := range ss.claims {
		if !c.leaving {
			before[k] = c
		}
	}
	ss.mu.Unlock()
	for k, was := range before {
		cur, err := ss.s.ledger.Current(ctx, k)
		if err != nil {
			ss.poke() // the ledger did not answer: look again
			continue
		}
		ss.mu.Lock()
		c := ss.claims[k]
		var mine claim
		if c != nil {
			mine = *c
		}
		ss.mu.Unlock()
		switch {
		case c != was || mine.leaving:
			continue
		case cur != nil && cur.Token == mine.token && cur.Session == ss.ref.ID:
			continue // still the session's
		case cur != nil && cur.Token == mine.token && cur.Holder.ID == ss.who.ID && cur.Holder.Agent == ss.who.Agent:
			ss.forget(k, c) // its holder renewed it outside the session: no longer the session's to keep, but not lost
			continue
		}
		if !ss.forget(k, c) {
			continue // the session itself began to end it meanwhile
		}
		ss.tell(ctx, contract.Lost{Status: contract.StatusLost, Repo: mine.repo, Issue: k.Issue, Token: mine.token, EndedBy: ss.endedBy(ctx, k, mine.token)})
	}
}

// forget drops claim c of k, unless the session is ending it itself; it
// says whether it dropped it.
func (ss *Session) forget(k models.Key, c *claim) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.claims[k] != c || c.leaving {
		return false
	}
	delete(ss.claims, k)
	ss.s.sessions.remove(ss, k)
	if len(ss.claims) == 0 && ss.idle.IsZero() {
		ss.idle = ss.s.now()
	}
	return true
}

// endedBy is how tenure token of k ended, as the history says.
func (ss *Session) endedBy(ctx context.Context, k models.Key, token int64) string {
	ts, err := ss.s.ledger.Tenures(ctx, k, 5)
	if err == nil {
		for _, t := range ts {
			if t.Token == token && t.EndedBy != "" {
				return string(t.EndedBy)
			}
		}
	}
	return contract.EndTakenOver
}

// loseAll tells the connection every claim of the session is lost: the
// ledger stopped keeping them alive.
func (ss *Session) loseAll(ctx context.Context) {
	ss.mu.Lock()
	var out []contract.Lost
	for k, c := range ss.claims {
		if !c.leaving {
			out = append(out, contract.Lost{Status: contract.StatusLost, Repo: c.repo, Issue: k.Issue, Token: c.token, EndedBy: contract.EndSessionLost})
		}
		ss.s.sessions.remove(ss, k)
	}
	clear(ss.claims)
	ss.mu.Unlock()
	for _, l := range out {
		ss.tell(ctx, l)
	}
}

func (ss *Session) tell(_ context.Context, l contract.Lost) {
	ss.mu.Lock()
	ss.lost = append(ss.lost, l)
	ss.mu.Unlock()
	select {
	case ss.told <- struct{}{}:
	default:
	}
}
