// Package contract is what the collab-lease server and its clients agree
// on (docs/ssh.md, docs/http.md): the grammar of the `collab-lease` SSH verb, its exit
// codes and error lines, and the JSON shapes of its replies and of the
// HTTP lease API.
//
// It is written once, here, so that the server (ssh/, routes/) and the
// client (cmd/git-collab) cannot drift apart. It imports only the standard
// library, so a client can use it without the server's database driver or
// web framework; it makes no decisions about leases and does no I/O.
package contract
