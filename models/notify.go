package models

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cross-replica notification (docs/operating.md, High availability). Several sidecars on one
// PostgreSQL database are one sidecar: a change committed through one
// must wake the --wait waiters, live-event streams and fenced-merge
// worker of all. The process that made a change Announces it; the store
// sends it on changesChannel with NOTIFY (payload "repoID:issue", or
// "repoID:*" for a whole repository, or "*" for everything), and every
// replica's Changes listens on a connection of its own. A notification
// only says "look again": whoever hears one rereads the ledger, so a
// change heard twice, or one that was no change, does no harm. On SQLite
// (one process) both are no-ops: the process already told itself.

// changesChannel is the channel of the NOTIFYs.
const (
	changesChannel = "collab_lease_changes"
	listenSQL      = "LISTEN " + changesChannel
)

// Everything is the Key Changes reports when any lease may have changed
// (after its connection was lost and made again); a Key with Issue 0
// means any issue of that repository.
var Everything = Key{}

// maxPendingChanges bounds the keys waiting to be sent; past it they
// collapse into Everything.
const maxPendingChanges = 4096

// Listener backoff bounds.
const (
	listenRetryMin = 100 * time.Millisecond
	listenRetryMax = 5 * time.Second
)

// announcer sends the NOTIFYs from one goroutine, a batch per round trip,
// so a write's caller never waits for them.
type announcer struct {
	mu      sync.Mutex
	pending map[string]struct{}
	kick    chan struct{}
	stop    chan struct{}
	started bool
	stopped bool
	done    sync.WaitGroup
}

// Announce tells the other replicas on this database that the leases on
// these keys may have changed; call it after the change is committed. It
// does not wait for the database: the notifications go out in the
// background, in order of announcement within a batch. On SQLite it does
// nothing.
func (s *Store) Announce(ks ...Key) {
	if !s.pg || len(ks) == 0 {
		return
	}
	a := &s.notes
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return
	}
	if !a.started {
		a.started = true
		a.pending = map[string]struct{}{}
		a.kick = make(chan struct{}, 1)
		a.stop = make(chan struct{})
		a.done.Go(s.sendChanges)
	}
	for _, k := range ks {
		a.pending[changePayload(k)] = struct{}{}
	}
	if len(a.pending) > maxPendingChanges {
		a.pending = map[string]struct{}{"*": {}}
	}
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// stopAnnouncing ends the sender after it sent what is pending (within a
// second), for Close.
func (s *Store) stopAnnouncing() {
	a := &s.notes
	a.mu.Lock()
	started := a.started && !a.stopped
	a.stopped = true
	a.mu.Unlock()
	if started {
		close(a.stop)
		a.done.Wait()
	}
}

func (s *Store) sendChanges() {
	a := &s.notes
	for {
		stopping := false
		select {
		case <-a.kick:
		case <-a.stop:
			stopping = true
		}
		a.mu.Lock()
		batch := make([]string, 0, len(a.pending))
		for p := range a.pending {
			batch = append(batch, p)
		}
		a.pending = map[string]struct{}{}
		a.mu.Unlock()
		if len(batch) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := s.db.WithContext(ctx).Exec("SELECT pg_notify(?, p) FROM unnest(?::text[]) AS p", changesChannel, textArray(batch)).Error
			cancel()
			if err != nil && !stopping {
				// The database is unreachable: keep them for the next
				// round (a waiter elsewhere still wakes at its lease's
				// expiry or its deadline meanwhile).
				a.mu.Lock()
				for _, p := range batch {
					a.pending[p] = struct{}{}
				}
				a.mu.Unlock()
				select {
				case <-a.stop:
					return
				case <-time.After(listenRetryMin * 10):
				}
				select {
				case a.kick <- struct{}{}:
				default:
				}
				continue
			}
		}
		if stopping {
			return
		}
	}
}

// textArray is a PostgreSQL text[] literal of ps; each element is
// digits, colons and '*' (changePayload), so no quoting is needed.
func textArray(ps []string) string {
	return "{" + strings.Join(ps, ",") + "}"
}

func changePayload(k Key) string {
	switch {
	case k.RepoID == 0:
		return "*"
	case k.Issue == 0:
		return strconv.FormatInt(k.RepoID, 10) + ":*"
	}
	return strconv.FormatInt(k.RepoID, 10) + ":" + strconv.FormatInt(k.Issue, 10)
}

// parseChange reads a payload of changePayload; ok is false for anything
// else (which is ignored).
func parseChange(p string) (Key, bool) {
	if p == "*" {
		return Everything, true
	}
	repo, issue, found := strings.Cut(p, ":")
	if !found {
		return Key{}, false
	}
	r, err := strconv.ParseInt(repo, 10, 64)
	if err != nil || r <= 0 {
		return Key{}, false
	}
	if issue == "*" {
		return Key{RepoID: r}, true
	}
	n, err := strconv.ParseInt(issue, 10, 64)
	if err != nil || n <= 0 {
		return Key{}, false
	}
	return Key{RepoID: r, Issue: n}, true
}

// Changes calls fn for each change any replica on this database
// Announces (this process's own included), until ctx ends; then it
// returns nil. It listens on a connection of its own; when that is lost
// it counts the loss (ListensLost), tells WithListenLost's function,
// connects again (backing off up to 5 s) and then calls fn(Everything),
// since what changed meanwhile cannot be told. fn runs on Changes'
// goroutine and should not block long. On SQLite it returns nil at once.
func (s *Store) Changes(ctx context.Context, fn func(Key)) error {
	if !s.pg {
		return nil
	}
	retry := listenRetryMin
	connected := false
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, s.pgCfg)
		if err == nil {
			_, err = conn.Exec(ctx, listenSQL)
		}
		if err == nil {
			if connected {
				fn(Everything) // changes made while we were away
			}
			connected = true
			retry = listenRetryMin
			err = listen(ctx, conn, fn)
			if ctx.Err() == nil {
				s.listensLost.Add(1)
				if s.onListenLost != nil {
					s.onListenLost(err)
				}
			}
		}
		if conn != nil {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(cctx)
			cancel()
		}
		if ctx.Err() != nil {
			break
		}
		_ = err // a lost connection: connect again
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
		retry = min(2*retry, listenRetryMax)
	}
	return nil
}

// WithListenLost sets what to tell, with the error, each time the
// connection Changes listens on is lost (on PostgreSQL; Changes connects
// again by itself).
func WithListenLost(f func(err error)) Option { return func(o *options) { o.onListenLost = f } }

// ListensLost is how many times the connection Changes listens on was
// lost since Open (0 on SQLite).
func (s *Store) ListensLost() int64 { return s.listensLost.Load() }

func listen(ctx context.Context, conn *pgx.Conn, fn func(Key)) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Channel != changesChannel {
			continue
		}
		if k, ok := parseChange(n.Payload); ok {
			fn(k)
		}
	}
}
