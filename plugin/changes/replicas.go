package changes

import (
	"context"

	"github.com/collab-lease/collab-lease/models"
)

// Replicas: several sidecars on one PostgreSQL ledger behave as one, so
// a change committed through any of them must reach the subscribers of
// all. Follow announces every change this process commits to the ledger
// (models.Store's Announce, a NOTIFY), and publishes what any replica
// announces (this one's own echo included) as Remote. An announcement
// says only "look again", so the echo is harmless, and whether a lease
// ended is not said: a remote change counts as one that may have ended
// it.

// Feed is a ledger shared by replicas: models.Store, whose Announce and
// Changes do nothing on SQLite (one process).
type Feed interface {
	Announce(ks ...models.Key)
	Changes(ctx context.Context, fn func(models.Key)) error
}

var _ Feed = (*models.Store)(nil)

// Follow ties b to the other replicas on f until ctx ends (serve runs it
// for the process's life), then returns nil. On a ledger that no other
// process shares (SQLite) it returns nil at once.
func Follow(ctx context.Context, f Feed, b *Bus) error {
	cancel := b.Subscribe(func(s Set) {
		if s.Origin == Committed {
			f.Announce(KeysOf(s)...)
		}
	})
	defer cancel()
	return f.Changes(ctx, func(k models.Key) {
		b.Publish(Set{Origin: Remote, Changes: []Change{{Key: k, Ended: true}}})
	})
}
