package changes

import (
	"sync"
	"time"
)

// Alarm is one timer on a clock, set for one instant at a time: the
// bus's expiry queue keeps one for its soonest instant, and the live hub
// one for the soonest end of an idle feed's linger. Setting it for
// another instant replaces the earlier one; when the instant comes, fire
// is called on the alarm's own goroutine, which must then look at what
// is due by the clock (a fire that a Set overtook may still come once)
// and set the alarm again.
type Alarm struct {
	now   Now
	after After
	fire  func()

	mu  sync.Mutex
	cur *alarmTimer // nil: not set
}

type alarmTimer struct {
	at     time.Time
	stop   func() bool
	cancel chan struct{}
}

// NewAlarm returns an alarm on this clock that calls fire.
func NewAlarm(now Now, after After, fire func()) *Alarm {
	return &Alarm{now: now, after: after, fire: fire}
}

// Set sets the alarm for at, or turns it off for the zero time. Setting
// it for the instant it is set for does nothing.
func (a *Alarm) Set(at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur != nil && a.cur.at.Equal(at) {
		return
	}
	if a.cur != nil {
		a.cur.stop()
		close(a.cur.cancel)
		a.cur = nil
	}
	if at.IsZero() {
		return
	}
	c, stop := a.after(at.Sub(a.now()))
	t := &alarmTimer{at: at, stop: stop, cancel: make(chan struct{})}
	a.cur = t
	go func() {
		select {
		case <-c:
		case <-t.cancel:
			return
		}
		a.mu.Lock()
		current := a.cur == t
		if current {
			a.cur = nil
		}
		a.mu.Unlock()
		if current {
			a.fire()
		}
	}()
}
