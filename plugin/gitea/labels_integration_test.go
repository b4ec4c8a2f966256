package gitea

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/collab-lease/collab-lease/integration"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// The quarantine's calls against a real Gitea 1.26: the label is made in
// the repository once and put on the issue once, however often asked;
// the comment is posted once per mark; the label comes off again; and a
// token without write:issue is told how to mend it.
func TestQuarantineLabelsAgainstGitea(t *testing.T) {
	g := integration.NewGitea(t)
	w := integration.SeedWorld(t, g)
	ctx := context.Background()
	token := func(name string, scopes ...string) *Forge {
		t.Helper()
		var tok struct {
			SHA1 string `json:"sha1"`
		}
		basic := &integration.API{URL: g.URL, User: w.Admin.Login, Password: w.Admin.Password}
		if err := basic.Do(ctx, "POST", "/users/"+w.Admin.Login+"/tokens", map[string]any{"name": name, "scopes": scopes}, &tok); err != nil {
			t.Fatal(err)
		}
		f, err := New(Options{URL: g.URL, Token: tok.SHA1})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := token("quarantine", "read:user", "read:repository", "write:issue")
	o, r, n := w.Widgets.Owner, w.Widgets.Name, w.OpenIssue
	l := forge.Label{Name: "collab-lease/quarantined", Color: "#b60205", Description: "quarantined"}
	for range 2 {
		if err := f.LabelIssue(ctx, o, r, n, l); err != nil {
			t.Fatal(err)
		}
	}
	names, err := f.IssueLabels(ctx, o, r, n)
	if err != nil || !slices.Equal(names, []string{l.Name}) {
		t.Fatalf("labels of the issue: %v %v", names, err)
	}
	var repoLabels []struct{ Name string }
	if err := g.Admin().Do(ctx, "GET", "/repos/"+w.Widgets.FullName()+"/labels", nil, &repoLabels); err != nil || len(repoLabels) != 1 {
		t.Fatalf("labels of the repository: %+v %v, want the one made", repoLabels, err)
	}
	for _, body := range []string{"first <!-- mark 1 -->", "again <!-- mark 1 -->"} {
		if err := f.CommentOnce(ctx, o, r, n, "<!-- mark 1 -->", body); err != nil {
			t.Fatal(err)
		}
	}
	var cs []struct{ Body string }
	if err := g.Admin().Do(ctx, "GET", fmt.Sprintf("/repos/%s/issues/%d/comments", w.Widgets.FullName(), n), nil, &cs); err != nil {
		t.Fatal(err)
	}
	marked := 0
	for _, c := range cs {
		if strings.Contains(c.Body, "<!-- mark 1 -->") {
			marked++
		}
	}
	if marked != 1 {
		t.Fatalf("%d comments with the mark, want 1: %+v", marked, cs)
	}
	for range 2 {
		if err := f.UnlabelIssue(ctx, o, r, n, l.Name); err != nil {
			t.Fatal(err)
		}
	}
	if names, err := f.IssueLabels(ctx, o, r, n); err != nil || len(names) != 0 {
		t.Fatalf("labels after unlabelling: %v %v", names, err)
	}
	if err := f.LabelIssue(ctx, o, r, 99999, l); !errors.Is(err, forge.ErrNotFound) {
		t.Fatalf("label on an issue that does not exist: %v, want not found", err)
	}
	ro := token("read-only", "read:user", "read:repository", "read:issue")
	if err := ro.LabelIssue(ctx, o, r, n, l); !errors.Is(err, forge.ErrConfig) || !strings.Contains(err.Error(), "write:issue") {
		t.Fatalf("label with a read-only token: %v, want a configuration error naming write:issue", err)
	}
}
