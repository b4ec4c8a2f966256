// Package lease is the lease service that both transports call (ssh/ and
// routes/): for a viewer (a forge account, or anonymous), a repository
// and an issue it decides who may do what, asks the forge only what it
// cannot know, makes the one ledger call, filters what the viewer may
// see, and returns the contract's replies (plugin/contract) or its
// refusals (errors.go), which Classify (errclass.go) classifies once for
// both transports.
//
// Where to look:
//
//   - who is asking, and whether a browser's session is still valid:
//     identity.go;
//   - who may do what, as pure functions: access.go; what a viewer may
//     see of a list: visible.go;
//   - what each verb does: leases.go (acquire, renew, release, list,
//     lease; issuecache.go remembers the issues this process saw open),
//     next.go, wait.go (acquire --wait, and the one wait loop
//     next --wait shares), nextwait.go (next --wait), tenures.go (check,
//     history, force-release), handoff.go (handoff), watch.go (one
//     viewer's live stream), board.go (the board: a repository's claims,
//     reservations, waiters and involuntary endings as a viewer may see
//     them, and the board of all the repositories they may read);
//   - agent sessions, whose claims live as long as their connection:
//     sessions.go (a Session and its Keeper), sessionindex.go (the live
//     sessions of this process, by account);
//   - the longest ttl a claim may ask for: ttl.go; the forge it asks:
//     forge.go; the upgrade of a ledger whose holders are logins, not
//     accounts: upgrade.go;
//   - what the forge said happened, and the reconcile of missed
//     deliveries: events.go (refs.go reads which issues a pull request
//     closes);
//   - every ledger write, and its publication on the change bus after
//     COMMIT: committed.go.
//
// It must not write the ledger except through its Ledger (committed.go
// wraps every write), make a network call inside a ledger transaction
// (the reconcile asks the forge while it holds its turn,
// Ledger.Exclusive, which holds none), speak HTTP, or tell anyone of a
// change by hand: the bus (plugin/changes) does. The live feeds
// (plugin/live) and the fence worker (plugin/fence) hear of its changes
// there, and decide nothing.
package lease
