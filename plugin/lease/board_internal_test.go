package lease

import (
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// The last push under a claim is its current tenure's: a new tenure
// of the issue has seen none.
func TestBoardPushes(t *testing.T) {
	var p boardPushes
	k := models.Key{RepoID: 1, Issue: 42}
	at := time.Unix(1700000000, 0)
	p.saw(nil, []contract.GateRef{{Name: "refs/heads/x", New: "abc"}}, at)
	if p.last(k, 3) != nil {
		t.Fatal("a push that carried no claim was noted")
	}
	p.saw([]models.Lease{{Key: k, Token: 3}}, []contract.GateRef{{Name: "refs/heads/x", New: "abc"}}, at)
	if g := p.last(k, 3); g == nil || g.Commit != "abc" || g.Ref != "refs/heads/x" || !g.At.Equal(at) {
		t.Fatalf("last push: %+v", g)
	}
	if p.last(k, 4) != nil {
		t.Fatal("a later tenure shows the earlier one's push")
	}
}
