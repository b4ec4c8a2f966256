package lease

import (
	"testing"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// What a stream's viewer is told of an event, by what they may read. A
// lease written before the ledger kept kinds becomes a reset for a viewer
// of one unit: the list they refetch asks the forge about it. A
// reservation's event reaches every reader, without its claim's number
// for who does not read both units.
func TestMayWatch(t *testing.T) {
	all := forge.Repo{CanRead: true, CanReadIssues: true, CanReadPulls: true}
	issues := forge.Repo{CanRead: true, CanReadIssues: true}
	neither := forge.Repo{CanRead: true}
	for _, c := range []struct {
		r    forge.Repo
		typ  string
		kind models.Kind
		want watchVerdict
	}{
		{all, contract.EventLease, models.KindPull, watchShow},
		{all, contract.EventReleased, models.KindUnknown, watchShow},
		{issues, contract.EventLease, models.KindIssue, watchShow},
		{issues, contract.EventReleased, models.KindPull, watchHide},
		{issues, contract.EventLease, models.KindUnknown, watchReset},
		{issues, contract.EventReleased, models.KindUnknown, watchReset},
		{neither, contract.EventLease, models.KindIssue, watchHide},
		{neither, contract.EventReleased, models.KindUnknown, watchHide},
		{neither, contract.EventReset, models.KindUnknown, watchShow},
		{issues, "", models.KindUnknown, watchShow},
		{all, contract.EventReserved, models.KindUnknown, watchShow},
		{all, contract.EventUnreserved, models.KindUnknown, watchShow},
		{issues, contract.EventReserved, models.KindUnknown, watchUnnumbered},
		{neither, contract.EventUnreserved, models.KindUnknown, watchUnnumbered},
	} {
		if got := mayWatch(c.r, c.typ, c.kind); got != c.want {
			t.Errorf("mayWatch(%+v, %q, %d) = %d, want %d", c.r, c.typ, c.kind, got, c.want)
		}
	}
}
