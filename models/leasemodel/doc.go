// Package leasemodel is the sequential model of the lease rules (docs/ssh.md, Rules worth knowing)
// that the linearizability checks run against: the store's check in
// models/ and the end-to-end check over SSH in integration/ record
// concurrent histories and ask porcupine whether one sequential order of
// each history would have been answered identically by this model. It is
// test support only, imported by tests, never by the sidecar; it decides
// nothing about real leases, and it must not touch the ledger's database.
//
// How time enters the model. The lease service decides with a clock in
// whole seconds. Each recorded operation carries the clock as its caller
// read it just before the call and just after the answer, so the `now` the
// service used lies in that window [Lo, Hi] (the clock never goes back).
// The model tries each value of the window and keeps the answers that
// match: an operation whose window straddles an expiry may be judged either
// way, and nothing else may.
//
// Why is "advance the clock" not an operation of its own, with `now` in the
// model's state? Because that model would be wrong about the store, and
// would cry wolf: List reads the clock and only then opens its read
// snapshot, so a write that commits in between, at a later clock value, is
// visible to a List that judges liveness at the earlier one. No single
// instant has that (rows, now) pair, yet nothing a client can rely on is
// broken. So reads are judged at their own `now`. Writes are stricter, and
// the model says so: every write (including one that is refused) reads the
// clock while it holds the ledger's write lock, so in the order of the
// ledger's history the writes' clock values never decrease. The state
// carries the last write's `now` (LastWrite) and a write may not be placed
// at an earlier one; a store that decided with a clock reading taken
// before it held the lock would fail that.
//
// Where a window allows several values of `now`, the model keeps one
// successor state per distinct lease row, the one with the smallest `now`:
// it allows every continuation a later `now` would, so nothing sound is
// lost. The history is partitioned by issue (a list is recorded as one read
// per issue of its repository), which keeps the check fast; the atomicity
// of a list across issues is not what this checks.
//
// Its files: the per-issue model, with the lock-delay as an option
// (model.go); the model of the claim caps, which span issues (caps.go);
// the model of a repository's path reservations with the claims they
// live with, which span issues too (reservations.go); and Check, which
// runs porcupine over a history (check.go).
package leasemodel
