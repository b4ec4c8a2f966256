package gitea

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
	"github.com/collab-lease/collab-lease/plugin/fence"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

func TestPostStatus(t *testing.T) {
	const sha = "0123456789abcdef0123456789abcdef01234567"
	var got map[string]string
	f := newFake(t, map[string]http.HandlerFunc{
		"POST /api/v1/repos/acme/widgets/statuses/" + sha: func(w http.ResponseWriter, r *http.Request) {
			_ = json.NewDecoder(r.Body).Decode(&got)
			w.WriteHeader(http.StatusCreated)
		},
	})
	fg := newTestForge(t, f.srv.URL, clocktest.New(), time.Second)
	st := forge.CommitStatus{State: "success", Description: "claimed by alice (#1 token 3)", TargetURL: "http://g/acme/widgets/issues/1", Context: fence.StatusContext}
	if err := fg.PostStatus(context.Background(), "acme", "widgets", sha, st); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"state": "success", "description": st.Description, "target_url": st.TargetURL, "context": "collab-lease/claim"}
	if len(got) != len(want) {
		t.Fatalf("body %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("body %v, want %v", got, want)
		}
	}
	if r := f.requests(); len(r) != 1 || r[0].Auth != "token "+adminToken || r[0].Sudo != "" {
		t.Fatalf("requests: %+v", r)
	}
	// A malformed commit ID or name asks nothing.
	for _, bad := range [][3]string{{"acme", "widgets", "abc"}, {"acme", "widgets", sha[:39] + "G"}, {"ac/me", "widgets", sha}} {
		if err := fg.PostStatus(context.Background(), bad[0], bad[1], bad[2], st); !errors.Is(err, forge.ErrNotFound) {
			t.Errorf("%v: %v", bad, err)
		}
	}
	if n := len(f.requests()); n != 1 {
		t.Fatalf("%d requests after malformed ones", n)
	}
}

func TestFencedRepos(t *testing.T) {
	page := func(names ...string) http.HandlerFunc {
		var data []map[string]string
		for _, n := range names {
			data = append(data, map[string]string{"full_name": n})
		}
		return jsonBody(map[string]any{"data": data, "ok": true})
	}
	f := newFake(t, map[string]http.HandlerFunc{
		"GET /api/v1/repos/search": page("acme/widgets", "acme/tools", "acme/gone", "acme/plain"),
		"GET /api/v1/repos/acme/widgets/branch_protections": jsonBody([]map[string]any{
			{"rule_name": "main", "enable_status_check": true, "status_check_contexts": []string{"ci/build", "collab-lease/claim"}},
			{"rule_name": "release/*", "enable_status_check": false, "status_check_contexts": []string{"collab-lease/claim"}},
		}),
		"GET /api/v1/repos/acme/tools/branch_protections": jsonBody([]map[string]any{
			{"rule_name": "main", "enable_status_check": true, "status_check_contexts": []string{"collab-lease/*"}},
		}),
		"GET /api/v1/repos/acme/plain/branch_protections": jsonBody([]map[string]any{}),
	})
	fg := newTestForge(t, f.srv.URL, clocktest.New(), time.Second)
	got, truncated, err := fg.FencedRepos(context.Background(), fence.StatusContext)
	if err != nil || truncated || len(got) != 2 || got[0] != "acme/widgets (main)" || got[1] != "acme/tools (main)" {
		t.Fatalf("FencedRepos = %q %v %v", got, truncated, err)
	}
}
