package lease

import (
	"sync"
	"time"

	"github.com/collab-lease/collab-lease/models"
)

// openIssues remembers, for the issues this process's acquires saw open,
// what the ledger's record (or the forge) said and when it was checked,
// so that the next acquire of the same issue needs no read of the ledger
// before its write. It only saves that read: the write itself still
// admits the claim against the ledger's record of the issue
// (models.Store.Acquire), so a close recorded since (a webhook, another
// replica) still wins there, and the acquire then forgets the entry and
// decides again from the ledger's record (Service.Acquire). An entry is
// trusted exactly as long as the record it copies (issueTTL after its
// check); the record's own check can only be as old or newer, so the
// entry never makes the forge be asked later than the ledger would.
//
// Only open issues are kept: a closed or deleted one is refused by what
// the ledger says, which the write reads anyway. An issue's kind (issue
// or pull request) never changes.
type openIssues struct {
	mu  sync.Mutex
	max int
	m   map[models.Key]openIssue
}

type openIssue struct {
	kind    models.Kind
	checked time.Time
}

// defaultOpenIssues bounds the entries kept: about 60 bytes each.
const defaultOpenIssues = 4096

func newOpenIssues(max int) *openIssues {
	return &openIssues{max: max, m: make(map[models.Key]openIssue)}
}

// get is k's entry if it was checked less than ttl before now.
func (c *openIssues) get(k models.Key, now time.Time, ttl time.Duration) (models.Kind, bool) {
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if !ok || now.Sub(e.checked) >= ttl {
		return models.KindUnknown, false
	}
	return e.kind, true
}

// put records that k, of this kind, was open when checked. A full cache
// first lets go of what has expired, then of any one entry.
func (c *openIssues) put(k models.Key, kind models.Kind, checked, now time.Time, ttl time.Duration) {
	if c.max <= 0 || ttl <= 0 || kind == models.KindUnknown {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok && e.checked.After(checked) {
		return
	}
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		for old, e := range c.m {
			if now.Sub(e.checked) >= ttl {
				delete(c.m, old)
			}
		}
		for old := range c.m {
			if len(c.m) < c.max {
				break
			}
			delete(c.m, old)
		}
	}
	c.m[k] = openIssue{kind: kind, checked: checked}
}

// forget drops k's entry: the ledger's record says otherwise now.
func (c *openIssues) forget(k models.Key) {
	c.mu.Lock()
	delete(c.m, k)
	c.mu.Unlock()
}
