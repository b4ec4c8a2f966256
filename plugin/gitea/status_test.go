package gitea

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin"
	"github.com/collab-lease/collab-lease/plugin/clocktest"
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
	forge := newTestForge(t, f.srv.URL, clocktest.New(), time.Second)
	st := plugin.CommitStatus{State: "success", Description: "claimed by alice (#1 token 3)", TargetURL: "http://g/acme/widgets/issues/1", Context: plugin.StatusContext}
	if err := forge.PostStatus(context.Background(), "acme", "widgets", sha, st); err != nil {
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
		if err := forge.PostStatus(context.Background(), bad[0], bad[1], bad[2], st); !errors.Is(err, plugin.ErrNotFound) {
			t.Errorf("%v: %v", bad, err)
		}
	}
	if n := len(f.requests()); n != 1 {
		t.Fatalf("%d requests after malformed ones", n)
	}
}
