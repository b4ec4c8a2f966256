package gitea

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	sdk "code.gitea.io/sdk/gitea"
	"golang.org/x/sync/errgroup"
)

// Titles of issues, for the board: many numbers of one repository at
// once, as the admin sees them (the lease service shows a title only
// beside a claim its viewer may see). Gitea has no request for a list of
// numbers, so the open issues and pull requests are read a page at a
// time when many are wanted, and a few one by one; every title read,
// and every number Gitea does not know, is kept for TitleTTL, so a board
// asks Gitea nothing while its titles are known. A title may lag behind
// an edit by that much. Titles are kept by the repository's ID, not its
// name: a repository renamed, or deleted and made anew under the same
// name, never shows another's titles.

// TitleTTL is how long a title is kept.
const TitleTTL = 5 * time.Minute

// The bounds of one IssueTitles: the pages of open issues it reads (of
// 50, when more numbers are wanted than it asks about one by one), and
// the numbers it asks about one by one, titleAtOnce at a time.
const (
	titlePages  = 4
	titleSingle = 32
	titleAtOnce = 8
)

// IssueTitles returns the titles of these numbers of repository id,
// owner/name, as the admin sees them; a number Gitea does not know, or that is past this
// call's bounds, has none. An outage or a spent budget ends the asking:
// the titles found so far are returned with the error.
func (f *Forge) IssueTitles(ctx context.Context, id int64, owner, name string, numbers []int64) (map[int64]string, error) {
	out := map[int64]string{}
	if !validName(owner) || !validName(name) {
		return out, nil
	}
	key := func(n int64) string { return fmt.Sprintf("%d#%d", id, n) }
	var missing []int64
	for _, n := range numbers {
		t, ok := f.titles.get(key(n))
		switch {
		case ok && t != "":
			out[n] = t
		case !ok && n > 0 && !slices.Contains(missing, n):
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	ctx, cancel := f.within(ctx)
	defer cancel()
	who := f.asAdmin()
	if len(missing) > titleSingle {
		want := map[int64]bool{}
		for _, n := range missing {
			want[n] = true
		}
		for page := 1; page <= titlePages && len(want) > 0; page++ {
			op := fmt.Sprintf("GET /api/v1/repos/%s/%s/issues?page=%d", owner, name, page)
			list, resp, err := f.sdk(ctx, who).ListRepoIssues(owner, name, sdk.ListIssueOption{
				ListOptions: sdk.ListOptions{Page: page, PageSize: 50},
				State:       sdk.StateOpen, Type: sdk.IssueTypeAll,
			})
			if err := sdkErr(op, who, resp, err); err != nil {
				return out, fmt.Errorf("titles of %s/%s: %w", owner, name, err)
			}
			for _, is := range list {
				if is == nil || is.Index <= 0 {
					continue
				}
				f.titles.put(key(is.Index), is.Title)
				if want[is.Index] {
					out[is.Index] = is.Title
					delete(want, is.Index)
				}
			}
			if len(list) < 50 {
				break
			}
		}
		missing = slices.DeleteFunc(missing, func(n int64) bool { return !want[n] })
	}
	missing = missing[:min(len(missing), titleSingle)]
	var mu sync.Mutex
	g := new(errgroup.Group)
	g.SetLimit(titleAtOnce)
	for _, n := range missing {
		g.Go(func() error {
			is, err := f.issue(ctx, who, owner, name, n)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				f.titles.put(key(n), is.Title)
				out[n] = is.Title
			case isMiss(err):
				f.titles.put(key(n), "") // deleted, or moved: no title
			default:
				return err
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return out, fmt.Errorf("titles of %s/%s: %w", owner, name, err)
	}
	return out, nil
}
