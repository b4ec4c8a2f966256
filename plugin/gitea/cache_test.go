package gitea

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// question is an ask for cachedOrAsk that answers what it is told to and
// counts how often it was asked.
type question struct {
	mu     sync.Mutex
	answer string
	err    error
	asked  int
}

func (q *question) set(answer string, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.answer, q.err = answer, err
}

func (q *question) ask() (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.asked++
	if q.err != nil {
		return "", q.err
	}
	return q.answer, nil
}

// times returns how often q was asked since the last call.
func (q *question) times() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.asked
	q.asked = 0
	return n
}

func TestCachedOrAskKeepsASuccessForItsLifetime(t *testing.T) {
	c := clocktest.New()
	hits, misses := newCache[string](c.Now, time.Minute), newCache[error](c.Now, time.Second)
	q := &question{answer: "alice"}
	for i := 0; i < 3; i++ {
		if v, err := cachedOrAsk(hits, "k", misses, "kind", q.ask); v != "alice" || err != nil {
			t.Fatalf("call %d: %q %v", i, v, err)
		}
	}
	if n := q.times(); n != 1 {
		t.Fatalf("3 calls asked %d times, want 1", n)
	}
	// Another key is another question.
	if _, err := cachedOrAsk(hits, "other", misses, "kind", q.ask); err != nil || q.times() != 1 {
		t.Fatalf("another key was not asked: %v", err)
	}
	// Just before the lifetime ends, the kept answer holds even though
	// the answer changed; at its end the question is asked again.
	q.set("bob", nil)
	c.Advance(time.Minute - time.Nanosecond)
	if v, _ := cachedOrAsk(hits, "k", misses, "kind", q.ask); v != "alice" || q.times() != 0 {
		t.Fatalf("within the lifetime: %q", v)
	}
	c.Advance(time.Nanosecond)
	if v, _ := cachedOrAsk(hits, "k", misses, "kind", q.ask); v != "bob" || q.times() != 1 {
		t.Fatalf("after the lifetime: %q", v)
	}
}

func TestCachedOrAskKeepsANotFoundOnlyInMisses(t *testing.T) {
	c := clocktest.New()
	hits, misses := newCache[string](c.Now, time.Minute), newCache[error](c.Now, time.Second)
	notFound := fmt.Errorf("repository acme/gone: %w", forge.ErrNotFound)
	q := &question{err: notFound}
	for i := 0; i < 3; i++ {
		if _, err := cachedOrAsk(hits, "k", misses, "repo", q.ask); err != notFound {
			t.Fatalf("call %d: %v, want the very not-found", i, err)
		}
	}
	if n := q.times(); n != 1 {
		t.Fatalf("3 calls for what is not found asked %d times, want 1", n)
	}
	// The kept "not found" is of its kind only.
	if _, err := cachedOrAsk(hits, "k", misses, "token", q.ask); !errors.Is(err, forge.ErrNotFound) || q.times() != 1 {
		t.Fatalf("another kind with the same key was not asked: %v", err)
	}
	// It lasts the misses' lifetime, not the hits'.
	q.set("created", nil)
	c.Advance(time.Second)
	if v, err := cachedOrAsk(hits, "k", misses, "repo", q.ask); v != "created" || err != nil || q.times() != 1 {
		t.Fatalf("after the miss lifetime: %q %v", v, err)
	}
}

// Nothing but a "not found" is kept, and that only where misses are kept
// (not for keys): every other call asks again.
func TestCachedOrAskKeepsNoOtherFailure(t *testing.T) {
	for _, tc := range []struct {
		err      error
		noMisses bool
	}{
		{err: fmt.Errorf("GET /api/v1/user: %w", forge.ErrUnavailable)},
		{err: fmt.Errorf("GET /api/v1/user: %w", forge.ErrRateLimited)},
		{err: fmt.Errorf("GET /api/v1/user: %w", forge.ErrConfig)},
		// A "not found" that is also an outage is an outage.
		{err: fmt.Errorf("%w: %w", forge.ErrNotFound, forge.ErrUnavailable)},
		{err: fmt.Errorf("%w: %w", forge.ErrNotFound, forge.ErrRateLimited)},
		{err: errors.New("something else")},
		{err: fmt.Errorf("key: %w", forge.ErrNotFound), noMisses: true},
	} {
		t.Run(fmt.Sprintf("%v,nomisses=%v", tc.err, tc.noMisses), func(t *testing.T) {
			c := clocktest.New()
			hits, misses := newCache[string](c.Now, time.Minute), newCache[error](c.Now, time.Second)
			if tc.noMisses {
				misses = nil
			}
			q := &question{err: tc.err}
			for i := 0; i < 2; i++ {
				if _, got := cachedOrAsk(hits, "k", misses, "repo", q.ask); got != tc.err {
					t.Fatalf("call %d: %v, want %v", i, got, tc.err)
				}
			}
			if n := q.times(); n != 2 {
				t.Fatalf("the failure was kept: %d asks for 2 calls", n)
			}
			// Once Gitea answers, the answer is the success.
			q.set("alice", nil)
			if v, got := cachedOrAsk(hits, "k", misses, "repo", q.ask); v != "alice" || got != nil {
				t.Fatalf("after the failure: %q %v", v, got)
			}
		})
	}
}

func TestCachedOrAskWithCachingOff(t *testing.T) {
	c := clocktest.New()
	hits, misses := newCache[string](c.Now, -1), newCache[error](c.Now, -1)
	q := &question{answer: "alice"}
	for i := 0; i < 2; i++ {
		if v, err := cachedOrAsk(hits, "k", misses, "repo", q.ask); v != "alice" || err != nil {
			t.Fatalf("call %d: %q %v", i, v, err)
		}
	}
	q.set("", fmt.Errorf("x: %w", forge.ErrNotFound))
	for i := 0; i < 2; i++ {
		if _, err := cachedOrAsk(hits, "k", misses, "repo", q.ask); !errors.Is(err, forge.ErrNotFound) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if n := q.times(); n != 4 {
		t.Fatalf("with caching off, 4 calls asked %d times", n)
	}
}

// A kept success is answered before a kept "not found" of the same key
// (as when concurrent asks got different answers).
func TestCachedOrAskPrefersASuccessToAMiss(t *testing.T) {
	c := clocktest.New()
	hits, misses := newCache[string](c.Now, time.Minute), newCache[error](c.Now, time.Second)
	misses.put("repo\x00k", fmt.Errorf("x: %w", forge.ErrNotFound))
	hits.put("k", "alice")
	q := &question{answer: "bob"}
	if v, err := cachedOrAsk(hits, "k", misses, "repo", q.ask); v != "alice" || err != nil || q.times() != 0 {
		t.Fatalf("%q %v", v, err)
	}
}

// Concurrent calls are not collapsed into one ask, but every one gets the
// answer, and what they kept then answers without asking.
func TestCachedOrAskConcurrently(t *testing.T) {
	c := clocktest.New()
	hits, misses := newCache[string](c.Now, time.Minute), newCache[error](c.Now, time.Second)
	q := &question{answer: "alice"}
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Go(func() {
			if v, err := cachedOrAsk(hits, "k", misses, "repo", q.ask); v != "alice" || err != nil {
				t.Errorf("%q %v", v, err)
			}
		})
	}
	wg.Wait()
	if n := q.times(); n < 1 || n > 16 {
		t.Fatalf("16 concurrent calls asked %d times", n)
	}
	if v, _ := cachedOrAsk(hits, "k", misses, "repo", q.ask); v != "alice" || q.times() != 0 {
		t.Fatalf("after the concurrent calls: %q", v)
	}
}
