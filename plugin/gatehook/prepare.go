package gatehook

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/collab-lease/collab-lease/internal/osfile"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Options says where the gate goes and what its program is told.
type Options struct {
	Root    string              // Gitea's repository root
	Program string              // path of the hook program to copy into <Root>/.collab-lease/
	Config  contract.GateConfig // written to <Root>/.collab-lease/gate.json
}

// secretSize is the number of random bytes of the gate's secret, kept
// hex-encoded: the hex text itself is the secret the hook's header
// carries.
const secretSize = 32

// Prepare makes <Root>/.collab-lease/ (mode 0755) and keeps in it the
// hook program (copied from Program, mode 0755, written only when its
// bytes differ), gate.json (Config, written only when it differs) and,
// if there is none, gate.secret (mode 0600). Of two processes making the
// secret at once, the second reads the first one's (osfile.Secret).
// Running as root, what it makes takes the owner of Root (Gitea's
// account), and so does the secret every time, so that Gitea's hooks can
// read it. It returns the secret, which the sidecar checks the hook's
// header against.
//
// Call it before InstallRepo or Sweep: a script that runs before the
// program's configuration is there lets the push in unchecked.
func Prepare(o Options) (secret []byte, err error) {
	if err := checkConfig(o.Config); err != nil {
		return nil, fmt.Errorf("prepare the gate: %w", err)
	}
	ri, err := os.Stat(o.Root)
	if err == nil && !ri.IsDir() {
		err = fmt.Errorf("%s is not a directory", o.Root)
	}
	if err != nil {
		return nil, fmt.Errorf("prepare the gate: Gitea's repository root: %w", err)
	}
	program, err := os.ReadFile(o.Program)
	if err != nil {
		return nil, fmt.Errorf("prepare the gate: its program: %w", err)
	}
	config, err := json.MarshalIndent(o.Config, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("prepare the gate: %w", err)
	}
	owner := asRoot(ri)
	dir, err := openDir(o.Root, contract.GateDir, true, owner)
	if err != nil {
		return nil, fmt.Errorf("prepare the gate: %w", err)
	}
	defer dir.Close()
	if _, err := keep(dir, contract.GateProgram, program, 0o755, owner); err != nil {
		return nil, fmt.Errorf("prepare the gate: %w", err)
	}
	if _, err := keep(dir, contract.GateConfigFile, append(config, '\n'), 0o644, owner); err != nil {
		return nil, fmt.Errorf("prepare the gate: %w", err)
	}
	if err := noLink(dir, contract.GateSecretFile); err != nil {
		return nil, fmt.Errorf("prepare the gate: %w", err)
	}
	file := secretFile(o.Root)
	raw, _, err := file.LoadOrCreate(func() ([]byte, error) {
		b := make([]byte, secretSize)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("gate secret: %w", err)
		}
		return []byte(hex.EncodeToString(b) + "\n"), nil
	})
	if err != nil {
		return nil, fmt.Errorf("prepare the gate: %w", err)
	}
	// Also when the file was there: a process that stopped between
	// making it and giving it away would have left it root's.
	chown(file.Path, owner)
	return parseSecret(file.Path, raw)
}

// ReadSecret returns the gate's secret below root, as Prepare made it,
// for the sidecar to check the hook's header against. Its error wraps
// fs.ErrNotExist when there is none.
func ReadSecret(root string) ([]byte, error) {
	dir, err := openDir(root, contract.GateDir, false, nil)
	if err == nil && dir == nil {
		err = fmt.Errorf("%s: %w", filepath.Join(root, contract.GateDir), fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("read the gate's secret: %w", err)
	}
	defer dir.Close()
	if err := noLink(dir, contract.GateSecretFile); err != nil {
		return nil, fmt.Errorf("read the gate's secret: %w", err)
	}
	file := secretFile(root)
	raw, err := file.Read()
	if err != nil {
		return nil, fmt.Errorf("read the gate's secret: %w", err)
	}
	return parseSecret(file.Path, raw)
}

// secretFile is the gate's secret below root, with its errors' words.
func secretFile(root string) osfile.Secret {
	return osfile.Secret{
		Path: filepath.Join(root, contract.GateDir, contract.GateSecretFile),
		Temp: ".gate-secret-*",
		Refuse: func(path string, mode fs.FileMode) error {
			return fmt.Errorf("gate secret %s has mode %04o: others could pass for the gate's hook; run chmod 600 %s", path, mode, path)
		},
		Wrap: func(_ string, err error) error { return fmt.Errorf("gate secret: %w", err) },
	}
}

// parseSecret checks what the secret's file at path holds.
func parseSecret(path string, raw []byte) ([]byte, error) {
	s := strings.TrimSpace(string(raw))
	if b, err := hex.DecodeString(s); err != nil || len(b) != secretSize {
		return nil, fmt.Errorf("gate secret %s does not hold %d hex-encoded bytes: delete it and start the sidecar again", path, secretSize)
	}
	return []byte(s), nil
}

// noLink refuses a symbolic link at name in dir.
func noLink(dir *os.Root, name string) error {
	fi, err := dir.Lstat(name)
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%s %w", filepath.Join(dir.Name(), name), ErrSymlink)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// checkConfig refuses a configuration the hook would not use: it would
// let every push in unchecked, saying the gate is not configured.
func checkConfig(c contract.GateConfig) error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		shown := "(not a URL)"
		if err == nil {
			shown = fmt.Sprintf("%q", u.Redacted())
		}
		return fmt.Errorf("the gate's URL %s is not an http or https URL with a host", shown)
	}
	switch c.Unreachable {
	case "", contract.GateAllow, contract.GateRefuse:
	default:
		return fmt.Errorf("the gate's policy when the sidecar does not answer is %q, neither %q nor %q", c.Unreachable, contract.GateAllow, contract.GateRefuse)
	}
	if c.TimeoutMS < 0 {
		return fmt.Errorf("the gate's timeout is %d ms", c.TimeoutMS)
	}
	return nil
}
