package main

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--version"}, environ{}.get, noGit, nil, &stdout, &stderr); code != exitAllow ||
		!strings.HasPrefix(stdout.String(), "collab-gate-hook ") || stderr.Len() > 0 {
		t.Errorf("exit %d, %q %q", code, stdout.String(), stderr.String())
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"--nope"}, {"extra"}, {"ping", "extra"}, {"--dir"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, environ{}.get, noGit, strings.NewReader(""), &stdout, &stderr); code != exitUsage ||
			!strings.Contains(stderr.String(), "usage:") {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr.String())
		}
	}
	var stdout bytes.Buffer
	if code := run([]string{"-h"}, environ{}.get, noGit, nil, &stdout, &stdout); code != exitAllow || !strings.HasPrefix(stdout.String(), "usage:") {
		t.Errorf("-h: exit %d, %q", code, stdout.String())
	}
}

func TestPing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		code   int
		out    string // stdout, or the end of stderr
	}{
		{"answered", http.StatusNoContent, exitAllow, " answered\n"},
		{"another secret", http.StatusUnauthorized, exitRefuse, "answered 401 Unauthorized: the gate's secret (gate.secret) is not the one the sidecar holds\n"},
		{"no gate", http.StatusNotFound, exitRefuse, "with the gate on (serve --gate)?\n"},
		{"200 is not 204", http.StatusOK, exitRefuse, "answered 200 OK, not 204\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSidecar(t, replying(tc.status, ""))
			dir := writeGate(t, contract.GateConfig{URL: s.URL + "/", Unreachable: contract.GateRefuse})
			var stdout, stderr bytes.Buffer
			code := run([]string{"ping", "--dir", dir}, environ{}.get, noGit, nil, &stdout, &stderr)
			out := stdout.String()
			if code != exitAllow {
				out = stderr.String()
			}
			if code != tc.code || !strings.HasSuffix(out, tc.out) || !strings.Contains(out, s.URL) || strings.Count(out, "\n") != 1 {
				t.Errorf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
			}
			if code == exitAllow && out != "ok: "+s.URL+"/ answered\n" {
				t.Errorf("stdout %q", out)
			}
			reqs := s.requests()
			if len(reqs) != 1 || reqs[0].method != http.MethodGet || reqs[0].path != contract.GatePingPath || reqs[0].secret != testSecret {
				t.Errorf("requests %+v", reqs)
			}
		})
	}
	t.Run("not configured", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		code := run([]string{"ping", "--dir", t.TempDir()}, environ{}.get, noGit, nil, &stdout, &stderr)
		if code != exitRefuse || !strings.Contains(stderr.String(), "not configured") || stdout.Len() > 0 {
			t.Errorf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
		}
	})
	t.Run("nobody listening", func(t *testing.T) {
		dir := writeGate(t, contract.GateConfig{URL: "http://127.0.0.1:1"})
		var stdout, stderr bytes.Buffer
		code := run([]string{"ping", "--dir", dir}, environ{}.get, noGit, nil, &stdout, &stderr)
		if code != exitRefuse || !strings.Contains(stderr.String(), "connection refused") || strings.Contains(stderr.String(), testSecret) {
			t.Errorf("exit %d, stderr %q", code, stderr.String())
		}
	})
}
