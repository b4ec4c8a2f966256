package gitea

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	sdk "code.gitea.io/sdk/gitea"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// What `next` asks of Gitea (docs/ssh.md, "The agent verbs"): the oldest
// open issues (or pull requests) of a repository that carry some labels,
// and whether an issue is blocked by an open dependency. Facts of Gitea
// 1.26 this relies on, checked against the real Gitea by
// next_integration_test.go:
//
//   - GET /repos/{o}/{r}/issues?state=open&type=issues|pulls lists newest
//     first (by creation time, then ID: number order for everything created
//     in this Gitea) and cannot be asked for the reverse; a page holds at
//     most 50 ([api] MAX_RESPONSE_ITEMS), page p of size s starts at offset
//     (p−1)·s, and X-Total-Count says how many there are. type=pulls lists
//     exactly the open pull requests, type=issues exactly the issues.
//   - Its labels= filter is no pre-filter to trust. Several names are ANDed
//     (its documentation says "any"), but a name is looked up among the
//     repository's own labels only: an issue carrying an organization label
//     of that name is left out, so is one carrying one of two repository
//     labels with the same name, and a name no repository label has is
//     dropped from the filter (alone, it filters nothing). So labels are
//     matched here, on the labels each listed issue carries, by exact name.
//   - GET /repos/{o}/{r}/issues/{n}/dependencies lists the issues and pull
//     requests that block n (of any repository), each with its state. It is
//     always paginated (30 a page unless asked, at most 50) with
//     X-Total-Count, and answers 404 both for an issue that does not exist
//     and for a repository whose dependencies are switched off.

// pageSize is the most issues Gitea lists in one page (the default of
// [api] MAX_RESPONSE_ITEMS); a Gitea configured lower is noticed.
const pageSize = 50

// maxOpenPages bounds the pages one OpenIssues reads (5,000 issues): a
// label filter that matches almost nothing in a huge repository fails
// loudly rather than reading on until the deadline.
const maxOpenPages = 100

// maxRescans bounds how often OpenIssues starts over because the list
// changed under it.
const maxRescans = 3

// maxDependencyPages bounds the pages of dependencies Blocked reads.
const maxDependencyPages = 10

// OpenIssues returns the oldest open issues (flt.Pulls: pull requests) of
// owner/name that carry every label of flt, oldest first, at most limit,
// as the admin sees them, and how many requests it made.
//
// The list comes newest first, so it is read from its last page
// backwards. The first request (page 1 of 50) tells how many there are
// and is all of them when there are at most 50; otherwise each next
// request takes the page size whose page ends just at the oldest issue
// not yet read and holds as many of the still missing ones as possible
// (oldest 30 of 120: page 3 of 45, not pages 3 and 2 of 50).
//
// Reading backwards, an issue created between two requests shifts every
// page by one, and the issue at the edge would be missed; one closed
// shifts them back, and one would be read twice. Every answer carries the
// count: when it differs from the count the reading started with, the
// reading starts over (at most maxRescans times, then ErrUnavailable).
// Duplicates are dropped by number all the same. (A creation and a
// close between the same two requests leave the count as it was; that
// can still miss one issue.)
//
// A repository that does not exist is forge.ErrNotFound, and so is one
// whose issues (or pull requests) Gitea will not list, e.g. with the
// Issues unit switched off: Gitea answers both with 404.
func (f *Forge) OpenIssues(ctx context.Context, owner, name string, flt forge.IssueFilter, limit int) ([]forge.Issue, int, error) {
	s := &openScan{f: f, owner: owner, name: name, pulls: flt.Pulls, labels: flt.Labels, limit: limit, size: pageSize}
	what := fmt.Sprintf("open %s of %s/%s", s.kind(), owner, name)
	if !validName(owner) || !validName(name) {
		return nil, 0, fmt.Errorf("%s: %w", what, forge.ErrNotFound)
	}
	if limit <= 0 {
		return nil, 0, nil
	}
	ctx, cancel := f.within(ctx)
	defer cancel()
	s.ctx = ctx
	issues, err := s.run()
	if err != nil {
		return nil, s.requests, fmt.Errorf("%s: %w", what, err)
	}
	return issues, s.requests, nil
}

// openScan is one OpenIssues call.
type openScan struct {
	f           *Forge
	ctx         context.Context
	owner, name string
	pulls       bool
	labels      []string
	limit       int
	size        int // the largest page Gitea serves (pageSize unless it serves less)
	requests    int
}

// errShifted: the list changed while it was read.
var errShifted = errors.New("the list changed while it was read")

func (s *openScan) run() ([]forge.Issue, error) {
	first, total, err := s.page(1, pageSize)
	if err != nil {
		return nil, err
	}
	if len(first) > 0 && len(first) < min(total, pageSize) {
		// A short first page of a longer list: Gitea serves fewer a
		// page (or the list shrank meanwhile, which the scan notices).
		s.size = len(first)
	}
	for rescan := 0; ; rescan++ {
		out, now, err := s.scan(first, total)
		if !errors.Is(err, errShifted) {
			return out, err
		}
		if rescan == maxRescans {
			return nil, fmt.Errorf("%w: %d open %s, then %d: the list kept changing while it was read", forge.ErrUnavailable, total, s.kind(), now)
		}
		first, total = nil, now
	}
}

func (s *openScan) kind() string {
	if s.pulls {
		return "pull requests"
	}
	return "issues"
}

// scan reads the list of total issues from its oldest end until it has
// limit matching ones. first is page 1 (of pageSize) if it was read while
// the list had total issues. On errShifted it returns the count now.
func (s *openScan) scan(first []*sdk.Issue, total int) ([]forge.Issue, int, error) {
	var out []forge.Issue
	seen := map[int64]bool{}
	// o is the offset (from the newest, 0) of the newest issue not read
	// yet: everything older has been read.
	for o := total - 1; o >= 0 && len(out) < s.limit; {
		list, start := first, 0
		if o >= len(first) {
			want := s.limit - len(out)
			if len(s.labels) > 0 {
				want = s.size // how many it takes to find the rest is unknown
			}
			page, size := window(o, want, s.size)
			var now int
			var err error
			list, now, err = s.page(page, size)
			if err != nil {
				return nil, 0, err
			}
			start = (page - 1) * size
			if now != total || o-start >= len(list) {
				return nil, now, errShifted
			}
		}
		for i := o - start; i >= 0 && len(out) < s.limit; i-- {
			is := list[i]
			if is == nil || is.Index <= 0 {
				return nil, 0, fmt.Errorf("%w: malformed response: an issue without a number", forge.ErrUnavailable)
			}
			if seen[is.Index] {
				continue
			}
			seen[is.Index] = true
			if s.matches(is) {
				out = append(out, forge.Issue{Number: is.Index, IsPull: is.PullRequest != nil, Updated: is.Updated})
			}
		}
		o = start - 1
	}
	return out, total, nil
}

// window picks the page and page size (at most most) whose page holds
// the offsets o−want+1 … o, the largest size that does; if none does, the
// page of size most that holds o. Gitea's page p of size s holds the
// offsets (p−1)·s … p·s−1.
func window(o, want, most int) (page, size int) {
	for size = most; size >= want && size > 0; size-- {
		if o%size+1 >= want {
			return o/size + 1, size
		}
	}
	return o/most + 1, most
}

// matches tells whether a listed issue is what was asked for. Gitea
// filters state and kind itself; this only guards against an answer that
// did not, and does the label filter (see above).
func (s *openScan) matches(is *sdk.Issue) bool {
	if is.State != sdk.StateOpen || (is.PullRequest != nil) != s.pulls {
		return false
	}
	for _, want := range s.labels {
		if !slices.ContainsFunc(is.Labels, func(l *sdk.Label) bool { return l != nil && l.Name == want }) {
			return false
		}
	}
	return true
}

// page is one request for the list: page (1-based) of size, as the admin.
// total is how many open issues Gitea counts now.
func (s *openScan) page(page, size int) (list []*sdk.Issue, total int, err error) {
	op := fmt.Sprintf("GET /api/v1/repos/%s/%s/issues?page=%d&limit=%d", s.owner, s.name, page, size)
	if s.requests == maxOpenPages {
		return nil, 0, fmt.Errorf("%s: %w: read %d pages and found fewer than %d", op, forge.ErrUnavailable, maxOpenPages, s.limit)
	}
	s.requests++
	typ := sdk.IssueTypeIssue
	if s.pulls {
		typ = sdk.IssueTypePull
	}
	id := s.f.asAdmin()
	list, resp, err := s.f.sdk(s.ctx, id).ListRepoIssues(s.owner, s.name, sdk.ListIssueOption{
		ListOptions: sdk.ListOptions{Page: page, PageSize: size},
		State:       sdk.StateOpen, Type: typ,
	})
	if err := sdkErr(op, id, resp, err); err != nil {
		return nil, 0, err
	}
	total, err = totalCount(resp)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", op, err)
	}
	// The count and the page are two queries in Gitea: the list has at
	// least what the page shows.
	return list, max(total, (page-1)*size+len(list)), nil
}

// totalCount is an answer's X-Total-Count.
func totalCount(resp *sdk.Response) (int, error) {
	h := resp.Header.Get("X-Total-Count")
	n, err := strconv.Atoi(h)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: malformed response: X-Total-Count %q", forge.ErrUnavailable, h)
	}
	return n, nil
}

// Blocked reports whether issue n of owner/name depends on an issue or
// pull request that is still open, as the admin sees it. It reads the
// dependencies page by page, up to maxDependencyPages: an open one on any
// page blocks. Beyond that bound, all closed so far, it says blocked:
// next must never hand out an issue Gitea may hold blocked (acquire still
// takes it). A repository with dependencies switched off blocks nothing.
func (f *Forge) Blocked(ctx context.Context, owner, name string, n int64) (bool, error) {
	what := fmt.Sprintf("dependencies of %s/%s#%d", owner, name, n)
	if n <= 0 || !validName(owner) || !validName(name) {
		return false, fmt.Errorf("%s: %w", what, forge.ErrNotFound)
	}
	ctx, cancel := f.within(ctx)
	defer cancel()
	id := f.asAdmin()
	c := f.sdk(ctx, id)
	read := 0
	for page := 1; page <= maxDependencyPages; page++ {
		list, resp, err := c.ListIssueDependencies(owner, name, n, sdk.ListIssueDependenciesOptions{
			ListOptions: sdk.ListOptions{Page: page, PageSize: pageSize},
		})
		op := fmt.Sprintf("GET /api/v1/repos/%s/%s/issues/%d/dependencies?page=%d", owner, name, n, page)
		err = sdkErr(op, id, resp, err)
		if page == 1 && errors.Is(err, forge.ErrNotFound) {
			// No such issue, or dependencies switched off: the issue
			// itself tells which.
			if _, err := f.issue(ctx, id, owner, name, n); err != nil {
				return false, fmt.Errorf("%s: %w", what, err)
			}
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		for _, b := range list {
			switch {
			case b == nil || (b.State != sdk.StateOpen && b.State != sdk.StateClosed):
				return false, fmt.Errorf("%s: %s: %w: malformed response: a dependency without a state", what, op, forge.ErrUnavailable)
			case b.State == sdk.StateOpen:
				return true, nil
			}
		}
		read += len(list)
		// Gitea may serve fewer than asked a page: the count tells
		// when all were read.
		total, err := totalCount(resp)
		if len(list) == 0 || (err == nil && read >= total) || (err != nil && len(list) < pageSize) {
			return false, nil
		}
	}
	return true, nil
}
