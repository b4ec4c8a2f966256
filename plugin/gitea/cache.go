package gitea

import (
	"sync"
	"time"
)

// cache keeps answers for a short time. The key and permission caches
// hold successful answers only: a lookup that failed asks Gitea again next
// time, so an outage never becomes a cached "not found", and a key added
// in Gitea works at once. The misses cache holds "not found" answers of
// repositories and tokens for a few seconds (Options.MissTTL), never an
// outage: a repository created or a permission granted right after a
// request for it was refused works within those seconds.
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
