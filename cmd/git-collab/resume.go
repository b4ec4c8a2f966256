package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// keptSession is a session kept across dropped connections: when its ssh
// ends by anything but Close, it opens the session again with --resume,
// within the session's grace, and goes on on the new connection. What
// happens meanwhile is told as events, in order; the caller decides what
// they mean for its claims (git collab run stops its command, git collab
// mcp tells the agent).
type keptSession struct {
	// dial opens the session (resume "") or takes it over (resume its id).
	dial func(ctx context.Context, resume string, notify func(contract.Lost)) (*session, error)

	mu      sync.Mutex
	cur     *session      // nil while reconnecting, and once gone or closed
	ready   chan struct{} // closed when cur is set again, or the session is gone
	id      string
	grace   time.Duration
	goneWhy string // set once the session is gone
	closed  bool
	stop    chan struct{} // closed by Close: stop reconnecting
	events  []sessionEvent
	wake    chan struct{} // has a value when events has some
}

// sessionEvent is one thing that happened to a kept session.
type sessionEvent struct {
	lost    *contract.Lost          // a claim of the session ended
	resumed *contract.SessionOpened // the connection dropped and the session was taken back, with these leases
	gone    string                  // the session is gone, and why: its claims end, if they have not
}

// resumeBackoff is the first wait between two attempts to resume a
// session; it doubles up to a third of the grace.
var resumeBackoff = 500 * time.Millisecond

// keepSession opens a session through dial and keeps it.
func keepSession(ctx context.Context, dial func(context.Context, string, func(contract.Lost)) (*session, error)) (*keptSession, error) {
	k := &keptSession{dial: dial, ready: make(chan struct{}), stop: make(chan struct{}), wake: make(chan struct{}, 1)}
	s, err := dial(ctx, "", k.lost)
	if err != nil {
		return nil, err
	}
	k.id, k.grace = s.opened.Session, graceOf(s.opened)
	k.set(s)
	return k, nil
}

// Opened is the session's first line, as it was opened.
func (k *keptSession) Opened() contract.SessionOpened {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cur != nil {
		return k.cur.opened
	}
	return contract.SessionOpened{Session: k.id, GraceSeconds: int64(k.grace / time.Second)}
}

// Wake has a value whenever there are events to take.
func (k *keptSession) Wake() <-chan struct{} { return k.wake }

// Closed is closed once Close is called.
func (k *keptSession) Closed() <-chan struct{} { return k.stop }

// TakeEvents returns the events since the last call, oldest first.
func (k *keptSession) TakeEvents() []sessionEvent {
	k.mu.Lock()
	defer k.mu.Unlock()
	ev := k.events
	k.events = nil
	return ev
}

func (k *keptSession) push(e sessionEvent) {
	k.mu.Lock()
	k.events = append(k.events, e)
	k.mu.Unlock()
	k.wakeUp()
}

func (k *keptSession) wakeUp() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

func (k *keptSession) lost(n contract.Lost) { k.push(sessionEvent{lost: &n}) }

// set makes s the current connection and watches it.
func (k *keptSession) set(s *session) {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		s.Close() // a reconnection that came after Close
		return
	}
	k.cur = s
	close(k.ready)
	k.mu.Unlock()
	go k.watch(s)
}

// watch waits for s's ssh to end; unless Close ended it, it reconnects.
func (k *keptSession) watch(s *session) {
	<-s.Done()
	if s.Closing() {
		return
	}
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return
	}
	k.cur, k.ready = nil, make(chan struct{})
	k.mu.Unlock()
	// The sidecar keeps the claims until grace after the last sign of
	// life, which came before this: past that deadline, a resume can only
	// be refused.
	deadline := time.Now().Add(k.grace)
	if strings.Contains(s.Exit().said, "session resumed elsewhere") {
		k.gone("the session was resumed on another connection")
		return
	}
	delay := resumeBackoff
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		ns, err := k.dial(ctx, k.id, k.lost)
		cancel()
		switch {
		case err == nil:
			o := ns.opened
			k.push(sessionEvent{resumed: &o})
			k.set(ns)
			return
		case errors.Is(err, errSessionGone):
			k.gone("the connection to the sidecar dropped, and the sidecar no longer has the session")
			return
		}
		if time.Now().Add(delay).After(deadline) {
			k.gone(fmt.Sprintf("the connection to the sidecar dropped, and it could not be reopened within the session's grace of %s (%v)",
				k.grace, err))
			return
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-k.stop:
			t.Stop()
			return
		}
		delay = min(2*delay, max(k.grace/3, resumeBackoff))
	}
}

// gone records that the session cannot be kept. The event is queued in
// the same step as Do starts answering errKeptGone: a caller that gets
// that error and then takes the events finds the gone among them.
func (k *keptSession) gone(why string) {
	k.mu.Lock()
	k.goneWhy = why
	k.events = append(k.events, sessionEvent{gone: why})
	close(k.ready)
	k.mu.Unlock()
	k.wakeUp()
}

// errKeptGone is the error of Do once the session is gone.
type errKeptGone struct{ why string }

func (e *errKeptGone) Error() string { return e.why }

// Do sends one command line over the current connection, waiting for a
// reconnection if one is under way; late is as session.Do's. A command
// that was sent when the connection dropped gets errSessionEnded: it may
// or may not have been done.
func (k *keptSession) Do(ctx context.Context, line string, late func(sessionReply)) (sessionReply, error) {
	for {
		k.mu.Lock()
		s, ready, why, closed := k.cur, k.ready, k.goneWhy, k.closed
		k.mu.Unlock()
		switch {
		case closed:
			return sessionReply{}, errors.New("the session is closed")
		case why != "":
			return sessionReply{}, &errKeptGone{why: why}
		case s == nil:
			select {
			case <-ready:
				continue
			case <-k.stop:
				continue
			case <-ctx.Done():
				return sessionReply{}, ctx.Err()
			}
		}
		return s.Do(ctx, line, late)
	}
}

// Connected says whether a connection is up now: Do would send at once
// rather than wait for a reconnection.
func (k *keptSession) Connected() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur != nil && k.goneWhy == "" && !k.closed
}

// Close ends the session cleanly (its claims are released) and stops
// reconnecting.
func (k *keptSession) Close() {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return
	}
	k.closed = true
	close(k.stop)
	s := k.cur
	k.mu.Unlock()
	if s != nil {
		s.Close()
	}
}
