package gitea

import (
	"errors"
	"sync"
	"time"

	"github.com/collab-lease/collab-lease/plugin/forge"
)

// cache keeps answers for a short time: each entry for the cache's ttl
// from when it was put, by the clock it was given. The Forge has four:
// keys, perms and tokens keep successful answers (the user an SSH key
// belongs to, what a viewer may do in a repository, the user an API token
// belongs to), and misses keeps "not found" answers of repositories and
// API tokens. cachedOrAsk is how they are used.
type cache[V any] struct {
	clock func() time.Time
	ttl   time.Duration // <= 0: caching is off

	mu      sync.Mutex
	entries map[string]entry[V]
}

type entry[V any] struct {
	value   V
	expires time.Time
}

// sweepAt is the size at which put drops expired entries, which bounds the
// map by what was looked up within one lifetime.
const sweepAt = 1024

func newCache[V any](clock func() time.Time, ttl time.Duration) *cache[V] {
	return &cache[V]{clock: clock, ttl: ttl, entries: map[string]entry[V]{}}
}

func (c *cache[V]) get(key string) (V, bool) {
	var zero V
	if c.ttl <= 0 {
		return zero, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return zero, false
	}
	if !c.clock().Before(e.expires) {
		delete(c.entries, key)
		return zero, false
	}
	return e.value, true
}

func (c *cache[V]) put(key string, v V) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock()
	if len(c.entries) >= sweepAt {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}
	}
	c.entries[key] = entry[V]{value: v, expires: now.Add(c.ttl)}
}

// cachedOrAsk answers the question key: with the success hits keeps for
// it; else, if misses is not nil, with the "not found" misses keeps for
// it (under kind+"\x00"+key, kind naming the question, so that kinds never
// share an entry); else with what ask says now. A success ask returns is
// kept in hits, a "not found" (isMiss) in misses, if not nil; any other
// failure is kept nowhere, so the next call asks again. Concurrent calls
// for one key are not collapsed: each that finds nothing asks.
func cachedOrAsk[V any](hits *cache[V], key string, misses *cache[error], kind string, ask func() (V, error)) (V, error) {
	if v, ok := hits.get(key); ok {
		return v, nil
	}
	var zero V
	if misses != nil {
		if err, ok := misses.get(kind + "\x00" + key); ok {
			return zero, err
		}
	}
	v, err := ask()
	if err != nil {
		if misses != nil && isMiss(err) {
			misses.put(kind+"\x00"+key, err)
		}
		return zero, err
	}
	hits.put(key, v)
	return v, nil
}

// isMiss reports whether err may be kept as a "not found": it says
// forge.ErrNotFound and none of forge.ErrUnavailable, forge.ErrRateLimited
// and forge.ErrConfig, so an outage, a spent budget or a misconfiguration
// is never one.
func isMiss(err error) bool {
	return errors.Is(err, forge.ErrNotFound) && !errors.Is(err, forge.ErrUnavailable) && !errors.Is(err, forge.ErrRateLimited) &&
		!errors.Is(err, forge.ErrConfig)
}
