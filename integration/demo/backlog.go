package main

import (
	"context"
	"fmt"

	"github.com/collab-lease/collab-lease/integration"
)

// A backlog for the demo's acme/widgets, so that next, the badges and
// the buttons have something to show: a handful of open issues, some
// labelled, one blocked by another (next skips it until that one is
// closed), beside the pull request the seed opened.

// demoIssue is one issue of the backlog.
type demoIssue struct {
	title  string
	labels []string
}

var demoLabels = map[string]string{"ready": "#0e8a16", "bug": "#ee0701", "docs": "#1d76db", "priority/high": "#b60205"}

var demoBacklog = []demoIssue{
	{"Fix the redirect loop after signing in", []string{"bug", "ready", "priority/high"}},
	{"Document the configuration file", []string{"docs", "ready"}},
	{"Rate-limit the search API", []string{"ready"}},
	{"Cache the rendered README", nil},
	{"Upgrade the database driver", []string{"ready"}},
}

// blockedBy: the last issue of the backlog waits for the third.
const blockedBy = 2

// backlog is what seedBacklog made: the numbers of demoBacklog's issues.
type backlog struct {
	issues  []int64
	blocked int64 // the issue next skips while its dependency is open
}

// seedBacklog creates the labels and the issues of the backlog in r, as
// the admin, and makes the last issue depend on the third.
func seedBacklog(ctx context.Context, g *integration.Gitea, r integration.Repo) (backlog, error) {
	admin := g.Admin()
	ids := map[string]int64{}
	for name, color := range demoLabels {
		var l struct{ ID int64 }
		if err := admin.Do(ctx, "POST", "/repos/"+r.FullName()+"/labels", map[string]any{"name": name, "color": color}, &l); err != nil {
			return backlog{}, fmt.Errorf("label %s: %w", name, err)
		}
		ids[name] = l.ID
	}
	var b backlog
	for _, is := range demoBacklog {
		labels := []int64{}
		for _, l := range is.labels {
			labels = append(labels, ids[l])
		}
		var out struct{ Number int64 }
		if err := admin.Do(ctx, "POST", "/repos/"+r.FullName()+"/issues", map[string]any{"title": is.title, "labels": labels}, &out); err != nil {
			return backlog{}, fmt.Errorf("issue %q: %w", is.title, err)
		}
		b.issues = append(b.issues, out.Number)
	}
	b.blocked = b.issues[len(b.issues)-1]
	if err := admin.Do(ctx, "POST", fmt.Sprintf("/repos/%s/issues/%d/dependencies", r.FullName(), b.blocked),
		map[string]any{"owner": r.Owner, "repo": r.Name, "index": b.issues[blockedBy]}, nil); err != nil {
		return backlog{}, fmt.Errorf("dependency of #%d: %w", b.blocked, err)
	}
	return b, nil
}
