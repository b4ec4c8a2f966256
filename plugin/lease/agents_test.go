package lease_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// agent is the viewer login acting as agent name.
func (w *world) agent(login, name string) lease.Viewer {
	v := w.as(login)
	v.Agent = name
	return v
}

// Agents of one account are holders of their own, through the service:
// held and not_holder name the agent, next skips another agent's claim,
// the account releases any of its agents' claims, a takeover by another
// agent makes the old token stale, and the history says who held each
// tenure and who ended it.
func TestAgentsOfOneAccountThroughTheService(t *testing.T) {
	w := newWorld(t)
	a7, a8, bob := w.agent("bob", "agent-7"), w.agent("bob", "agent-8"), w.as("bob")
	first, err := w.svc.Acquire(bg, a7, "acme", "widgets", 1, time.Minute)
	if err != nil || first.Agent == nil || *first.Agent != "agent-7" || first.Holder != "bob" {
		t.Fatalf("agent-7's acquire: %+v %v", first, err)
	}
	_, err = w.svc.Acquire(bg, a8, "acme", "widgets", 1, time.Minute)
	var conflict *lease.ConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("agent-8's acquire of agent-7's claim: %v, want held", err)
	}
	if b, _ := json.Marshal(conflict.Reply); string(b) != `{"status":"held","repo":"acme/widgets","issue":1,"holder":"bob","agent":"agent-7","expires_at":"2026-09-05T12:01:00Z"}` {
		t.Fatalf("held reply %s", b)
	}
	if _, err := w.svc.Renew(bg, a8, "acme", "widgets", 1, time.Minute); !errors.As(err, &conflict) || conflict.Status() != contract.StatusNotHolder {
		t.Fatalf("agent-8's renew: %v, want not_holder", err)
	}
	// next passes over agent-7's claim: #1 is held, #2 is a pull request,
	// #3 closed, so agent-8 gets #4.
	got, err := w.svc.Next(bg, a8, "acme", "widgets", forge.IssueFilter{}, time.Minute)
	if err != nil || got.Issue != 4 || *got.Agent != "agent-8" {
		t.Fatalf("agent-8's next: %+v %v, want #4", got, err)
	}
	// The claim lapses and agent-8 takes it over: agent-7's token is stale.
	w.clock.Advance(2 * time.Minute)
	taken, err := w.svc.Acquire(bg, a8, "acme", "widgets", 1, 0)
	if err != nil || taken.Token != first.Token+1 {
		t.Fatalf("agent-8's takeover: %+v %v, want token %d", taken, err, first.Token+1)
	}
	if _, err := w.svc.Check(bg, a7, "acme", "widgets", 1, first.Token); !errors.As(err, &conflict) || conflict.Status() != contract.StatusStale {
		t.Fatalf("agent-7's check of its old token: %v, want stale", err)
	}
	// The account cleans up after its agent; another account may not.
	if _, err := w.svc.Release(bg, w.agent("alice", "agent-8"), "acme", "widgets", 1); !errors.As(err, &conflict) {
		t.Fatalf("alice's agent-8 released bob's agent-8's claim: %v", err)
	}
	if _, err := w.svc.Release(bg, bob, "acme", "widgets", 1); err != nil {
		t.Fatalf("bob releases his agent's claim: %v", err)
	}
	h, err := w.svc.History(bg, bob, "acme", "widgets", 1, 20)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(h)
	want := `{"repo":"acme/widgets","issue":1,"tenures":[` +
		`{"token":2,"holder":"bob","agent":"agent-8","acquired_at":"2026-09-05T12:02:00Z","ended_at":"2026-09-05T12:02:00Z","ended_by":"released","ended_by_login":"bob","ended_by_agent":null},` +
		`{"token":1,"holder":"bob","agent":"agent-7","acquired_at":"2026-09-05T12:00:00Z","ended_at":"2026-09-05T12:01:00Z","ended_by":"taken_over"}]}`
	if string(b) != want {
		t.Fatalf("history\n got %s\nwant %s", b, want)
	}
}

// The lock-delay through the service: another's acquire of an issue whose
// claim lapsed moments ago answers cooling, until when; its holder's
// acquire succeeds; next passes it over.
func TestCoolingThroughTheService(t *testing.T) {
	lw := leasetest.New(t, leasetest.Options{Forge: leasetest.Acme(), Ledger: []models.Option{models.WithLockDelay(time.Minute)}})
	w := worldOf(lw)
	if _, err := w.svc.Acquire(bg, w.as("alice"), "acme", "widgets", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(time.Minute)
	_, err := w.svc.Acquire(bg, w.as("bob"), "acme", "widgets", 1, 0)
	var conflict *lease.ConflictError
	if !errors.As(err, &conflict) || conflict.Status() != contract.StatusCooling {
		t.Fatalf("bob's acquire in the lock-delay: %v, want cooling", err)
	}
	if b, _ := json.Marshal(conflict.Reply); string(b) != `{"status":"cooling","repo":"acme/widgets","issue":1,"until":"2026-09-05T12:02:00Z"}` {
		t.Fatalf("cooling reply %s", b)
	}
	if got, err := w.svc.Next(bg, w.as("bob"), "acme", "widgets", forge.IssueFilter{}, 0); err != nil || got.Issue != 4 {
		t.Fatalf("bob's next in the lock-delay: %+v %v, want #4 (#1 cools down)", got, err)
	}
	// bob waits for it: he gets it the instant the delay ends.
	got := make(chan error, 1)
	go func() {
		_, err := w.svc.AcquireWait(bg, w.as("bob"), "acme", "widgets", 1, 0, 10*time.Minute)
		got <- err
	}()
	leasetest.WaitFor(t, "bob to wait", func() bool { return w.svc.Waiting(1, 1) == 1 && w.bus.Pending() == 1 })
	w.clock.Advance(time.Minute)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("bob's wait: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("bob was not woken when the lock-delay ended")
	}
}

// The lapsed holder may claim its issue again at once, in the lock-delay.
func TestTheLapsedHolderIsNotCooled(t *testing.T) {
	lw := leasetest.New(t, leasetest.Options{Forge: leasetest.Acme(), Ledger: []models.Option{models.WithLockDelay(time.Minute)}})
	if _, err := lw.Service.Acquire(bg, lw.As("alice"), "acme", "widgets", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	lw.Clock.Advance(time.Minute)
	if got, err := lw.Service.Acquire(bg, lw.As("alice"), "acme", "widgets", 1, 0); err != nil || got.Token != 2 {
		t.Fatalf("the lapsed holder's acquire: %+v %v, want a new tenure", got, err)
	}
}

// The caps through the service: a claim past the holder's cap answers
// limit, naming the scope, the cap and the live claims; next's has no
// issue; acquire --wait does not wait for it.
func TestCapsThroughTheService(t *testing.T) {
	lw := leasetest.New(t, leasetest.Options{Forge: leasetest.Acme(), Ledger: []models.Option{models.WithClaimCaps(1, 0)}})
	bot := lw.As("bob")
	bot.Agent = "a1"
	if _, err := lw.Service.Acquire(bg, bot, "acme", "widgets", 1, 0); err != nil {
		t.Fatal(err)
	}
	_, err := lw.Service.AcquireWait(bg, bot, "acme", "widgets", 4, 0, 10*time.Minute)
	var conflict *lease.ConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("a claim past the cap: %v, want limit", err)
	}
	if b, _ := json.Marshal(conflict.Reply); string(b) != `{"status":"limit","repo":"acme/widgets","issue":4,"holder":"bob","agent":"a1","scope":"holder","limit":1,"live":1}` {
		t.Fatalf("limit reply %s", b)
	}
	_, err = lw.Service.Next(bg, bot, "acme", "widgets", forge.IssueFilter{}, 0)
	if !errors.As(err, &conflict) {
		t.Fatalf("a next past the cap: %v, want limit", err)
	}
	if b, _ := json.Marshal(conflict.Reply); string(b) != `{"status":"limit","repo":"acme/widgets","issue":null,"holder":"bob","agent":"a1","scope":"holder","limit":1,"live":1}` {
		t.Fatalf("next's limit reply %s", b)
	}
	if _, err := lw.Service.Acquire(bg, bot, "acme", "widgets", 1, time.Minute); err != nil {
		t.Fatalf("a re-acquire at the cap: %v", err)
	}
}

// Priority labels: next takes the oldest issue of the highest priority
// there is, then of the next, then the oldest with none of them; --oldest
// takes the oldest whatever its labels.
func TestNextByPriority(t *testing.T) {
	f := leasetest.Acme()
	for n := int64(10); n <= 14; n++ {
		f.AddIssue("acme/widgets", n, false, false)
	}
	f.Label("acme/widgets", 13, "p/high")
	f.Label("acme/widgets", 12, "p/high")
	f.Label("acme/widgets", 11, "p/critical")
	f.Label("acme/widgets", 14, "p/critical", "p/high")
	lw := leasetest.New(t, leasetest.Options{Forge: f, Service: []lease.Option{lease.WithPriorityLabels("p/critical", "p/high")}})
	var got []int64
	for range 5 {
		tn, err := lw.Service.Next(bg, lw.As("alice"), "acme", "widgets", forge.IssueFilter{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, tn.Issue)
	}
	if want := []int64{11, 14, 12, 13, 1}; !equal(got, want) {
		t.Fatalf("next by priority took %v, want %v", got, want)
	}
	tn, err := lw.Service.Next(bg, lw.As("bob"), "acme", "widgets", forge.IssueFilter{Oldest: true}, 0)
	if err != nil || tn.Issue != 4 {
		t.Fatalf("next --oldest: %+v %v, want #4", tn, err)
	}
}

// Handoff through the service: the holder hands its claim to another
// account's agent in one step (the next token, at least ten minutes
// left); its old token is stale; a target that may not claim, or no
// account at all, is refused alike; a stranger's handoff is not_holder,
// an admin's goes through.
func TestHandoffThroughTheService(t *testing.T) {
	w := newWorld(t)
	w.forge.Grant("acme/widgets", "eve", forgetest.Admin)
	alice := w.as("alice")
	first, err := w.svc.Acquire(bg, alice, "acme", "widgets", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got, err := w.svc.Handoff(bg, alice, "acme", "widgets", 1, "bob", "agent-8")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(got); string(b) != `{"status":"handed_off","repo":"acme/widgets","issue":1,"holder":"bob","agent":"agent-8","token":2,"expires_at":"2026-09-05T12:10:00Z","from":{"holder":"alice","agent":null,"token":1}}` {
		t.Fatalf("handoff reply %s", b)
	}
	var conflict *lease.ConflictError
	if _, err := w.svc.Check(bg, alice, "acme", "widgets", 1, first.Token); !errors.As(err, &conflict) || conflict.Status() != contract.StatusStale {
		t.Fatalf("the old token after the handoff: %v, want stale", err)
	}
	if _, err := w.svc.Renew(bg, w.agent("bob", "agent-8"), "acme", "widgets", 1, time.Hour); err != nil {
		t.Fatalf("the target renews: %v", err)
	}
	var target *lease.TargetMayNotClaimError
	for _, to := range []string{"reader", "nobody-at-all"} {
		if _, err := w.svc.Handoff(bg, w.as("bob"), "acme", "widgets", 1, to, ""); !errors.As(err, &target) || err.Error() != to+" may not claim in acme/widgets" {
			t.Fatalf("a handoff to %s: %v, want refused", to, err)
		}
	}
	if _, err := w.svc.Handoff(bg, w.as("dave"), "acme", "widgets", 1, "alice", ""); err == nil {
		t.Fatal("dave, who may not write acme/widgets, handed off bob's claim")
	}
	if _, err := w.svc.Handoff(bg, w.as("alice"), "acme", "widgets", 1, "alice", ""); !errors.As(err, &conflict) || conflict.Status() != contract.StatusNotHolder {
		t.Fatalf("alice hands off bob's claim: %v, want not_holder", err)
	}
	if got, err := w.svc.Handoff(bg, w.as("eve"), "acme", "widgets", 1, "alice", ""); err != nil || got.Holder != "alice" || got.Token != 3 {
		t.Fatalf("an admin hands off bob's claim: %+v %v", got, err)
	}
	h, err := w.svc.History(bg, alice, "acme", "widgets", 1, 20)
	if err != nil || len(h.Tenures) != 3 || *h.Tenures[1].EndedBy != contract.EndHandedOff || *h.Tenures[1].EndedByLogin != "eve" {
		t.Fatalf("history %+v %v", h, err)
	}
}

// An issue let go that a priority list put first, further down the open
// issues than the plain list reaches, is checked like any other: closed
// before its release, it is not handed out; open, it is.
func TestNextChecksAPriorityIssueLetGoBeyondTheList(t *testing.T) {
	f := leasetest.Acme()
	for n := int64(10); n <= 130; n++ {
		f.AddIssue("acme/widgets", n, false, false)
	}
	f.Label("acme/widgets", 120, "p/high")
	f.Label("acme/widgets", 125, "p/high")
	lw := leasetest.New(t, leasetest.Options{Forge: f, Service: []lease.Option{lease.WithPriorityLabels("p/high")}})
	next := func(who string) int64 {
		t.Helper()
		tn, err := lw.Service.Next(bg, lw.As(who), "acme", "widgets", forge.IssueFilter{}, 0)
		if err != nil {
			t.Fatalf("%s's next: %v", who, err)
		}
		return tn.Issue
	}
	release := func(who string, n int64) {
		t.Helper()
		if _, err := lw.Service.Release(bg, lw.As(who), "acme", "widgets", n); err != nil {
			t.Fatal(err)
		}
	}
	if n := next("alice"); n != 120 {
		t.Fatalf("alice's next: #%d, want #120", n)
	}
	lw.Clock.Advance(time.Second)
	f.Close("acme/widgets", 120, false) // merged; no webhook yet
	release("alice", 120)
	if n := next("bob"); n != 125 {
		t.Fatalf("bob's next after #120 was closed and let go: #%d, want #125", n)
	}
	lw.Clock.Advance(time.Second)
	release("bob", 125)
	if n := next("alice"); n != 125 {
		t.Fatalf("alice's next after #125 was let go open: #%d, want #125", n)
	}
	if n, m := f.Calls("ClosedSince"), f.Calls("Issue"); n != 2 || m != 0 {
		t.Fatalf("%d lists of closed issues and %d single issues asked for, want 2 and 0", n, m)
	}
}

// When Gitea's answer about closed issues is cut short and many issues
// were let go, next asks about a bounded number of them alone, the
// oldest first, not about every one.
func TestNextAsksAboutFewIssuesLetGoWhenTheClosedListIsCutShort(t *testing.T) {
	f := leasetest.Acme()
	for n := int64(10); n <= 69; n++ {
		f.AddIssue("acme/widgets", n, false, false)
	}
	lw := leasetest.New(t, leasetest.Options{Forge: f})
	var held []int64
	for range 60 {
		tn, err := lw.Service.Next(bg, lw.As("alice"), "acme", "widgets", forge.IssueFilter{}, 0)
		if err != nil {
			t.Fatalf("alice's next: %v", err)
		}
		held = append(held, tn.Issue)
	}
	lw.Clock.Advance(time.Second)
	f.SetClosedCap(1)
	f.Close("acme/widgets", held[0], false) // merged; no webhook yet
	f.Reopen("acme/widgets", 3)
	f.Close("acme/widgets", 3, false) // newer: the one on the answer
	for _, n := range held {
		if _, err := lw.Service.Release(bg, lw.As("alice"), "acme", "widgets", n); err != nil {
			t.Fatal(err)
		}
	}
	single := f.Calls("Issue")
	tn, err := lw.Service.Next(bg, lw.As("bob"), "acme", "widgets", forge.IssueFilter{}, 0)
	if err != nil || tn.Issue != held[1] {
		t.Fatalf("bob's next: %+v %v, want #%d (#%d was closed before its release)", tn, err, held[1], held[0])
	}
	if n := f.Calls("Issue") - single; n < 2 || n > 32 {
		t.Fatalf("%d single issues asked about, want 2 to 32 of the 60 let go", n)
	}
}
