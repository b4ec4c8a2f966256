package models

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// Thirty-two goroutines, each with its own database handle (its own
// connection pool, as separate processes would have), race for one issue.
func TestRaceSeparateHandlesExactlyOneAcquires(t *testing.T) {
	forEachEngine(t, testRaceSeparateHandlesExactlyOneAcquires)
}

func testRaceSeparateHandlesExactlyOneAcquires(t *testing.T, e engine) {
	_, clock, path := e.open(t)
	const n = 32
	stores := make([]*Store, n)
	for i := range stores {
		s, err := Open(path, WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[i] = s
	}
	start := make(chan struct{})
	results := make([]error, n)
	var wg sync.WaitGroup
	for i := range stores {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			_, results[i] = stores[i].Acquire(bg, k42, who(fmt.Sprintf("agent-%02d", i)), time.Minute, Observed{Kind: KindIssue})
		}(i)
	}
	close(start)
	wg.Wait()
	won, held := 0, 0
	for i, err := range results {
		switch {
		case err == nil:
			won++
		case errors.Is(err, ErrHeld):
			held++
		default:
			t.Errorf("agent %d: unexpected error %v", i, err)
		}
	}
	if won != 1 || held != n-1 {
		t.Fatalf("won %d held %d, want 1 and %d", won, held, n-1)
	}
}

// The same race with separate OS processes on one file: the test binary
// re-executes itself as the racers.
func TestRaceSeparateProcessesExactlyOneAcquires(t *testing.T) {
	forEachEngine(t, testRaceSeparateProcessesExactlyOneAcquires)
}

func testRaceSeparateProcessesExactlyOneAcquires(t *testing.T, e engine) {
	if os.Getenv("COLLAB_TEST_RACER") != "" {
		return
	}
	_, _, path := e.open(t)
	const n = 8
	type racer struct {
		cmd *exec.Cmd
		out *bufio.Reader
		in  interface{ Close() error }
	}
	racers := make([]racer, n)
	for i := range racers {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRacerChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "COLLAB_TEST_RACER=1", "COLLAB_TEST_DB="+path, fmt.Sprintf("COLLAB_TEST_HOLDER=proc-%d", i))
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		racers[i] = racer{cmd: cmd, out: bufio.NewReader(stdout), in: stdin}
	}
	// Each child opens the database and says "ready"; closing its stdin
	// is the starting gun, fired for all at once.
	for i, r := range racers {
		if line, err := r.out.ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("racer %d: %q %v", i, line, err)
		}
	}
	for _, r := range racers {
		_ = r.in.Close()
	}
	won := 0
	for i, r := range racers {
		line, err := r.out.ReadString('\n')
		if err != nil {
			t.Fatalf("racer %d: %v", i, err)
		}
		switch strings.TrimSpace(line) {
		case "acquired":
			won++
		case "held":
		default:
			t.Errorf("racer %d said %q", i, line)
		}
		if err := r.cmd.Wait(); err != nil {
			t.Errorf("racer %d: %v", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d processes acquired, want exactly 1", won)
	}
}

// TestRacerChild is the body of one racing process (a no-op in a normal run).
func TestRacerChild(t *testing.T) {
	path := os.Getenv("COLLAB_TEST_DB")
	if os.Getenv("COLLAB_TEST_RACER") == "" || path == "" {
		t.Skip("only runs as a child of TestRaceSeparateProcessesExactlyOneAcquires")
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // EOF is the signal
	_, err = s.Acquire(bg, k42, who(os.Getenv("COLLAB_TEST_HOLDER")), time.Minute, Observed{Kind: KindIssue})
	switch {
	case err == nil:
		fmt.Println("acquired")
	case errors.Is(err, ErrHeld):
		fmt.Println("held")
	default:
		fmt.Println("error:", err)
	}
}

// model is the in-memory reference of the lease rules the ledger is checked against.
type model struct {
	rows map[Key]*modelRow
}

type modelRow struct {
	holder  string
	token   int64
	expires int64 // 0: open-ended
}

func (m *model) live(k Key, now int64) *modelRow {
	r := m.rows[k]
	if r == nil || r.holder == "" || (r.expires != 0 && r.expires <= now) {
		return nil
	}
	return r
}

func (m *model) acquire(k Key, h string, ttl int64, now int64) (token int64, heldBy string) {
	exp := int64(0)
	if ttl > 0 {
		exp = now + ttl
	}
	if r := m.live(k, now); r != nil {
		if r.holder != h {
			return 0, r.holder
		}
		r.expires = exp
		return r.token, ""
	}
	r := m.rows[k]
	if r == nil {
		r = &modelRow{}
		m.rows[k] = r
	}
	r.holder, r.token, r.expires = h, r.token+1, exp
	return r.token, ""
}

// A thousand random operations by several holders on a few issues, each
// checked against the model, with time jumping so that leases expire.
func TestRandomOperationsMatchModel(t *testing.T) { forEachEngine(t, testRandomOperationsMatchModel) }

func testRandomOperationsMatchModel(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	rng := rand.New(rand.NewSource(42))
	m := &model{rows: map[Key]*modelRow{}}
	holders := []string{"alice", "bob", "carol", "dave"}
	lastToken := map[Key]int64{}
	for step := 0; step < 1000; step++ {
		k := Key{RepoID: 1, Issue: int64(rng.Intn(4) + 1)}
		h := holders[rng.Intn(len(holders))]
		ttl := int64(rng.Intn(4)) * 5 // 0 (open-ended) .. 15 s
		now := clock.Now().Unix()
		switch op := rng.Intn(5); op {
		case 0, 1:
			wantToken, wantHeld := m.acquire(k, h, ttl, now)
			l, err := s.Acquire(bg, k, who(h), time.Duration(ttl)*time.Second, Observed{Kind: KindIssue})
			var he *HeldError
			switch {
			case wantHeld != "" && (!errors.As(err, &he) || he.Holder != wantHeld):
				t.Fatalf("step %d acquire %v by %s: err %v, model says held by %s", step, k, h, err, wantHeld)
			case wantHeld == "" && (err != nil || l.Token != wantToken):
				t.Fatalf("step %d acquire %v by %s: %+v %v, model says token %d", step, k, h, l, err, wantToken)
			}
			if err == nil {
				if l.Token < lastToken[k] {
					t.Fatalf("step %d: token went backwards on %v: %d after %d", step, k, l.Token, lastToken[k])
				}
				lastToken[k] = l.Token
			}
		case 2:
			if ttl == 0 {
				ttl = 5
			}
			r := m.live(k, now)
			_, err := s.Renew(bg, k, who(h), time.Duration(ttl)*time.Second)
			if r != nil && r.holder == h {
				if err != nil {
					t.Fatalf("step %d renew %v by holder %s: %v", step, k, h, err)
				}
				r.expires = now + ttl
			} else if !errors.Is(err, ErrNotHolder) {
				t.Fatalf("step %d renew %v by non-holder %s: %v", step, k, h, err)
			}
		case 3:
			r := m.live(k, now)
			_, err := s.Release(bg, k, who(h))
			if r != nil && r.holder != h {
				if !errors.Is(err, ErrNotHolder) {
					t.Fatalf("step %d release %v by non-holder %s: %v", step, k, h, err)
				}
			} else {
				if err != nil {
					t.Fatalf("step %d release %v by %s: %v", step, k, h, err)
				}
				if mr := m.rows[k]; mr != nil {
					mr.holder, mr.expires = "", 0
				}
			}
		case 4:
			clock.Advance(time.Duration(rng.Intn(8)) * time.Second)
		}
		// After every step: the ledger's live view equals the model's, so
		// there is at most one live holder per issue, and it is the right one.
		now = clock.Now().Unix()
		for i := int64(1); i <= 4; i++ {
			k := Key{1, i}
			cur, err := s.Current(bg, k)
			if err != nil {
				t.Fatal(err)
			}
			r := m.live(k, now)
			switch {
			case r == nil && cur != nil:
				t.Fatalf("step %d: ledger has %+v live on %v, model has none", step, cur, k)
			case r != nil && (cur == nil || cur.Holder.Login != r.holder || cur.Token != r.token):
				t.Fatalf("step %d: ledger %+v on %v, model %+v", step, cur, k, r)
			}
		}
	}
}
