package gitea

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

func TestParseDelivery(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 5, 0, time.UTC)
	for _, tc := range []struct {
		name, event, body string
		want              forge.Event
		ok                bool
		bad               bool
	}{
		{"issue closed", "issues", `{"action":"closed","number":5,"issue":{"number":5,"state":"closed","updated_at":"2026-12-01T10:00:05Z"},"repository":{"id":3}}`,
			forge.Event{Kind: forge.EventClosed, RepoID: 3, Number: 5, Updated: at, Delivery: "d"}, true, false},
		{"issue reopened", "issues", `{"action":"reopened","number":5,"issue":{"updated_at":"2026-12-01T10:00:05Z"},"repository":{"id":3}}`,
			forge.Event{Kind: forge.EventReopened, RepoID: 3, Number: 5, Updated: at, Delivery: "d"}, true, false},
		{"issue deleted", "issues", `{"action":"deleted","number":5,"issue":{"updated_at":"2026-12-01T10:00:05Z"},"repository":{"id":3}}`,
			forge.Event{Kind: forge.EventDeleted, RepoID: 3, Number: 5, Updated: at, Delivery: "d"}, true, false},
		{"pull request merged", "pull_request", `{"action":"closed","number":7,"pull_request":{"merged":true,"state":"closed","updated_at":"2026-12-01T10:00:05Z","head":{"sha":"abc"},"user":{"id":4,"login":"alice"}},"repository":{"id":3,"full_name":"acme/widgets"}}`,
			forge.Event{Kind: forge.EventMerged, RepoID: 3, Number: 7, Updated: at, Delivery: "d",
				Pull: &forge.PullEvent{Repo: "acme/widgets", Head: "abc", Author: forge.User{ID: 4, Login: "alice"}}}, true, false},
		{"pull request closed", "pull_request", `{"action":"closed","number":7,"pull_request":{"merged":false,"updated_at":"2026-12-01T10:00:05Z"},"repository":{"id":3}}`,
			forge.Event{Kind: forge.EventClosed, RepoID: 3, Number: 7, Updated: at, Delivery: "d", Pull: &forge.PullEvent{}}, true, false},
		{"pull request opened", "pull_request", `{"action":"opened","number":7,"pull_request":{"state":"open","title":"Fix it","body":"Fixes #5","updated_at":"2026-12-01T10:00:05Z","head":{"sha":"abc","ref":"fix-it","repo_id":3},"user":{"id":4,"login":"alice"}},"repository":{"id":3,"full_name":"acme/widgets"}}`,
			forge.Event{Kind: forge.EventPullChanged, RepoID: 3, Number: 7, Updated: at, Delivery: "d",
				Pull: &forge.PullEvent{Repo: "acme/widgets", Head: "abc", Branch: "fix-it", Author: forge.User{ID: 4, Login: "alice"}, Title: "Fix it", Body: "Fixes #5", Open: true}}, true, false},
		{"pull request from a fork", "pull_request", `{"action":"opened","number":7,"pull_request":{"state":"open","updated_at":"2026-12-01T10:00:05Z","head":{"sha":"abc","ref":"fix-it","repo_id":9},"user":{"id":4,"login":"alice"}},"repository":{"id":3,"full_name":"acme/widgets"}}`,
			forge.Event{Kind: forge.EventPullChanged, RepoID: 3, Number: 7, Updated: at, Delivery: "d",
				Pull: &forge.PullEvent{Repo: "acme/widgets", Head: "abc", Author: forge.User{ID: 4, Login: "alice"}, Open: true}}, true, false},
		{"pull request without a branch of its own (AGit, or its branch deleted)", "pull_request", `{"action":"opened","number":7,"pull_request":{"state":"open","updated_at":"2026-12-01T10:00:05Z","head":{"sha":"abc","ref":"refs/pull/7/head","repo_id":3},"user":{"id":4,"login":"alice"}},"repository":{"id":3,"full_name":"acme/widgets"}}`,
			forge.Event{Kind: forge.EventPullChanged, RepoID: 3, Number: 7, Updated: at, Delivery: "d",
				Pull: &forge.PullEvent{Repo: "acme/widgets", Head: "abc", Author: forge.User{ID: 4, Login: "alice"}, Open: true}}, true, false},
		{"pull request pushed to", "pull_request", `{"action":"synchronized","number":7,"pull_request":{"state":"open","updated_at":"2026-12-01T10:00:05Z","head":{"sha":"def"},"user":{"id":4,"login":"alice"}},"repository":{"id":3}}`,
			forge.Event{Kind: forge.EventPullChanged, RepoID: 3, Number: 7, Updated: at, Delivery: "d",
				Pull: &forge.PullEvent{Head: "def", Author: forge.User{ID: 4, Login: "alice"}, Open: true}}, true, false},
		{"repository deleted", "repository", `{"action":"deleted","repository":{"id":3}}`,
			forge.Event{Kind: forge.EventRepoDeleted, RepoID: 3, Delivery: "d"}, true, false},
		{"labels changed", "issues", `{"action":"label_updated","number":5,"issue":{"updated_at":"2026-12-01T10:00:05Z","labels":[{"id":1,"name":"bug"}]},"repository":{"id":3,"full_name":"acme/widgets"}}`,
			forge.Event{Kind: forge.EventLabels, RepoID: 3, Repo: "acme/widgets", Number: 5, Updated: at, Delivery: "d", Labels: []string{"bug"}}, true, false},
		{"labels cleared", "issues", `{"action":"label_cleared","number":5,"issue":{"updated_at":"2026-12-01T10:00:05Z","labels":[]},"repository":{"id":3,"full_name":"acme/widgets"}}`,
			forge.Event{Kind: forge.EventLabels, RepoID: 3, Repo: "acme/widgets", Number: 5, Updated: at, Delivery: "d", Labels: []string{}}, true, false},
		{"a pull request's labels changed", "pull_request", `{"action":"label_updated","number":7,"pull_request":{"state":"open","labels":[{"name":"collab-lease/quarantined"}],"updated_at":"2026-12-01T10:00:05Z","head":{"sha":"abc"},"user":{"id":4,"login":"alice"}},"repository":{"id":3,"full_name":"acme/widgets"}}`,
			forge.Event{Kind: forge.EventLabels, RepoID: 3, Repo: "acme/widgets", Number: 7, Updated: at, Delivery: "d", Labels: []string{"collab-lease/quarantined"},
				Pull: &forge.PullEvent{Repo: "acme/widgets", Head: "abc", Author: forge.User{ID: 4, Login: "alice"}, Open: true}}, true, false},
		{"labels without an issue", "issues", `{"action":"label_updated","number":5,"repository":{"id":3}}`, forge.Event{}, false, true},
		{"assigned is ignored", "pull_request", `{"action":"assigned","number":5}`, forge.Event{}, false, false},
		{"opened without a pull request", "pull_request", `{"action":"opened","number":5,"repository":{"id":3}}`, forge.Event{}, false, true},
		{"pushes are ignored", "push", `{}`, forge.Event{}, false, false},
		{"repository created", "repository", `{"action":"created","repository":{"id":3,"full_name":"acme/new"}}`,
			forge.Event{Kind: forge.EventRepoCreated, RepoID: 3, Repo: "acme/new", Delivery: "d"}, true, false},
		{"repository archived is ignored", "repository", `{"action":"archived","repository":{"id":3}}`, forge.Event{}, false, false},
		{"not JSON", "issues", `{`, forge.Event{}, false, true},
		{"no repository", "issues", `{"action":"closed","number":5,"issue":{}}`, forge.Event{}, false, true},
		{"no number", "pull_request", `{"action":"closed","pull_request":{},"repository":{"id":3}}`, forge.Event{}, false, true},
	} {
		got, ok, err := ParseDelivery(tc.event, "d", []byte(tc.body))
		if tc.bad != (err != nil) || (err != nil && !errors.Is(err, lease.ErrInvalid)) || ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v %v %v, want %+v %v bad=%v", tc.name, got, ok, err, tc.want, tc.ok, tc.bad)
		}
	}
}
