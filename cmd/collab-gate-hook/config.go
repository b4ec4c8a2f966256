package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// gate is what the hook knows of the sidecar: its configuration and the
// secret it authenticates with, both written by the sidecar into the
// hook's directory (contract.GateConfigFile, contract.GateSecretFile).
type gate struct {
	url       *url.URL // the admin listener's base URL
	unreached string   // contract.GateAllow or contract.GateRefuse
	timeout   time.Duration
	secret    string // never printed
}

// maxConfig bounds what the hook reads of gate.json and gate.secret.
const maxConfig = 64 << 10

// loadGate reads the gate's files in dir. Its errors name the file and
// what is wrong with it, never the secret, and never the directory: a
// pusher may read them.
func loadGate(dir string) (gate, error) {
	if dir == "" {
		return gate{}, errors.New("the hook cannot tell which directory it is in")
	}
	raw, err := readSmall(filepath.Join(dir, contract.GateConfigFile))
	if err != nil {
		return gate{}, err
	}
	var cfg contract.GateConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return gate{}, fmt.Errorf("%s: %v", contract.GateConfigFile, err)
	}
	g := gate{unreached: cfg.Unreachable, timeout: time.Duration(cfg.TimeoutMS) * time.Millisecond}
	if g.url, err = baseURL(cfg.URL); err != nil {
		return gate{}, fmt.Errorf("%s: %v", contract.GateConfigFile, err)
	}
	switch cfg.Unreachable {
	case "":
		g.unreached = contract.GateAllow
	case contract.GateAllow, contract.GateRefuse:
	default:
		return gate{}, fmt.Errorf("%s: unreachable is %q, neither %q nor %q", contract.GateConfigFile, cfg.Unreachable, contract.GateAllow, contract.GateRefuse)
	}
	switch {
	case cfg.TimeoutMS < 0:
		return gate{}, fmt.Errorf("%s: timeout_ms is %d", contract.GateConfigFile, cfg.TimeoutMS)
	case cfg.TimeoutMS == 0:
		g.timeout = contract.GateTimeoutMS * time.Millisecond
	}
	secret, err := readSmall(filepath.Join(dir, contract.GateSecretFile))
	if err != nil {
		return gate{}, err
	}
	g.secret = strings.TrimSpace(string(secret))
	if g.secret == "" {
		return gate{}, fmt.Errorf("%s is empty", contract.GateSecretFile)
	}
	for _, c := range []byte(g.secret) {
		if c <= ' ' || c >= 0x7f {
			return gate{}, fmt.Errorf("%s holds a character a header cannot carry", contract.GateSecretFile)
		}
	}
	return g, nil
}

// readSmall reads the file at path, up to maxConfig bytes. Its errors
// name the file by its base name only.
func readSmall(path string) ([]byte, error) {
	name := filepath.Base(path)
	f, err := os.Open(path)
	if err == nil {
		defer f.Close()
		var b []byte
		if b, err = io.ReadAll(io.LimitReader(f, maxConfig+1)); err == nil {
			if len(b) > maxConfig {
				return nil, fmt.Errorf("%s is larger than %d bytes", name, maxConfig)
			}
			return b, nil
		}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return nil, fmt.Errorf("%s: %v", name, err)
}

// baseURL checks the admin listener's base URL: absolute, http or https.
func baseURL(s string) (*url.URL, error) {
	if s == "" {
		return nil, errors.New("url is empty")
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, errors.New("url is not a URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("url %s is not an http or https URL with a host", u.Redacted())
	}
	return u, nil
}

// endpoint is the URL of path (contract.GatePath, contract.GatePingPath)
// below the base URL.
func (g gate) endpoint(path string) string {
	return strings.TrimSuffix(g.url.String(), "/") + path
}
