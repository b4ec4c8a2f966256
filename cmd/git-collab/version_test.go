package main

import (
	"bytes"
	"strings"
	"testing"
)

// --version needs no repository, remote or sidecar.
func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	a := &app{stdout: &stdout, stderr: &stderr}
	code := a.run([]string{"--version"})
	out := stdout.String()
	if code != 0 || stderr.Len() != 0 || !strings.HasPrefix(out, "git-collab ") ||
		!strings.Contains(out, ", go1.") || strings.Count(out, "\n") != 1 {
		t.Errorf("exit %d, stdout %q, stderr %q; want one line naming the build", code, out, stderr.String())
	}
}
