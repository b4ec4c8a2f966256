package forge

import (
	"errors"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Merging a pull request through the forge: what the merge
// needs to know of a pull request, what it asks, and how the forge may
// answer besides the sentinels of forge.go.

// PullState is a pull request as one user sees it when merging it.
type PullState struct {
	Number int64
	Closed bool // closed, merged or not
	Merged bool
	// Draft: a work-in-progress pull request, which the forge will not
	// merge.
	Draft bool
	// Mergeable: the forge tested the pull request against its base and
	// may merge it. Gitea says false while it tests, for a conflict, for
	// an error of its test and for a draft; true also when there is
	// nothing to merge (the head is already in the base, or adds nothing).
	Mergeable bool
	HeadSHA   string // the head branch's commit now, not necessarily the one tested
	BaseSHA   string // the base branch's commit now
	Base      string // the base branch
	Head      string // the head branch ("" for one pushed without a branch, AGit)
	// HeadRepoID is the repository of the head branch (a fork's, or the
	// base repository's); 0 when that repository is gone.
	HeadRepoID int64
	MergeSHA   string // the merge commit, once merged
	// Title and Body are what the closing keywords are read from; Author
	// opened it.
	Title, Body string
	Author      User
	// Updated is the forge's last update of the pull request; MergedAt,
	// once merged, when.
	Updated, MergedAt time.Time
}

// MergeOptions are what a merge asks of the forge.
type MergeOptions struct {
	// Style is one of MergeStyles; "" is "merge", the forge's default.
	// Anything else, notably Gitea's "manually-merged" (which marks a pull
	// request merged without pushing anything), is refused before asking.
	Style string
	// HeadSHA, if not "", is the head commit the merge is for: the forge
	// refuses to merge a head that moved since (MergeRefusedError.HeadMoved).
	HeadSHA string
	// DeleteBranch deletes the head branch after the merge; false keeps
	// it, whatever the repository's default.
	DeleteBranch bool
}

// MergeStyles are the merge styles a merge may ask for, as Gitea names
// them: the contract's (merge --style).
func MergeStyles() []string { return contract.MergeStyles() }

// ValidMergeStyle reports whether style is one of MergeStyles.
func ValidMergeStyle(style string) bool { return contract.ValidMergeStyle(style) }

var (
	// ErrMergeNotYet: the forge will not merge the pull request yet. Gitea
	// gives the same answer while it tests the pull request, after a test
	// that found a conflict or failed, and for a head already in its base:
	// the caller tells them apart (PullState.Mergeable, and a conflict
	// test of its own), and waits only for a test.
	ErrMergeNotYet = errors.New("the forge will not merge the pull request yet")
	// ErrBaseMoved: the base branch moved while the forge merged, so the
	// merge was not pushed. Trying again may succeed.
	ErrBaseMoved = errors.New("the base branch moved during the merge")
)

// MergeRefusedError is the forge's refusal to merge a pull request: its
// permissions, branch protection (checks, approvals), a hook, a conflict,
// a head that moved, a closed pull request, an archived repository.
// Trying again will not help unless something changes first.
type MergeRefusedError struct {
	// Reason is the forge's words, on one line (or, where it gave none,
	// the sidecar's words for what it answered).
	Reason string
	// Hook: a pre-receive hook refused the merge's push, and Reason is
	// what it said.
	Hook bool
	// Conflict: the forge found a conflict while merging.
	Conflict bool
	// HeadMoved: the head branch is no longer MergeOptions.HeadSHA.
	HeadMoved bool
	// Failed: the forge failed (Gitea's HTTP 500), which is what it answers
	// for an open dependency and for a fast-forward-only merge of a head
	// that the base has moved away from, and for its own errors; the merge
	// may even have been pushed before it failed. The caller asks for the
	// pull request again before it says anything.
	Failed bool
}

func (e *MergeRefusedError) Error() string { return "merge refused: " + e.Reason }
