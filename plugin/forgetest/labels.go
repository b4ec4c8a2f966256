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

// LabelIssue implements lease.Forge.
func (f *Forge) LabelIssue(ctx context.Context, owner, name string, n int64, l forge.Label) error {
	if err := f.enter(ctx, "LabelIssue"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key, err := f.issueKey(owner, name, n)
	if err != nil {
		return err
	}
	repo := strings.ToLower(owner + "/" + name)
	if !slices.ContainsFunc(f.repoLabels[repo], func(have forge.Label) bool { return have.Name == l.Name }) {
		f.repoLabels[repo] = append(f.repoLabels[repo], l)
	}
	if !slices.Contains(f.labels[key], l.Name) {
		f.labels[key] = append(f.labels[key], l.Name)
	}
	return nil
}

// UnlabelIssue implements lease.Forge.
func (f *Forge) UnlabelIssue(ctx context.Context, owner, name string, n int64, label string) error {
	if err := f.enter(ctx, "UnlabelIssue"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key, err := f.issueKey(owner, name, n)
	if err != nil {
		return err
	}
	f.labels[key] = slices.DeleteFunc(f.labels[key], func(l string) bool { return l == label })
	return nil
}

// IssueLabels implements lease.Forge.
func (f *Forge) IssueLabels(ctx context.Context, owner, name string, n int64) ([]string, error) {
	if err := f.enter(ctx, "IssueLabels"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key, err := f.issueKey(owner, name, n)
	if err != nil {
		return nil, err
	}
	return slices.Clone(f.labels[key]), nil
}

// CommentOnce implements lease.Forge.
func (f *Forge) CommentOnce(ctx context.Context, owner, name string, n int64, mark, body string) error {
	if err := f.enter(ctx, "CommentOnce"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key, err := f.issueKey(owner, name, n)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(f.comments[key], func(c string) bool { return strings.Contains(c, mark) }) {
		f.comments[key] = append(f.comments[key], body)
	}
	return nil
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
