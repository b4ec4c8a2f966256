package gitea

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// The payload of Gitea's webhook deliveries that change what may be
// claimed (docs/operating.md, "When issues close: Gitea's webhook";
// verified on Gitea 1.26): events issues, pull_request and repository
// share these fields. Only the fields read are named. A change of an
// issue's labels comes as event issues (pull_request for a pull
// request's) with action label_updated, and the labels after it.
type hookPayload struct {
	Action string `json:"action"`
	Number int64  `json:"number"`
	Issue  *struct {
		Updated time.Time   `json:"updated_at"`
		Labels  []hookLabel `json:"labels"`
	} `json:"issue"`
	PullRequest *struct {
		Labels  []hookLabel `json:"labels"`
		Merged  bool        `json:"merged"`
		Updated time.Time   `json:"updated_at"`
		State   string      `json:"state"`
		Title   string      `json:"title"`
		Body    string      `json:"body"`
		Head    struct {
			SHA    string `json:"sha"`
			Ref    string `json:"ref"`
			RepoID int64  `json:"repo_id"`
		} `json:"head"`
		User struct {
			ID    int64  `json:"id"`
			Login string `json:"login"`
		} `json:"user"`
	} `json:"pull_request"`
	Repository *struct {
		ID       int64  `json:"id"`
		FullName string `json:"full_name"`
	} `json:"repository"`
}

// hookLabel is a label in a payload.
type hookLabel struct {
	Name string `json:"name"`
}

func labelNames(ls []hookLabel) []string {
	names := make([]string, len(ls))
	for i, l := range ls {
		names[i] = l.Name
	}
	return names
}

// hookActions are the actions that matter, per event.
var hookActions = map[string]map[string]forge.EventKind{
	"issues": {"closed": forge.EventClosed, "reopened": forge.EventReopened, "deleted": forge.EventDeleted,
		"label_updated": forge.EventLabels, "label_cleared": forge.EventLabels},
	"pull_request": {"closed": forge.EventClosed, "reopened": forge.EventReopened,
		"opened": forge.EventPullChanged, "edited": forge.EventPullChanged, "synchronized": forge.EventPullChanged,
		"label_updated": forge.EventLabels, "label_cleared": forge.EventLabels},
	"repository": {"deleted": forge.EventRepoDeleted, "created": forge.EventRepoCreated},
}

// ParseDelivery reads one webhook delivery: event is its X-Gitea-Event
// header, delivery its X-Gitea-Delivery, body the raw JSON. It returns the
// event and true, or false for a delivery that changes nothing a lease
// or a quarantine depends on (assignees, pushes, opened issues, …); a
// body that is
// not what Gitea sends for the event is an error.
func ParseDelivery(event, delivery string, body []byte) (forge.Event, bool, error) {
	actions, ok := hookActions[event]
	if !ok {
		return forge.Event{}, false, nil
	}
	var p hookPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return forge.Event{}, false, fmt.Errorf("webhook %s delivery %s: %w: %v", event, delivery, lease.ErrInvalid, err)
	}
	kind, ok := actions[p.Action]
	if !ok {
		return forge.Event{}, false, nil
	}
	e := forge.Event{Kind: kind, Delivery: delivery}
	if p.Repository != nil {
		e.RepoID = p.Repository.ID
		if event == "repository" || kind == forge.EventLabels {
			e.Repo = p.Repository.FullName
		}
	}
	switch {
	case event == "issues" && p.Issue != nil:
		e.Number, e.Updated = p.Number, p.Issue.Updated
		if kind == forge.EventLabels {
			e.Labels = labelNames(p.Issue.Labels)
		}
	case event == "pull_request" && p.PullRequest != nil:
		e.Number, e.Updated = p.Number, p.PullRequest.Updated
		if kind == forge.EventClosed && p.PullRequest.Merged {
			e.Kind = forge.EventMerged
		}
		if kind == forge.EventLabels {
			e.Labels = labelNames(p.PullRequest.Labels)
		}
		pr := p.PullRequest
		e.Pull = &forge.PullEvent{Head: pr.Head.SHA, Author: forge.User{ID: pr.User.ID, Login: pr.User.Login},
			Title: pr.Title, Body: pr.Body, Open: pr.State == "open"}
		if p.Repository != nil {
			e.Pull.Repo = p.Repository.FullName
			// A fork's branch is not the repository's to fence, nor is
			// a ref outside its branches: Gitea gives refs/pull/N/head
			// for a pull request pushed with AGit or whose head branch
			// was deleted, and no branch rule can name that.
			if pr.Head.RepoID == p.Repository.ID && !strings.HasPrefix(pr.Head.Ref, "refs/") {
				e.Pull.Branch = pr.Head.Ref
			}
		}
	case event != "repository":
		e.Number = 0 // no issue or pull request object: malformed
	}
	if e.RepoID <= 0 || (event != "repository" && e.Number <= 0) {
		return forge.Event{}, false, fmt.Errorf("webhook %s delivery %s: %w: no repository, number or %s", event, delivery, lease.ErrInvalid, strings.TrimSuffix(event, "s"))
	}
	return e, true, nil
}
