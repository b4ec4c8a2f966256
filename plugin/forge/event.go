package forge

import "time"

// What the forge says happened (its webhooks, or the reconcile's answers),
// as the lease service applies it.

// EventKind is what happened at the forge.
type EventKind string

// The events that change what may be claimed.
const (
	EventClosed      EventKind = "closed"  // an issue or pull request closed unmerged
	EventMerged      EventKind = "merged"  // a pull request merged
	EventDeleted     EventKind = "deleted" // an issue deleted
	EventReopened    EventKind = "reopened"
	EventRepoDeleted EventKind = "repo_deleted"
	// EventRepoCreated: a repository was created (or migrated); it
	// changes no lease, but the gate's hook goes into it at once.
	EventRepoCreated EventKind = "repo_created"
	// EventPullChanged: a pull request opened, edited (title or body) or
	// pushed to; what it is linked to, or its head, may have changed.
	EventPullChanged EventKind = "pull_changed"
	// EventLabels: the labels of an issue or pull request changed; it
	// changes no lease, but removing the quarantine's label lifts it.
	EventLabels EventKind = "labels"
)

// Event is one thing the forge says happened to an issue (or to a
// whole repository).
type Event struct {
	Kind   EventKind
	RepoID int64
	Number int64 // 0 for EventRepoDeleted and EventRepoCreated
	// Repo is the repository's "owner/name", for a repository's events.
	Repo string
	// Updated is the update time the event carries: an event
	// older than what the ledger knows of the issue changes nothing.
	Updated time.Time
	// Delivery identifies the webhook delivery; a delivery seen before
	// has no second effect. "" for none (the reconcile).
	Delivery string
	// Pull is what the forge says of the pull request Number now, for an
	// event about a pull request (nil otherwise).
	Pull *PullEvent
	// Labels are the names of the labels after an EventLabels.
	Labels []string
}

// PullEvent is a pull request as a webhook delivery describes it.
type PullEvent struct {
	Repo string // the repository's "owner/name", for references like owner/name#3
	Head string // the head commit's SHA
	// Branch is the head branch if it is in the same repository ("" for
	// a fork's).
	Branch string
	Author User
	Title  string
	Body   string
	Open   bool
}
