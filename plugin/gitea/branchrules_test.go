package gitea

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

func TestBranchRuleRequests(t *testing.T) {
	listed := []map[string]any{
		{"rule_name": "feat/*", "branch_name": "feat/*", "priority": 3, "created_at": "2026-12-01T10:00:00Z", "updated_at": "2026-12-01T10:00:00Z",
			"enable_push": true, "enable_push_whitelist": true, "push_whitelist_usernames": []string{"bob"}, "push_whitelist_teams": []string{"devs"},
			"push_whitelist_deploy_keys": true, "enable_force_push": false, "enable_status_check": true,
			"status_check_contexts": []string{"ci"}, "required_approvals": 2, "protected_file_patterns": "*.lock"},
	}
	var created, edited map[string]any
	answer := map[string]any{"rule_name": "feat/x", "priority": 2, "created_at": "2026-12-01T11:00:00Z", "enable_push": true}
	f := newFake(t, map[string]http.HandlerFunc{
		"GET /api/v1/repos/acme/widgets/branch_protections": jsonBody(listed),
		"POST /api/v1/repos/acme/widgets/branch_protections": func(w http.ResponseWriter, r *http.Request) {
			_ = json.NewDecoder(r.Body).Decode(&created)
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(answer)
		},
		"PATCH /api/v1/repos/acme/widgets/branch_protections/feat/x": func(w http.ResponseWriter, r *http.Request) {
			_ = json.NewDecoder(r.Body).Decode(&edited)
			_ = json.NewEncoder(w).Encode(answer)
		},
		"DELETE /api/v1/repos/acme/widgets/branch_protections/feat/x": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNoContent)
		},
		"GET /api/v1/orgs/acme/teams/search": jsonBody(map[string]any{"ok": true, "data": []map[string]any{{"id": 4, "name": "Devs"}}}),
		"GET /api/v1/teams/4/members/alice":  jsonBody(map[string]any{"id": 1, "login": "alice"}),
	})
	fg := newTestForge(t, f.srv.URL, clocktest.New(), time.Second)
	ctx := context.Background()

	rules, err := fg.BranchRules(ctx, "acme", "widgets", "feat/x")
	if err != nil {
		t.Fatal(err)
	}
	m := rules.Match
	wantSettings := map[string]any{"enable_status_check": true, "status_check_contexts": []any{"ci"}, "required_approvals": float64(2), "protected_file_patterns": "*.lock"}
	if rules.Exact != nil || m == nil || m.Name != "feat/*" || m.Priority != 3 || !m.Push.Listed || m.Push.Users[0] != "bob" || m.Push.Teams[0] != "devs" ||
		!m.Push.DeployKeys || m.ForcePush.Enabled || !reflect.DeepEqual(m.Settings, wantSettings) || m.Created.Unix() != 1796119200 {
		t.Fatalf("rules: %+v, match %+v", rules, m)
	}

	r := forge.BranchRule{Name: "feat/x", Priority: 2, Settings: m.Settings,
		Push: forge.Allow{Enabled: true, Listed: true, Users: []string{"alice"}}, ForcePush: forge.Allow{}}
	got, err := fg.CreateBranchRule(ctx, "acme", "widgets", r)
	if err != nil || got.Name != "feat/x" || got.Created.Unix() != 1796122800 {
		t.Fatalf("create: %+v %v", got, err)
	}
	wantBody := map[string]any{"rule_name": "feat/x", "priority": float64(2), "enable_push": true, "enable_push_whitelist": true,
		"push_whitelist_usernames": []any{"alice"}, "push_whitelist_teams": []any{}, "push_whitelist_deploy_keys": false,
		"enable_force_push": false, "enable_force_push_allowlist": false, "force_push_allowlist_usernames": []any{},
		"force_push_allowlist_teams": []any{}, "force_push_allowlist_deploy_keys": false,
		"enable_status_check": true, "status_check_contexts": []any{"ci"}, "required_approvals": float64(2), "protected_file_patterns": "*.lock"}
	if !reflect.DeepEqual(created, wantBody) {
		t.Fatalf("created with\n%v\nwant\n%v", created, wantBody)
	}
	if _, err := fg.EditBranchRule(ctx, "acme", "widgets", r); err != nil || !reflect.DeepEqual(edited, wantBody) {
		t.Fatalf("edit: %v, body %v", err, edited)
	}
	if err := fg.DeleteBranchRule(ctx, "acme", "widgets", "feat/x"); err != nil {
		t.Fatal(err)
	}
	// A rule already gone is no error.
	if err := fg.DeleteBranchRule(ctx, "acme", "widgets", "gone"); err != nil {
		t.Fatal(err)
	}
	if in, err := fg.TeamMember(ctx, "acme", "devs", "alice"); err != nil || !in {
		t.Fatalf("alice in devs: %v %v", in, err)
	}
	if in, err := fg.TeamMember(ctx, "acme", "devs", "bob"); err != nil || in {
		t.Fatalf("bob in devs: %v %v", in, err)
	}
	for _, req := range f.requests() {
		if req.Auth != "token "+adminToken || req.Sudo != "" {
			t.Fatalf("request %+v not as the admin", req)
		}
	}
	// Malformed names ask nothing.
	n := len(f.requests())
	if _, err := fg.BranchRules(ctx, "ac/me", "widgets", "x"); !errors.Is(err, forge.ErrNotFound) {
		t.Fatalf("a malformed owner: %v", err)
	}
	if _, err := fg.CreateBranchRule(ctx, "acme", "widgets", forge.BranchRule{}); !errors.Is(err, forge.ErrNotFound) {
		t.Fatalf("a rule without a name: %v", err)
	}
	if len(f.requests()) != n {
		t.Fatal("malformed names were sent")
	}
}

// A token that may not manage branch protection is the operator's to fix;
// a rule of the same name made meanwhile (another replica's) is not.
func TestBranchRulesRefusedIsAConfigurationError(t *testing.T) {
	refusal := `{"message":"token does not have at least one of required scope(s): [write:repository]"}`
	f := newFake(t, map[string]http.HandlerFunc{
		"POST /api/v1/repos/acme/widgets/branch_protections": func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, refusal, http.StatusForbidden)
		},
	})
	fg := newTestForge(t, f.srv.URL, clocktest.New(), time.Second)
	_, err := fg.CreateBranchRule(context.Background(), "acme", "widgets", forge.BranchRule{Name: "x"})
	if !errors.Is(err, forge.ErrConfig) {
		t.Fatalf("create refused: %v, want a configuration error", err)
	}
	refusal = `{"message":"Branch protection already exist"}`
	_, err = fg.CreateBranchRule(context.Background(), "acme", "widgets", forge.BranchRule{Name: "x"})
	if !errors.Is(err, forge.ErrExists) || errors.Is(err, forge.ErrConfig) {
		t.Fatalf("create of a rule made meanwhile: %v, want ErrExists", err)
	}
}
