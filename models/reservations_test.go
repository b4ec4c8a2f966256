package models

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/pathglob"
)

func globsOf(rs []Reservation) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Glob)
	}
	return out
}

// Exclusive globs keep other holders off every path they may share;
// shared ones meet only exclusive ones; a holder never conflicts with
// itself; a reservation ends with its anchor.
func TestReserveDecidesConflicts(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, _ := e.open(t)
		a1, a2 := who("bot"), who("bot")
		a1.Agent, a2.Agent = "a1", "a2"
		mustAcquireAs(t, s, Key{RepoID: 1, Issue: 1}, a1, time.Hour)
		mustAcquireAs(t, s, Key{RepoID: 1, Issue: 2}, a2, time.Hour)
		got, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: a1, Globs: []string{"src/auth/**"}, Issue: 1})
		if err != nil || !slices.Equal(globsOf(got), []string{"src/auth/**"}) || got[0].Issue != 1 || got[0].ExpiresAt == nil {
			t.Fatalf("a1's reserve: %+v %v", got, err)
		}
		var conflict *ReservedError
		for _, g := range []string{"src/auth/login.go", "src/*/login.go", "**/*.go", "src/"} {
			if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: a2, Globs: []string{"docs/x.md", g}, Issue: 2}); !errors.As(err, &conflict) ||
				len(conflict.With) != 1 || conflict.With[0].Glob != "src/auth/**" || conflict.With[0].Holder != a1 || conflict.With[0].Issue != 1 {
				t.Fatalf("a2's reserve of %s: %v, want a conflict with a1's src/auth/**", g, err)
			}
		}
		// All or none: docs/x.md was not reserved either.
		if rs, err := s.Reservations(bg, 1, "docs/x.md"); err != nil || len(rs) != 0 {
			t.Fatalf("docs/x.md after a refused reserve: %+v %v", rs, err)
		}
		if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: a2, Globs: []string{"src/authz/**", "docs/x.md"}, Issue: 2}); err != nil {
			t.Fatalf("paths apart: %v", err)
		}
		// Another repository is another world.
		if _, err := s.Reserve(bg, Reserve{RepoID: 2, Holder: a2, Globs: []string{"src/auth/login.go"}, TTL: time.Minute}); err != nil {
			t.Fatalf("another repository: %v", err)
		}
		// Shared meets shared, not exclusive.
		if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: a1, Globs: []string{"go.mod"}, Shared: true, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: a2, Globs: []string{"go.*"}, Shared: true, TTL: time.Minute}); err != nil {
			t.Fatalf("shared with shared: %v", err)
		}
		if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: who("carol"), Globs: []string{"go.mod"}, TTL: time.Minute}); !errors.As(err, &conflict) || len(conflict.With) != 2 {
			t.Fatalf("exclusive over two shared: %v, want a conflict with both", err)
		}
		// A holder's own reservations never stand in its way.
		if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: a1, Globs: []string{"src/auth/login.go"}, TTL: time.Minute}); err != nil {
			t.Fatalf("a1 over its own: %v", err)
		}
		// The claim ends: its reservations with it.
		if _, err := s.Release(bg, Key{RepoID: 1, Issue: 1}, a1); err != nil {
			t.Fatal(err)
		}
		if rs, _ := s.Reservations(bg, 1, "src/auth/login.go"); !slices.Equal(globsOf(rs), []string{"src/auth/login.go"}) {
			t.Fatalf("after a1's release: %v, want only its own ttl's", globsOf(rs))
		}
		// Its ttl ends the rest.
		clock.Advance(time.Minute)
		if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: a2, Globs: []string{"src/auth/login.go"}, Issue: 2}); err != nil {
			t.Fatalf("after every reservation of a1 ended: %v", err)
		}
		// Unreserve: one's own only, unless forced.
		if rs, err := s.Unreserve(bg, 1, a1, nil, 0, false); err != nil || len(rs) != 0 {
			t.Fatalf("a1's unreserve of nothing: %+v %v", rs, err)
		}
		if rs, err := s.Unreserve(bg, 1, who("admin"), []string{"src/auth/login.go"}, 0, true); err != nil || len(rs) != 1 || rs[0].Holder != a2 {
			t.Fatalf("a forced unreserve: %+v %v", rs, err)
		}
		if rs, err := s.Unreserve(bg, 1, a2, nil, 2, false); err != nil || !slices.Equal(globsOf(rs), []string{"src/authz/**", "docs/x.md"}) {
			t.Fatalf("a2's unreserve of its claim's: %v %v", globsOf(rs), err)
		}
		// Bad input changes nothing.
		var nh *NotHolderError
		for _, bad := range []Reserve{
			{RepoID: 1, Holder: a1, Globs: []string{"/abs"}, TTL: time.Minute},
			{RepoID: 1, Holder: a1, Globs: []string{"a/../b"}, TTL: time.Minute},
			{RepoID: 1, Holder: a1, Globs: nil, TTL: time.Minute},
			{RepoID: 1, Holder: a1, Globs: []string{"x"}},
			{RepoID: 1, Holder: a1, Globs: []string{"x"}, Issue: 2, TTL: time.Minute},
		} {
			if _, err := s.Reserve(bg, bad); !errors.Is(err, ErrInvalid) {
				t.Errorf("%+v: %v, want invalid", bad, err)
			}
		}
		if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: a1, Globs: []string{"x"}, Issue: 2}); !errors.As(err, &nh) || nh.Agent != "a2" {
			t.Errorf("a reserve on another's claim: %v, want not holder", err)
		}
	})
}

// Twenty holders racing to reserve overlapping globs, through two
// replicas of one ledger: exactly one wins.
func TestReserveRaceHasOneWinner(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, db := e.open(t)
		other := replica(t, db, clock)
		globs := []string{"src/**", "src/auth/*", "**/login.go", "src/auth/login.go", "src/a*/l*"}
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := 0
		for i := range 20 {
			wg.Go(func() {
				h := who("bot")
				h.Agent = "a" + string(rune('a'+i))
				_, err := []*Store{s, other}[i%2].Reserve(bg, Reserve{RepoID: 1, Holder: h, Globs: []string{globs[i%len(globs)]}, TTL: time.Minute})
				var conflict *ReservedError
				switch {
				case err == nil:
					mu.Lock()
					won++
					mu.Unlock()
				case !errors.As(err, &conflict):
					t.Errorf("%s: %v", h.Agent, err)
				}
			})
		}
		wg.Wait()
		if won != 1 {
			t.Fatalf("%d holders reserved overlapping globs at once, want 1", won)
		}
	})
}

// The gate refuses a push whose paths are under another holder's
// exclusive reservation, naming the path, the holder and its claim.
func TestGateRefusesReservedPaths(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, _, _ := e.open(t)
		a1, a2 := who("bot"), who("bot")
		a1.Agent, a2.Agent = "a1", "a2"
		mustAcquireAs(t, s, Key{RepoID: 1, Issue: 1}, a1, 0)
		l2 := mustAcquireAs(t, s, Key{RepoID: 1, Issue: 2}, a2, time.Hour)
		if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: a1, Globs: []string{"src/auth/**", "*.md"}, Issue: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: a2, Globs: []string{"lib/**"}, Shared: true, Issue: 2}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: who("bot"), Globs: []string{"account/**"}, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		push := func(pusher string, opts []string, paths ...string) GatePush {
			p := gatePush(pusher, []string{"refs/heads/anything"}, opts...)
			p.Paths = paths
			return p
		}
		a2opt := []string{"collab-lease=2:" + fmt.Sprint(l2.Token)}
		for _, c := range []struct {
			name  string
			push  GatePush
			lines []string
		}{
			{"a2 changes a1's file", push("bot", a2opt, "docs/x.txt", "src/auth/login.go"),
				[]string{"collab-lease: src/auth/login.go is reserved by bot · a1 for acme/widgets#1 (no expiry)"}},
			{"a2 changes what nobody reserved", push("bot", a2opt, "docs/x.txt", "src/authz/a.go"), nil},
			{"a1 changes its own", push("bot", []string{"collab-lease=1:1"}, "src/auth/login.go", "README.md"), nil},
			{"the account with no agent (no token) is not a1", push("bot", nil, "README.md"),
				[]string{"collab-lease: README.md is reserved by bot · a1 for acme/widgets#1 (no expiry)"}},
			{"another account", push("carol", nil, "src/auth/a.go", "src/auth/b.go", "lib/x.go"),
				[]string{"collab-lease: src/auth/a.go is reserved by bot · a1 for acme/widgets#1 (no expiry)",
					"collab-lease: src/auth/b.go is reserved by bot · a1 for acme/widgets#1 (no expiry)"}},
			{"an account's own reservation with no agent keeps none of its agents off", push("bot", a2opt, "account/x"), nil},
			{"another account meets the account's", push("carol", nil, "account/x"), []string{"collab-lease: account/x is reserved by bot until "}},
			{"a directory standing for its paths", func() GatePush { p := push("carol", nil, "src"); p.PathsAreDirs = true; return p }(),
				[]string{"collab-lease: a path under src/ is reserved by bot · a1 for acme/widgets#1 (no expiry)"}},
			{"a directory apart", func() GatePush { p := push("carol", nil, "docs"); p.PathsAreDirs = true; return p }(), nil},
			{"the root, for a top-level file among too many paths", func() GatePush { p := push("carol", nil, ""); p.PathsAreDirs = true; return p }(),
				[]string{"collab-lease: a path this push changes is reserved by"}},
		} {
			v, err := s.Gate(bg, c.push)
			if err != nil {
				t.Fatal(err)
			}
			if v.Allow != (len(c.lines) == 0) || len(v.Lines) != len(c.lines) {
				t.Fatalf("%s: %+v, want lines %q", c.name, v, c.lines)
			}
			for i, want := range c.lines {
				if !strings.HasPrefix(v.Lines[i], want) || v.Refused[i] != GateReserved {
					t.Fatalf("%s: line %q (%s), want %q", c.name, v.Lines[i], v.Refused[i], want)
				}
			}
		}
		// The claim ends: so does the refusal.
		if _, err := s.Release(bg, Key{RepoID: 1, Issue: 1}, a1); err != nil {
			t.Fatal(err)
		}
		if v, err := s.Gate(bg, push("carol", nil, "src/auth/login.go")); err != nil || !v.Allow {
			t.Fatalf("after a1's release: %+v %v", v, err)
		}
	})
}

// A reserve reads only the reservations whose prefixes could meet its
// globs: it must find every conflict reading them all would. Each glob
// of a set spread over prefixes above, below and beside one another is
// reserved by its own holder; every other glob then decides against
// them, and the conflicts must be exactly those pathglob.Overlap finds.
func TestReserveReadsEveryReservationThatMayConflict(t *testing.T) {
	globs := []string{"**/*.go", "src/", "src/auth/**", "src/auth/login.go", "src/auth/*/x", "src/authz/*", "src/a?th/**",
		"docs/ü/**", "docs/ü/x.md", "docs/üx/y", "*.md", "README.md", "src/auth/deep/er/file.go", "s*/auth/deep/**"}
	forEachEngine(t, func(t *testing.T, e engine) {
		s, _, _ := e.open(t)
		for i, g := range globs {
			h := who("bot")
			h.Agent = fmt.Sprint("h", i)
			if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: h, Globs: []string{g}, Shared: true, TTL: time.Hour}); err != nil {
				t.Fatalf("reserve %s: %v", g, err)
			}
		}
		for _, g := range globs {
			a := mustGlob(t, g)
			var want []string
			for _, o := range globs {
				if _, ok := pathglob.Overlap(a, mustGlob(t, o)); ok {
					want = append(want, o)
				}
			}
			_, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: who("carol"), Globs: []string{g}, TTL: time.Hour})
			var conflict *ReservedError
			if !errors.As(err, &conflict) {
				t.Fatalf("reserve %s: %v, want conflicts with %q", g, err, want)
			}
			got := globsOf(conflict.With)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("reserve %s conflicts with %q, want %q", g, got, want)
			}
		}
	})
}

func mustGlob(t *testing.T, s string) pathglob.Glob {
	t.Helper()
	g, err := pathglob.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The cap counts a holder's live reservations over every repository; a
// glob it holds already is replaced, not counted twice; ended ones
// free their place; other holders have caps of their own.
func TestReservationCap(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, _ := e.open(t, WithReservationCap(3))
		a1 := who("bot")
		a1.Agent = "a1"
		if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: a1, Globs: []string{"a", "b"}, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Reserve(bg, Reserve{RepoID: 2, Holder: a1, Globs: []string{"c"}, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		var limit *LimitError
		if _, err := s.Reserve(bg, Reserve{RepoID: 2, Holder: a1, Globs: []string{"d"}, TTL: time.Hour}); !errors.As(err, &limit) || *limit != (LimitError{Scope: "reservations", Limit: 3, Live: 3}) {
			t.Fatalf("a fourth: %v, want the cap", err)
		}
		if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: a1, Globs: []string{"a", "b"}, TTL: time.Hour}); err != nil {
			t.Fatalf("the same globs again: %v", err)
		}
		if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: who("bot"), Globs: []string{"x", "y", "z"}, TTL: time.Hour}); err != nil {
			t.Fatalf("the account itself is another holder: %v", err)
		}
		clock.Advance(30 * time.Minute) // nothing ended yet: a and b were renewed to an hour
		if _, err := s.Reserve(bg, Reserve{RepoID: 2, Holder: a1, Globs: []string{"d"}, TTL: time.Hour}); !errors.As(err, &limit) {
			t.Fatalf("still at the cap: %v", err)
		}
		if _, err := s.Unreserve(bg, 1, a1, []string{"a"}, 0, false); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Reserve(bg, Reserve{RepoID: 2, Holder: a1, Globs: []string{"d"}, TTL: time.Hour}); err != nil {
			t.Fatalf("after an unreserve: %v", err)
		}
	})
}

// PruneReservations removes the dead, whatever their anchor, and only
// them; the listing never showed them.
func TestPruneReservations(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, _ := e.open(t)
		a1 := who("bot")
		a1.Agent = "a1"
		k := Key{RepoID: 1, Issue: 1}
		mustAcquireAs(t, s, k, a1, time.Hour)
		if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: a1, Globs: []string{"claim/**"}, Issue: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: a1, Globs: []string{"short/**"}, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Reserve(bg, Reserve{RepoID: 2, Holder: a1, Globs: []string{"long/**"}, TTL: 2 * time.Hour}); err != nil {
			t.Fatal(err)
		}
		if n, err := s.PruneReservations(bg); err != nil || n != 0 {
			t.Fatalf("prune with all live: %d %v", n, err)
		}
		clock.Advance(2 * time.Minute)
		if _, err := s.Release(bg, k, a1); err != nil {
			t.Fatal(err)
		}
		if n, err := s.PruneReservations(bg); err != nil || n != 2 {
			t.Fatalf("prune: %d %v, want 2", n, err)
		}
		var rows int64
		if err := s.db.Model(&reservationRow{}).Count(&rows).Error; err != nil || rows != 1 {
			t.Fatalf("%d rows left (%v), want long/** alone", rows, err)
		}
	})
}

// raceSets are the glob sets of twenty agents racing to reserve, in a
// known pattern of overlaps: a chain (each set meets the next one's,
// and only it), a star (a center meeting six leaves that never meet one
// another), and globs across everything (**/*.md meets every set with a
// directory under which a .md may be; shared ones meet shared ones
// without conflict, and exclusive ones with it). The last set continues
// the chain from outside it.
var raceSets = func() []struct {
	globs  []string
	shared bool
} {
	type set = struct {
		globs  []string
		shared bool
	}
	var sets []set
	for i := range 7 { // the chain: 0–6
		sets = append(sets, set{globs: []string{fmt.Sprintf("chain/%d/**", i), fmt.Sprintf("chain/%d/*.go", i+1)}})
	}
	sets = append(sets, set{globs: []string{"star/**"}}) // the star's center: 7
	for j := range 6 {                                   // its leaves: 8–13
		sets = append(sets, set{globs: []string{fmt.Sprintf("star/%d/main.go", j), fmt.Sprintf("leaf/%d/**", j)}})
	}
	return append(sets,
		set{globs: []string{"**/*.md"}},                      // 14: meets nearly everyone
		set{globs: []string{"docs/*.md", "docs/api/**"}},     // 15
		set{globs: []string{"docs/api/v1.md"}, shared: true}, // 16: meets 17 (shared) and 14, 15
		set{globs: []string{"docs/api/*.md"}, shared: true},  // 17
		set{globs: []string{"docs/*"}, shared: true},         // 18
		set{globs: []string{"docs/guide.md", "chain/7/**"}},  // 19: the chain's far end
	)
}()

// raceConflict says whether sets i and j conflict: a glob of one may
// match a path a glob of the other does, and not both are shared.
func raceConflict(t *testing.T, i, j int) bool {
	a, b := raceSets[i], raceSets[j]
	if a.shared && b.shared {
		return false
	}
	for _, x := range a.globs {
		for _, y := range b.globs {
			if _, ok := pathglob.Overlap(mustGlob(t, x), mustGlob(t, y)); ok {
				return true
			}
		}
	}
	return false
}

// Twenty agents race to reserve overlapping sets of globs (raceSets),
// all at once, half of them through each of two replicas of one ledger,
// the even ones anchored to a claim, the odd ones to a ttl. Afterwards:
// of each pair of sets that conflict, at most one won; each refused
// reserve reserved nothing, and was refused for winners' reservations
// that do conflict with it (so no one lost to a loser, or for nothing);
// and the live reservations of different holders never overlap where
// one of them is exclusive.
func TestReserveRaceOverOverlappingSets(t *testing.T) {
	n := len(raceSets)
	conflicts := make([][]bool, n)
	for i := range n {
		conflicts[i] = make([]bool, n)
		for j := range n {
			conflicts[i][j] = i != j && raceConflict(t, i, j)
		}
	}
	// The pattern is what it says.
	for i := range 7 {
		for j := range 7 {
			if conflicts[i][j] != (j == i+1 || i == j+1) {
				t.Fatalf("chain %d and %d: conflict %v", i, j, conflicts[i][j])
			}
		}
	}
	for j := 8; j < 14; j++ {
		if !conflicts[7][j] || slices.Contains(conflicts[j][8:14], true) {
			t.Fatalf("star leaf %d: the center %v, other leaves %v", j, conflicts[7][j], conflicts[j][8:14])
		}
	}
	if !conflicts[6][19] || conflicts[16][17] || !conflicts[15][18] || !conflicts[14][0] {
		t.Fatal("the globs across the groups do not meet as they should")
	}
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, db := e.open(t)
		replicas := []*Store{s, replica(t, db, clock)}
		holders := make([]Holder, n)
		for i := range holders {
			holders[i] = who("bot")
			holders[i].Agent = fmt.Sprintf("a%02d", i)
			if i%2 == 0 {
				mustAcquireAs(t, s, Key{RepoID: 1, Issue: int64(i + 1)}, holders[i], time.Hour)
			}
		}
		won := make([][]Reservation, n)
		lost := make([][]Reservation, n) // the With of a refusal
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				r := Reserve{RepoID: 1, Holder: holders[i], Globs: raceSets[i].globs, Shared: raceSets[i].shared}
				if i%2 == 0 {
					r.Issue = int64(i + 1)
				} else {
					r.TTL = time.Hour
				}
				<-start
				rs, err := replicas[i%2].Reserve(bg, r)
				var conflict *ReservedError
				switch {
				case err == nil:
					won[i] = rs
				case errors.As(err, &conflict):
					lost[i] = conflict.With
				default:
					t.Errorf("%s: %v", holders[i].Agent, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if t.Failed() {
			return
		}
		var winners []string
		for i := range n {
			switch {
			case won[i] != nil && !slices.Equal(globsOf(won[i]), raceSets[i].globs):
				t.Errorf("%s reserved %q, want %q", holders[i].Agent, globsOf(won[i]), raceSets[i].globs)
			case won[i] != nil:
				winners = append(winners, holders[i].Agent)
			case len(lost[i]) == 0:
				t.Errorf("%s was refused for nothing", holders[i].Agent)
			}
			for j := range i {
				if conflicts[i][j] && won[i] != nil && won[j] != nil {
					t.Errorf("%s and %s both won sets that conflict: %q and %q", holders[i].Agent, holders[j].Agent, raceSets[i].globs, raceSets[j].globs)
				}
			}
			// A refusal names only winners' reservations that conflict.
			for _, x := range lost[i] {
				j := slices.IndexFunc(holders, func(h Holder) bool { return h == x.Holder })
				if j < 0 || won[j] == nil || !conflicts[i][j] || !slices.Contains(raceSets[j].globs, x.Glob) {
					t.Errorf("%s was refused for %s's %s, not a winner's reservation in its way", holders[i].Agent, x.Holder.Agent, x.Glob)
				}
			}
		}
		t.Logf("%d of %d won: %v", len(winners), n, winners)
		// The ledger holds exactly the winners' reservations, on either
		// replica, and none of them overlap across holders.
		for _, st := range replicas {
			live, err := st.Reservations(bg, 1, "")
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for i := range n {
				for _, g := range globsOf(won[i]) {
					want = append(want, holders[i].Agent+" "+g)
				}
			}
			var got []string
			for _, x := range live {
				got = append(got, x.Holder.Agent+" "+x.Glob)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("live reservations %q, want the winners' %q", got, want)
			}
			for i, x := range live {
				for _, y := range live[:i] {
					if x.Holder == y.Holder || (x.Shared && y.Shared) {
						continue
					}
					if p, ok := pathglob.Overlap(mustGlob(t, x.Glob), mustGlob(t, y.Glob)); ok {
						t.Errorf("%s's %s and %s's %s are both live and both match %s", x.Holder.Agent, x.Glob, y.Holder.Agent, y.Glob, p)
					}
				}
			}
		}
	})
}
