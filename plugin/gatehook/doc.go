// Package gatehook installs collab-lease's gate in Gitea's repositories,
// for the sidecar: below Gitea's repository root it keeps a directory,
// contract.GateDir, holding the hook program (cmd/collab-gate-hook), its
// configuration and its secret (Prepare, ReadSecret), and in each
// repository one short script, hooks/pre-receive.d/collab-lease, that
// runs the program (InstallRepo, Sweep, Missing, Remove). Gitea's own
// pre-receive hook runs every executable file of pre-receive.d on every
// push, so the script needs no change to Gitea's files.
//
// It must never touch another file of a hooks directory (Gitea's
// pre-receive, pre-receive.d/gitea, an admin's own hooks): it writes one
// name, and removes only a file that carries its marker line. It follows
// no symbolic link where it keeps a file or a directory (ErrSymlink), and
// writes each file by renaming a complete one over its name, so that a
// push running at that moment reads the old bytes or the new ones. The
// root is the admin's, and may be a link; below it, the owners' and
// repositories' directories and hooks/ are Gitea's, and a link there is
// refused too, since the script finds the program by going up from its
// own directory, which inside a link leads elsewhere. pre-receive.d and
// the gate's directory are opened once (os.Root) and written within what
// was opened. Running as root, what it makes takes the owner of the root
// (the gate's directory and its files) or of the hooks directory
// (pre-receive.d and the script): Gitea's account, so that Gitea's hooks
// can read the secret.
//
// It decides nothing about pushes: the program asks the sidecar, whose
// answer is the ledger's.
//
// Its files: the gate's directory and secret (prepare.go); the script and
// its marker (script.go); one repository (repo.go); every repository
// below the root (sweep.go); files written and read without following
// links (fs.go).
package gatehook
