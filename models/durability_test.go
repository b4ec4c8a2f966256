package models

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
)

// SQLite's durability is its journal mode and synchronous pragma;
// PostgreSQL's is in TestPostgresSessionsCommitDurably.
func TestOpenSetsDurablePragmas(t *testing.T) {
	s, _, _ := openTestStore(t)
	for pragma, want := range map[string]string{
		"journal_mode": "wal",
		"synchronous":  "2", // FULL
	} {
		var got string
		if err := s.db.Raw("PRAGMA " + pragma).Scan(&got).Error; err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %q, want %q", pragma, got, want)
		}
	}
	var timeout int
	if err := s.db.Raw("PRAGMA busy_timeout").Scan(&timeout).Error; err != nil || timeout != 50 {
		t.Errorf("busy_timeout = %d (%v), want 50", timeout, err)
	}
}

func TestOpenRefusesMissingDirectory(t *testing.T) {
	if _, err := Open(t.TempDir() + "/no/such/dir/collab.db"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing directory: %v", err)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) { forEachEngine(t, testOpenRefusesNewerSchema) }

func testOpenRefusesNewerSchema(t *testing.T, e engine) {
	s, _, path := e.open(t)
	setVersion := "PRAGMA user_version = 99"
	if s.pg {
		setVersion = "UPDATE collab_schema SET version = 99"
	}
	if err := s.db.Exec(setVersion).Error; err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("newer schema: %v", err)
	}
}

// oldLedger writes a database as the first version did (the leases table
// keyed by login alone, without indexes), then runs stmts on it, and
// returns its path.
func oldLedger(t *testing.T, stmts ...string) string {
	t.Helper()
	path := t.TempDir() + "/old.db"
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, stmt := range append([]string{
		"DROP TABLE lease_events",
		"DROP TABLE leases",
		`CREATE TABLE leases (repo_id integer, issue integer, holder text, token integer NOT NULL, acquired_at integer NOT NULL, expires_at integer, PRIMARY KEY (repo_id, issue))`,
	}, stmts...) {
		if err := s.db.Exec(stmt).Error; err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	return path
}

// A database written by an earlier version (here: the leases table alone,
// without the history table, indexes or user_version) keeps its rows and
// its tokens when this version opens it. (SQLite only: a PostgreSQL
// ledger begins at schema 6.)
func TestOpenKeepsRowsOfAnOlderDatabase(t *testing.T) {
	path := oldLedger(t,
		"PRAGMA user_version = 0",
		"INSERT INTO leases VALUES (7, 42, 'alice', 5, 1000, NULL)",
		"INSERT INTO leases VALUES (7, 43, NULL, 9, 1000, NULL)",
	)
	clock := clocktest.New()
	s, err := Open(path, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cur, err := s.Current(bg, k42)
	if err != nil || cur == nil || cur.Holder.Login != "alice" || cur.Token != 5 {
		t.Fatalf("old live lease after migration: %+v %v", cur, err)
	}
	if l := mustAcquire(t, s, Key{7, 43}, "bob", 0); l.Token != 10 {
		t.Fatalf("old free row's token did not carry on: %+v", l)
	}
	if h, err := s.History(bg, Key{7, 43}); err != nil || len(h) != 1 {
		t.Fatalf("history table not created: %+v %v", h, err)
	}
}

// Another process holding the write lock (on PostgreSQL, the issue's
// lock) past the busy timeout makes an operation fail with ErrBusy,
// quickly, and write nothing.
func TestBusyDatabaseFailsLoudlyAndWritesNothing(t *testing.T) {
	forEachEngine(t, testBusyDatabaseFailsLoudlyAndWritesNothing)
}

func testBusyDatabaseFailsLoudlyAndWritesNothing(t *testing.T, e engine) {
	holder, clock, path := e.open(t)
	s, err := Open(path, WithClock(clock), WithBusyTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	patient, err := Open(path, WithClock(clock), WithBusyTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer patient.Close()
	tx := holder.db.Begin() // SQLite: BEGIN IMMEDIATE holds the write lock
	if tx.Error != nil {
		t.Fatal(tx.Error)
	}
	if holder.pg {
		if _, err := lock(tx, issueScope(k42)); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.Acquire(bg, k42, who("alice"), 0, Observed{Kind: KindIssue})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("acquire under a held write lock: %v, want ErrBusy", err)
	}
	// A caller's own deadline ends the wait the same way.
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	if _, err := patient.Acquire(ctx, k42, who("alice"), 0, Observed{Kind: KindIssue}); !errors.Is(err, ErrBusy) {
		t.Fatalf("acquire past the caller's deadline: %v, want ErrBusy", err)
	}
	tx.Rollback()
	if cur, _ := s.Current(bg, k42); cur != nil {
		t.Fatalf("busy acquire wrote %+v", cur)
	}
	// (The patient store: on PostgreSQL a cancelled lock wait may still
	// hold the lock for a moment, until the server hears of the cancel.)
	if l := mustAcquire(t, patient, k42, "alice", 0); l.Token != 1 {
		t.Fatalf("after the lock is gone: %+v", l)
	}
}

// A child process acquires and releases in a loop and reports each
// acquire once Acquire has returned; it is killed with SIGKILL mid-stream.
// Every acquire it reported must be in the ledger and the next token must
// exceed every token it was handed.
func TestCrashKeepsEveryAcknowledgedAcquire(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) { crashRounds(t, e, 1) })
}

// The same with sixteen writers in the child, each on issues of its own,
// so that it is killed while batches are open (group commit: write.go,
// pgbatch.go): a write is acknowledged only once the COMMIT of its batch
// returned, so none of those is lost either. The child reports how many
// transactions it had begun at each acknowledgement, and the test checks
// that they were fewer than the writes: batches were open.
func TestCrashMidBatchKeepsEveryAcknowledgedWrite(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) { crashRounds(t, e, 16) })
}

// crashRounds kills a child with writers writers three times, and checks
// what it acknowledged after each.
func crashRounds(t *testing.T, e engine, writers int) {
	if os.Getenv("COLLAB_TEST_CRASHER") != "" {
		return
	}
	path := e.newDB(t)
	reported := map[int64]int64{} // issue -> highest token reported
	heldAtKill := map[int64]int64{}
	for round := 0; round < 3; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrasherChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "COLLAB_TEST_CRASHER=1", "COLLAB_TEST_DB="+path, fmt.Sprint("COLLAB_TEST_ROUND=", round),
			fmt.Sprint("COLLAB_TEST_WRITERS=", writers))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		lines, txns := 0, int64(0)
		for sc.Scan() && lines < (150+round*37)*min(writers, 4) {
			f := strings.Fields(sc.Text())
			if len(f) != 4 {
				continue
			}
			txns, _ = strconv.ParseInt(f[3], 10, 64)
			issue, _ := strconv.ParseInt(f[1], 10, 64)
			token, _ := strconv.ParseInt(f[2], 10, 64)
			switch f[0] {
			case "acquired":
				if held, ok := heldAtKill[issue]; ok && token != held {
					t.Fatalf("re-acquire of held #%d changed token %d to %d", issue, held, token)
				} else if !ok && token <= reported[issue] {
					t.Fatalf("new tenure token %d for #%d repeated or lower than %d", token, issue, reported[issue])
				}
				reported[issue] = token
				heldAtKill[issue] = token
			case "released":
				delete(heldAtKill, issue)
			}
			lines++
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		if lines == 0 {
			t.Fatalf("round %d: child reported nothing", round)
		}
		if writers > 1 && txns >= int64(lines) {
			t.Fatalf("round %d: %d writes acknowledged in %d transactions: no batch was open", round, lines, txns)
		}

		s, err := Open(path)
		if err != nil {
			t.Fatalf("reopen after SIGKILL: %v", err)
		}
		for issue, token := range reported {
			k := Key{RepoID: 1, Issue: issue}
			h, err := s.History(bg, k)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, e := range h {
				found = found || (e.Action != ActionRelease && e.Token == token && e.Holder == "crasher")
			}
			if !found {
				t.Fatalf("acknowledged acquire #%d token %d missing from history", issue, token)
			}
			// The child ran on between our last read and the kill, so
			// it may have released and re-acquired since; but a lease it
			// reported as held can only have been followed by its own
			// later tenures, never lost or rewound.
			if want, ok := heldAtKill[issue]; ok {
				cur, _ := s.Current(bg, k)
				last := h[len(h)-1]
				if (cur == nil && last.Action != ActionRelease) || (cur != nil && (cur.Token < want || cur.Holder.Login != "crasher")) {
					t.Fatalf("acknowledged live lease #%d token %d lost: %+v", issue, want, cur)
				}
			}
		}
		// What the child held when it died is what the ledger says now
		// (it may have released and re-acquired after our last read);
		// the next round's re-acquires are checked against that.
		for issue := range reported {
			cur, err := s.Current(bg, Key{RepoID: 1, Issue: issue})
			if err != nil {
				t.Fatal(err)
			}
			if cur != nil && cur.Holder.Login == "crasher" {
				heldAtKill[issue], reported[issue] = cur.Token, max(reported[issue], cur.Token)
			} else {
				delete(heldAtKill, issue)
			}
		}
		_ = s.Close()
	}
	// The next tenure on every issue outranks every token ever handed out.
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for issue, token := range reported {
		k := Key{RepoID: 1, Issue: issue}
		if _, err := s.Release(bg, k, who("crasher")); err != nil {
			t.Fatal(err)
		}
		l := mustAcquire(t, s, k, "after", 0)
		if l.Token <= token {
			t.Fatalf("#%d: next token %d not above reported %d", issue, l.Token, token)
		}
	}
}

// TestCrasherChild is the body of the process TestCrashKeepsEveryAcknowledgedAcquire kills.
func TestCrasherChild(t *testing.T) {
	if os.Getenv("COLLAB_TEST_CRASHER") == "" {
		t.Skip("only runs as a child of TestCrashKeepsEveryAcknowledgedAcquire")
	}
	s, err := Open(os.Getenv("COLLAB_TEST_DB"))
	if err != nil {
		t.Fatal(err)
	}
	writers, _ := strconv.Atoi(os.Getenv("COLLAB_TEST_WRITERS"))
	var mu sync.Mutex // one line at a time, whole
	w := bufio.NewWriter(os.Stdout)
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, format+" %d\n", append(args, s.txns.Load())...)
		_ = w.Flush()
	}
	for g := range max(writers, 1) {
		go func() {
			for i := int64(0); ; i++ {
				k := Key{RepoID: 1, Issue: int64(5*g) + i%5 + 1}
				if i%2 == 0 {
					// Leave some leases live at the moment of the kill.
					l, err := s.Acquire(bg, k, who("crasher"), 0, Observed{Kind: KindIssue})
					if err != nil {
						continue
					}
					report("acquired %d %d", k.Issue, l.Token)
				} else {
					if i%7 == 0 {
						continue
					}
					if _, err := s.Release(bg, k, who("crasher")); err != nil {
						continue
					}
					report("released %d 0", k.Issue)
				}
			}
		}()
	}
	select {}
}
