package live

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// The path reservations of a feed's repository: a feed keeps the live
// ones it last published and, when they may have changed, reads them
// all again and publishes the difference: "reserved" for each one made
// (a reserve of a glob its holder has already makes it anew, under a
// new ID, and is told again), "unreserved" for each one that ended,
// however it ended. They may have changed
//   - after a reserve or an unreserve (a change with Reservations set),
//   - after a change of a whole repository (another replica announces
//     its reserves and unreserves so, as keys with no issue),
//   - after a claim they are anchored to ended or began a new tenure
//     (leased and released call anchorChanged),
//   - at the expiry of the soonest one anchored to a session or to its
//     own time to live, which the bus's queue tells at its instant
//     (ExpireReservationsAt); an explicitly ended session is not told, so
//     its reservations are told ended at their anchor's expiry, or at the
//     next read.
// A reservation of a claim expires with it, whose expiry the feed has
// on the queue already.

// heldGlob is what names a reservation to a client: its holder and its
// glob (a holder has one reservation of a glob at most).
type heldGlob struct {
	holder int64
	agent  string
	glob   string
}

func heldGlobOf(x models.Reservation) heldGlob {
	return heldGlob{holder: x.Holder.ID, agent: x.Holder.Agent, glob: x.Glob}
}

// ReservationView is x as the contract shows a reservation: in events,
// and in the lease service's replies, which hide Issue from a viewer who
// may not see it.
func ReservationView(x models.Reservation) contract.Reservation {
	v := contract.Reservation{Glob: x.Glob, Shared: x.Shared, Holder: x.Holder.Login, Agent: contract.AgentPtr(x.Holder.Agent),
		ExpiresAt: contract.TimePtr(x.ExpiresAt)}
	if x.Issue != 0 {
		n := x.Issue
		v.Issue = &n
	}
	return v
}

// anchorChanged marks f's reservations to be read again if some are
// anchored to a claim of issue n, whose tenure ended or changed (under
// h.mu).
func (h *Hub) anchorChanged(f *feed, n int64) {
	if f.anchors[n] > 0 {
		f.dirtyRes = true
	}
}

// rereadReservations reads the live reservations of f's repository and
// publishes what differs from what f last published.
func (h *Hub) rereadReservations(f *feed) {
	var rs []models.Reservation
	h.reading(f, func(ctx context.Context) (err error) {
		rs, err = h.ledger.Reservations(ctx, f.repoID, "")
		return err
	}, func() { h.reservationsRead(f, rs, true) })
}

// reservationsRead makes rs, the live reservations of f's repository
// (oldest first), those f knows, and puts the soonest expiry of those
// not anchored to a claim on the bus's queue; with tell, it publishes
// what differs from those f knew: those that ended first, then those
// made (under h.mu).
func (h *Hub) reservationsRead(f *feed, rs []models.Reservation, tell bool) {
	live := make(map[heldGlob]models.Reservation, len(rs))
	for _, x := range rs {
		live[heldGlobOf(x)] = x
	}
	if tell {
		var ended []models.Reservation
		for k, x := range f.reservations {
			if _, ok := live[k]; !ok {
				ended = append(ended, x)
			}
		}
		slices.SortFunc(ended, func(a, b models.Reservation) int { return cmp.Compare(a.ID, b.ID) })
		for _, x := range ended {
			h.reservationEvent(f, contract.EventUnreserved, x)
		}
	}
	var soonest time.Time
	clear(f.anchors)
	for _, x := range rs {
		// Only a new ID is news: the expiry of a claim or a session
		// moves on without a reserve, and the claim's is told by its
		// lease's events.
		if prev, had := f.reservations[heldGlobOf(x)]; tell && (!had || prev.ID != x.ID) {
			h.reservationEvent(f, contract.EventReserved, x)
		}
		switch {
		case x.Issue != 0:
			f.anchors[x.Issue]++
		case x.ExpiresAt != nil && (soonest.IsZero() || x.ExpiresAt.Before(soonest)):
			soonest = *x.ExpiresAt
		}
	}
	f.reservations = live
	if !soonest.IsZero() {
		// At or past it, the ledger's clock has not got there yet: look
		// again a second later.
		if now := h.now(); !soonest.After(now) {
			soonest = now.Add(time.Second)
		}
		h.bus.ExpireReservationsAt(f.repoID, soonest)
	}
}

// reservationEvent publishes an event of type typ about x to f (under
// h.mu).
func (h *Hub) reservationEvent(f *feed, typ string, x models.Reservation) {
	v := ReservationView(x)
	data, _ := json.Marshal(v)
	e := &Event{Type: typ, Data: data, issue: x.Issue}
	if v.Issue != nil {
		v.Issue = nil
		e.unnumbered, _ = json.Marshal(v)
	}
	h.publish(f, e)
}
