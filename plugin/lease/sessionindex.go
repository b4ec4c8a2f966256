package lease

import (
	"sync"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
)

// sessionIndex is the one subscriber on the bus for every open session of
// this process: it hands a change only to the sessions that hold a claim
// it touches, and each of them judges it (Session.heard). With a
// subscriber per session, every change anywhere cost every open session a
// call and a lock on the committing goroutine: a thousand sessions, a
// thousand calls per acquire.
//
// The index may name more sessions than care (heard filters), never fewer:
// a key is added under the session's lock in the same step that makes it
// the session's claim (track, a resume), and removed in the step that
// drops it. A change published just before its key is added is not missed
// either: that race is the one a subscriber per session had, and the
// session's next heartbeat catches it (track).
type sessionIndex struct {
	mu     sync.RWMutex
	open   map[*Session]map[models.Key]struct{} // each open session's claims
	byKey  map[models.Key]map[*Session]struct{}
	byRepo map[int64]map[*Session]int // claims of each session per repository
}

func newSessionIndex() *sessionIndex {
	return &sessionIndex{open: map[*Session]map[models.Key]struct{}{}, byKey: map[models.Key]map[*Session]struct{}{},
		byRepo: map[int64]map[*Session]int{}}
}

// opened adds ss, with the claims it starts with (a resume's).
func (x *sessionIndex) opened(ss *Session, keys []models.Key) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.open[ss] = map[models.Key]struct{}{}
	for _, k := range keys {
		x.addLocked(ss, k)
	}
}

// closed removes ss and every claim of it.
func (x *sessionIndex) closed(ss *Session) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for k := range x.open[ss] {
		x.removeLocked(ss, k)
	}
	delete(x.open, ss)
}

// add records k as a claim of ss.
func (x *sessionIndex) add(ss *Session, k models.Key) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.addLocked(ss, k)
}

// remove records that k is no longer a claim of ss.
func (x *sessionIndex) remove(ss *Session, k models.Key) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.removeLocked(ss, k)
}

func (x *sessionIndex) addLocked(ss *Session, k models.Key) {
	mine := x.open[ss]
	if mine == nil {
		return // closed already: nothing of it is indexed
	}
	mine[k] = struct{}{}
	set := x.byKey[k]
	if set == nil {
		set = map[*Session]struct{}{}
		x.byKey[k] = set
	}
	if _, ok := set[ss]; ok {
		return
	}
	set[ss] = struct{}{}
	repo := x.byRepo[k.RepoID]
	if repo == nil {
		repo = map[*Session]int{}
		x.byRepo[k.RepoID] = repo
	}
	repo[ss]++
}

func (x *sessionIndex) removeLocked(ss *Session, k models.Key) {
	delete(x.open[ss], k)
	set := x.byKey[k]
	if _, ok := set[ss]; !ok {
		return
	}
	delete(set, ss)
	if len(set) == 0 {
		delete(x.byKey, k)
	}
	repo := x.byRepo[k.RepoID]
	if repo[ss]--; repo[ss] <= 0 {
		delete(repo, ss)
	}
	if len(repo) == 0 {
		delete(x.byRepo, k.RepoID)
	}
}

// heard is the index's subscriber: each session that holds a claim the
// set touches hears the set, once.
func (x *sessionIndex) heard(set changes.Set) {
	var to []*Session
	x.mu.RLock()
	if len(x.open) > 0 {
		to = x.touchedLocked(set)
	}
	x.mu.RUnlock()
	for _, ss := range to {
		ss.heard(set)
	}
}

// touchedLocked are the sessions that hold a claim set touches, each once.
func (x *sessionIndex) touchedLocked(set changes.Set) []*Session {
	var to []*Session
	var dup map[*Session]struct{} // only when several changes may name one session twice
	if len(set.Changes) > 1 {
		dup = map[*Session]struct{}{}
	}
	add := func(ss *Session) {
		if dup != nil {
			if _, ok := dup[ss]; ok {
				return
			}
			dup[ss] = struct{}{}
		}
		to = append(to, ss)
	}
	for _, c := range set.Changes {
		switch {
		case c.Reservations: // path reservations: no claim changed
		case c.Key == models.Everything:
			to, dup = to[:0], nil
			for ss := range x.open {
				to = append(to, ss)
			}
			return to
		case c.Key.Issue == 0: // a whole repository
			for ss := range x.byRepo[c.Key.RepoID] {
				add(ss)
			}
		default:
			for ss := range x.byKey[c.Key] {
				add(ss)
			}
		}
	}
	return to
}

// holding returns the open sessions that hold claim k.
func (x *sessionIndex) holding(k models.Key) []*Session {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]*Session, 0, len(x.byKey[k]))
	for ss := range x.byKey[k] {
		out = append(out, ss)
	}
	return out
}
