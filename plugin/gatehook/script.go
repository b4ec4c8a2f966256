package gatehook

import (
	"bytes"
	"fmt"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// marker is the line that makes a pre-receive.d/collab-lease the gate's
// own: Remove takes out no file without it.
const marker = `# collab-lease's gate: installed by collab-sidecar, removed by "collab-sidecar gate remove".`

// preReceiveD is the directory of a repository's hooks whose executable
// files Gitea's pre-receive hook runs, in the order of their names.
const preReceiveD = "pre-receive.d"

// script finds the program by going up from its own directory: it is
// <root>/<owner>/<name>.git/hooks/pre-receive.d/collab-lease, four levels
// below the root, so the path holds wherever the root is mounted (in
// Gitea's container, on the host). Gitea's pre-receive runs it as
// "${GIT_DIR}/hooks/pre-receive.d/collab-lease", GIT_DIR being "." (git
// runs hooks in the repository) or an absolute path. A missing program
// (a gate half removed) lets the push in, saying so, as the program does
// when its configuration is missing (cmd/collab-gate-hook, ask.go).
var script = fmt.Appendf(nil, `#!/bin/sh
%s
# It runs the gate's program, which asks the collab-lease sidecar whether
# this push may go in. The program is in <root>/%s/, and this script in
# <root>/<owner>/<name>.git/hooks/%s/: four levels up.
hook="$(dirname "$0")/../../../../%s/%s"
if [ ! -x "$hook" ]; then
	echo "collab-lease: the gate's program is missing; this push was not checked" >&2
	exit 0
fi
exec "$hook"
`, marker, contract.GateDir, preReceiveD, contract.GateDir, contract.GateProgram)

// Script returns the bytes of the script the gate puts in each
// repository's hooks/pre-receive.d/collab-lease.
func Script() []byte { return bytes.Clone(script) }

// maxScript bounds what is read of a file where the script goes: the
// script is far shorter, so a larger file is not the gate's.
const maxScript = 64 << 10

// ours says whether data is the gate's: a line of it is the marker.
func ours(data []byte) bool {
	for line := range bytes.Lines(data) {
		if string(bytes.TrimRight(line, "\r\n")) == marker {
			return true
		}
	}
	return false
}
