package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/collab-lease/collab-lease/plugin/leasetest"
	"golang.org/x/crypto/ssh"
)

// BuildSidecar builds cmd/collab-sidecar of this module into dir and
// returns the binary's path.
func BuildSidecar(ctx context.Context, dir string) (string, error) {
	return buildCommand(ctx, dir, "collab-sidecar", true)
}

// BuildRaceSidecar is BuildSidecar with the race detector: the sidecar
// the end-to-end tests run is checked for data races while they drive it
// (a report makes it exit 66, which the tests see).
func BuildRaceSidecar(ctx context.Context, dir string) (string, error) {
	return buildCommand(ctx, dir, "collab-sidecar", true, "-race")
}

// buildCommand builds cmd/<name> of this module into dir, with cgo or
// without and with extra build flags, and returns the binary's path.
func buildCommand(ctx context.Context, dir, name string, cgo bool, flags ...string) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	args := append(append([]string{"build"}, flags...), "-o", bin, "./cmd/"+name)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	enabled := "0"
	if cgo {
		enabled = "1"
	}
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+enabled)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", name, err, out)
	}
	return bin, nil
}

// moduleRoot is the directory of the sidecar's go.mod.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the collab-lease module")
	}
	return filepath.Dir(gomod), nil
}

// SidecarOptions configure StartSidecar.
type SidecarOptions struct {
	Binary   string // from BuildSidecar
	Gitea    *Gitea // the forge it serves
	GiteaURL string // where it reaches Gitea; "" means Gitea.URL (set it for a proxy in front)
	DataDir  string // kept across restarts of the same sidecar
	SSHAddr  string // "" means 127.0.0.1:0
	HTTPAddr string // "" means 127.0.0.1:0
	// AdminAddr is where the operators' endpoints (/metrics, /readyz)
	// listen: "" means 127.0.0.1:0, "off" none.
	AdminAddr string
	// HostKey is the SSH host key file (--host-key), shared by replicas;
	// "" means the one in DataDir.
	HostKey string
	Args    []string // extra flags for `serve`
}

func (o SidecarOptions) giteaURL() string {
	if o.GiteaURL != "" {
		return o.GiteaURL
	}
	return o.Gitea.URL
}

// Sidecar is a running `collab-sidecar serve` process.
type Sidecar struct {
	SSHAddr  string // where it listens, read from its log
	HTTPAddr string // where its HTTP server listens, read from its log
	HTTPURL  string // "http://" + HTTPAddr
	// AdminURL is "http://" + the address of /metrics and /readyz, read
	// from its log ("" when AdminAddr is "off").
	AdminURL   string
	DataDir    string
	DB         string // its ledger file
	KnownHosts string // a known_hosts file naming its host key

	opts SidecarOptions
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	logs *leasetest.LogBuffer
	// killed: Kill was called, so the exit by SIGKILL is no failure.
	killed atomic.Bool
}

var (
	sshListening   = regexp.MustCompile(`msg="ssh listening" addr=(\S+)`)
	httpListening  = regexp.MustCompile(`msg="http listening" addr=(\S+)`)
	adminListening = regexp.MustCompile(`msg="admin listening" addr=(\S+)`)
)

// StartSidecar starts the sidecar and waits until it has said where it
// listens.
func StartSidecar(ctx context.Context, o SidecarOptions) (*Sidecar, error) {
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return nil, err
	}
	tokenFile := filepath.Join(o.DataDir, "gitea-token")
	if err := os.WriteFile(tokenFile, []byte(o.Gitea.AdminToken+"\n"), 0o600); err != nil {
		return nil, err
	}
	addr := o.SSHAddr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	httpAddr := o.HTTPAddr
	if httpAddr == "" {
		httpAddr = "127.0.0.1:0"
	}
	adminAddr := o.AdminAddr
	if adminAddr == "" {
		adminAddr = "127.0.0.1:0"
	}
	args := append([]string{"serve", "--gitea-url", o.giteaURL(), "--gitea-token-file", tokenFile,
		"--data-dir", o.DataDir, "--ssh-listen", addr, "--http-listen", httpAddr, "--admin-listen", adminAddr}, o.Args...)
	if o.HostKey != "" {
		args = append(args, "--host-key", o.HostKey)
	}
	s := &Sidecar{DataDir: o.DataDir, DB: filepath.Join(o.DataDir, "collab.db"), opts: o,
		done: make(chan struct{}), logs: &leasetest.LogBuffer{}}
	s.cmd = exec.Command(o.Binary, args...)
	s.cmd.Env = cleanEnv()
	s.cmd.SysProcAttr = sidecarProcAttr()
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	s.cmd.Stdout = s.logs
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	found, foundHTTP, foundAdmin := make(chan string, 1), make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			s.logs.Write([]byte(line + "\n"))
			if m := sshListening.FindStringSubmatch(line); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
			if m := httpListening.FindStringSubmatch(line); m != nil {
				select {
				case foundHTTP <- m[1]:
				default:
				}
			}
			if m := adminListening.FindStringSubmatch(line); m != nil {
				select {
				case foundAdmin <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(s.logs, stderr)
	}()
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	for s.SSHAddr == "" || s.HTTPAddr == "" || (s.AdminURL == "" && adminAddr != "off") {
		select {
		case a := <-found:
			s.SSHAddr = a
		case a := <-foundHTTP:
			s.HTTPAddr, s.HTTPURL = a, "http://"+a
		case a := <-foundAdmin:
			s.AdminURL = "http://" + a
		case <-s.done:
			return nil, fmt.Errorf("collab-sidecar exited (%v) before listening:\n%s", s.err, s.logs.String())
		case <-ctx.Done():
			s.Kill()
			return nil, fmt.Errorf("collab-sidecar did not listen in time:\n%s", s.logs.String())
		}
	}
	if err := s.writeKnownHosts(); err != nil {
		s.Kill()
		return nil, err
	}
	return s, nil
}

// cleanEnv keeps the sidecar from picking up COLLAB_* settings of the
// developer's shell.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COLLAB_") {
			env = append(env, kv)
		}
	}
	return env
}

// HostKeyFile is the sidecar's SSH host key file: the shared one given
// by SidecarOptions.HostKey, or the one in its data directory.
func (s *Sidecar) HostKeyFile() string {
	if s.opts.HostKey != "" {
		return s.opts.HostKey
	}
	return filepath.Join(s.DataDir, "ssh_host_ed25519_key")
}

func (s *Sidecar) writeKnownHosts() error {
	pub, err := os.ReadFile(s.HostKeyFile())
	if err != nil {
		return err
	}
	key, err := hostPublicKey(pub)
	if err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(s.SSHAddr)
	if err != nil {
		return err
	}
	s.KnownHosts = filepath.Join(s.DataDir, "known_hosts")
	line := fmt.Sprintf("[%s]:%s %s", host, port, key)
	return os.WriteFile(s.KnownHosts, []byte(line), 0o600)
}

// Logs returns everything the sidecar has logged so far.
func (s *Sidecar) Logs() string { return s.logs.String() }

// Stop sends SIGTERM and waits for the process to exit (at most timeout);
// it returns the process's exit error, nil for exit status 0 and for a
// sidecar the test killed on purpose.
func (s *Sidecar) Stop(timeout time.Duration) error {
	if s.killed.Load() {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return s.err
	case <-time.After(timeout):
		s.Kill()
		return fmt.Errorf("collab-sidecar did not stop within %s after SIGTERM", timeout)
	}
}

// Kill stops the process with SIGKILL, as a crash would.
func (s *Sidecar) Kill() {
	s.killed.Store(true)
	_ = s.cmd.Process.Kill()
	<-s.done
}

// PID is the process ID of the sidecar (for reading /proc/<pid>/status).
func (s *Sidecar) PID() int { return s.cmd.Process.Pid }

// Restart starts a new process on the same data directory and addresses.
func (s *Sidecar) Restart(ctx context.Context) (*Sidecar, error) {
	o := s.opts
	o.SSHAddr, o.HTTPAddr = s.SSHAddr, s.HTTPAddr
	if s.AdminURL != "" {
		o.AdminAddr = strings.TrimPrefix(s.AdminURL, "http://")
	}
	return StartSidecar(ctx, o)
}

// Install runs `collab-sidecar install` against o.Gitea for a sidecar with
// its data in o.DataDir that browsers reach at public, writing the footer
// into the custom directory custom. It returns what install printed.
func Install(ctx context.Context, o SidecarOptions, public, custom string, extra ...string) (string, error) {
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return "", err
	}
	tokenFile := filepath.Join(o.DataDir, "gitea-token")
	if err := os.WriteFile(tokenFile, []byte(o.Gitea.AdminToken+"\n"), 0o600); err != nil {
		return "", err
	}
	args := append([]string{"install", "--gitea-url", o.giteaURL(), "--gitea-token-file", tokenFile,
		"--data-dir", o.DataDir, "--public-url", public, "--gitea-custom", custom}, extra...)
	cmd := exec.CommandContext(ctx, o.Binary, args...)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("collab-sidecar %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// StartInstalled starts a sidecar whose public URL is its own HTTP address
// and which is installed (footer in custom, OAuth2 application registered)
// into o.Gitea: it starts once to learn its addresses, stops, installs,
// restarts Gitea if custom is Gitea's own custom directory (Gitea reads its
// templates at start), and starts again on the same addresses.
func StartInstalled(ctx context.Context, o SidecarOptions, custom string) (*Sidecar, error) {
	first, err := StartSidecar(ctx, o)
	if err != nil {
		return nil, err
	}
	o.SSHAddr, o.HTTPAddr = first.SSHAddr, first.HTTPAddr
	if first.AdminURL != "" {
		o.AdminAddr = strings.TrimPrefix(first.AdminURL, "http://")
	}
	if err := first.Stop(20 * time.Second); err != nil {
		return nil, err
	}
	public := "http://" + o.HTTPAddr
	if _, err := Install(ctx, o, public, custom); err != nil {
		return nil, err
	}
	if custom == o.Gitea.Custom {
		if err := o.Gitea.Restart(ctx); err != nil {
			return nil, err
		}
	}
	o.Args = append(append([]string(nil), o.Args...), "--public-url", public)
	return StartSidecar(ctx, o)
}

// SSHResult is what one run of the OpenSSH client produced.
type SSHResult struct {
	Stdout, Stderr string
	Code           int
}

// SSH runs the real OpenSSH client with the private key at keyPath against
// the sidecar: `ssh -p PORT git@HOST <words...>`. Options before a "--"
// word are passed to ssh itself.
func (s *Sidecar) SSH(ctx context.Context, keyPath string, words ...string) SSHResult {
	host, port, _ := net.SplitHostPort(s.SSHAddr)
	args := []string{"-F", os.DevNull, "-p", port, "-i", keyPath,
		"-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-o", "BatchMode=yes",
		"-o", "UserKnownHostsFile=" + s.KnownHosts, "-o", "StrictHostKeyChecking=yes",
		"-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR"}
	for i, w := range words {
		if w == "--" {
			args = append(args, words[:i]...)
			words = words[i+1:]
			break
		}
	}
	args = append(append(args, "git@"+host), words...)
	r, err := RunCommand(exec.CommandContext(ctx, "ssh", args...))
	if err != nil {
		r.Code = -1
		r.Stderr += err.Error()
	}
	return r
}

// RunCommand runs cmd and returns what it printed and its exit status; the
// error says only that it could not run at all.
func RunCommand(cmd *exec.Cmd) (SSHResult, error) {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := SSHResult{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.Code, err = ee.ExitCode(), nil
	}
	return r, err
}

// hostPublicKey returns the authorized_keys form of the public half of an
// OpenSSH private key file.
func hostPublicKey(pemBytes []byte) (string, error) {
	signer, err := ssh.ParsePrivateKey(pemBytes)
	if err != nil {
		return "", fmt.Errorf("parse host key: %w", err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))), nil
}
