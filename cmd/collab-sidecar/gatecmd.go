package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/internal/osfile"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/gatehook"
)

// What install, doctor and `collab-sidecar gate remove` do about the gate
// (gate.go has serve's part).

// gateRoot is the repository root install and doctor look at:
// gitea-repo-root, else app.ini's (through gitea-custom).
func gateRoot(cfg Config) (string, error) {
	if cfg.RepoRoot != "" {
		return cfg.RepoRoot, nil
	}
	if cfg.GiteaCustom == "" {
		return "", errors.New("pass --gitea-repo-root (app.ini's [repository] ROOT) or --gitea-custom")
	}
	return repoRootOf(cfg.GiteaCustom)
}

// installGate writes the gate's files (the hook program, its
// configuration and its secret) below the repository root, and says how
// to turn the gate on; without a root or a hook program it says what is
// missing and changes nothing.
func installGate(cfg Config, out io.Writer) {
	root, err := gateRoot(cfg)
	if err != nil {
		fmt.Fprintf(out, "\nGate: not prepared: Gitea's repository root is unknown (%v).\n", err)
		return
	}
	program, err := gateProgram(cfg)
	if err != nil {
		fmt.Fprintf(out, "\nGate: not prepared: %v\n", err)
		return
	}
	url := cfg.GateURL
	if url == "" {
		url = "http://" + strings.Replace(cfg.AdminListen, "0.0.0.0:", "127.0.0.1:", 1)
		if strings.HasPrefix(cfg.AdminListen, ":") {
			url = "http://127.0.0.1" + cfg.AdminListen
		}
	}
	if _, err := gatehook.Prepare(gatehook.Options{Root: root, Program: program,
		Config: contract.GateConfig{URL: url, Unreachable: cfg.GateUnreachable, TimeoutMS: gateTimeoutMS}}); err != nil {
		fmt.Fprintf(out, "\nGate: not prepared: %v\n", err)
		return
	}
	dir := filepath.Join(root, contract.GateDir)
	fmt.Fprintf(out, "\nGate: its hook program, configuration (asking %s) and secret are in %s (the secret readable by its owner alone: Gitea's user).\n", url, dir)
	if cfg.Gate {
		fmt.Fprintln(out, "  It is on: serve puts the hook into every repository and Gitea asks the sidecar about every push.")
		return
	}
	fmt.Fprintln(out, "  To have Gitea refuse a stale claim's pushes, even from the holder's own account, run collab-sidecar serve with --gate")
	fmt.Fprintf(out, "  --gitea-repo-root %s (docs/operating.md: The gate), as a user that may write Gitea's repositories' hooks.\n", root)
}

// checkGate is doctor's look at the gate: repositories without its hook,
// whether the hook reaches a sidecar, and its secret's owner and mode.
func checkGate(ctx context.Context, cfg Config) []check {
	root, err := gateRoot(cfg)
	if err != nil {
		return []check{{name: "gate", err: err}}
	}
	var out []check
	missing, err := gatehook.Missing(root)
	switch {
	case err != nil:
		out = append(out, check{name: "gate hooks", err: err})
	case len(missing) > 0:
		shown := missing[:min(len(missing), 5)]
		out = append(out, check{name: "gate hooks", err: fmt.Errorf("%d repositories lack the hook (%s%s): serve --gate puts it in at start and at each reconcile sweep",
			len(missing), strings.Join(shown, ", "), map[bool]string{true: ", …"}[len(missing) > len(shown)])})
	default:
		out = append(out, check{name: "gate hooks", ok: "every repository under " + root + " has the hook"})
	}
	secret := filepath.Join(root, contract.GateDir, contract.GateSecretFile)
	out = append(out, checkGateSecret(root, secret))
	program := filepath.Join(root, contract.GateDir, contract.GateProgram)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := exec.CommandContext(pctx, program, "ping").CombinedOutput()
	line := strings.TrimSpace(string(msg))
	if err != nil {
		out = append(out, check{name: "gate asks", err: fmt.Errorf("the hook cannot reach a sidecar (%s): check gate-url and that serve runs with --gate", cmp.Or(line, err.Error()))})
	} else {
		out = append(out, check{name: "gate asks", ok: line})
	}
	return out
}

// checkGateSecret: the secret is the owner's alone, and that owner is
// Gitea's (the repository root's), whose hooks must read it.
func checkGateSecret(root, secret string) check {
	st, err := os.Stat(secret)
	if err != nil {
		return check{name: "gate secret", err: fmt.Errorf("%v: serve --gate (or install) writes it", err)}
	}
	if st.Mode().Perm()&0o077 != 0 {
		return check{name: "gate secret", err: fmt.Errorf("%s has mode %04o: others may read it and ask the gate as Gitea; run chmod 600 %s", secret, st.Mode().Perm(), secret)}
	}
	rst, err := os.Stat(root)
	if err != nil {
		return check{name: "gate secret", err: err}
	}
	owner, ok := osfile.OwnerOf(st)
	rootOwner, rok := osfile.OwnerOf(rst)
	if ok && rok && owner != rootOwner {
		return check{name: "gate secret", err: fmt.Errorf("%s belongs to user %d, the repositories to user %d, whose hooks cannot read it: chown %d %s", secret, owner, rootOwner, rootOwner, secret)}
	}
	return check{name: "gate secret", ok: fmt.Sprintf("%s, mode %04o, owned by the repositories' owner", secret, st.Mode().Perm())}
}

// gateCommand runs `collab-sidecar gate <sub>`: remove.
func gateCommand(args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "remove" {
		return errors.New("usage: collab-sidecar gate remove [--gitea-repo-root DIR | --gitea-custom DIR]")
	}
	fs := flag.NewFlagSet("gate remove", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	root := fs.String("gitea-repo-root", getenv("COLLAB_GITEA_REPO_ROOT"), "Gitea's repository root")
	custom := fs.String("gitea-custom", getenv("COLLAB_GITEA_CUSTOM"), "Gitea's custom directory, to read the root from app.ini")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("%v (usage: collab-sidecar gate remove [--gitea-repo-root DIR | --gitea-custom DIR])", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	r, err := gateRoot(Config{RepoRoot: *root, GiteaCustom: *custom})
	if err != nil {
		return err
	}
	n, err := gatehook.Remove(r)
	if err != nil {
		return fmt.Errorf("removing the gate: %w (removed from %d repositories so far; run it again)", err, n)
	}
	fmt.Fprintf(stdout, "Gate: removed its hook from %d repositories under %s, and %s; Gitea's own hooks are as they were.\n", n, r, filepath.Join(r, contract.GateDir))
	fmt.Fprintln(stdout, "  Stop serve --gate first, or it puts the hook back at its next sweep.")
	return nil
}
