package lease

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/clocktest"
)

// ledgerReads are the Ledger's methods that write nothing, so committed
// need not publish after them. Every other method is a write.
var ledgerReads = map[string]bool{
	"Tenures": true, "Current": true, "List": true, "ListPage": true, "Issue": true,
	"LiveRepos": true, "PullsLinkedTo": true, "PullOf": true, "OpenPulls": true, "Leases": true,
	"SessionEpoch": true, "SessionLeases": true, "Gate": true, "TenureTTL": true,
	"Reservations": true, "ClaimReservations": true, "InvoluntaryEnds": true, "Quarantined": true,
	"QuarantineOf": true, "QuarantinesToForge": true, "LapsedUnquarantined": true,
}

// Every write of the Ledger has its own method in committed.go, so none
// can reach the ledger without its change being published (a write
// added to Ledger alone would be promoted from the embedded Ledger and
// publish nothing).
func TestEveryLedgerWritePublishes(t *testing.T) {
	declared := committedMethods(t)
	writes := 0
	typ := reflect.TypeFor[Ledger]()
	for i := range typ.NumMethod() {
		name := typ.Method(i).Name
		if ledgerReads[name] {
			if declared[name] {
				t.Errorf("committed.go wraps %s, listed here as a read", name)
			}
			continue
		}
		writes++
		if !declared[name] {
			t.Errorf("Ledger.%s is a write (not in ledgerReads) that committed.go does not wrap: its change would be published by nobody", name)
		}
	}
	if writes < 10 {
		t.Fatalf("found %d writes in Ledger; the test is not looking at it", writes)
	}
	for name := range ledgerReads {
		if _, ok := typ.MethodByName(name); !ok {
			t.Errorf("ledgerReads names %s, which Ledger does not have", name)
		}
	}
}

// committedMethods are the methods committed.go declares on committed.
func committedMethods(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "committed.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 {
			continue
		}
		if id, ok := fd.Recv.List[0].Type.(*ast.Ident); ok && id.Name == "committed" && fd.Name.IsExported() {
			out[fd.Name.Name] = true
		}
	}
	return out
}

// succeeding is a ledger whose every write succeeds at once (and ends
// one lease where a write can end some), for calling committed's writes
// without a database.
type succeeding struct{ Ledger }

var oneEnded = models.Ended{Leases: []models.Lease{{Key: models.Key{RepoID: 1, Issue: 2}}}}

func (succeeding) TakeMergeTicket(_ context.Context, t models.MergeTicket, _ time.Duration) (models.MergeTicket, error) {
	return t, nil
}

func (succeeding) DropMergeTicket(context.Context, int64, string, string) error { return nil }

func (succeeding) OpenSession(context.Context, models.Holder, time.Duration, int) (models.SessionRef, error) {
	return models.SessionRef{}, nil
}

func (succeeding) ResumeSession(context.Context, string, models.Holder) (models.SessionRef, []models.Lease, error) {
	return models.SessionRef{}, nil, nil
}

func (succeeding) Heartbeat(context.Context, models.SessionRef, models.Holder, time.Duration) (int, error) {
	return 0, nil
}

func (succeeding) EndSession(context.Context, models.SessionRef, models.Holder) ([]models.Lease, error) {
	return oneEnded.Leases, nil
}

func (succeeding) Acquire(context.Context, models.Key, models.Holder, time.Duration, models.Observed) (models.Lease, error) {
	return models.Lease{}, nil
}
func (succeeding) Renew(context.Context, models.Key, models.Holder, time.Duration) (models.Lease, error) {
	return models.Lease{}, nil
}
func (succeeding) RenewTenure(context.Context, models.Key, models.Holder, int64, time.Duration) (models.Lease, error) {
	return models.Lease{}, nil
}
func (succeeding) Release(context.Context, models.Key, models.Holder) (*models.Lease, error) {
	return &models.Lease{}, nil
}
func (succeeding) ForceRelease(context.Context, models.Key, models.Holder) (*models.Lease, error) {
	return &models.Lease{}, nil
}
func (succeeding) AcquireFirst(context.Context, int64, []models.Candidate, models.Holder, time.Duration) (models.Lease, error) {
	return models.Lease{}, nil
}
func (succeeding) EndIssue(context.Context, models.Key, models.Reason, int64, string) (models.Ended, error) {
	return oneEnded, nil
}
func (succeeding) ReopenIssue(context.Context, models.Key, int64, string) (models.Ended, error) {
	return models.Ended{}, nil
}
func (succeeding) EndRepo(context.Context, int64, string) (models.Ended, error) { return oneEnded, nil }
func (succeeding) RecordPull(context.Context, models.Pull, string) (bool, error) {
	return true, nil
}
func (succeeding) EndSessions(context.Context, int64) (int64, error) { return 1, nil }
func (succeeding) Reserve(context.Context, models.Reserve) ([]models.Reservation, error) {
	return []models.Reservation{{RepoID: 1, Glob: "a"}}, nil
}
func (succeeding) Unreserve(context.Context, int64, models.Holder, []string, int64, bool) ([]models.Reservation, error) {
	return []models.Reservation{{RepoID: 1, Glob: "a"}}, nil
}
func (succeeding) PruneReservations(context.Context) (int64, error) { return 1, nil }
func (succeeding) AcquireForced(context.Context, models.Key, models.Holder, time.Duration, models.Observed) (models.Lease, error) {
	return models.Lease{}, nil
}
func (succeeding) RecordQuarantine(context.Context, models.Key) (models.Quarantine, bool, error) {
	return models.Quarantine{}, true, nil
}
func (succeeding) LiftQuarantine(context.Context, models.Key, bool) (bool, error) { return true, nil }
func (succeeding) MarkQuarantineForged(context.Context, models.Key, int64, bool) error {
	return nil
}
func (succeeding) Handoff(context.Context, models.Key, models.Holder, models.Holder, bool) (models.Lease, models.Lease, error) {
	return models.Lease{}, models.Lease{}, nil
}

// Every write of the committed ledger publishes once it succeeded (and a
// write that ends leases publishes each as ended); the one that changes
// no lease (a browser's sign-out) publishes nothing.
func TestEveryCommittedWritePublishes(t *testing.T) {
	c := clocktest.New()
	bus := changes.New(c.Now, c.After)
	var sets []changes.Set
	bus.Subscribe(func(s changes.Set) { sets = append(sets, s) })
	l := committed{Ledger: succeeding{}, bus: bus}
	ctx, k, h := context.Background(), models.Key{RepoID: 1, Issue: 2}, models.Holder{ID: 1, Login: "a"}
	calls := map[string]func(){
		"Acquire":       func() { _, _ = l.Acquire(ctx, k, h, 0, models.Observed{}) },
		"Renew":         func() { _, _ = l.Renew(ctx, k, h, time.Minute) },
		"RenewTenure":   func() { _, _ = l.RenewTenure(ctx, k, h, 1, time.Minute) },
		"Release":       func() { _, _ = l.Release(ctx, k, h) },
		"ForceRelease":  func() { _, _ = l.ForceRelease(ctx, k, h) },
		"AcquireFirst":  func() { _, _ = l.AcquireFirst(ctx, 1, nil, h, 0) },
		"EndIssue":      func() { _, _ = l.EndIssue(ctx, k, models.ReasonClosed, 1, "") },
		"ReopenIssue":   func() { _, _ = l.ReopenIssue(ctx, k, 1, "") },
		"EndRepo":       func() { _, _ = l.EndRepo(ctx, 1, "") },
		"RecordPull":    func() { _, _ = l.RecordPull(ctx, models.Pull{RepoID: 1, Number: 2}, "") },
		"EndSessions":   func() { _, _ = l.EndSessions(ctx, 1) },
		"Handoff":       func() { _, _, _ = l.Handoff(ctx, k, h, h, false) },
		"OpenSession":   func() { _, _ = l.OpenSession(ctx, h, time.Minute, 0) },
		"ResumeSession": func() { _, _, _ = l.ResumeSession(ctx, "", h) },
		"Heartbeat":     func() { _, _ = l.Heartbeat(ctx, models.SessionRef{}, h, time.Minute) },
		"EndSession":    func() { _, _ = l.EndSession(ctx, models.SessionRef{}, h) },
		"TakeMergeTicket": func() {
			_, _ = l.TakeMergeTicket(ctx, models.MergeTicket{RepoID: 1, Base: "main", Pull: 2, Claim: k, Token: 1, Holder: h, ID: "m"}, time.Minute)
		},
		"DropMergeTicket": func() { _ = l.DropMergeTicket(ctx, 1, "main", "m") },
		"Reserve": func() {
			_, _ = l.Reserve(ctx, models.Reserve{RepoID: 1, Holder: h, Globs: []string{"a"}, TTL: time.Minute})
		},
		"Unreserve":            func() { _, _ = l.Unreserve(ctx, 1, h, nil, 0, false) },
		"PruneReservations":    func() { _, _ = l.PruneReservations(ctx) },
		"AcquireForced":        func() { _, _ = l.AcquireForced(ctx, k, h, 0, models.Observed{}) },
		"RecordQuarantine":     func() { _, _, _ = l.RecordQuarantine(ctx, k) },
		"LiftQuarantine":       func() { _, _ = l.LiftQuarantine(ctx, k, false) },
		"MarkQuarantineForged": func() { _ = l.MarkQuarantineForged(ctx, k, 1, true) },
	}
	typ := reflect.TypeFor[Ledger]()
	for i := range typ.NumMethod() {
		name := typ.Method(i).Name
		if ledgerReads[name] {
			continue
		}
		call, ok := calls[name]
		if !ok {
			t.Errorf("Ledger.%s is a write this test does not call", name)
			continue
		}
		sets = nil
		call()
		switch {
		case name == "EndSessions" || name == "OpenSession" || name == "ResumeSession" || name == "Heartbeat" ||
			name == "TakeMergeTicket" || name == "DropMergeTicket" || name == "PruneReservations" || name == "MarkQuarantineForged":
			if len(sets) != 0 {
				t.Errorf("%s published %+v; it changes no lease", name, sets)
			}
		case len(sets) != 1 || sets[0].Origin != changes.Committed || len(sets[0].Changes) == 0:
			t.Errorf("%s published %+v, want one committed set", name, sets)
		case name == "EndIssue" || name == "EndRepo" || name == "Release" || name == "ForceRelease" || name == "EndSession" || name == "LiftQuarantine":
			if !sets[0].Changes[0].Ended || sets[0].Changes[0].Key != k {
				t.Errorf("%s published %+v, want the ended lease first", name, sets[0])
			}
		case name == "RecordPull" && !sets[0].Changes[0].Pull:
			t.Errorf("%s published %+v, want a pull request's change", name, sets[0])
		case (name == "Reserve" || name == "Unreserve") && (!sets[0].Changes[0].Reservations || sets[0].Changes[0].Key != models.Key{RepoID: 1}):
			t.Errorf("%s published %+v, want the repository's reservations' change", name, sets[0])
		}
	}
}
