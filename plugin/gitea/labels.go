package gitea

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	sdk "code.gitea.io/sdk/gitea"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// The quarantine's calls (lease.Forge; plugin/lease, quarantine.go): a
// label on an issue, made in its repository if missing, taken off again,
// and one comment. All are made as the sidecar's admin, whose token needs
// write:issue for them (a 403 is forge.ErrConfig, with the fix).

// labelPages bounds the pages of a repository's labels one call reads.
const labelPages = 20

// labelPageSize is the size of a page of them.
const labelPageSize = 50

// quarantineFix tells an operator how to let the sidecar label and
// comment.
const quarantineFix = "quarantining needs a site administrator's Gitea token with the write:issue scope"

func (f *Forge) asLabeller() identity { return identity{token: f.token, fix: quarantineFix} }

// LabelIssue puts label l on issue n of owner/name, first making it in
// the repository if the repository has no label of that name
// (GET /repos/{o}/{r}/labels, POST /repos/{o}/{r}/labels,
// POST /repos/{o}/{r}/issues/{n}/labels). A label already on the issue
// stays, once.
func (f *Forge) LabelIssue(ctx context.Context, owner, name string, n int64, l forge.Label) error {
	what := fmt.Sprintf("label %q on %s/%s#%d", l.Name, owner, name, n)
	if n <= 0 || !validName(owner) || !validName(name) || l.Name == "" {
		return fmt.Errorf("%s: %w", what, forge.ErrNotFound)
	}
	ctx, cancel := f.within(ctx)
	defer cancel()
	id := f.asLabeller()
	c := f.sdk(ctx, id)
	lid, err := f.repoLabel(c, id, owner, name, l.Name)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if lid == 0 {
		made, resp, err := c.CreateLabel(owner, name, sdk.CreateLabelOption{Name: l.Name, Color: l.Color, Description: l.Description})
		if resp != nil && resp.StatusCode == http.StatusUnprocessableEntity {
			// Made meanwhile (another sidecar's turn before ours, or a
			// person): use theirs.
			lid, err = f.repoLabel(c, id, owner, name, l.Name)
			if err == nil && lid == 0 {
				err = fmt.Errorf("%w: the label was refused and is not there", forge.ErrUnavailable)
			}
		} else if err = sdkErr(fmt.Sprintf("POST /api/v1/repos/%s/%s/labels", owner, name), id, resp, err); err == nil {
			lid = made.ID
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	_, resp, err := c.AddIssueLabels(owner, name, n, sdk.IssueLabelsOption{Labels: []int64{lid}})
	if err := sdkErr(fmt.Sprintf("POST /api/v1/repos/%s/%s/issues/%d/labels", owner, name, n), id, resp, err); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// repoLabel is the ID of the repository's label named label, 0 for none.
func (f *Forge) repoLabel(c *sdk.Client, id identity, owner, name, label string) (int64, error) {
	for page := 1; page <= labelPages; page++ {
		ls, resp, err := c.ListRepoLabels(owner, name, sdk.ListLabelsOptions{ListOptions: sdk.ListOptions{Page: page, PageSize: labelPageSize}})
		if err := sdkErr(fmt.Sprintf("GET /api/v1/repos/%s/%s/labels", owner, name), id, resp, err); err != nil {
			return 0, err
		}
		for _, l := range ls {
			if l != nil && l.Name == label {
				return l.ID, nil
			}
		}
		if len(ls) < labelPageSize {
			break
		}
	}
	return 0, nil
}

// issueLabels are the labels of issue n of owner/name
// (GET /repos/{o}/{r}/issues/{n}/labels).
func (f *Forge) issueLabels(c *sdk.Client, id identity, owner, name string, n int64) ([]*sdk.Label, error) {
	ls, resp, err := c.GetIssueLabels(owner, name, n, sdk.ListLabelsOptions{})
	if err := sdkErr(fmt.Sprintf("GET /api/v1/repos/%s/%s/issues/%d/labels", owner, name, n), id, resp, err); err != nil {
		return nil, err
	}
	return ls, nil
}

// UnlabelIssue takes the label named label off issue n of owner/name
// (DELETE /repos/{o}/{r}/issues/{n}/labels/{id}); one not on it is no
// error.
func (f *Forge) UnlabelIssue(ctx context.Context, owner, name string, n int64, label string) error {
	what := fmt.Sprintf("label %q off %s/%s#%d", label, owner, name, n)
	if n <= 0 || !validName(owner) || !validName(name) {
		return fmt.Errorf("%s: %w", what, forge.ErrNotFound)
	}
	ctx, cancel := f.within(ctx)
	defer cancel()
	id := f.asLabeller()
	c := f.sdk(ctx, id)
	ls, err := f.issueLabels(c, id, owner, name, n)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	for _, l := range ls {
		if l == nil || l.Name != label {
			continue
		}
		resp, err := c.DeleteIssueLabel(owner, name, n, l.ID)
		if err := sdkErr(fmt.Sprintf("DELETE /api/v1/repos/%s/%s/issues/%d/labels/%d", owner, name, n, l.ID), id, resp, err); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// IssueLabels returns the names of the labels of issue n of owner/name.
func (f *Forge) IssueLabels(ctx context.Context, owner, name string, n int64) ([]string, error) {
	what := fmt.Sprintf("labels of %s/%s#%d", owner, name, n)
	if n <= 0 || !validName(owner) || !validName(name) {
		return nil, fmt.Errorf("%s: %w", what, forge.ErrNotFound)
	}
	ctx, cancel := f.within(ctx)
	defer cancel()
	id := f.asAdmin()
	ls, err := f.issueLabels(f.sdk(ctx, id), id, owner, name, n)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	names := make([]string, 0, len(ls))
	for _, l := range ls {
		if l != nil {
			names = append(names, l.Name)
		}
	}
	return names, nil
}

// CommentOnce posts body on issue n of owner/name
// (POST /repos/{o}/{r}/issues/{n}/comments) unless one of its comments
// holds mark already (GET of the same).
func (f *Forge) CommentOnce(ctx context.Context, owner, name string, n int64, mark, body string) error {
	what := fmt.Sprintf("comment on %s/%s#%d", owner, name, n)
	if n <= 0 || !validName(owner) || !validName(name) || mark == "" || !strings.Contains(body, mark) {
		return fmt.Errorf("%s: %w", what, forge.ErrNotFound)
	}
	ctx, cancel := f.within(ctx)
	defer cancel()
	id := f.asLabeller()
	c := f.sdk(ctx, id)
	// Gitea lists an issue's comments all at once (no pages).
	cs, resp, err := c.ListIssueComments(owner, name, n, sdk.ListIssueCommentOptions{})
	if err := sdkErr(fmt.Sprintf("GET /api/v1/repos/%s/%s/issues/%d/comments", owner, name, n), id, resp, err); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	for _, cm := range cs {
		if cm != nil && strings.Contains(cm.Body, mark) {
			return nil
		}
	}
	_, resp, err = c.CreateIssueComment(owner, name, n, sdk.CreateIssueCommentOption{Body: body})
	if err := sdkErr(fmt.Sprintf("POST /api/v1/repos/%s/%s/issues/%d/comments", owner, name, n), id, resp, err); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
