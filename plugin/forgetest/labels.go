package forgetest

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/collab-lease/collab-lease/plugin/forge"
)

// The quarantine's calls (lease.Forge): labels on issues, the labels
// made in each repository, and comments, kept for Labels, RepoLabels and
// Comments.

// issueKey is the key of issue n of owner/name in the maps, or
// forge.ErrNotFound if the forge has no such issue.
func (f *Forge) issueKey(owner, name string, n int64) (string, error) {
	key := fmt.Sprintf("%s#%d", strings.ToLower(owner+"/"+name), n)
	if _, ok := f.issues[key]; !ok {
		return "", fmt.Errorf("issue %s/%s#%d: %w", owner, name, n, forge.ErrNotFound)
	}
	return key, nil
}

// onIssue runs fn under the forge's lock with the key of issue n of
// owner/name, once the call named op was let through (enter).
func (f *Forge) onIssue(ctx context.Context, op, owner, name string, n int64, fn func(key string)) error {
	if err := f.enter(ctx, op); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key, err := f.issueKey(owner, name, n)
	if err != nil {
		return err
	}
	fn(key)
	return nil
}

// LabelIssue implements lease.Forge.
func (f *Forge) LabelIssue(ctx context.Context, owner, name string, n int64, l forge.Label) error {
	return f.onIssue(ctx, "LabelIssue", owner, name, n, func(key string) {
		repo := strings.ToLower(owner + "/" + name)
		if !slices.ContainsFunc(f.repoLabels[repo], func(have forge.Label) bool { return have.Name == l.Name }) {
			f.repoLabels[repo] = append(f.repoLabels[repo], l)
		}
		if !slices.Contains(f.labels[key], l.Name) {
			f.labels[key] = append(f.labels[key], l.Name)
		}
	})
}

// UnlabelIssue implements lease.Forge.
func (f *Forge) UnlabelIssue(ctx context.Context, owner, name string, n int64, label string) error {
	return f.onIssue(ctx, "UnlabelIssue", owner, name, n, func(key string) {
		f.labels[key] = slices.DeleteFunc(f.labels[key], func(l string) bool { return l == label })
	})
}

// IssueLabels implements lease.Forge.
func (f *Forge) IssueLabels(ctx context.Context, owner, name string, n int64) ([]string, error) {
	var out []string
	err := f.onIssue(ctx, "IssueLabels", owner, name, n, func(key string) { out = slices.Clone(f.labels[key]) })
	return out, err
}

// CommentOnce implements lease.Forge.
func (f *Forge) CommentOnce(ctx context.Context, owner, name string, n int64, mark, body string) error {
	return f.onIssue(ctx, "CommentOnce", owner, name, n, func(key string) {
		if !slices.ContainsFunc(f.comments[key], func(c string) bool { return strings.Contains(c, mark) }) {
			f.comments[key] = append(f.comments[key], body)
		}
	})
}

// Unlabel takes label off issue n of fullName, as a person would in
// Gitea's page.
func (f *Forge) Unlabel(fullName string, n int64, label string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := fmt.Sprintf("%s#%d", strings.ToLower(fullName), n)
	f.labels[key] = slices.DeleteFunc(f.labels[key], func(l string) bool { return l == label })
}

// Labels returns the labels of issue n of fullName.
func (f *Forge) Labels(fullName string, n int64) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.labels[fmt.Sprintf("%s#%d", strings.ToLower(fullName), n)])
}

// RepoLabels returns the labels LabelIssue made in fullName.
func (f *Forge) RepoLabels(fullName string) []forge.Label {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.repoLabels[strings.ToLower(fullName)])
}

// Comments returns the comments posted on issue n of fullName, oldest
// first.
func (f *Forge) Comments(fullName string, n int64) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.comments[fmt.Sprintf("%s#%d", strings.ToLower(fullName), n)])
}
