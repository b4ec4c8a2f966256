package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Options configure StartGitea. The zero value starts a fresh Gitea in a
// new temporary directory with the cached binary (built on first use).
type Options struct {
	// Binary is the Gitea executable. "" runs integration/build-gitea.sh,
	// which reuses the cached build or makes one (minutes, once).
	Binary string
	// Dir holds everything of this instance (app.ini, database,
	// repositories, custom dir, log). "" makes a temporary directory that
	// Close removes; a given Dir is left in place.
	Dir string
	// StaticRoot is Gitea's source directory, from which it serves
	// templates and static files. "" asks the go command where the
	// code.gitea.io/gitea module is.
	StaticRoot string
	// ReadyTimeout bounds the wait for Gitea to answer after `gitea web`
	// starts. Zero means 60s.
	ReadyTimeout time.Duration
	// Git is the git executable Gitea runs (app.ini's [git] PATH). ""
	// is the first git on PATH. BuildGit builds one recent enough for
	// Gitea's quick mergeability test.
	Git string
}

// Gitea is a running (or stopped) Gitea on 127.0.0.1.
type Gitea struct {
	URL           string // "http://127.0.0.1:<port>", no trailing slash
	AdminLogin    string // a site administrator
	AdminPassword string
	AdminToken    string // an access token of AdminLogin with scope "all"
	Dir           string // the instance's directory
	Custom        string // $GITEA_CUSTOM: templates/, public/ overrides
	AppIni        string // path of app.ini
	LogFile       string // Gitea's stdout and stderr, across restarts
	// RealFrontend: Gitea serves its real frontend (the cached build of
	// integration/build-gitea-frontend.sh), not the empty stand-ins.
	RealFrontend bool

	binary       string
	addr         string // 127.0.0.1:<port>
	env          []string
	readyTimeout time.Duration
	ownDir       bool
	http         *http.Client

	mu   sync.Mutex
	proc *process // nil while stopped
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, valid after done
}

const adminLogin = "siteadmin"

// StartGitea prepares a fresh Gitea (app.ini, migrated database, a site
// administrator and their token) and starts `gitea web` on a free loopback
// port. It returns once Gitea answers.
//
// Gitea cannot report a port it chose itself (its ROOT_URL must name the
// port), and handing it a bound socket (LISTEN_FDS) makes it SIGTERM its
// parent, which it takes for the old process of a graceful restart. So the
// port is chosen here, and a start that loses the port to another process
// is retried on a new one.
func StartGitea(ctx context.Context, opts Options) (*Gitea, error) {
	g := &Gitea{
		AdminLogin:   adminLogin,
		readyTimeout: opts.ReadyTimeout,
		http:         &http.Client{},
	}
	if g.readyTimeout == 0 {
		g.readyTimeout = 60 * time.Second
	}
	ok := false
	defer func() {
		if !ok {
			_ = g.Close()
		}
	}()

	g.Dir = opts.Dir
	if g.Dir == "" {
		dir, err := os.MkdirTemp("", "collab-lease-gitea-")
		if err != nil {
			return nil, fmt.Errorf("start gitea: %w", err)
		}
		g.Dir, g.ownDir = dir, true
	}
	g.Dir, _ = filepath.Abs(g.Dir)
	g.Custom = filepath.Join(g.Dir, "custom")
	g.AppIni = filepath.Join(g.Dir, "custom", "conf", "app.ini")
	g.LogFile = filepath.Join(g.Dir, "gitea.log")

	var (
		wg         sync.WaitGroup
		binErr     error
		staticErr  error
		staticRoot = opts.StaticRoot
		frontend   string
	)
	wg.Go(func() { frontend = giteaFrontendDir(ctx) })
	g.binary = opts.Binary
	if g.binary == "" {
		wg.Go(func() { g.binary, binErr = BuildGitea(ctx) })
	}
	if staticRoot == "" {
		wg.Go(func() { staticRoot, staticErr = giteaSourceDir(ctx) })
	}
	wg.Wait()
	if err := errors.Join(binErr, staticErr); err != nil {
		return nil, fmt.Errorf("start gitea: %w", err)
	}

	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("start gitea: %w", err)
	}
	g.setAddr(port)
	g.AdminPassword = randomHex(12) + "Aa1!"
	if err := g.writeFiles(staticRoot, frontend, port, opts.Git); err != nil {
		return nil, fmt.Errorf("start gitea: %w", err)
	}
	g.RealFrontend = frontend != ""
	if err := g.prepare(ctx); err != nil {
		return nil, fmt.Errorf("start gitea: %w", err)
	}
	// Another process may take the port between choosing and Gitea's
	// bind; then choose again.
	for attempt := 1; ; attempt++ {
		err = g.serve(ctx)
		if !errors.Is(err, errAddrInUse) || attempt == 5 {
			break
		}
		if port, err = freePort(); err != nil {
			break
		}
		g.setAddr(port)
		if err = g.rewritePort(port); err != nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("start gitea: %w", err)
	}
	ok = true
	return g, nil
}

// NewGitea starts a fresh Gitea for a test (see StartGitea) and stops it
// when the test ends. It fails the test, with the tail of Gitea's log, if
// Gitea does not start; it skips only under -short, the convention of
// make check's tests that need no Gitea. The first use on a machine
// builds the Gitea binary, which takes minutes.
func NewGitea(t testing.TB) *Gitea {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real Gitea: not run with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	g, err := StartGitea(ctx, Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("start Gitea: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("stop Gitea: %v", err)
		}
		if t.Failed() {
			t.Logf("Gitea log:\n%s", g.LogTail(60))
		}
	})
	return g
}

// writeFiles writes app.ini and the frontend's files (see writeAssets).
func (g *Gitea) writeFiles(staticRoot, frontend string, port int, git string) error {
	for _, d := range []string{"custom/conf", "data", "repos", "log", "home"} {
		if err := os.MkdirAll(filepath.Join(g.Dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := g.writeAssets(frontend); err != nil {
		return err
	}
	runUser := os.Getenv("USER")
	if u, err := user.Current(); err == nil {
		runUser = u.Username
	}
	ini := appIni{
		RunUser:    runUser,
		Dir:        g.Dir,
		Port:       port,
		StaticRoot: staticRoot,
		SecretKey:  randomHex(32),
		Git:        git,
	}
	// app.ini must be writable: Gitea stores generated secrets in it.
	return os.WriteFile(g.AppIni, []byte(ini.String()), 0o600)
}

// writeAssets puts the built frontend (JS, CSS, …) where Gitea serves
// custom files from, which it prefers to STATIC_ROOT_PATH's: links to the
// cached build of integration/build-gitea-frontend.sh when frontend names
// one, else empty stand-ins. Gitea's module carries no built frontend:
// without either, a browser shows an alert for every page; with the
// stand-ins, pages render unstyled and run no script.
func (g *Gitea) writeAssets(frontend string) error {
	assets := filepath.Join(g.Custom, "public", "assets")
	// A reused Dir holds the files of its last start. Remove them first:
	// writing stand-ins through links would clobber the cached build.
	if err := os.RemoveAll(assets); err != nil {
		return err
	}
	if frontend != "" {
		if err := os.MkdirAll(assets, 0o755); err != nil {
			return err
		}
		entries, err := os.ReadDir(frontend)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := os.Symlink(filepath.Join(frontend, e.Name()), filepath.Join(assets, e.Name())); err != nil {
				return err
			}
		}
		return nil
	}
	for _, d := range []string{"js", "css"} {
		if err := os.MkdirAll(filepath.Join(assets, d), 0o755); err != nil {
			return err
		}
	}
	for _, f := range []string{
		"js/index.js", "js/iife.js",
		"css/index.css", "css/theme-gitea-auto.css", "css/theme-gitea-light.css", "css/theme-gitea-dark.css",
		"licenses.txt",
	} {
		if err := os.WriteFile(filepath.Join(assets, f), nil, 0o644); err != nil {
			return err
		}
	}
	return nil
}

type appIni struct {
	RunUser    string
	Dir        string
	Port       int
	StaticRoot string
	SecretKey  string
	Git        string // [git] PATH; "" leaves it out
}

func (a appIni) String() string {
	p := func(s ...string) string { return filepath.Join(append([]string{a.Dir}, s...)...) }
	return `APP_NAME = collab-lease test Gitea
RUN_USER = ` + a.RunUser + `
RUN_MODE = prod
WORK_PATH = ` + a.Dir + `
I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = ` + strconv.Itoa(a.Port) + `
DOMAIN = 127.0.0.1
ROOT_URL = http://127.0.0.1:` + strconv.Itoa(a.Port) + `/
DISABLE_SSH = true
START_SSH_SERVER = false
OFFLINE_MODE = true
LFS_START_SERVER = false
APP_DATA_PATH = ` + p("data") + `
STATIC_ROOT_PATH = ` + a.StaticRoot + `

[database]
DB_TYPE = sqlite3
PATH = ` + p("data", "gitea.db") + `
SQLITE_JOURNAL_MODE = WAL
SQLITE_TIMEOUT = 5000

[repository]
ROOT = ` + p("repos") + `
DEFAULT_BRANCH = main
; git's hooks run through sh rather than bash: one process fewer per hook
SCRIPT_TYPE = sh

[queue]
; in memory: a persistent (level) queue that ran dry looks for new work
; every 50 ms, backing off to 2 s, so each queue a change passes through
; (a push, its webhook, a pull request's mergeability test) adds up to 2 s
; on a quiet instance; a channel hands work over at once. Its unique
; queues (a pull request's mergeability test) can lose an item for good,
; in Gitea 1.26: PushItem records an item as queued after handing it to a
; worker, so one taken at once stays recorded and every later push of it
; is dropped; the pull request's merge then answers "try again later"
; until it is replaced (bench/fleet/work.go replacePull)
TYPE = channel

[queue.pr_patch_checker]
; Gitea tests pull requests for mergeability with NumCPU/2 workers, one on
; 2 cores, 20 pull requests taken at a time; with pull requests being
; pushed and merged by many agents at once, that one worker is where they
; wait. Two workers, one pull request at a time each.
MAX_WORKERS = 2
BATCH_LENGTH = 1

[actions]
; no workflows run here: do not look for them on every push
ENABLED = false

[security]
INSTALL_LOCK = true
SECRET_KEY = ` + a.SecretKey + `
; test instance only: cheap password hashing keeps seeding fast
PASSWORD_HASH_ALGO = pbkdf2$1000$50

[service]
DISABLE_REGISTRATION = true
REQUIRE_SIGNIN_VIEW = false
ENABLE_NOTIFY_MAIL = false
DEFAULT_KEEP_EMAIL_PRIVATE = false

[mailer]
ENABLED = false

[session]
PROVIDER = memory

[cache]
ADAPTER = memory

[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false

[cron.update_checker]
ENABLED = false

[webhook]
ALLOWED_HOST_LIST = loopback

[log]
MODE = console
LEVEL = Info
ROOT_PATH = ` + p("log") + `
` + a.gitSection()
}

func (a appIni) gitSection() string {
	if a.Git == "" {
		return ""
	}
	return `
[git]
PATH = ` + a.Git + `
`
}

// prepare migrates the database and creates the site administrator and
// their token, each with the gitea command line (Gitea is not running yet).
func (g *Gitea) prepare(ctx context.Context) error {
	if _, err := g.run(ctx, "migrate"); err != nil {
		return err
	}
	if _, err := g.run(ctx, "admin", "user", "create", "--admin",
		"--username", g.AdminLogin, "--password", g.AdminPassword,
		"--email", g.AdminLogin+"@example.com", "--must-change-password=false"); err != nil {
		return err
	}
	out, err := g.run(ctx, "admin", "user", "generate-access-token",
		"--username", g.AdminLogin, "--token-name", "collab-lease-admin", "--scopes", "all", "--raw")
	if err != nil {
		return err
	}
	tok := regexp.MustCompile(`(?m)^[0-9a-f]{40}$`).FindString(out)
	if tok == "" {
		return fmt.Errorf("gitea admin user generate-access-token printed no token:\n%s", out)
	}
	g.AdminToken = tok
	return nil
}

// environ is the environment of every gitea command: Gitea reads its
// directories from GITEA_* variables, so drop the caller's.
func (g *Gitea) environ() []string {
	if g.env != nil {
		return g.env
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GITEA_") && !strings.HasPrefix(kv, "LISTEN_") {
			env = append(env, kv)
		}
	}
	g.env = append(env, "GITEA_WORK_DIR="+g.Dir, "GITEA_CUSTOM="+g.Custom)
	return g.env
}

func (g *Gitea) args(sub ...string) []string {
	return append(sub, "--config", g.AppIni, "--work-path", g.Dir, "--custom-path", g.Custom)
}

// run runs one gitea subcommand to completion, returning its stdout. Its
// output also goes to the log file.
func (g *Gitea) run(ctx context.Context, sub ...string) (string, error) {
	logf, err := os.OpenFile(g.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return "", err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== gitea %s\n", strings.Join(sub, " "))
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, g.binary, g.args(sub...)...)
	cmd.Dir = g.Dir
	cmd.Env = g.environ()
	cmd.Stdout = io.MultiWriter(&stdout, logf)
	cmd.Stderr = logf
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("gitea %s: %w\n%s", strings.Join(sub, " "), err, g.LogTail(30))
	}
	return stdout.String(), nil
}

// errAddrInUse: gitea web exited because its port was taken.
var errAddrInUse = errors.New("address already in use")

// serve starts `gitea web` and waits until it answers.
func (g *Gitea) serve(ctx context.Context) error {
	logf, err := os.OpenFile(g.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== gitea web on %s\n", g.addr)
	logStart, _ := logf.Seek(0, io.SeekEnd)

	cmd := exec.Command(g.binary, g.args("web")...)
	cmd.Dir = g.Dir
	cmd.Env = g.environ()
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	g.mu.Lock()
	g.proc = p
	g.mu.Unlock()

	if err := g.waitReady(ctx, p, logStart); err != nil {
		_ = g.Stop()
		return err
	}
	return nil
}

// logSince reports whether the log, from offset on, contains s.
func (g *Gitea) logSince(offset int64, s string) bool {
	f, err := os.Open(g.LogFile)
	if err != nil {
		return false
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, offset, 1<<24))
	return err == nil && bytes.Contains(b, []byte(s))
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (g *Gitea) setAddr(port int) {
	g.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	g.URL = "http://" + g.addr
}

// rewritePort points app.ini at another port, keeping everything else
// (Gitea has written generated secrets into it).
func (g *Gitea) rewritePort(port int) error {
	b, err := os.ReadFile(g.AppIni)
	if err != nil {
		return err
	}
	p := strconv.Itoa(port)
	b = regexp.MustCompile(`(?m)^HTTP_PORT\s*=.*$`).ReplaceAll(b, []byte("HTTP_PORT = "+p))
	b = regexp.MustCompile(`(?m)^ROOT_URL\s*=.*$`).ReplaceAll(b, []byte("ROOT_URL = http://127.0.0.1:"+p+"/"))
	return os.WriteFile(g.AppIni, b, 0o600)
}

// waitReady polls /api/v1/version until it answers 200, the process exits,
// its log (from logStart on) says the port is taken, or the deadline
// passes. (Gitea does not exit when it cannot bind its port.)
func (g *Gitea) waitReady(ctx context.Context, p *process, logStart int64) error {
	ctx, cancel := context.WithTimeout(ctx, g.readyTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/api/v1/version", nil)
		if resp, err := g.http.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if g.logSince(logStart, "address already in use") {
			return fmt.Errorf("gitea web on %s: %w", g.addr, errAddrInUse)
		}
		select {
		case <-p.done:
			return fmt.Errorf("gitea web exited before it was ready: %v\n%s", p.err, g.LogTail(40))
		case <-ctx.Done():
			return fmt.Errorf("gitea web did not answer on %s: %w\n%s", g.URL, ctx.Err(), g.LogTail(40))
		case <-tick.C:
		}
	}
}

// Stop stops Gitea (SIGTERM, then SIGKILL after 10s) and keeps its data.
// Afterwards its port refuses connections. Stopping a stopped Gitea does
// nothing.
func (g *Gitea) Stop() error {
	g.mu.Lock()
	p := g.proc
	g.proc = nil
	g.mu.Unlock()
	if p == nil {
		return nil
	}
	// Signal the group while its leader is unreaped, so the group id
	// is still certainly ours.
	signalGroup(p.cmd, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		signalGroup(p.cmd, syscall.SIGKILL)
		<-p.done
	}
	return nil
}

// Start starts a stopped Gitea again, on the same port with the same data,
// and waits until it answers.
func (g *Gitea) Start(ctx context.Context) error {
	g.mu.Lock()
	running := g.proc != nil
	g.mu.Unlock()
	if running {
		return fmt.Errorf("start gitea on %s: already running", g.addr)
	}
	// The port was free the moment Gitea let go of it, but a stranger
	// could have taken it meanwhile: retry briefly, on the same port.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := g.serve(ctx)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errAddrInUse) || time.Now().After(deadline) {
			return fmt.Errorf("start gitea again: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("start gitea again on %s: %w", g.addr, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Restart stops Gitea and starts it again on the same port and data.
func (g *Gitea) Restart(ctx context.Context) error {
	if err := g.Stop(); err != nil {
		return err
	}
	return g.Start(ctx)
}

// Close stops Gitea and, if StartGitea made the directory, removes it.
func (g *Gitea) Close() error {
	err := g.Stop()
	if g.ownDir {
		err = errors.Join(err, os.RemoveAll(g.Dir))
	}
	return err
}

// Running reports whether the Gitea process is running.
func (g *Gitea) Running() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.proc == nil {
		return false
	}
	select {
	case <-g.proc.done:
		return false
	default:
		return true
	}
}

// PID is the process ID of the running `gitea web`, 0 while stopped.
func (g *Gitea) PID() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.proc == nil {
		return 0
	}
	return g.proc.cmd.Process.Pid
}

// LogTail returns the last n lines of Gitea's log.
func (g *Gitea) LogTail(n int) string {
	f, err := os.Open(g.LogFile)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return "--- last lines of " + g.LogFile + ":\n" + strings.Join(lines, "\n")
}

// BuildGitea returns the path of the cached Gitea binary, building it
// first (minutes) if the cache has none for the current giteabin module.
// It runs integration/build-gitea.sh, whose progress goes to stderr.
func BuildGitea(ctx context.Context) (string, error) {
	return runBuildScript(ctx, "build-gitea.sh")
}

// BuildGit returns the path of the cached upstream git that Gitea can
// run instead of the system's (Options.Git), building it first (minutes)
// if the cache has none. It runs integration/build-git.sh, whose progress
// goes to stderr.
func BuildGit(ctx context.Context) (string, error) {
	return runBuildScript(ctx, "build-git.sh")
}

// runBuildScript runs one of this package's build scripts, which print
// the path of what they built (or found cached) as their last line.
func runBuildScript(ctx context.Context, script string) (string, error) {
	dir, err := sourceDir()
	if err != nil {
		return "", err
	}
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(dir, script))
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	bin := strings.TrimSpace(lines[len(lines)-1])
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		return "", fmt.Errorf("%s printed %q, which is not a file", script, bin)
	}
	return bin, nil
}

// giteaFrontendDir returns the directory of Gitea's built frontend that
// integration/build-gitea-frontend.sh has cached for the current giteabin
// module, or "" if it has built none (it is never built here: `make
// gitea-frontend` builds it).
func giteaFrontendDir(ctx context.Context) string {
	dir, err := sourceDir()
	if err != nil {
		return ""
	}
	out, err := exec.CommandContext(ctx, "bash", filepath.Join(dir, "build-gitea-frontend.sh"), "--print-path").Output()
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	frontend := strings.TrimSpace(lines[len(lines)-1])
	if !filepath.IsAbs(frontend) {
		return ""
	}
	if _, err := os.Stat(filepath.Join(frontend, ".vite", "manifest.json")); err != nil {
		return ""
	}
	return frontend
}

// giteaSourceDir is where the go command keeps the code.gitea.io/gitea
// module that giteabin builds: Gitea serves templates and static files
// from there.
func giteaSourceDir(ctx context.Context) (string, error) {
	dir, err := sourceDir()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "code.gitea.io/gitea")
	cmd.Dir = filepath.Join(dir, "giteabin")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m code.gitea.io/gitea: %w: %s", err, stderr.String())
	}
	src := strings.TrimSpace(string(out))
	if _, err := os.Stat(filepath.Join(src, "templates")); err != nil {
		return "", fmt.Errorf("gitea source directory %q has no templates (run integration/build-gitea.sh first): %w", src, err)
	}
	return src, nil
}

// sourceDir is the directory of this package's sources (which holds
// build-gitea.sh and giteabin/): next to this file when the sources are
// where they were compiled, else found upwards from the working directory.
func sourceDir() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok {
		dir := filepath.Dir(file)
		if _, err := os.Stat(filepath.Join(dir, "build-gitea.sh")); err == nil {
			return dir, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "integration", "build-gitea.sh")); err == nil {
			return filepath.Join(d, "integration"), nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("cannot find integration/build-gitea.sh above the working directory")
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
