package models

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// inSessionOf is h acting in session ref.
func inSessionOf(h Holder, ref SessionRef) Holder {
	h.Session = &ref
	return h
}

func openSession(t *testing.T, s *Store, h Holder, grace time.Duration) SessionRef {
	t.Helper()
	ref, err := s.OpenSession(bg, h, grace, 0)
	if err != nil {
		t.Fatalf("OpenSession(%+v): %v", h, err)
	}
	return ref
}

// A claim taken in a session lives as long as the session is heard from,
// with no renew: 60 s on a 5 s grace, one token, one tenure; then, no
// longer heard from, it lapses a grace after the last heartbeat, and the
// history says the session was lost.
func TestSessionKeepsItsClaimAlive(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, _ := e.open(t)
		bot := Holder{ID: 7, Login: "bot", Agent: "a1"}
		ref := openSession(t, s, bot, 5*time.Second)
		k := Key{RepoID: 1, Issue: 42}
		l, err := s.Acquire(bg, k, inSessionOf(bot, ref), 0, issueObs)
		if err != nil || l.Session != ref.ID || l.ExpiresAt == nil || !l.ExpiresAt.Equal(clock.Now().Add(5*time.Second)) {
			t.Fatalf("acquire in the session: %+v %v, want kept by it, expiring a grace from now", l, err)
		}
		for range 36 { // 60 s, a heartbeat every grace/3
			clock.Advance(5 * time.Second / 3)
			if n, err := s.Heartbeat(bg, ref, bot, 5*time.Second); err != nil || n != 1 {
				t.Fatalf("heartbeat at %s: kept %d, %v", clock.Now(), n, err)
			}
		}
		cur, err := s.Current(bg, k)
		if err != nil || cur == nil || cur.Token != l.Token || cur.Holder.Agent != "a1" {
			t.Fatalf("after 60 s of heartbeats: %+v %v, want the same tenure live", cur, err)
		}
		// Lost: nothing more is heard; a grace after the last heartbeat
		// another agent of the account takes it over, with the next token.
		last := clock.Now()
		clock.Advance(4 * time.Second)
		other := Holder{ID: 7, Login: "bot", Agent: "a2"}
		if _, err := s.Acquire(bg, k, other, time.Minute, issueObs); !errors.Is(err, ErrHeld) {
			t.Fatalf("a2 within the grace: %v, want held", err)
		}
		clock.Set(last.Add(5 * time.Second))
		taken, err := s.Acquire(bg, k, other, time.Minute, issueObs)
		if err != nil || taken.Token != l.Token+1 {
			t.Fatalf("a2 after the grace: %+v %v, want token %d", taken, err, l.Token+1)
		}
		if _, err := s.Heartbeat(bg, ref, bot, 5*time.Second); !errors.Is(err, ErrSessionGone) {
			t.Fatalf("a heartbeat of the lost session: %v, want gone", err)
		}
		ts, err := s.Tenures(bg, k, 10)
		if err != nil || len(ts) != 2 {
			t.Fatalf("tenures %+v %v", ts, err)
		}
		// (The ledger keeps whole seconds.)
		if want := last.Truncate(time.Second).Add(5 * time.Second); ts[1].EndedBy != EndSessionLost || !ts[1].EndedAt.Equal(want) {
			t.Fatalf("the session's tenure ended %q at %v, want session_lost at %s", ts[1].EndedBy, ts[1].EndedAt, want)
		}
	})
}

// A lapsed session tenure nobody has taken says so too, and one capped by
// a --ttl given in the session ends expired at its cap, heartbeats or not.
func TestSessionTenureEndings(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, _ := e.open(t)
		bot := Holder{ID: 7, Login: "bot", Agent: "a1"}
		ref := openSession(t, s, bot, 10*time.Second)
		capped, lost := Key{RepoID: 1, Issue: 1}, Key{RepoID: 1, Issue: 2}
		start := clock.Now()
		if _, err := s.Acquire(bg, capped, inSessionOf(bot, ref), 25*time.Second, issueObs); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(bg, lost, inSessionOf(bot, ref), 0, issueObs); err != nil {
			t.Fatal(err)
		}
		for range 10 {
			clock.Advance(3 * time.Second)
			if _, err := s.Heartbeat(bg, ref, bot, 10*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		if cur, _ := s.Current(bg, capped); cur != nil {
			t.Fatalf("the capped claim is live 30 s after its 25 s cap: %+v", cur)
		}
		ts, _ := s.Tenures(bg, capped, 1)
		if ts[0].EndedBy != EndExpired || !ts[0].EndedAt.Equal(start.Add(25*time.Second)) {
			t.Fatalf("capped tenure %+v, want expired at its cap", ts[0])
		}
		clock.Advance(11 * time.Second)
		ts, _ = s.Tenures(bg, lost, 1)
		if ts[0].EndedBy != EndSessionLost || !ts[0].EndedAt.Equal(start.Add(40*time.Second)) {
			t.Fatalf("lost tenure %+v, want session_lost a grace after the last heartbeat", ts[0])
		}
		// Released by its account after it lapsed: it still ended lost.
		if _, err := s.Release(bg, lost, Holder{ID: 7, Login: "bot"}); err != nil {
			t.Fatal(err)
		}
		ts, _ = s.Tenures(bg, lost, 1)
		if ts[0].EndedBy != EndSessionLost {
			t.Fatalf("lost then released: %+v, want session_lost", ts[0])
		}
	})
}

// --resume within grace takes the session over with its tenures and
// tokens; the connection before may do nothing in its name any more; past
// the grace, or by another holder, there is nothing to resume.
func TestResumeSession(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, _ := e.open(t)
		bot := Holder{ID: 7, Login: "bot", Agent: "a1"}
		ref := openSession(t, s, bot, 5*time.Second)
		k := Key{RepoID: 1, Issue: 42}
		l, err := s.Acquire(bg, k, inSessionOf(bot, ref), 0, issueObs)
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(4 * time.Second)
		if _, _, err := s.ResumeSession(bg, ref.ID, Holder{ID: 7, Login: "bot", Agent: "a2"}); !errors.Is(err, ErrSessionGone) {
			t.Fatalf("another agent resumes it: %v, want gone", err)
		}
		if _, _, err := s.ResumeSession(bg, ref.ID, Holder{ID: 8, Login: "eve", Agent: "a1"}); !errors.Is(err, ErrSessionGone) {
			t.Fatalf("another account resumes it: %v, want gone", err)
		}
		next, leases, err := s.ResumeSession(bg, ref.ID, bot)
		if err != nil || next.ID != ref.ID || next.Gen != ref.Gen+1 || next.Grace != ref.Grace || len(leases) != 1 || leases[0].Token != l.Token {
			t.Fatalf("resume: %+v %+v %v, want the next generation with the claim", next, leases, err)
		}
		if !leases[0].ExpiresAt.Equal(clock.Now().Add(5 * time.Second)) {
			t.Fatalf("resumed claim expires %s, want a grace from now", leases[0].ExpiresAt)
		}
		if _, err := s.Heartbeat(bg, ref, bot, 5*time.Second); !errors.Is(err, ErrSessionMoved) {
			t.Fatalf("the old connection's heartbeat: %v, want moved", err)
		}
		if _, err := s.EndSession(bg, ref, bot); !errors.Is(err, ErrSessionMoved) {
			t.Fatalf("the old connection's clean end: %v, want moved", err)
		}
		if _, err := s.Acquire(bg, Key{RepoID: 1, Issue: 43}, inSessionOf(bot, ref), 0, issueObs); !errors.Is(err, ErrSessionMoved) {
			t.Fatalf("the old connection's acquire: %v, want moved", err)
		}
		if cur, _ := s.Current(bg, k); cur == nil || cur.Token != l.Token {
			t.Fatalf("after the old connection's end: %+v, want still held", cur)
		}
		clock.Advance(5 * time.Second)
		if _, _, err := s.ResumeSession(bg, ref.ID, bot); !errors.Is(err, ErrSessionGone) {
			t.Fatalf("resume past the grace: %v, want gone", err)
		}
	})
}

// A clean end releases every claim of the session, in its holder's name,
// and nothing else; the session is then gone.
func TestEndSessionReleases(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, _, _ := e.open(t)
		bot := Holder{ID: 7, Login: "bot", Agent: "a1"}
		ref := openSession(t, s, bot, 30*time.Second)
		for i := range int64(3) {
			if _, err := s.Acquire(bg, Key{RepoID: 1 + i%2, Issue: 10 + i}, inSessionOf(bot, ref), 0, issueObs); err != nil {
				t.Fatal(err)
			}
		}
		plain := Key{RepoID: 1, Issue: 99}
		mustAcquireAs(t, s, plain, bot, time.Hour)
		ended, err := s.EndSession(bg, ref, bot)
		if err != nil || len(ended) != 3 {
			t.Fatalf("EndSession: %+v %v, want its 3 claims released", ended, err)
		}
		if cur, _ := s.Current(bg, plain); cur == nil {
			t.Fatal("the claim outside the session was released with it")
		}
		ts, _ := s.Tenures(bg, Key{RepoID: 1, Issue: 10}, 1)
		if ts[0].EndedBy != EndReleased || ts[0].EndedByHolder == nil || ts[0].EndedByHolder.Agent != "a1" {
			t.Fatalf("tenure %+v, want released by a1", ts[0])
		}
		if _, err := s.Heartbeat(bg, ref, bot, time.Second); !errors.Is(err, ErrSessionGone) {
			t.Fatalf("heartbeat after the end: %v, want gone", err)
		}
		if _, _, err := s.ResumeSession(bg, ref.ID, bot); !errors.Is(err, ErrSessionGone) {
			t.Fatalf("resume after the end: %v, want gone", err)
		}
	})
}

// One heartbeat is one write transaction whatever the number of claims.
func TestHeartbeatIsOneWrite(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, _, _ := e.open(t)
		bot := Holder{ID: 7, Login: "bot"}
		ref := openSession(t, s, bot, 30*time.Second)
		for i := range int64(20) {
			if _, err := s.Acquire(bg, Key{RepoID: 1 + i%3, Issue: 1 + i}, inSessionOf(bot, ref), 0, issueObs); err != nil {
				t.Fatal(err)
			}
		}
		before := s.txns.Load()
		if n, err := s.Heartbeat(bg, ref, bot, 30*time.Second); err != nil || n != 20 {
			t.Fatalf("heartbeat kept %d, %v", n, err)
		}
		if got := s.txns.Load() - before; got != 1 {
			t.Fatalf("a heartbeat of 20 claims took %d transactions, want 1", got)
		}
	})
}

// Sessions per account are capped; ended and lapsed ones do not count.
func TestSessionsPerAccount(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, _ := e.open(t)
		bot := Holder{ID: 7, Login: "bot"}
		a, err := s.OpenSession(bg, bot, 5*time.Second, 2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.OpenSession(bg, bot, 5*time.Second, 2); err != nil {
			t.Fatal(err)
		}
		if _, err := s.OpenSession(bg, bot, 5*time.Second, 2); !errors.Is(err, ErrTooManySessions) {
			t.Fatalf("a third session: %v, want too many", err)
		}
		if _, err := s.OpenSession(bg, Holder{ID: 8, Login: "other"}, 5*time.Second, 2); err != nil {
			t.Fatalf("another account's session: %v", err)
		}
		if _, err := s.EndSession(bg, a, bot); err != nil {
			t.Fatal(err)
		}
		if _, err := s.OpenSession(bg, bot, 5*time.Second, 2); err != nil {
			t.Fatalf("after one ended: %v", err)
		}
		clock.Advance(5 * time.Second)
		if _, err := s.OpenSession(bg, bot, 5*time.Second, 2); err != nil {
			t.Fatalf("after the others lapsed: %v", err)
		}
		for _, g := range []time.Duration{4 * time.Second, 5500 * time.Millisecond, 169 * time.Hour} {
			if _, err := s.OpenSession(bg, bot, g, 0); !errors.Is(err, ErrInvalid) {
				t.Fatalf("grace %s: %v, want invalid", g, err)
			}
		}
	})
}

// Ten sessions of one account, ten agents, race for one issue: one wins,
// the nine others are told it is held by the winner's agent.
func TestSessionsRace(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, _, _ := e.open(t)
		k := Key{RepoID: 1, Issue: 42}
		var wg sync.WaitGroup
		winners := make(chan string, 10)
		helds := make(chan string, 10)
		for i := range 10 {
			h := Holder{ID: 7, Login: "bot", Agent: fmt.Sprintf("agent-%d", i)}
			ref := openSession(t, s, h, 30*time.Second)
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.Acquire(bg, k, inSessionOf(h, ref), 0, issueObs)
				var held *HeldError
				switch {
				case err == nil:
					winners <- h.Agent
				case errors.As(err, &held):
					helds <- held.Agent
				default:
					t.Errorf("%s: %v", h.Agent, err)
				}
			}()
		}
		wg.Wait()
		close(winners)
		close(helds)
		var won []string
		for w := range winners {
			won = append(won, w)
		}
		if len(won) != 1 {
			t.Fatalf("winners %v, want one", won)
		}
		n := 0
		for a := range helds {
			n++
			if a != won[0] {
				t.Errorf("held names agent %q, want the winner %q", a, won[0])
			}
		}
		if n != 9 {
			t.Fatalf("%d held, want 9", n)
		}
	})
}

// A renew by the session's holder outside the session (a command run
// under `git collab run`) leaves the claim with the session, capped by
// the renew's ttl; heartbeats still keep it, up to that cap.
func TestRenewOutsideTheSessionKeepsItThere(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, _ := e.open(t)
		bot := Holder{ID: 7, Login: "bot", Agent: "a1"}
		ref := openSession(t, s, bot, 10*time.Second)
		k := Key{RepoID: 1, Issue: 42}
		if _, err := s.Acquire(bg, k, inSessionOf(bot, ref), 0, issueObs); err != nil {
			t.Fatal(err)
		}
		l, err := s.Renew(bg, k, bot, 20*time.Second)
		if err != nil || l.Session != ref.ID || !l.ExpiresAt.Equal(clock.Now().Add(10*time.Second)) {
			t.Fatalf("renew outside the session: %+v %v, want still the session's, expiry unchanged", l, err)
		}
		for range 5 {
			clock.Advance(3 * time.Second)
			if n, err := s.Heartbeat(bg, ref, bot, 10*time.Second); err != nil || n != 1 {
				t.Fatalf("heartbeat: %d %v", n, err)
			}
		}
		cur, _ := s.Current(bg, k)
		if cur == nil || !cur.ExpiresAt.Equal(clock.Now().Add(5*time.Second)) {
			t.Fatalf("after 15 s of heartbeats: %+v, want live until the renew's cap (20 s after it)", cur)
		}
	})
}

// A session with more claims than one heartbeat write locks keeps all of
// them alive.
func TestHeartbeatOfManyClaims(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, _ := e.open(t)
		bot := Holder{ID: 7, Login: "bot"}
		ref := openSession(t, s, bot, 10*time.Second)
		n := maxBeatKeys + 44
		for i := range n {
			if _, err := s.Acquire(bg, Key{RepoID: 1, Issue: int64(i + 1)}, inSessionOf(bot, ref), 0, issueObs); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(5 * time.Second)
		if kept, err := s.Heartbeat(bg, ref, bot, 10*time.Second); err != nil || kept != n {
			t.Fatalf("heartbeat kept %d of %d: %v", kept, n, err)
		}
		clock.Advance(9 * time.Second)
		if live, _ := s.CountLive(bg); live != int64(n) {
			t.Fatalf("%d live after the heartbeat's grace nearly ran out, want %d", live, n)
		}
	})
}
