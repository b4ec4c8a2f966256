package contract

import (
	"slices"
	"time"
)

// merge: a pull request merged through the sidecar by the holder of its
// claim, one merge at a time into each base branch (docs/ssh.md, Merging
// through the sidecar).

// DefaultMergeWait is how long a merge waits for its turn to merge into
// the base branch when --wait is not given.
const DefaultMergeWait = 2 * time.Minute

// MergeTicketMax bounds a merge ticket: the time the sidecar gives itself
// to merge one pull request, whatever the tenure's expiry.
const MergeTicketMax = 5 * time.Minute

// MergeStyles are the styles merge --style takes, as Gitea names them.
func MergeStyles() []string {
	return []string{"merge", "rebase", "rebase-merge", "squash", "fast-forward-only"}
}

// ValidMergeStyle reports whether style is one of MergeStyles.
func ValidMergeStyle(style string) bool { return slices.Contains(MergeStyles(), style) }

// The statuses only merge answers.
const (
	StatusMerged  = "merged"  // exit 0
	StatusRefused = "refused" // the forge would not merge (exit 4)
	StatusBusy    = "busy"    // the turn to merge did not come within --wait (exit 4)
)

// Merged answers a merge that happened (exit 0): the merge commit, and
// the claim it was merged under, its issue (the pull request's own
// number, or an issue it closes) and token.
//
//	{"status":"merged","repo":"acme/widgets","pull":7,"sha":"…","issue":42,"token":8}
type Merged struct {
	Status string `json:"status"` // StatusMerged
	Repo   string `json:"repo"`
	Pull   int64  `json:"pull"`
	SHA    string `json:"sha"`
	Issue  int64  `json:"issue"`
	Token  int64  `json:"token"`
}

// MergeRefused answers a merge the forge refused (exit 4): a conflict,
// checks or approvals that branch protection wants, a closed pull
// request; Reason is the forge's words, on one line.
//
//	{"status":"refused","repo":"acme/widgets","pull":7,"reason":"…"}
type MergeRefused struct {
	Status string `json:"status"` // StatusRefused
	Repo   string `json:"repo"`
	Pull   int64  `json:"pull"`
	Reason string `json:"reason"`
}

// MergeBusy answers a merge whose turn did not come within its --wait
// (exit 4): Ahead merges were before it when the wait ran out, the one
// under way included.
//
//	{"status":"busy","repo":"acme/widgets","pull":7,"ahead":2}
type MergeBusy struct {
	Status string `json:"status"` // StatusBusy
	Repo   string `json:"repo"`
	Pull   int64  `json:"pull"`
	Ahead  int    `json:"ahead"`
}
