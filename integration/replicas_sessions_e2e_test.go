package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/models/leasemodel"
	"github.com/collab-lease/collab-lease/models/pgtest"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Agent sessions on replicas (docs/ssh.md, Sessions): a session's
// liveness is in the ledger, so every replica sees a claim kept alive by
// a session on another, and a replica killed with SIGKILL loses its
// sessions, whose claims end a grace after its last heartbeat, with no
// acknowledged command lost.

// sessionGrace is the grace of the sessions of these tests, the least a
// session may have.
const sessionGrace = 5 * time.Second

// Six agents, two of each of three Gitea users, each hold a session of
// grace 5 s through the real OpenSSH client, two on each of three
// replicas on one PostgreSQL database (a user's two on two replicas).
// Each keeps one issue of its own the whole run and, meanwhile, acquires,
// releases and checks four shared issues through its session, never
// renewing anything. Two more sessions, on the replicas that will
// survive, watch with list and check. After two graces of that, one
// replica (the sidecar process, not the ssh clients) is SIGKILLed:
//
//   - the claims its sessions kept are still live a while after the kill:
//     a check sent 2 s after it answers current (its last heartbeat was at
//     most grace/3 before the kill and kept them a grace past the last sign
//     of life, less up to 1 s as the ledger counts whole seconds, and less
//     some scheduling); and they are free no later than grace + 1 s after
//     it: no check sent after that answers current (a heartbeat keeps
//     claims at most a grace past it, so the 1 s covers the ledger's
//     rounding), and the first stale answer comes within a second more
//     (the poll's own slack); their history ends them session_lost, not
//     released, at an expiry within that bound;
//   - the sessions on the two others keep their claims alive the whole
//     time: every check of an agent's own issue answers current, still more
//     than two graces after the kill, with the token of the first acquire,
//     and no claim of theirs ever lapses (no session_lost in any history);
//   - a session on one surviving replica sees with list the claims kept by
//     sessions on the other as live, their expiry moved on by heartbeats it
//     never wrote;
//   - the ledger, read straight from the database, holds every acquire and
//     release a session was told succeeded, with tokens 1, 2, 3, … per
//     issue, and no session saw a token repeated or going backwards
//     (acks.check, as for the killed replica under load).
func TestSessionsOnReplicasOutliveOneKilled(t *testing.T) {
	db := pgtest.NewDatabase(t)
	g, w, _ := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	users := racerUsers(t, ctx, g, w, 50)[:4]
	keptIssues := newIssues(t, g, w, 6, "Session kept")
	sharedIssues := newIssues(t, g, w, 4, "Session shared")
	replicas, killed := startReplicasToKill(t, ctx, db, 3, victim)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)

	// Agent i is user i/2's agent-i on replica i%3.
	var agents []*sessionAgent
	for i := range 6 {
		a := &sessionAgent{user: users[i/2], name: fmt.Sprint("agent-", i), replica: i % len(replicas), kept: keptIssues[i],
			rng: rand.New(rand.NewSource(seed + int64(i))), mine: map[int64]int64{}}
		a.p = openSession(t, ctx, replicas[a.replica], a.user, a.name)
		agents = append(agents, a)
	}
	watchers := map[int]*SessionProc{}
	for _, r := range []int{0, 2} {
		watchers[r] = openSession(t, ctx, replicas[r], users[3], fmt.Sprint("watch-", r))
	}

	start := time.Now()
	var ack acks
	for _, a := range agents {
		if err := a.keep(ctx, &ack, w.Widgets, start); err != nil {
			t.Fatal(err)
		}
	}
	var (
		stop       atomic.Bool
		dead       atomic.Bool // the victim is killed: its sessions' commands may fail
		wg         sync.WaitGroup
		ops        atomic.Int64
		unexpected = make(chan error, len(agents))
	)
	for _, a := range agents {
		wg.Go(func() {
			for !stop.Load() {
				err := a.step(ctx, &ack, w.Widgets, sharedIssues, start)
				ops.Add(1)
				switch {
				case err == nil:
				case errors.Is(err, errTransport) && a.replica == victim && dead.Load():
					a.cut.Store(true) // its session went with the replica
					return
				default:
					unexpected <- fmt.Errorf("%s on replica %d: %w", a.name, a.replica, err)
					return
				}
			}
		})
	}
	finish := func() {
		stop.Store(true)
		wg.Wait()
	}
	defer finish()
	failed := func() {
		t.Helper()
		select {
		case err := <-unexpected:
			t.Fatal(err)
		default:
		}
	}
	// until polls, with a deadline, until ok holds; an agent's unexpected
	// error ends the test.
	until := func(what string, within time.Duration, ok func() bool) {
		t.Helper()
		for limit := time.Now().Add(within); !ok(); {
			if time.Now().After(limit) {
				t.Fatalf("%s: not within %s", what, within)
			}
			select {
			case err := <-unexpected:
				t.Fatal(err)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	list := func(r int) map[int64]sessionReply {
		t.Helper()
		v := sessionDo(t, ctx, watchers[r], "list "+w.Widgets.FullName())
		if v.exit() != 0 {
			t.Fatalf("list through replica %d: %+v", r, v)
		}
		out := map[int64]sessionReply{}
		for _, l := range v.Leases {
			out[l.Issue] = l
		}
		return out
	}
	// seesKept checks that the list through replica r shows the claim
	// that agent a keeps, live, with its token, and an expiry at most a
	// grace (and the ledger's second) ahead: a session's, not a ttl's.
	seesKept := func(r int, leases map[int64]sessionReply, a *sessionAgent) int64 {
		t.Helper()
		l, ok := leases[a.kept]
		now := time.Now()
		switch {
		case !ok:
			t.Fatalf("list through replica %d does not show #%d, which %s on replica %d keeps", r, a.kept, a.name, a.replica)
		case l.token() != a.token || deref(l.Holder) != a.user.Login || deref(l.Agent) != a.name || l.ExpiresAt == nil:
			t.Fatalf("list through replica %d shows #%d, which %s (%s) on replica %d keeps with token %d, as %+v",
				r, a.kept, a.name, a.user.Login, a.replica, a.token, l)
		case unixOf(l.ExpiresAt) > now.Add(sessionGrace+time.Second).Unix():
			t.Fatalf("list through replica %d shows #%d expiring at %d, more than a grace after %s", r, a.kept, unixOf(l.ExpiresAt), now.UTC())
		}
		return unixOf(l.ExpiresAt)
	}

	// Two graces of load: every session has been kept alive by its
	// heartbeats alone, and each has had some shared issue.
	until("every agent acquires shared issues for two graces", time.Minute, func() bool {
		for _, a := range agents {
			if a.acquired.Load() < 3 {
				return false
			}
		}
		return time.Since(start) > 2*sessionGrace
	})
	expiryBefore := map[int64]int64{}
	for _, a := range agents {
		if a.replica != 0 {
			expiryBefore[a.kept] = seesKept(0, list(0), a)
		}
	}
	time.Sleep(time.Duration(rand.New(rand.NewSource(seed)).Int63n(int64(sessionGrace / 3)))) // a random moment of a heartbeat's round
	dead.Store(true)
	killed.Kill()
	killedAt := time.Now()

	// The victim's sessions' claims, through a session on replica 0:
	// live for a while yet, then free by a grace and a second.
	type lapse struct {
		a        *sessionAgent
		lastLive time.Time // when the last check answering current was sent
		free     time.Time // when the first stale answer came
	}
	var lapses []*lapse
	for _, a := range agents {
		if a.replica == victim {
			lapses = append(lapses, &lapse{a: a})
		}
	}
	bound := sessionGrace + time.Second
	for pending := slices.Clone(lapses); len(pending) > 0; {
		if time.Since(killedAt) > bound+time.Second {
			for _, l := range pending {
				t.Errorf("#%d, kept by %s on the killed replica, still live %s after the kill (last answered current to a check sent %s after it)",
					l.a.kept, l.a.name, time.Since(killedAt).Round(time.Millisecond), l.lastLive.Sub(killedAt).Round(time.Millisecond))
			}
			t.FailNow()
		}
		failed()
		pending = slices.DeleteFunc(pending, func(l *lapse) bool {
			sent := time.Now()
			v := sessionDo(t, ctx, watchers[0], fmt.Sprintf("check %s %d --token %d", w.Widgets.FullName(), l.a.kept, l.a.token))
			switch {
			case v.Status == "current" && v.exit() == 0 && v.token() == l.a.token:
				l.lastLive = sent
				return false
			case v.Status == "stale" && v.exit() == 4 && v.Token == nil:
				l.free = time.Now()
				return true
			}
			t.Fatalf("check of #%d (%s's, token %d) after the kill: %+v", l.a.kept, l.a.name, l.a.token, v)
			return false
		})
		time.Sleep(5 * time.Millisecond) // pacing of the poll, not a wait for time to pass
	}
	store, err := models.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, l := range lapses {
		outlived, free := l.lastLive.Sub(killedAt), l.free.Sub(killedAt)
		t.Logf("#%d, kept by %s on the killed replica: current to a check sent %s after the kill, stale to one answered %s after it",
			l.a.kept, l.a.name, outlived.Round(time.Millisecond), free.Round(time.Millisecond))
		if outlived < 2*time.Second {
			t.Errorf("#%d, kept by %s on the killed replica, ended too soon: the last current answer was to a check sent %s after the kill, want ≥ 2s",
				l.a.kept, l.a.name, outlived.Round(time.Millisecond))
		}
		if outlived >= bound {
			t.Errorf("#%d, kept by %s on the killed replica, was current to a check sent %s after the kill, past grace + 1s", l.a.kept, l.a.name, outlived.Round(time.Millisecond))
		}
		ts, err := store.Tenures(ctx, models.Key{RepoID: w.Widgets.ID, Issue: l.a.kept}, 5)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case len(ts) != 1 || ts[0].Token != l.a.token || ts[0].Holder.Agent != l.a.name:
			t.Errorf("history of #%d, kept by %s (token %d) on the killed replica: %+v", l.a.kept, l.a.name, l.a.token, ts)
		case ts[0].EndedBy != models.EndSessionLost || ts[0].EndedByHolder != nil || ts[0].EndedAt == nil:
			t.Errorf("history of #%d, kept by %s on the killed replica: ended %q by %+v, want session_lost", l.a.kept, l.a.name, ts[0].EndedBy, ts[0].EndedByHolder)
		case ts[0].EndedAt.Unix() <= killedAt.Unix() || ts[0].EndedAt.After(killedAt.Add(bound)):
			t.Errorf("history of #%d, kept by %s on the killed replica: ended at %s, killed at %s: want within (0, grace + 1s]", l.a.kept, l.a.name,
				ts[0].EndedAt.UTC(), killedAt.UTC())
		}
		// Its ssh client saw the connection go.
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		code, stderr, err := l.a.p.Wait(wctx)
		wcancel()
		if err != nil || code != 255 {
			t.Errorf("the ssh client of %s on the killed replica: exit %d (%v), stderr %q, want 255", l.a.name, code, err, stderr)
		}
	}

	// The sessions on the two others: alive, and seen alive from the
	// other replica, until two graces after the kill.
	survivors := slices.DeleteFunc(slices.Clone(agents), func(a *sessionAgent) bool { return a.replica == victim })
	var lists int
	until("two graces after the kill, every surviving agent's check of its own claim answers current", time.Minute, func() bool {
		for _, r := range []int{0, 2} {
			leases := list(r)
			lists++
			for _, a := range agents {
				_, shown := leases[a.kept]
				switch {
				case a.replica == victim && shown:
					t.Fatalf("list through replica %d shows #%d, kept by %s on the killed replica, after it was free", r, a.kept, a.name)
				case a.replica != victim && a.replica != r:
					seesKept(r, leases, a)
				}
			}
		}
		for _, a := range survivors {
			if a.checked.Load() < killedAt.Add(2*sessionGrace).UnixNano() {
				return false
			}
		}
		return true
	})
	// Heartbeats on replica 2 moved on the expiry replica 0 shows.
	after := list(0)
	for _, a := range survivors {
		if a.replica == 2 {
			if exp := seesKept(0, after, a); exp <= expiryBefore[a.kept] {
				t.Errorf("#%d, kept by %s on replica 2: expiry %d through replica 0 more than two graces after %d", a.kept, a.name, exp, expiryBefore[a.kept])
			}
		}
	}
	finish()
	close(unexpected)
	for err := range unexpected {
		t.Fatal(err)
	}
	elapsed := time.Since(start)

	// Each surviving session still holds its own issue, in its first
	// tenure; nothing of it was lost.
	for _, a := range survivors {
		k := models.Key{RepoID: w.Widgets.ID, Issue: a.kept}
		cur, err := store.Current(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if cur == nil || cur.Token != a.token || cur.Holder.Agent != a.name || cur.Session != a.p.ID() {
			t.Errorf("#%d, kept by %s on replica %d (token %d, session %s): %+v in the ledger", a.kept, a.name, a.replica, a.token, a.p.ID(), cur)
		}
		if ts, err := store.Tenures(ctx, k, 5); err != nil {
			t.Fatal(err)
		} else if len(ts) != 1 || ts[0].EndedBy != "" {
			t.Errorf("history of #%d, kept by %s on replica %d: %+v, want one live tenure", a.kept, a.name, a.replica, ts)
		}
	}
	// Nobody but a session itself ended a claim of it while it was
	// there to be told: no lost line, on any replica.
	for _, a := range agents {
		select {
		case l := <-a.p.Lost:
			t.Errorf("%s on replica %d was told %v", a.name, a.replica, l)
		default:
		}
	}
	// They end cleanly, releasing what they hold.
	for _, p := range append(sessionsOf(survivors), watchers[0], watchers[2]) {
		if err := p.CloseInput(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range append(sessionsOf(survivors), watchers[0], watchers[2]) {
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		code, stderr, err := p.Wait(wctx)
		wcancel()
		if err != nil || code != 0 {
			t.Errorf("session %s at EOF: exit %d (%v), stderr %q", p.ID(), code, err, stderr)
		}
	}
	var cut, busy int64
	for _, a := range agents {
		if a.cut.Load() {
			cut++
		}
		busy += a.busy.Load()
	}
	t.Logf("%d session commands in %s over 3 replicas, one SIGKILLed after %s (%d acquires and %d releases acknowledged; %d sessions cut off by the kill, %d answers of exit 75, %d lists after it)",
		ops.Load(), elapsed.Round(time.Millisecond), killedAt.Sub(start).Round(time.Millisecond), len(ack.seen), len(ack.writes), cut, busy, lists)
	for i, s := range replicas {
		if logs := s.Logs(); i != victim && (strings.Contains(logs, "panic") || strings.Contains(logs, "level=ERROR")) {
			t.Errorf("replica %d logged an error or a panic:\n%s", i, tail(logs, 40))
		}
	}

	// The ledger, read from the database (nothing writes to these issues
	// any more): every acknowledged command is in it, and no claim of a
	// surviving session ever lapsed; those of the victim's lapsed only
	// after the kill.
	issues := append(slices.Clone(keptIssues), sharedIssues...)
	ack.check(t, ctx, store, w.Widgets.ID, issues)
	onVictim := map[string]bool{}
	for _, a := range agents {
		onVictim[a.name] = a.replica == victim
	}
	lost := 0
	for _, n := range issues {
		evs, err := store.History(ctx, models.Key{RepoID: w.Widgets.ID, Issue: n})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Action != models.ActionSessionLost && e.Action != models.ActionExpire {
				continue
			}
			lost++
			switch {
			case e.Action == models.ActionExpire || !onVictim[e.Agent]:
				t.Errorf("#%d: tenure %d of %s ended %s at %d", n, e.Token, e.Agent, e.Action, e.At)
			case e.At <= killedAt.Unix() || e.At > killedAt.Add(bound).Unix():
				t.Errorf("#%d: tenure %d of %s, on the killed replica, lapsed at %d, killed at %s", n, e.Token, e.Agent, e.At, killedAt.UTC())
			}
		}
	}
	t.Logf("%d claims of the killed replica's sessions lapsed and were taken over since (session_lost in the history)", lost)
}

// A session on one replica keeps its claim alive, with no renew, while a
// check through another replica (a plain OpenSSH exec of another user)
// answers current for more than three graces, with an expiry that moves
// on and is never more than a grace ahead; once the session ends (EOF),
// the same check answers stale at once, and the history there says
// released by the session's agent.
func TestReplicaSeesASessionOfAnotherKeepItsClaim(t *testing.T) {
	db := pgtest.NewDatabase(t)
	g, w, _ := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	users := racerUsers(t, ctx, g, w, 50)[4:6]
	holder, checker := users[0], users[1]
	n := newIssues(t, g, w, 1, "Session across replicas")[0]
	replicas := startReplicas(t, ctx, db, 2)
	for _, s := range replicas {
		stopAtEnd(t, s)
	}
	p := openSession(t, ctx, replicas[0], holder, "keeper")
	v := sessionDo(t, ctx, p, fmt.Sprintf("acquire %s %d", w.Widgets.FullName(), n))
	if v.Status != "acquired" || v.exit() != 0 || v.token() != 1 || v.ExpiresAt == nil {
		t.Fatalf("acquire in the session: %+v", v)
	}
	began := time.Now()
	first, last := unixOf(v.ExpiresAt), unixOf(v.ExpiresAt)
	check := lease("check", w.Widgets, n, "--token", "1")
	checks, moves := 0, 0
	for time.Since(began) <= 3*sessionGrace+time.Second {
		r := run(t, replicas[1], checker, check)
		checks++
		c := parseMaybe(r)
		now := time.Now()
		switch {
		case r.Code != 0 || c.Status != "current" || c.Token != 1 || deref(c.Holder) != holder.Login || c.ExpiresAt == nil:
			t.Fatalf("check through replica 1, %s after the acquire through replica 0: %s", now.Sub(began).Round(time.Millisecond), show(r))
		}
		exp, err := time.Parse(time.RFC3339, *c.ExpiresAt)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case exp.Unix() < last:
			t.Fatalf("check through replica 1: expiry %s, earlier than %d seen before", exp, last)
		case exp.After(now.Add(sessionGrace + time.Second)):
			t.Fatalf("check through replica 1 at %s: expiry %s, more than a grace ahead", now.UTC(), exp)
		case exp.Unix() > last:
			moves++
		}
		last = exp.Unix()
	}
	t.Logf("%d checks through replica 1 answered current for %s; the expiry moved on %d times, %d s in all", checks,
		time.Since(began).Round(time.Millisecond), moves, last-first)
	if last < first+int64(2*sessionGrace/time.Second) {
		t.Errorf("the expiry moved from %d to %d over more than three graces", first, last)
	}
	if err := p.CloseInput(); err != nil {
		t.Fatal(err)
	}
	if code, stderr, err := p.Wait(ctx); err != nil || code != 0 {
		t.Fatalf("session at EOF: exit %d (%v), stderr %q", code, err, stderr)
	}
	r := run(t, replicas[1], checker, check)
	if c := parseMaybe(r); r.Code != 4 || c.Status != "stale" {
		t.Fatalf("check through replica 1 after the session ended: %s", show(r))
	}
	r = run(t, replicas[1], checker, lease("history", w.Widgets, n))
	var h struct {
		Tenures []struct {
			Token        int64   `json:"token"`
			Agent        *string `json:"agent"`
			EndedBy      *string `json:"ended_by"`
			EndedByAgent *string `json:"ended_by_agent"`
		} `json:"tenures"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &h); err != nil || r.Code != 0 || len(h.Tenures) != 1 ||
		deref(h.Tenures[0].EndedBy) != "released" || deref(h.Tenures[0].EndedByAgent) != "keeper" {
		t.Fatalf("history through replica 1: %s", show(r))
	}
}

// sessionAgent is one agent of a load run over sessions: its session on
// one replica, the issue it keeps the whole run, and what it knows it
// holds of the shared ones (its commands being sequential).
type sessionAgent struct {
	user    *User
	name    string // its --agent
	replica int
	p       *SessionProc
	kept    int64
	token   int64 // of its tenure of kept
	rng     *rand.Rand
	mine    map[int64]int64 // shared issue → token

	acquired atomic.Int64 // shared acquires acknowledged
	checked  atomic.Int64 // when the last check of kept that answered current was sent, Unix ns
	busy     atomic.Int64 // exit 75 answers
	cut      atomic.Bool  // its session went with its replica
}

// keep acquires the agent's own issue, its first tenure.
func (a *sessionAgent) keep(ctx context.Context, ack *acks, repo Repo, start time.Time) error {
	call := time.Since(start)
	v, err := a.do(ctx, fmt.Sprintf("acquire %s %d", repo.FullName(), a.kept))
	if err != nil {
		return err
	}
	if v.Status != "acquired" || v.exit() != 0 || v.token() != 1 || v.ExpiresAt == nil {
		return fmt.Errorf("%s: acquire of #%d: %+v", a.name, a.kept, v)
	}
	a.token = v.token()
	a.checked.Store(time.Now().UnixNano())
	ack.mu.Lock()
	defer ack.mu.Unlock()
	ack.seen = append(ack.seen, seenAcquire{issue: a.kept, holder: a.user.Login, token: a.token, acquiredAt: unixOf(v.AcquiredAt),
		expiresAt: unixOf(v.ExpiresAt), call: call, ret: time.Since(start)})
	return nil
}

// step runs one command in the agent's session: an acquire of a shared
// issue, a release of one it holds, or a check of one it holds (mostly
// its own), and records in ack what it was told succeeded. A session's
// claims live as long as it does, so a check of one must answer current,
// and a release must find it. An error wrapping errTransport is a
// command whose fate is unknown (the session ended); any other error is
// a command that hung or an answer the contract does not allow.
func (a *sessionAgent) step(ctx context.Context, ack *acks, repo Repo, shared []int64, start time.Time) error {
	held := slices.Sorted(maps.Keys(a.mine))
	verb, n, token := "check", a.kept, a.token
	switch roll := a.rng.Intn(10); {
	case roll < 5 || (roll < 7 && len(held) == 0):
		verb, n = "acquire", shared[a.rng.Intn(len(shared))]
	case roll < 7:
		verb, n = "release", held[a.rng.Intn(len(held))]
		token = a.mine[n]
	case roll == 9 && len(held) > 0:
		n = held[a.rng.Intn(len(held))]
		token = a.mine[n]
	}
	line := fmt.Sprintf("%s %s %d", verb, repo.FullName(), n)
	if verb == "check" {
		line += fmt.Sprintf(" --token %d", token)
	}
	call, sent := time.Since(start), time.Now()
	v, err := a.do(ctx, line)
	ret := time.Since(start)
	if err != nil {
		delete(a.mine, n)
		return err
	}
	if v.exit() == 75 {
		a.busy.Add(1) // nothing was done
		return nil
	}
	switch {
	case verb == "acquire" && v.Status == "acquired" && v.exit() == 0:
		// A session's claim expires a grace ahead, moved on by its
		// heartbeats.
		if deref(v.Holder) != a.user.Login || deref(v.Agent) != a.name || v.ExpiresAt == nil ||
			unixOf(v.ExpiresAt) > time.Now().Add(sessionGrace).Unix() || (a.mine[n] != 0 && v.token() != a.mine[n]) {
			return fmt.Errorf("%s: %s: %+v", a.name, line, v)
		}
		a.mine[n] = v.token()
		a.acquired.Add(1)
		ack.mu.Lock()
		ack.seen = append(ack.seen, seenAcquire{issue: n, holder: a.user.Login, token: v.token(), acquiredAt: unixOf(v.AcquiredAt),
			expiresAt: unixOf(v.ExpiresAt), call: call, ret: ret})
		ack.mu.Unlock()
	case verb == "acquire" && v.Status == "held" && v.exit() == 4:
		if _, mine := a.mine[n]; mine || deref(v.Holder) == a.user.Login && deref(v.Agent) == a.name {
			return fmt.Errorf("%s: %s: %+v, while its session keeps it", a.name, line, v)
		}
	case verb == "release" && v.Status == "released" && v.exit() == 0:
		delete(a.mine, n)
		// Its session kept the claim alive: the release must have found
		// it (an expiry of 0 says so to acks.check).
		ack.mu.Lock()
		ack.writes = append(ack.writes, seenWrite{kind: leasemodel.Release, issue: n, holder: a.user.Login, token: token, callUnix: sent.Unix()})
		ack.mu.Unlock()
	case verb == "check" && v.Status == "current" && v.exit() == 0 && v.token() == token && deref(v.Agent) == a.name:
		if n == a.kept {
			a.checked.Store(sent.UnixNano())
		}
	default:
		return fmt.Errorf("%s: %s: %+v, its session alive", a.name, line, v)
	}
	return nil
}

// do runs one command line in the agent's session, within a deadline.
func (a *sessionAgent) do(ctx context.Context, line string) (sessionReply, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := a.p.Do(cctx, line)
	switch {
	case cctx.Err() != nil:
		return sessionReply{}, fmt.Errorf("%s: %s hung for 10s", a.name, line)
	case err != nil:
		return sessionReply{}, fmt.Errorf("%w: %s: %s: %v", errTransport, a.name, line, err)
	}
	return decodeSessionReply(m)
}

// sessionReply is one reply line of a session, or one lease of a list.
type sessionReply struct {
	Status     string         `json:"status"`
	Exit       *int           `json:"exit"`
	Issue      int64          `json:"issue"`
	Holder     *string        `json:"holder"`
	Agent      *string        `json:"agent"`
	Token      *int64         `json:"token"`
	AcquiredAt *contract.Time `json:"acquired_at"`
	ExpiresAt  *contract.Time `json:"expires_at"`
	Leases     []sessionReply `json:"leases"`
	Error      string         `json:"error"`
}

func (v sessionReply) exit() int {
	if v.Exit == nil {
		return -1
	}
	return *v.Exit
}

func (v sessionReply) token() int64 {
	if v.Token == nil {
		return 0
	}
	return *v.Token
}

func decodeSessionReply(m map[string]any) (sessionReply, error) {
	var v sessionReply
	b, err := json.Marshal(m)
	if err == nil {
		err = json.Unmarshal(b, &v)
	}
	if err != nil {
		return v, fmt.Errorf("reply %v: %w", m, err)
	}
	return v, nil
}

// openSession opens a session of u, as agent, with the tests' grace, on
// s; its ssh client is killed when the test ends, if it has not ended.
func openSession(t *testing.T, ctx context.Context, s *Sidecar, u *User, agent string) *SessionProc {
	t.Helper()
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p, err := s.OpenSession(octx, u.Key.Path, "--agent", agent, "--grace", sessionGrace.String())
	if err != nil {
		t.Fatalf("open a session of %s/%s: %v", u.Login, agent, err)
	}
	t.Cleanup(p.Kill)
	if p.First["holder"] != u.Login || p.First["agent"] != agent || p.First["grace_seconds"] != sessionGrace.Seconds() {
		t.Fatalf("first line of the session of %s/%s: %v", u.Login, agent, p.First)
	}
	return p
}

// sessionDo runs one command line in session p, within a deadline; a
// session that does not answer ends the test.
func sessionDo(t *testing.T, ctx context.Context, p *SessionProc, line string) sessionReply {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := p.Do(cctx, line)
	if err != nil {
		t.Fatalf("session %s: %s: %v", p.ID(), line, err)
	}
	v, err := decodeSessionReply(m)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func sessionsOf(agents []*sessionAgent) []*SessionProc {
	var out []*SessionProc
	for _, a := range agents {
		out = append(out, a.p)
	}
	return out
}
