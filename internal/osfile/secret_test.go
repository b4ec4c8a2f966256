package osfile

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func newSecret() ([]byte, error) {
	b := make([]byte, 32)
	_, err := rand.Read(b)
	return b, err
}

// A secret is made once, mode 0600, with no temporary file left, and read
// back as it was made.
func TestSecretIsMadeOnceAndPrivate(t *testing.T) {
	dir := t.TempDir()
	s := Secret{Path: filepath.Join(dir, "key"), Temp: ".key-*"}
	if _, err := s.Read(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read before it exists: %v", err)
	}
	made, created, err := s.LoadOrCreate(newSecret)
	if err != nil || !created || len(made) != 32 {
		t.Fatalf("create: %d bytes, created %v, %v", len(made), created, err)
	}
	st, err := os.Stat(s.Path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode: %v %v", st, err)
	}
	again, created, err := s.LoadOrCreate(func() ([]byte, error) { t.Fatal("made a second secret"); return nil, nil })
	if err != nil || created || !bytes.Equal(again, made) {
		t.Fatalf("again: created %v, same %v, %v", created, bytes.Equal(again, made), err)
	}
	if read, err := s.Read(); err != nil || !bytes.Equal(read, made) {
		t.Fatalf("read: same %v, %v", bytes.Equal(read, made), err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}

// An existing secret its group may read is refused, with its user's words,
// and not replaced.
func TestSecretReadableByGroupIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	s := Secret{Path: path, Temp: ".key-*", Refuse: func(path string, mode fs.FileMode) error {
		return fmt.Errorf("key %s has mode %04o: run chmod 600 %s", path, mode, path)
	}}
	want := fmt.Sprintf("key %s has mode 0640: run chmod 600 %s", path, path)
	if _, err := s.Read(); err == nil || err.Error() != want {
		t.Fatalf("read: %v", err)
	}
	if _, _, err := s.LoadOrCreate(newSecret); err == nil || err.Error() != want {
		t.Fatalf("load or create: %v", err)
	}
	s.Refuse = nil
	if _, err := s.Read(); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("read without words of its own: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("the refused file was replaced: %q", b)
	}
}

// Of processes making the same secret at once, one makes it and all get
// its bytes.
func TestSecretMadeAtOnceIsOneSecret(t *testing.T) {
	for round := range 20 {
		dir := t.TempDir()
		s := Secret{Path: filepath.Join(dir, "key"), Temp: ".key-*"}
		const makers = 8
		got := make([][]byte, makers)
		made := make([]bool, makers)
		errs := make([]error, makers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range makers {
			wg.Go(func() {
				<-start
				got[i], made[i], errs[i] = s.LoadOrCreate(newSecret)
			})
		}
		close(start)
		wg.Wait()
		creators := 0
		for i := range makers {
			if errs[i] != nil {
				t.Fatalf("round %d, maker %d: %v", round, i, errs[i])
			}
			if !bytes.Equal(got[i], got[0]) {
				t.Fatalf("round %d: maker %d got another secret than maker 0", round, i)
			}
			if made[i] {
				creators++
			}
		}
		if onDisk, err := os.ReadFile(s.Path); err != nil || !bytes.Equal(onDisk, got[0]) {
			t.Fatalf("round %d: the file holds another secret: %v", round, err)
		}
		if creators != 1 {
			t.Fatalf("round %d: %d makers say they made it", round, creators)
		}
		if left, _ := os.ReadDir(dir); len(left) != 1 {
			t.Fatalf("round %d: temporary files left behind: %v", round, left)
		}
	}
}

// A failed step is told in its user's words, with the step named.
func TestSecretWordsAFailedStep(t *testing.T) {
	var ops []string
	s := Secret{Path: filepath.Join(t.TempDir(), "missing", "key"), Temp: ".key-*",
		Wrap: func(op string, err error) error { ops = append(ops, op); return fmt.Errorf("%s key: %w", op, err) }}
	_, _, err := s.LoadOrCreate(newSecret)
	if err == nil || !strings.HasPrefix(err.Error(), "create key: ") || len(ops) != 1 {
		t.Fatalf("in a missing directory: %v (steps %v)", err, ops)
	}
}
