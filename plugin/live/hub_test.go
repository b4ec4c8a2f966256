package live_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/clocktest"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/live"
)

// ledger is an in-memory one, whose List of one repository can be held.
type ledger struct {
	leases map[models.Key]models.Lease
	hold   int64         // List of this repository waits for release
	held   chan struct{} // closed once it waits
	free   chan struct{}
}

func (l *ledger) Current(_ context.Context, k models.Key) (*models.Lease, error) {
	if x, ok := l.leases[k]; ok {
		return &x, nil
	}
	return nil, nil
}

func (l *ledger) List(ctx context.Context, repoID int64) ([]models.Lease, error) {
	if repoID == l.hold {
		close(l.held)
		<-l.free
	}
	var out []models.Lease
	for k, x := range l.leases {
		if k.RepoID == repoID {
			out = append(out, x)
		}
	}
	return out, nil
}

func next(t *testing.T, s *live.Sub) *live.Event {
	t.Helper()
	select {
	case e := <-s.C:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	return nil
}

// A feed whose read is slow (here its seed, stuck in the ledger) delays
// no other repository's events: each feed reads on its own goroutine.
func TestASlowFeedDelaysNoOther(t *testing.T) {
	c := clocktest.New()
	l := &ledger{leases: map[models.Key]models.Lease{}, hold: 2, held: make(chan struct{}), free: make(chan struct{})}
	bus := changes.New(c.Now, c.After)
	h := live.New(l, bus, c.Now, c.After, live.Options{})
	one, err := h.Subscribe(context.Background(), 1, "")
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	go func() {
		if s, err := h.Subscribe(context.Background(), 2, ""); err == nil {
			s.Close()
		}
	}()
	<-l.held // repository 2's feed is seeding, and stuck there
	k1, k2 := models.Key{RepoID: 1, Issue: 7}, models.Key{RepoID: 2, Issue: 7}
	l.leases[k1] = models.Lease{Key: k1, Holder: models.Holder{ID: 1, Login: "alice", Agent: "a"}, Token: 1, AcquiredAt: c.Now()}
	bus.Publish(changes.Set{Origin: changes.Committed, Changes: []changes.Change{{Key: k2}, {Key: k1}}})
	e := next(t, one)
	var got contract.LeaseView
	if err := json.Unmarshal(e.Data, &got); err != nil || e.Type != contract.EventLease || got.Issue != 7 || got.Agent == nil || *got.Agent != "a" {
		t.Fatalf("repository 1's event: %s %s %v", e.Type, e.Data, err)
	}
	close(l.free)
	h.Settle()
}
