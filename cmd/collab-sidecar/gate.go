package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/gatehook"
	"github.com/collab-lease/collab-lease/plugin/gitea"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// The gate's settings and files (docs/operating.md, The gate): serve
// --gate keeps the hook (plugin/gatehook) in every repository under
// Gitea's repository root, install writes its secret and configuration,
// doctor looks at them, and `collab-sidecar gate remove` takes them out.

// gateTimeoutMS bounds the hook's question: past it, gate-unreachable.
const gateTimeoutMS = 2000

// gateConfig validates the gate's settings into c.
func gateConfig(c *Config, v map[string]string) error {
	var err error
	if c.Gate, err = strconv.ParseBool(v["gate"]); err != nil {
		return fmt.Errorf("gate %q must be true or false", v["gate"])
	}
	if c.RenewOnPush, err = strconv.ParseBool(v["renew-on-push"]); err != nil {
		return fmt.Errorf("renew-on-push %q must be true or false", v["renew-on-push"])
	}
	c.GateUnreachable = v["gate-unreachable"]
	switch c.GateUnreachable {
	case contract.GateAllow, contract.GateRefuse:
	default:
		return fmt.Errorf("gate-unreachable %q must be allow or refuse", c.GateUnreachable)
	}
	c.GateURL = strings.TrimRight(v["gate-url"], "/")
	if c.GateURL != "" {
		if err := checkURL("gate-url", c.GateURL); err != nil {
			return err
		}
	}
	c.RepoRoot, c.GateProgram = v["gitea-repo-root"], v["gate-program"]
	if !c.Gate {
		if c.RenewOnPush {
			return errors.New("renew-on-push needs the gate: add --gate")
		}
		return nil
	}
	if c.AdminListen == "" {
		return errors.New("gate needs the admin listener, which answers the hook: set admin-listen (default 127.0.0.1:" + defaultAdminPort + ")")
	}
	if c.RepoRoot == "" && c.GiteaCustom != "" {
		if c.RepoRoot, err = repoRootOf(c.GiteaCustom); err != nil {
			return err
		}
	}
	if c.RepoRoot == "" {
		return errors.New("gate needs Gitea's repository root: pass --gitea-repo-root (app.ini's [repository] ROOT), or --gitea-custom to read it from app.ini")
	}
	if !filepath.IsAbs(c.RepoRoot) {
		if c.RepoRoot, err = filepath.Abs(c.RepoRoot); err != nil {
			return fmt.Errorf("gitea-repo-root: %v", err)
		}
	}
	return nil
}

// repoRootOf reads Gitea's repository root from <custom>/conf/app.ini as
// Gitea does: [repository] ROOT, relative to WORK_PATH; by default
// <APP_DATA_PATH>/gitea-repositories, APP_DATA_PATH ([server]) by default
// <WORK_PATH>/data.
func repoRootOf(custom string) (string, error) {
	path := filepath.Join(custom, "conf", "app.ini")
	ini, err := readAppIni(path)
	if err != nil {
		return "", fmt.Errorf("gitea-custom: %v (or pass --gitea-repo-root)", err)
	}
	work := ini[""]["WORK_PATH"]
	under := func(p string) (string, error) {
		if filepath.IsAbs(p) {
			return filepath.Clean(p), nil
		}
		if work == "" {
			return "", fmt.Errorf("%s gives the relative path %q and no WORK_PATH: pass --gitea-repo-root", path, p)
		}
		return filepath.Join(work, p), nil
	}
	if root := ini["repository"]["ROOT"]; root != "" {
		return under(root)
	}
	data := ini["server"]["APP_DATA_PATH"]
	if data == "" {
		data = "data"
	}
	data, err = under(data)
	if err != nil {
		return "", err
	}
	return filepath.Join(data, "gitea-repositories"), nil
}

// readAppIni reads the keys of an app.ini by section ("" before the
// first), values unquoted.
func readAppIni(path string) (map[string]map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]map[string]string{"": {}}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == ';' || line[0] == '#':
		case line[0] == '[' && strings.HasSuffix(line, "]"):
			section = strings.ToLower(strings.TrimSpace(line[1 : len(line)-1]))
			if out[section] == nil {
				out[section] = map[string]string{}
			}
		default:
			k, val, ok := strings.Cut(line, "=")
			if !ok {
				continue
			}
			val = strings.TrimSpace(val)
			if len(val) >= 2 && (val[0] == '"' && val[len(val)-1] == '"' || val[0] == '`' && val[len(val)-1] == '`') {
				val = val[1 : len(val)-1]
			}
			out[section][strings.ToUpper(strings.TrimSpace(k))] = val
		}
	}
	return out, sc.Err()
}

// gateURLFor is the URL the hook asks at: gate-url, else the admin
// listener's bound address, with a wildcard host read as loopback.
func gateURLFor(cfg Config, admin net.Addr) string {
	if cfg.GateURL != "" {
		return cfg.GateURL
	}
	host, port, err := net.SplitHostPort(admin.String())
	if err != nil {
		return "http://" + admin.String()
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// gateProgram is the hook program to install: gate-program, else the
// collab-gate-hook beside this executable.
func gateProgram(cfg Config) (string, error) {
	if cfg.GateProgram != "" {
		return cfg.GateProgram, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("gate: finding the hook program: %v (pass --gate-program)", err)
	}
	p := filepath.Join(filepath.Dir(self), contract.GateProgram)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("gate: no hook program beside collab-sidecar (%v): install %s there, or pass --gate-program", err, contract.GateProgram)
	}
	return p, nil
}

// gateRun is the gate of a running sidecar: its secret, the repository
// root it keeps the hook in, and what it counts and logs.
type gateRun struct {
	root   string
	secret []byte
	leases *lease.Service
	met    *metrics
	log    *slog.Logger
}

// startGate writes the gate's files (the hook program, its configuration
// naming gateURL, its secret if missing) and puts the hook into every
// repository under the root.
func startGate(cfg Config, gateURL string, leases *lease.Service, met *metrics, log *slog.Logger) (*gateRun, error) {
	program, err := gateProgram(cfg)
	if err != nil {
		return nil, err
	}
	secret, err := gatehook.Prepare(gatehook.Options{Root: cfg.RepoRoot, Program: program,
		Config: contract.GateConfig{URL: gateURL, Unreachable: cfg.GateUnreachable, TimeoutMS: gateTimeoutMS}})
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	g := &gateRun{root: cfg.RepoRoot, secret: secret, leases: leases, met: met, log: log}
	n, err := gatehook.Sweep(cfg.RepoRoot)
	met.gateInstall.WithLabelValues("start").Add(float64(n))
	if err != nil {
		// One repository the hook cannot go into must not keep the
		// others unguarded: the sweeps try it again.
		met.gateInstall.WithLabelValues("failed").Inc()
		log.Warn("the gate's hook could not go into every repository; trying again at each reconcile sweep", "root", cfg.RepoRoot, "err", err)
	}
	log.Info("gate on: Gitea asks this sidecar about every push", "root", cfg.RepoRoot, "hook_asks", gateURL,
		"unreachable", cfg.GateUnreachable, "renew_on_push", cfg.RenewOnPush, "hooks_added", n)
	return g, nil
}

// answer is the admin listener's answer to the hook (routes.AdminOptions.Gate).
func (g *gateRun) answer(ctx context.Context, q contract.GateQuestion) (contract.GateAnswer, error) {
	start := time.Now()
	a, res, err := g.leases.Gate(ctx, q)
	outcome := "allowed"
	switch {
	case err != nil && lease.Classify(err).Class == lease.Invalid:
		outcome = "invalid"
		g.log.Warn("the gate's hook asked a question it should not", "err", err)
	case err != nil:
		outcome = "unanswered"
		g.log.Warn("the gate could not decide a push; the hook does what gate-unreachable says", "repo", q.Owner+"/"+q.Repo, "err", err)
	case !a.Allow:
		outcome = "refused"
		g.log.Info("gate refused a push", "repo", q.Owner+"/"+q.Repo, "pusher", q.Pusher, "reasons", strings.Join(res.Refused, ","))
	}
	if res.RenewErr != nil {
		g.log.Warn("renewing a claim on its push failed", "repo", q.Owner+"/"+q.Repo, "err", res.RenewErr)
	}
	g.met.gateAnswered(outcome, res, time.Since(start))
	return a, err
}

// created puts the hook into a repository Gitea's webhook says was
// created (routes.Webhook.RepoCreated).
func (g *gateRun) created(repo string) {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok {
		return
	}
	changed, err := gatehook.InstallRepo(g.root, owner, name)
	if err != nil {
		g.log.Warn("putting the gate's hook into a new repository failed; the next sweep tries again", "repo", repo, "err", err)
		return
	}
	if changed {
		g.met.gateInstall.WithLabelValues("created").Inc()
	}
}

// sweep puts the hook back wherever it is missing (each reconcile sweep).
func (g *gateRun) sweep(context.Context) {
	n, err := gatehook.Sweep(g.root)
	g.met.gateInstall.WithLabelValues("sweep").Add(float64(n))
	if err != nil {
		g.met.gateInstall.WithLabelValues("failed").Inc()
		g.log.Warn("the gate's sweep could not put its hook into every repository", "root", g.root, "err", err)
	}
	if n > 0 {
		g.log.Info("the gate's sweep put its hook into repositories that lacked it", "added", n)
	}
}

// mergeConflictTest is the conflict test of merges through the sidecar
// (lease.WithConflictTest): git merge-tree in Gitea's repository
// directory under the repository root, when the sidecar knows it (the
// gate's setting); without it, a merge waits for Gitea's own test, up to
// lease.MergeUntested.
func mergeConflictTest(cfg Config) lease.Option {
	if cfg.RepoRoot == "" {
		return lease.WithConflictTest(nil)
	}
	return lease.WithConflictTest(func(ctx context.Context, owner, name, base, head string) (bool, []string, error) {
		dir := filepath.Join(cfg.RepoRoot, strings.ToLower(owner), strings.ToLower(name)+".git")
		return gitea.ConflictTest(ctx, "", dir, base, head)
	})
}
