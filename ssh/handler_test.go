package ssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/forge"
	gossh "golang.org/x/crypto/ssh"
)

type keysFunc func(ctx context.Context, fp string) (forge.User, error)

func (f keysFunc) UserByKey(ctx context.Context, fp string) (forge.User, error) { return f(ctx, fp) }

// recordingHandler answers every request with a fixed reply and keeps
// what the server handed it.
type recordingHandler struct {
	mu     sync.Mutex
	execs  []ConnInfo
	lines  []string
	greets []ConnInfo
}

func (h *recordingHandler) Exec(ctx context.Context, c ConnInfo, line string) Reply {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.execs, h.lines = append(h.execs, c), append(h.lines, line)
	if _, ok := ctx.Deadline(); !ok {
		return Reply{Stderr: "no deadline\n", Code: 99}
	}
	return Reply{Stdout: []byte("out: " + line + "\n"), Stderr: "err\n", Code: 3}
}

func (h *recordingHandler) Greet(c ConnInfo) Reply {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.greets = append(h.greets, c)
	return Reply{Stderr: "hello\n", Code: 1}
}

// The server hands its Handler the identity verified at the handshake
// (the account's ID and login, the key's fingerprint, whether the forge
// could tell) and sends the Handler's reply as it is.
func TestHandlerGetsTheVerifiedIdentity(t *testing.T) {
	dir := t.TempDir()
	alice, outage := newTestKey(t, dir, "alice"), newTestKey(t, dir, "outage")
	keys := keysFunc(func(_ context.Context, fp string) (forge.User, error) {
		switch fp {
		case alice.fp:
			return forge.User{ID: 4242, Login: "alice"}, nil
		case outage.fp:
			return forge.User{}, fmt.Errorf("dial: %w", forge.ErrUnavailable)
		}
		return forge.User{}, forge.ErrNotFound
	})
	h := &recordingHandler{}
	hostKey, err := LoadOrCreateHostKey(filepath.Join(dir, "host_key"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{HostKey: hostKey, Keys: keys, Handler: h, Logger: slog.New(slog.DiscardHandler)}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	dial := func(k testKey) *gossh.Client {
		t.Helper()
		pemBytes, err := os.ReadFile(k.path)
		if err != nil {
			t.Fatal(err)
		}
		signer, err := gossh.ParsePrivateKey(pemBytes)
		if err != nil {
			t.Fatal(err)
		}
		c, err := gossh.Dial("tcp", l.Addr().String(), &gossh.ClientConfig{User: "git",
			Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)}, HostKeyCallback: gossh.FixedHostKey(hostKey.PublicKey()),
			Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	run := func(c *gossh.Client, cmd string) (stdout, stderr string, code int) {
		t.Helper()
		sess, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		var out, errb bytes.Buffer
		sess.Stdout, sess.Stderr = &out, &errb
		if cmd == "" {
			err = sess.Shell()
			if err == nil {
				err = sess.Wait()
			}
		} else {
			err = sess.Run(cmd)
		}
		var ee *gossh.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitStatus()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}

	c := dial(alice)
	if out, errs, code := run(c, "collab-lease list a/b"); out != "out: collab-lease list a/b\n" || errs != "err\n" || code != 3 {
		t.Errorf("exec: %q %q %d", out, errs, code)
	}
	if _, errs, code := run(c, ""); errs != "hello\n" || code != 1 {
		t.Errorf("shell: %q %d", errs, code)
	}
	if _, _, code := run(dial(outage), "collab-lease help"); code != 3 {
		t.Errorf("exec without an identity: exit %d", code)
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.execs) != 2 || len(h.greets) != 1 {
		t.Fatalf("%d execs, %d greets; want 2 and 1", len(h.execs), len(h.greets))
	}
	got := h.execs[0]
	if got.UserID != 4242 || got.Login != "alice" || got.Fingerprint != alice.fp || got.Unavailable ||
		got.RemoteAddr == nil || got.RemoteAddr.String() != c.LocalAddr().String() {
		t.Errorf("exec ConnInfo %+v", got)
	}
	if h.greets[0] != got {
		t.Errorf("shell ConnInfo %+v, exec's %+v", h.greets[0], got)
	}
	down := h.execs[1]
	if !down.Unavailable || down.UserID != 0 || down.Login != "" || down.Fingerprint != outage.fp {
		t.Errorf("ConnInfo with the forge down %+v", down)
	}
}
