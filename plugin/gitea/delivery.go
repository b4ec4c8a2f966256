package gitea

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/collab-lease/collab-lease/plugin"
)

// The payloads of Gitea's webhook deliveries that change what may be
// claimed (SPEC §8.7: verified on 1.26). Only the fields read are named.
type (
	hookRepo struct {
		ID int64 `json:"id"`
	}
	issuePayload struct {
		Action string `json:"action"`
		Number int64  `json:"number"`
		Issue  *struct {
			Updated time.Time `json:"updated_at"`
		} `json:"issue"`
		Repository *hookRepo `json:"repository"`
	}
	pullPayload struct {
		Action      string `json:"action"`
		Number      int64  `json:"number"`
		PullRequest *struct {
			Merged  bool      `json:"merged"`
			Updated time.Time `json:"updated_at"`
		} `json:"pull_request"`
		Repository *hookRepo `json:"repository"`
	}
	repoPayload struct {
		Action     string    `json:"action"`
		Repository *hookRepo `json:"repository"`
	}
)

// ParseDelivery reads one webhook delivery: event is its X-Gitea-Event
// header, delivery its X-Gitea-Delivery, body the raw JSON. It returns the
// event and true, or false for a delivery that changes nothing a lease
// depends on (labels, assignees, pushes, opened issues, …); a body that is
// not what Gitea sends for the event is an error.
func ParseDelivery(event, delivery string, body []byte) (plugin.ForgeEvent, bool, error) {
	e := plugin.ForgeEvent{Delivery: delivery}
	bad := func(why string) (plugin.ForgeEvent, bool, error) {
		return plugin.ForgeEvent{}, false, fmt.Errorf("webhook %s delivery %s: %s: %w", event, delivery, why, plugin.ErrInvalid)
	}
	switch event {
	case "issues":
		var p issuePayload
		if err := json.Unmarshal(body, &p); err != nil {
			return bad(err.Error())
		}
		switch p.Action {
		case "closed":
			e.Kind = plugin.EventClosed
		case "reopened":
			e.Kind = plugin.EventReopened
		case "deleted":
			e.Kind = plugin.EventDeleted
		default:
			return plugin.ForgeEvent{}, false, nil
		}
		if p.Repository == nil || p.Repository.ID <= 0 || p.Number <= 0 || p.Issue == nil {
			return bad("no repository, number or issue")
		}
		e.RepoID, e.Number, e.Updated = p.Repository.ID, p.Number, p.Issue.Updated
	case "pull_request":
		var p pullPayload
		if err := json.Unmarshal(body, &p); err != nil {
			return bad(err.Error())
		}
		switch p.Action {
		case "closed":
			e.Kind = plugin.EventClosed
		case "reopened":
			e.Kind = plugin.EventReopened
		default:
			return plugin.ForgeEvent{}, false, nil
		}
		if p.Repository == nil || p.Repository.ID <= 0 || p.Number <= 0 || p.PullRequest == nil {
			return bad("no repository, number or pull request")
		}
		if p.Action == "closed" && p.PullRequest.Merged {
			e.Kind = plugin.EventMerged
		}
		e.RepoID, e.Number, e.Updated = p.Repository.ID, p.Number, p.PullRequest.Updated
	case "repository":
		var p repoPayload
		if err := json.Unmarshal(body, &p); err != nil {
			return bad(err.Error())
		}
		if p.Action != "deleted" {
			return plugin.ForgeEvent{}, false, nil
		}
		if p.Repository == nil || p.Repository.ID <= 0 {
			return bad("no repository")
		}
		e.Kind, e.RepoID = plugin.EventRepoDeleted, p.Repository.ID
	default:
		return plugin.ForgeEvent{}, false, nil
	}
	return e, true, nil
}
