package gitea

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/collab-lease/collab-lease/plugin/forge"
)

// Merging a pull request as its holder, verified on Gitea
// 1.26: GET /repos/{o}/{r}/pulls/{n} and POST …/pulls/{n}/merge, both as
// the user through the admin token and Sudo, so that Gitea's own checks
// apply to them (their permission, the merge allowlist, branch
// protection, signing) and the merge is theirs (pusher, merged_by). Sudo
// applies before Gitea looks at the repository: a login Gitea does not
// know is a 404.
//
// The merge never sends force_merge (a repository admin's override of
// branch protection), merge_when_checks_succeed (Gitea would merge later,
// on its own, as the scheduler) or the style manually-merged (Gitea marks
// the pull request merged and pushes nothing). Gitea answers the merge
// (routers/api/v1/repo/pull.go, MergePullRequest) with:
//
//	200, empty                                   merged; merge_commit_sha is set before the answer
//	405 "Please try again later"                 forge.ErrMergeNotYet: testing, conflict, test failed, or nothing to merge
//	405 other words                              refused (not allowed to merge, already merged,
//	                                             draft, checks, approvals, signing, style not allowed)
//	409 "merge push out of date"                 forge.ErrBaseMoved
//	409 "PushRejected with remote message:       forge.ErrBaseMoved: git said "! [remote rejected]"
//	     push is rejected"                       and no hook said anything (a ref lock lost to a push)
//	409 "PushRejected with remote message: <m>"  refused, Hook: a pre-receive hook said m
//	409 "PushRejected without remote error       refused, Hook: a hook refused and said nothing
//	     message"
//	409 "head out of date"                       refused, HeadMoved
//	409 without "message"                        refused, Conflict: a conflict (or unrelated histories)
//	                                             while merging (Gitea sends its merge error's fields,
//	                                             not an API error)
//	404                                          refused: the pull request is closed (or not there
//	                                             for this user: the two are one answer)
//	422, 423                                     refused: a request Gitea would not read; an archived repository
//	500                                          refused, Failed (see below)
//	401, 403                                     forge.ErrConfig: the admin token may not sudo, or lacks write:repository
//	no answer, other 5xx, anything else          forge.ErrUnavailable (classify)
//
// 500 is ambiguous. Gitea answers it for an open dependency (its
// ErrDependenciesLeft is not mapped), for a fast-forward-only merge of a
// head the base moved away from, and for its own failures, some of them
// after the merge was pushed; and under Sudo it blanks the message for
// anyone but a site administrator, so the words do not tell them apart.
// classify takes a 5xx for an outage (retry), but the first two are
// lasting: a merge retried on them would be retried for ever. So a 500 of
// the merge is a refusal marked Failed, which tells the caller to ask for
// the pull request again: merged after all, or refused. Any other 5xx,
// which comes from a proxy in front of Gitea, is an outage.
//
// Gitea tests a pull request again after every merge of it that failed
// (a moved head, a hook's refusal: services/pull/merge.go, Merge), and
// every open pull request into the base after one that succeeded, so a
// merge tried again at once may well be told "try again later" (a test
// Gitea on loopback took some 50 ms to test one again with git 2.47,
// some 250 ms with git 2.39).

// mergeFix tells an operator how to let the sidecar merge.
const mergeFix = "merging needs a site administrator's Gitea token with the write:repository scope, " +
	"besides read:user, read:repository and read:issue: create one (Gitea: Site Administration or " +
	"`gitea admin user generate-access-token`) and set --gitea-token-file"

// pullJSON is the part of Gitea's pull request the merge reads.
type pullJSON struct {
	Number    int64   `json:"number"`
	State     string  `json:"state"`
	Draft     bool    `json:"draft"`
	Mergeable bool    `json:"mergeable"`
	Merged    bool    `json:"merged"`
	MergeSHA  *string `json:"merge_commit_sha"`
	Title     string  `json:"title"`
	Body      string  `json:"body"`
	User      *struct {
		ID    int64  `json:"id"`
		Login string `json:"login"`
	} `json:"user"`
	Updated  *time.Time `json:"updated_at"`
	MergedAt *time.Time `json:"merged_at"`
	Base     *struct {
		Label string `json:"label"`
		SHA   string `json:"sha"`
	} `json:"base"`
	Head *struct {
		Label  string `json:"label"`
		SHA    string `json:"sha"`
		RepoID int64  `json:"repo_id"`
	} `json:"head"`
}

// PullForMerge returns pull request n of owner/name as login sees it, for
// merging it. It is never cached: a merge needs what Gitea says now.
func (f *Forge) PullForMerge(ctx context.Context, login, owner, name string, n int64) (forge.PullState, error) {
	what := fmt.Sprintf("pull request %s/%s!%d", owner, name, n)
	if n <= 0 || !validName(owner) || !validName(name) || !validName(login) {
		return forge.PullState{}, fmt.Errorf("%s: %w", what, forge.ErrNotFound)
	}
	ctx, cancel := f.within(ctx)
	defer cancel()
	path := fmt.Sprintf("/api/v1/repos/%s/%s/pulls/%d", owner, name, n)
	var p pullJSON
	if err := f.send(ctx, f.asViewer(login), http.MethodGet, path, nil, nil, &p); err != nil {
		return forge.PullState{}, fmt.Errorf("%s as %s: %w", what, login, err)
	}
	st, err := pullState(p, n)
	if err != nil {
		return forge.PullState{}, fmt.Errorf("GET %s: %w: malformed response: %v", path, forge.ErrUnavailable, err)
	}
	return st, nil
}

// pullState checks and converts Gitea's pull request n.
func pullState(p pullJSON, n int64) (forge.PullState, error) {
	switch {
	case p.Number != n:
		return forge.PullState{}, fmt.Errorf("number %d", p.Number)
	case p.State != "open" && p.State != "closed":
		return forge.PullState{}, fmt.Errorf("state %q", p.State)
	case p.Base == nil || p.Head == nil || p.Base.Label == "":
		return forge.PullState{}, fmt.Errorf("no base or head")
	}
	st := forge.PullState{
		Number: p.Number, Closed: p.State == "closed", Merged: p.Merged, Draft: p.Draft, Mergeable: p.Mergeable,
		HeadSHA: p.Head.SHA, BaseSHA: p.Base.SHA, Base: p.Base.Label, Head: p.Head.Label,
		HeadRepoID: max(p.Head.RepoID, 0), // Gitea says -1 for a head repository that is gone
	}
	if p.MergeSHA != nil {
		st.MergeSHA = *p.MergeSHA
	}
	st.Title, st.Body = p.Title, p.Body
	if p.User != nil {
		st.Author = forge.User{ID: p.User.ID, Login: p.User.Login}
	}
	if p.Updated != nil {
		st.Updated = p.Updated.UTC()
	}
	if p.MergedAt != nil {
		st.MergedAt = p.MergedAt.UTC()
	}
	for _, sha := range []string{st.HeadSHA, st.BaseSHA, st.MergeSHA} {
		if sha != "" && !validSHA(sha) {
			return forge.PullState{}, fmt.Errorf("commit ID %q", sha)
		}
	}
	if st.Merged && st.MergeSHA == "" {
		return forge.PullState{}, fmt.Errorf("merged without a merge commit")
	}
	return st, nil
}

// MergePull asks Gitea to merge pull request n of owner/name as login
// (see above for what it sends and how each answer maps). It returns nil
// once Gitea merged; PullForMerge then names the merge commit. A merge
// that got no answer (forge.ErrUnavailable) may have happened all the
// same: ask for the pull request before trying again.
func (f *Forge) MergePull(ctx context.Context, login, owner, name string, n int64, o forge.MergeOptions) error {
	what := fmt.Sprintf("merge %s/%s!%d as %s", owner, name, n, login)
	style := o.Style
	if style == "" {
		style = "merge"
	}
	switch {
	case !forge.ValidMergeStyle(style):
		return fmt.Errorf("%s: %w", what, &forge.MergeRefusedError{
			Reason: fmt.Sprintf("the merge style %q is not one the sidecar merges with (%s)", oneLine(style), strings.Join(forge.MergeStyles(), ", ")),
		})
	case o.HeadSHA != "" && !validSHA(o.HeadSHA):
		return fmt.Errorf("%s: %w", what, &forge.MergeRefusedError{Reason: fmt.Sprintf("%q is not a commit ID", oneLine(o.HeadSHA))})
	case n <= 0 || !validName(owner) || !validName(name) || !validName(login):
		return fmt.Errorf("%s: %w", what, forge.ErrNotFound)
	}
	ctx, cancel := context.WithTimeout(ctx, f.mergeTimeout)
	defer cancel()
	body := map[string]any{"do": style, "delete_branch_after_merge": o.DeleteBranch}
	if o.HeadSHA != "" {
		body["head_commit_id"] = o.HeadSHA
	}
	id := f.asViewer(login)
	id.fix, id.merge = mergeFix, true
	path := fmt.Sprintf("/api/v1/repos/%s/%s/pulls/%d/merge", owner, name, n)
	if err := f.send(ctx, id, http.MethodPost, path, nil, body, nil); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// isMergeAnswer reports whether status is one of the merge's own answers
// (mergeAnswer), rather than one classify maps as for any request.
func isMergeAnswer(status int) bool {
	switch status {
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusConflict,
		http.StatusUnprocessableEntity, http.StatusLocked, http.StatusInternalServerError:
		return true
	}
	return false
}

// Gitea's words that mean more than a refusal.
const (
	tryAgainLater   = "Please try again later"
	pushOutOfDate   = "merge push out of date"
	headOutOfDate   = "head out of date"
	pushRejected    = "PushRejected with remote message: "
	pushRejectedAny = "PushRejected"
	// gitRejected is what Gitea makes of a push git refused with
	// "! [remote rejected]" and no "remote:" line: no hook spoke.
	gitRejected = "push is rejected"
)

// mergeAnswer maps one of the merge's own answers (isMergeAnswer) onto the
// forge's merge errors; it is classify's, for the merge's request only.
func mergeAnswer(op string, status int, body []byte) error {
	msg, said := message(body)
	refused := func(e forge.MergeRefusedError) error {
		if e.Reason == "" {
			e.Reason = oneLine(msg)
		}
		if e.Reason == "" {
			e.Reason = fmt.Sprintf("Gitea answered HTTP %d and gave no reason", status)
		}
		return fmt.Errorf("%s: HTTP %d: %w", op, status, &e)
	}
	switch status {
	case http.StatusMethodNotAllowed:
		if msg == tryAgainLater {
			return fmt.Errorf("%s: HTTP %d (%s): %w", op, status, msg, forge.ErrMergeNotYet)
		}
		return refused(forge.MergeRefusedError{})
	case http.StatusConflict:
		switch {
		case !said:
			return refused(forge.MergeRefusedError{Conflict: true, Reason: "Gitea found a conflict while merging the pull request into its base"})
		case msg == pushOutOfDate, msg == pushRejected+gitRejected:
			return fmt.Errorf("%s: HTTP %d (%s): %w", op, status, msg, forge.ErrBaseMoved)
		case msg == headOutOfDate:
			return refused(forge.MergeRefusedError{HeadMoved: true})
		case strings.HasPrefix(msg, pushRejected):
			return refused(forge.MergeRefusedError{Hook: true, Reason: oneLine(strings.TrimPrefix(msg, pushRejected))})
		case strings.HasPrefix(msg, pushRejectedAny):
			return refused(forge.MergeRefusedError{Hook: true})
		}
		return refused(forge.MergeRefusedError{})
	case http.StatusNotFound:
		return refused(forge.MergeRefusedError{Reason: "Gitea answered not found: the pull request is closed, or not there for this user"})
	case http.StatusInternalServerError:
		why := "it gave no reason"
		if m := oneLine(msg); m != "" {
			why = m
		}
		return refused(forge.MergeRefusedError{Failed: true, Reason: "Gitea failed to merge (" + why +
			"): an open dependency, a fast-forward-only merge of a head the base moved away from, or an error of its own"})
	}
	return refused(forge.MergeRefusedError{})
}

// message is the "message" of Gitea's API error body, and whether there
// was one: Gitea answers a conflict while merging with the fields of its
// merge error, which have none.
func message(body []byte) (string, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return strings.TrimSpace(string(body)), len(strings.TrimSpace(string(body))) > 0
	}
	raw, ok := m["message"]
	if !ok {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return string(raw), true
	}
	return s, true
}

// oneLine is s on one line, its runs of white space made one space, at
// most 200 bytes (and whole characters).
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		cut := 200
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
