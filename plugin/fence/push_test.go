package fence_test

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/fence"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// workRule is the name of the sidecar's rule for branch work: a glob of
// that branch alone (a plain name would be WORK's too).
const workRule = "[w]ork"

// rule waits until branch "work" of acme/widgets has the sidecar's rule
// letting exactly want push (nil: no rule at all), and returns it.
func (w *fenceWorld) rule(t *testing.T, want []string) forge.BranchRule {
	t.Helper()
	return w.ruleMoving(t, want, 0)
}

// ruleMoving is rule that moves the clock on by step each time it looks
// (0: never), for a rule that comes with a retry after a backoff.
func (w *fenceWorld) ruleMoving(t *testing.T, want []string, step time.Duration) forge.BranchRule {
	t.Helper()
	var got forge.BranchRule
	var ok bool
	leasetest.WaitFor(t, "the rule of branch work letting "+strings.Join(want, ",")+" push", func() bool {
		got, ok = w.forge.BranchRule("acme/widgets", workRule)
		if want == nil && !ok || want != nil && ok && got.Push.Enabled && got.Push.Listed && slices.Equal(got.Push.Users, want) {
			return true
		}
		if step > 0 {
			w.clock.Advance(step)
		}
		return false
	})
	return got
}

// record is what the ledger remembers of branch work.
func (w *fenceWorld) record(t *testing.T) *models.FenceRule {
	t.Helper()
	r, err := w.Ledger.FenceRuleOf(bg, 1, "work")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestPushFenceFollowsTheClaim(t *testing.T) {
	w := newWorld(t, true)
	w.pullOn(t, forge.EventPullChanged, sha1, "work", "Fixes #1", true)
	w.status(t, sha1, "failure: claim #1 before merging")
	if _, ok := w.forge.BranchRule("acme/widgets", workRule); ok || w.forge.Calls("BranchRules") != 0 {
		t.Fatalf("a rule, or a question about rules, with no claim (%d questions)", w.forge.Calls("BranchRules"))
	}

	first, err := w.svc.Acquire(bg, w.As("alice"), "acme", "widgets", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r := w.rule(t, []string{"alice"})
	// An unprotected branch: alice alone may push and force-push, and
	// the rule applies before any other.
	if !r.ForcePush.Enabled || !r.ForcePush.Listed || !slices.Equal(r.ForcePush.Users, []string{"alice"}) || r.Priority != -1 || r.Push.DeployKeys {
		t.Fatalf("alice's rule %+v", r)
	}
	leasetest.WaitFor(t, "the ledger's record of the rule with its creation time", func() bool {
		rec := w.record(t)
		return rec != nil && !rec.Admin && rec.Created == r.Created.Unix()
	})

	// Her claim lapses: the rule goes at the expiry instant.
	leasetest.WaitFor(t, "the expiry timer", func() bool { return w.clock.Timers() >= 1 })
	w.clock.Set(time.Time(*first.ExpiresAt))
	w.rule(t, nil)
	// bob takes over.
	if _, err := w.svc.Acquire(bg, w.As("bob"), "acme", "widgets", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	w.rule(t, []string{"bob"})
	// alice claims the pull request itself: its own claim decides.
	if _, err := w.svc.Acquire(bg, w.As("alice"), "acme", "widgets", 2, time.Hour); err != nil {
		t.Fatal(err)
	}
	w.rule(t, []string{"alice"})
	if w.pushOutcomes.count("made") != 2 || w.pushOutcomes.count("updated") != 1 || w.pushOutcomes.count("removed") != 1 {
		t.Fatalf("outcomes %v, want made twice, updated and removed once", w.pushOutcomes.got)
	}
	// Closed: no rule, and nothing remembered.
	w.pullOn(t, forge.EventClosed, sha1, "work", "Fixes #1", false)
	w.rule(t, nil)
	leasetest.WaitFor(t, "the record forgotten", func() bool { return w.record(t) == nil })
}

// The sidecar's rule carries the admin's rule that would otherwise apply,
// with its allowlist narrowed to the holder; an admin's rule of the exact
// name is left alone.
func TestPushFenceNeverWeakensTheAdminsRule(t *testing.T) {
	w := newWorld(t, true)
	settings := map[string]any{"enable_status_check": true, "status_check_contexts": []any{"ci/build"}, "required_approvals": float64(2)}
	// Files any writer may push to, allowlist or not: not on the fenced
	// branch, where only the holders push.
	adminSettings := maps.Clone(settings)
	adminSettings["unprotected_file_patterns"] = "docs/**"
	settings["unprotected_file_patterns"] = ""
	w.forge.AddBranchRule("acme/widgets", forge.BranchRule{Name: "wor*", Priority: 3, Settings: adminSettings,
		Push:      forge.Allow{Enabled: true, Listed: true, Users: []string{"bob"}, Teams: []string{"devs"}, DeployKeys: true},
		ForcePush: forge.Allow{}})
	w.forge.AddBranchRule("acme/widgets", forge.BranchRule{Name: "main", Priority: 1})
	w.forge.SetTeam("acme", "devs", "alice")
	w.pullOn(t, forge.EventPullChanged, sha1, "work", "Fixes #1", true)
	if _, err := w.svc.Acquire(bg, w.As("alice"), "acme", "widgets", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	// alice is on the allowlist through her team.
	r := w.rule(t, []string{"alice"})
	if r.Priority != 2 {
		t.Fatalf("priority %d, want 2: below the admin's rule that matches (3)", r.Priority)
	}
	if !reflect.DeepEqual(r.Settings, settings) || r.ForcePush.Enabled || r.Push.DeployKeys || len(r.Push.Teams) != 0 {
		t.Fatalf("the rule %+v does not carry the admin's %+v", r, settings)
	}
	// eve is not on it: nobody may push while eve holds the claim.
	if _, err := w.svc.Release(bg, w.As("alice"), "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	w.rule(t, nil)
	w.forge.Grant("acme/widgets", "eve", forgetest.Write)
	if _, err := w.svc.Acquire(bg, w.As("eve"), "acme", "widgets", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	leasetest.WaitFor(t, "a rule letting nobody push", func() bool {
		r, ok := w.forge.BranchRule("acme/widgets", workRule)
		return ok && r.Push.Enabled && r.Push.Listed && len(r.Push.Users) == 0
	})
	if _, err := w.svc.Release(bg, w.As("eve"), "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	w.rule(t, nil)

	// An admin's rule of the name the sidecar gives its own: left alone,
	// and remembered.
	admins := forge.BranchRule{Name: workRule, Priority: 7, Push: forge.Allow{Enabled: true}}
	w.forge.AddBranchRule("acme/widgets", admins)
	edits := w.forge.Calls("EditBranchRule") + w.forge.Calls("CreateBranchRule") + w.forge.Calls("DeleteBranchRule")
	if _, err := w.svc.Acquire(bg, w.As("bob"), "acme", "widgets", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	leasetest.WaitFor(t, "the admin's rule remembered", func() bool { r := w.record(t); return r != nil && r.Admin })
	if r, _ := w.forge.BranchRule("acme/widgets", workRule); r.Priority != 7 || r.Push.Listed {
		t.Fatalf("the admin's rule became %+v", r)
	}
	if _, err := w.svc.Release(bg, w.As("bob"), "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	leasetest.WaitFor(t, "the admin's branch forgotten", func() bool { return w.record(t) == nil })
	if _, ok := w.forge.BranchRule("acme/widgets", workRule); !ok {
		t.Fatal("the admin's rule was removed")
	}
	if n := w.forge.Calls("EditBranchRule") + w.forge.Calls("CreateBranchRule") + w.forge.Calls("DeleteBranchRule"); n != edits {
		t.Fatalf("%d changes of rules while the admin's rule stood", n-edits)
	}
}

// A failed change is retried with backoff; a restarted worker removes
// the rules whose claims ended while it was down, even with the push
// fence turned off.
func TestPushFenceIsRetriedAndReconciledAfterARestart(t *testing.T) {
	w := newWorld(t, true)
	w.forge.SetHook(func(ctx context.Context, method string) error {
		if method == "CreateBranchRule" {
			return errors.New("gitea is down")
		}
		return nil
	})
	w.pullOn(t, forge.EventPullChanged, sha1, "work", "Fixes #1", true)
	if _, err := w.svc.Acquire(bg, w.As("alice"), "acme", "widgets", 1, 0); err != nil {
		t.Fatal(err)
	}
	leasetest.WaitFor(t, "a failed change", func() bool { return w.pushOutcomes.count("failed") >= 1 })
	if rec := w.record(t); rec == nil || rec.Admin || rec.Created >= 0 {
		t.Fatalf("the intent recorded before the creation: %+v", rec)
	}
	w.forge.SetHook(nil)
	// The retry comes after its backoff: 1 s after one failure, longer
	// if the worker tried again meanwhile (woken by another change). The
	// clock moves a second at a time until it does.
	w.ruleMoving(t, []string{"alice"}, time.Second)

	// Down while the claim ends.
	w.stop()
	if _, err := w.svc.Release(bg, w.As("alice"), "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.forge.BranchRule("acme/widgets", workRule); !ok {
		t.Fatal("the rule went with nobody running")
	}
	w.pushes = false
	w.start(t)
	w.rule(t, nil)
	leasetest.WaitFor(t, "the record forgotten", func() bool { return w.record(t) == nil })
}

// Two workers on one ledger (two replicas) racing for one branch: one
// rule, recorded as the sidecar's (never taken for an admin's), and gone
// when the claim ends.
func TestPushFenceOfTwoReplicas(t *testing.T) {
	w := newWorld(t, true)
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() {
		done <- fence.New(w.Ledger, w.forge, w.Bus, fence.Options{FencePushes: true, Now: w.clock.Now, After: w.clock.After}).Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	w.pullOn(t, forge.EventPullChanged, sha1, "work", "Fixes #1", true)
	for _, who := range []string{"alice", "bob", "alice"} {
		if _, err := w.svc.Acquire(bg, w.As(who), "acme", "widgets", 1, time.Hour); err != nil {
			t.Fatal(err)
		}
		// Retries after a lost race come from the backoff timers.
		w.ruleMoving(t, []string{who}, time.Second)
		leasetest.WaitFor(t, "the record of the sidecar's rule", func() bool {
			if r := w.record(t); r != nil && !r.Admin && r.Created > 0 {
				return true
			}
			w.clock.Advance(time.Second)
			return false
		})
		if _, err := w.svc.Release(bg, w.As(who), "acme", "widgets", 1); err != nil {
			t.Fatal(err)
		}
		w.rule(t, nil)
	}
	leasetest.WaitFor(t, "the record forgotten", func() bool { return w.record(t) == nil })
}

// An admin's rule of the branch's exact name made between the worker's
// look at the rules and its create is the admin's: the worker records it
// so and never edits or removes it.
func TestPushFenceLeavesARuleAnAdminMadeMeanwhile(t *testing.T) {
	w := newWorld(t, true)
	admins := forge.BranchRule{Name: workRule, Priority: 9, Push: forge.Allow{Enabled: true}}
	w.forge.SetHook(func(ctx context.Context, method string) error {
		if method == "CreateBranchRule" {
			w.forge.SetHook(nil)
			w.forge.AddBranchRule("acme/widgets", admins)
		}
		return nil
	})
	w.pullOn(t, forge.EventPullChanged, sha1, "work", "Fixes #1", true)
	if _, err := w.svc.Acquire(bg, w.As("alice"), "acme", "widgets", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	leasetest.WaitFor(t, "the admin's rule recorded", func() bool { r := w.record(t); return r != nil && r.Admin })
	if _, err := w.svc.Release(bg, w.As("alice"), "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Acquire(bg, w.As("bob"), "acme", "widgets", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(time.Minute)
	if r, ok := w.forge.BranchRule("acme/widgets", workRule); !ok || r.Priority != 9 || r.Push.Listed {
		t.Fatalf("the admin's rule became %+v (there: %v)", r, ok)
	}
	if n := w.forge.Calls("EditBranchRule") + w.forge.Calls("DeleteBranchRule"); n != 0 {
		t.Fatalf("%d edits or deletions of the admin's rule", n)
	}
}

// turnTaken is a ledger on which another replica holds every branch's
// turn while busy is set.
type turnTaken struct {
	fence.Ledger
	busy    atomic.Bool
	refused atomic.Int64
}

func (l *turnTaken) Exclusive(ctx context.Context, chore int32, fn func(context.Context) error) (bool, error) {
	if l.busy.Load() {
		l.refused.Add(1)
		return false, nil
	}
	return l.Ledger.Exclusive(ctx, chore, fn)
}

// While another replica keeps a branch's rule, the worker neither reads
// the record nor asks the forge about that branch: it looks again after
// a backoff, and keeps the rule once the turn is free.
func TestPushFenceTakesTurnsWithOtherReplicas(t *testing.T) {
	w := newWorld(t, true)
	w.stop()
	turns := &turnTaken{Ledger: w.Ledger}
	turns.busy.Store(true)
	w.ledger = turns
	w.start(t)
	w.pullOn(t, forge.EventPullChanged, sha1, "work", "Fixes #1", true)
	if _, err := w.svc.Acquire(bg, w.As("alice"), "acme", "widgets", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	leasetest.WaitFor(t, "a turn refused", func() bool { return turns.refused.Load() >= 1 })
	if n := w.forge.Calls("BranchRules") + w.forge.Calls("CreateBranchRule"); n != 0 || w.record(t) != nil {
		t.Fatalf("%d questions to the forge, record %+v, while another replica had the branch's turn", n, w.record(t))
	}
	turns.busy.Store(false)
	// Looks again after its backoff.
	leasetest.WaitFor(t, "the rule once the turn is free", func() bool {
		if r, ok := w.forge.BranchRule("acme/widgets", workRule); ok && slices.Equal(r.Push.Users, []string{"alice"}) {
			return true
		}
		w.clock.Advance(time.Second)
		return false
	})
	if w.pushOutcomes.count("failed") != 0 {
		t.Fatalf("another replica's turn counted as a failure: %v", w.pushOutcomes.got)
	}
}

// A change of the admin's rule reaches the sidecar's within Recheck, with
// no change of the claim; so does the sidecar's rule removed by hand.
func TestPushFenceRechecksTheAdminsRule(t *testing.T) {
	w := newWorld(t, false)
	w.stop()
	w.pushes, w.recheck = true, 5*time.Minute
	w.start(t)
	w.forge.AddBranchRule("acme/widgets", forge.BranchRule{Name: "wor*", Priority: 3, Push: forge.Allow{Enabled: true}})
	w.pullOn(t, forge.EventPullChanged, sha1, "work", "Fixes #1", true)
	if _, err := w.svc.Acquire(bg, w.As("alice"), "acme", "widgets", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	w.rule(t, []string{"alice"})
	// The admin now requires approvals of everything under wor*.
	w.forge.AddBranchRule("acme/widgets", forge.BranchRule{Name: "wo*", Priority: 1, Push: forge.Allow{Enabled: true},
		Settings: map[string]any{"required_approvals": float64(2)}})
	w.clock.Advance(5 * time.Minute)
	leasetest.WaitFor(t, "the admin's approvals carried", func() bool {
		r, ok := w.forge.BranchRule("acme/widgets", workRule)
		return ok && r.Settings["required_approvals"] == float64(2) && r.Priority == 0-1 && slices.Equal(r.Push.Users, []string{"alice"})
	})
	// Removed by hand: back at the next look.
	if err := w.forge.DeleteBranchRule(bg, "acme", "widgets", workRule); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(5 * time.Minute)
	w.rule(t, []string{"alice"})
}

// An admin's plain rule named for the branch in another case is a rule
// the forge applies to the branch (it matches plain names without regard
// to case): the sidecar's rule carries it and goes before it, and leaves
// it as it is, with its other namesakes.
func TestPushFenceCarriesTheAdminsRuleOfAnotherCase(t *testing.T) {
	w := newWorld(t, true)
	admins := forge.BranchRule{Name: "WORK", Priority: 4, Push: forge.Allow{Enabled: true},
		Settings: map[string]any{"required_approvals": float64(2)}}
	w.forge.AddBranchRule("acme/widgets", admins)
	w.pullOn(t, forge.EventPullChanged, sha1, "work", "Fixes #1", true)
	if _, err := w.svc.Acquire(bg, w.As("alice"), "acme", "widgets", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	r := w.rule(t, []string{"alice"})
	if r.Priority != 3 || r.Settings["required_approvals"] != float64(2) {
		t.Fatalf("the sidecar's rule %+v: want priority 3 and the admin's approvals", r)
	}
	if got, ok := w.forge.BranchRule("acme/widgets", "WORK"); !ok || !reflect.DeepEqual(got.Push, admins.Push) || got.Priority != 4 {
		t.Fatalf("the admin's rule became %+v (there: %v)", got, ok)
	}
	if rec := w.record(t); rec == nil || rec.Admin {
		t.Fatalf("record %+v, want the sidecar's rule", rec)
	}
	if _, err := w.svc.Release(bg, w.As("alice"), "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	w.rule(t, nil)
	if _, ok := w.forge.BranchRule("acme/widgets", "WORK"); !ok {
		t.Fatal("the admin's rule was removed")
	}
}

// An earlier sidecar named its rule as the branch ("work"), which the
// forge applies to WORK too. The ledger says the rule is the sidecar's:
// it is replaced by one of the new name, made before the old one goes,
// also when a step fails on the way; the admin's rule that applies
// besides is carried, not the old rule.
func TestPushFenceReplacesTheRuleOfAnEarlierSidecar(t *testing.T) {
	for _, failing := range []string{"", "CreateBranchRule", "DeleteBranchRule"} {
		t.Run("failing "+cmp.Or(failing, "nothing"), func(t *testing.T) {
			w := newWorld(t, true)
			w.stop()
			w.forge.AddBranchRule("acme/widgets", forge.BranchRule{Name: "wor*", Priority: 3, Push: forge.Allow{Enabled: true},
				Settings: map[string]any{"required_approvals": float64(1)}})
			old := forge.BranchRule{Name: "work", Priority: 2, Created: time.Unix(1_700_000_000, 0),
				Push: forge.Allow{Enabled: true, Listed: true, Users: []string{"alice"}}}
			w.forge.AddBranchRule("acme/widgets", old)
			if err := w.Ledger.SaveFenceRule(bg, models.FenceRule{RepoID: 1, Branch: "work", Created: old.Created.Unix()}); err != nil {
				t.Fatal(err)
			}
			var failed atomic.Bool
			w.forge.SetHook(func(ctx context.Context, method string) error {
				if method == failing && failed.CompareAndSwap(false, true) {
					return errors.New("gitea is down")
				}
				if method == "DeleteBranchRule" {
					// Never unfenced: the new rule stands before the old goes.
					if _, ok := w.forge.BranchRule("acme/widgets", workRule); !ok {
						t.Error("the earlier sidecar's rule removed before the new one stood")
					}
				}
				return nil
			})
			w.pullOn(t, forge.EventPullChanged, sha1, "work", "Fixes #1", true)
			if _, err := w.svc.Acquire(bg, w.As("bob"), "acme", "widgets", 1, time.Hour); err != nil {
				t.Fatal(err)
			}
			w.start(t)
			r := w.ruleMoving(t, []string{"bob"}, time.Second)
			leasetest.WaitFor(t, "the earlier sidecar's rule gone", func() bool {
				_, ok := w.forge.BranchRule("acme/widgets", "work")
				if ok {
					w.clock.Advance(time.Second)
				}
				return !ok
			})
			if r.Priority != 2 || r.Settings["required_approvals"] != float64(1) {
				t.Fatalf("the new rule %+v: want priority 2 and the admin's approval", r)
			}
			leasetest.WaitFor(t, "the new rule recorded", func() bool {
				r := w.record(t)
				return r != nil && !r.Admin && r.Created > 0 && r.Created != old.Created.Unix()
			})
			if _, ok := w.forge.BranchRule("acme/widgets", "wor*"); !ok {
				t.Fatal("the admin's rule was removed")
			}
			if _, err := w.svc.Release(bg, w.As("bob"), "acme", "widgets", 1); err != nil {
				t.Fatal(err)
			}
			w.rule(t, nil)
		})
	}
}

// A rule of the name earlier sidecars gave that the ledger does not say
// is the sidecar's (an admin's, left alone by an earlier sidecar) stays,
// and is carried: even when the sidecar stops between recording its
// intent and making its rule.
func TestPushFenceKeepsTheAdminsRuleOfTheEarlierName(t *testing.T) {
	w := newWorld(t, true)
	w.stop()
	admins := forge.BranchRule{Name: "work", Priority: 5, Push: forge.Allow{Enabled: true},
		Settings: map[string]any{"required_approvals": float64(3)}}
	w.forge.AddBranchRule("acme/widgets", admins)
	if err := w.Ledger.SaveFenceRule(bg, models.FenceRule{RepoID: 1, Branch: "work", Admin: true}); err != nil {
		t.Fatal(err)
	}
	w.forge.SetHook(func(ctx context.Context, method string) error {
		if method == "CreateBranchRule" {
			return errors.New("gitea is down")
		}
		return nil
	})
	w.pullOn(t, forge.EventPullChanged, sha1, "work", "Fixes #1", true)
	if _, err := w.svc.Acquire(bg, w.As("alice"), "acme", "widgets", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	w.start(t)
	leasetest.WaitFor(t, "a failed creation", func() bool { return w.pushOutcomes.count("failed") >= 1 })
	if rec := w.record(t); rec == nil || rec.Admin || rec.Created != -1 {
		t.Fatalf("the intent: %+v, want -1 (no rule of the earlier name is the sidecar's)", rec)
	}
	// The sidecar stops, and starts again.
	w.stop()
	w.forge.SetHook(nil)
	w.start(t)
	r := w.ruleMoving(t, []string{"alice"}, time.Second)
	if r.Priority != 4 || r.Settings["required_approvals"] != float64(3) {
		t.Fatalf("the sidecar's rule %+v: want priority 4 and the admin's approvals", r)
	}
	if _, err := w.svc.Release(bg, w.As("alice"), "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	w.rule(t, nil)
	leasetest.WaitFor(t, "the record forgotten", func() bool { return w.record(t) == nil })
	if got, ok := w.forge.BranchRule("acme/widgets", "work"); !ok || !reflect.DeepEqual(got.Settings, admins.Settings) {
		t.Fatalf("the admin's rule became %+v (there: %v)", got, ok)
	}
}
