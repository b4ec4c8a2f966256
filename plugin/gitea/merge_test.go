package gitea

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// Tests of PullForMerge and MergePull against an httptest fake of Gitea:
// the requests they send, and every answer of Gitea's merge mapped (see
// merge.go). merge_integration_test.go has them against the real Gitea.

const (
	headSHA  = "1111111111111111111111111111111111111111"
	baseSHA  = "2222222222222222222222222222222222222222"
	mergeSHA = "3333333333333333333333333333333333333333"
)

// mergeBodies records the JSON bodies of the merges a fake was sent.
type mergeBodies struct {
	mu     sync.Mutex
	bodies []map[string]any
}

func (m *mergeBodies) answer(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var got map[string]any
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &got); err != nil || r.Header.Get("Content-Type") != "application/json" {
			got = map[string]any{"undecodable": string(b)}
		}
		m.mu.Lock()
		m.bodies = append(m.bodies, got)
		m.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}

func (m *mergeBodies) all() []map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]map[string]any(nil), m.bodies...)
}

const mergePath = "/api/v1/repos/acme/widgets/pulls/7/merge"

func TestMergeAnswersMapped(t *testing.T) {
	refused := func(e forge.MergeRefusedError) *forge.MergeRefusedError { return &e }
	tests := []struct {
		name     string
		status   int
		body     string
		sentinel error                    // the error should be this sentinel
		refused  *forge.MergeRefusedError // or this refusal (Reason: a part of it)
	}{
		{"merged", 200, "", nil, nil},
		{"testing, or a conflict Gitea found", 405, `{"message":"Please try again later","url":"http://gitea/api/swagger"}`, forge.ErrMergeNotYet, nil},
		{"not allowed to merge", 405, `{"message":"User not allowed to merge PR","url":"u"}`, nil, refused(forge.MergeRefusedError{Reason: "User not allowed to merge PR"})},
		{"already merged", 405, `{"message":"The PR is already merged","url":"u"}`, nil, refused(forge.MergeRefusedError{Reason: "The PR is already merged"})},
		{"draft", 405, `{"message":"Work in progress PRs cannot be merged","url":"u"}`, nil, refused(forge.MergeRefusedError{Reason: "Work in progress PRs cannot be merged"})},
		{"checks", 405, `{"message":"Not all required status checks successful","url":"u"}`, nil, refused(forge.MergeRefusedError{Reason: "Not all required status checks successful"})},
		{"approvals", 405, `{"message":"Does not have enough approvals","url":"u"}`, nil, refused(forge.MergeRefusedError{Reason: "Does not have enough approvals"})},
		{"style", 405, `{"message":"squash is not allowed an allowed merge style for this repository","url":"u"}`, nil, refused(forge.MergeRefusedError{Reason: "squash is not allowed"})},
		{"405 without words", 405, ``, nil, refused(forge.MergeRefusedError{Reason: "HTTP 405 and gave no reason"})},
		{"base moved", 409, `{"message":"merge push out of date","url":"u"}`, forge.ErrBaseMoved, nil},
		{"push rejected by git", 409, `{"message":"PushRejected with remote message: push is rejected","url":"u"}`, forge.ErrBaseMoved, nil},
		{"a hook refused", 409, `{"message":"PushRejected with remote message: collab-lease: merging acme/widgets!7 needs the current claim\nsee the docs","url":"u"}`,
			nil, refused(forge.MergeRefusedError{Hook: true, Reason: "collab-lease: merging acme/widgets!7 needs the current claim see the docs"})},
		{"a hook refused in silence", 409, `{"message":"PushRejected without remote error message","url":"u"}`,
			nil, refused(forge.MergeRefusedError{Hook: true, Reason: "PushRejected without remote error message"})},
		{"head moved", 409, `{"message":"head out of date","url":"u"}`, nil, refused(forge.MergeRefusedError{HeadMoved: true, Reason: "head out of date"})},
		{"conflict while merging", 409, `{"Style":"merge","StdOut":"Auto-merging README.md\nCONFLICT (content): Merge conflict in README.md\n","StdErr":"","Err":{}}`,
			nil, refused(forge.MergeRefusedError{Conflict: true, Reason: "conflict"})},
		{"conflict while rebasing", 409, `{"Style":"rebase","CommitSHA":"` + headSHA + `","StdOut":"","StdErr":"","Err":{}}`,
			nil, refused(forge.MergeRefusedError{Conflict: true, Reason: "conflict"})},
		{"another 409", 409, `{"message":"something new","url":"u"}`, nil, refused(forge.MergeRefusedError{Reason: "something new"})},
		{"closed", 404, `{"errors":null,"message":"not found","url":"u"}`, nil, refused(forge.MergeRefusedError{Reason: "closed"})},
		{"archived", 423, `{"message":"acme/widgets is archived","url":"u"}`, nil, refused(forge.MergeRefusedError{Reason: "acme/widgets is archived"})},
		{"unreadable request", 422, `{"message":"[Do]: In","url":"u"}`, nil, refused(forge.MergeRefusedError{Reason: "[Do]: In"})},
		{"500 under Sudo", 500, `{"message":"","url":"u"}`, nil, refused(forge.MergeRefusedError{Failed: true, Reason: "Gitea failed to merge (it gave no reason)"})},
		{"500 with words", 500, `{"message":"is blocked by an open dependency","url":"u"}`, nil,
			refused(forge.MergeRefusedError{Failed: true, Reason: "Gitea failed to merge (is blocked by an open dependency)"})},
		{"a proxy's 502", 502, `bad gateway`, forge.ErrUnavailable, nil},
		{"503", 503, ``, forge.ErrUnavailable, nil},
		{"scheduled, not merged", 201, ``, forge.ErrUnavailable, nil},
		{"the token lacks write:repository", 403, `{"message":"token does not have at least one of required scope(s), required=[write:repository]","url":"u"}`, forge.ErrConfig, nil},
		{"the token is invalid", 401, `{"message":"token is required","url":"u"}`, forge.ErrConfig, nil},
		{"a redirect", 302, ``, forge.ErrUnavailable, nil},
	}
	sentinels := []error{forge.ErrMergeNotYet, forge.ErrBaseMoved, forge.ErrUnavailable, forge.ErrConfig, forge.ErrNotFound, forge.ErrRateLimited}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m mergeBodies
			fk := newFake(t, map[string]http.HandlerFunc{"POST " + mergePath: m.answer(tt.status, tt.body)})
			f := newTestForge(t, fk.srv.URL, clocktest.New(), time.Second)
			err := f.MergePull(context.Background(), "alice", "acme", "widgets", 7,
				forge.MergeOptions{Style: "squash", HeadSHA: headSHA, DeleteBranch: true})

			var r *forge.MergeRefusedError
			isRefused := errors.As(err, &r)
			switch {
			case tt.sentinel == nil && tt.refused == nil && err != nil:
				t.Fatalf("err = %v, want nil", err)
			case tt.sentinel != nil && (!errors.Is(err, tt.sentinel) || isRefused):
				t.Fatalf("err = %v, want %v alone", err, tt.sentinel)
			case tt.refused != nil && !isRefused:
				t.Fatalf("err = %v, want a refusal", err)
			case tt.refused != nil:
				if r.Hook != tt.refused.Hook || r.Conflict != tt.refused.Conflict || r.HeadMoved != tt.refused.HeadMoved || r.Failed != tt.refused.Failed {
					t.Errorf("refusal %+v, want %+v", *r, *tt.refused)
				}
				if !strings.Contains(r.Reason, tt.refused.Reason) || strings.ContainsAny(r.Reason, "\n\r") {
					t.Errorf("reason %q, want one line with %q", r.Reason, tt.refused.Reason)
				}
				for _, s := range sentinels {
					if errors.Is(err, s) {
						t.Errorf("a refusal is also %v: %v", s, err)
					}
				}
			}
			if tt.status == 403 && !strings.Contains(err.Error(), "write:repository") {
				t.Errorf("a refused token should say what it needs: %v", err)
			}

			reqs := fk.requests()
			if len(reqs) != 1 || reqs[0].Method != "POST" || reqs[0].Path != mergePath || reqs[0].Sudo != "alice" || reqs[0].Auth != "token "+adminToken {
				t.Fatalf("requests = %+v, want one POST %s as alice through the admin token", reqs, mergePath)
			}
			bodies := m.all()
			want := map[string]any{"do": "squash", "head_commit_id": headSHA, "delete_branch_after_merge": true}
			if len(bodies) != 1 || len(bodies[0]) != len(want) {
				t.Fatalf("bodies = %v, want %v", bodies, want)
			}
			for k, v := range want {
				if bodies[0][k] != v {
					t.Errorf("body[%s] = %v, want %v", k, bodies[0][k], v)
				}
			}
		})
	}
}

// The merge asks for what it was given and nothing more: no head commit
// unless given, the branch kept unless asked, "merge" for no style.
func TestMergeSendsOnlyWhatItWasAsked(t *testing.T) {
	var m mergeBodies
	fk := newFake(t, map[string]http.HandlerFunc{"POST " + mergePath: m.answer(200, "")})
	f := newTestForge(t, fk.srv.URL, clocktest.New(), time.Second)
	if err := f.MergePull(context.Background(), "alice", "acme", "widgets", 7, forge.MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	bodies := m.all()
	if len(bodies) != 1 || len(bodies[0]) != 2 || bodies[0]["do"] != "merge" || bodies[0]["delete_branch_after_merge"] != false {
		t.Errorf("bodies = %v, want {do: merge, delete_branch_after_merge: false}", bodies)
	}
}

func TestMergeRefusesBeforeAsking(t *testing.T) {
	fk := newFake(t, map[string]http.HandlerFunc{"POST " + mergePath: status(200, "")})
	f := newTestForge(t, fk.srv.URL, clocktest.New(), time.Second)
	ctx := context.Background()
	for _, style := range []string{"manually-merged", "Merge", " merge", "fast-forward", "rebase merge", "squash\n"} {
		err := f.MergePull(ctx, "alice", "acme", "widgets", 7, forge.MergeOptions{Style: style})
		var r *forge.MergeRefusedError
		if !errors.As(err, &r) || !strings.Contains(r.Reason, "merge style") || strings.ContainsAny(r.Reason, "\n") {
			t.Errorf("style %q: %v, want a refusal of the style", style, err)
		}
	}
	for _, sha := range []string{"abc", strings.Repeat("A", 40), headSHA + "0"} {
		err := f.MergePull(ctx, "alice", "acme", "widgets", 7, forge.MergeOptions{HeadSHA: sha})
		var r *forge.MergeRefusedError
		if !errors.As(err, &r) || !strings.Contains(r.Reason, "not a commit ID") {
			t.Errorf("head %q: %v, want a refusal of the head", sha, err)
		}
	}
	for _, c := range []struct {
		login, owner, name string
		n                  int64
	}{{"", "acme", "widgets", 7}, {"al ice", "acme", "widgets", 7}, {"alice", "../x", "widgets", 7}, {"alice", "acme", "", 7}, {"alice", "acme", "widgets", 0}} {
		if err := f.MergePull(ctx, c.login, c.owner, c.name, c.n, forge.MergeOptions{}); !errors.Is(err, forge.ErrNotFound) {
			t.Errorf("%+v: %v, want ErrNotFound", c, err)
		}
		if _, err := f.PullForMerge(ctx, c.login, c.owner, c.name, c.n); !errors.Is(err, forge.ErrNotFound) {
			t.Errorf("PullForMerge %+v: %v, want ErrNotFound", c, err)
		}
	}
	if reqs := fk.requests(); len(reqs) != 0 {
		t.Errorf("asked Gitea %+v", reqs)
	}
}

// A merge takes as long as Gitea needs to clone, merge and push, up to
// MergeTimeout, not the Timeout of every other call; past it, it is
// unavailable.
func TestMergeHasItsOwnDeadline(t *testing.T) {
	release := make(chan struct{})
	slow := func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-time.After(300 * time.Millisecond):
		}
	}
	fk := newFake(t, map[string]http.HandlerFunc{"POST " + mergePath: slow})
	t.Cleanup(func() { close(release) })
	f, err := New(Options{URL: fk.srv.URL, Token: adminToken, Timeout: 50 * time.Millisecond, MergeTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.MergePull(context.Background(), "alice", "acme", "widgets", 7, forge.MergeOptions{}); err != nil {
		t.Errorf("a merge slower than Timeout: %v", err)
	}
	f, err = New(Options{URL: fk.srv.URL, Token: adminToken, MergeTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.MergePull(context.Background(), "alice", "acme", "widgets", 7, forge.MergeOptions{}); !errors.Is(err, forge.ErrUnavailable) {
		t.Errorf("a merge slower than MergeTimeout: %v, want ErrUnavailable", err)
	}
}

func TestMergeWithGiteaDown(t *testing.T) {
	fk := newFake(t, nil)
	fk.srv.Close()
	f := newTestForge(t, fk.srv.URL, clocktest.New(), time.Second)
	if err := f.MergePull(context.Background(), "alice", "acme", "widgets", 7, forge.MergeOptions{}); !errors.Is(err, forge.ErrUnavailable) {
		t.Errorf("MergePull: %v, want ErrUnavailable", err)
	}
	if _, err := f.PullForMerge(context.Background(), "alice", "acme", "widgets", 7); !errors.Is(err, forge.ErrUnavailable) {
		t.Errorf("PullForMerge: %v, want ErrUnavailable", err)
	}
}

// pulled is st with what pullAnswer says of every pull request besides.
func pulled(st forge.PullState) forge.PullState {
	st.Title, st.Body, st.Author = "Fix the widget", "Fixes #3", forge.User{ID: 9, Login: "bot"}
	st.Updated = time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	return st
}

// merged is st merged when pullAnswer's merges say.
func merged(st forge.PullState) forge.PullState {
	st.MergedAt = time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	return st
}

// pullAnswer is Gitea 1.26's pull request, in part, with changes.
func pullAnswer(change func(map[string]any)) map[string]any {
	p := map[string]any{
		"id": 70, "number": 7, "state": "open", "draft": false, "mergeable": true, "merged": false,
		"merge_commit_sha": nil, "merge_base": baseSHA,
		"base":  map[string]any{"label": "main", "ref": "main", "sha": baseSHA, "repo_id": 5},
		"head":  map[string]any{"label": "feature", "ref": "feature", "sha": headSHA, "repo_id": 5},
		"title": "Fix the widget", "body": "Fixes #3", "user": map[string]any{"id": 9, "login": "bot"},
		"updated_at": "2026-12-07T10:00:00Z",
	}
	if change != nil {
		change(p)
	}
	return p
}

func TestPullForMerge(t *testing.T) {
	const path = "/api/v1/repos/acme/widgets/pulls/7"
	tests := []struct {
		name   string
		answer http.HandlerFunc
		want   forge.PullState
		err    error
	}{
		{"open and mergeable", jsonBody(pullAnswer(nil)), pulled(forge.PullState{
			Number: 7, Mergeable: true, HeadSHA: headSHA, BaseSHA: baseSHA, Base: "main", Head: "feature", HeadRepoID: 5}), nil},
		{"a draft being tested", jsonBody(pullAnswer(func(p map[string]any) { p["draft"], p["mergeable"] = true, false })), pulled(forge.PullState{
			Number: 7, Draft: true, HeadSHA: headSHA, BaseSHA: baseSHA, Base: "main", Head: "feature", HeadRepoID: 5}), nil},
		{"merged, its head repository gone", jsonBody(pullAnswer(func(p map[string]any) {
			p["state"], p["merged"], p["mergeable"], p["merge_commit_sha"] = "closed", true, false, mergeSHA
			p["merged_at"] = "2026-12-07T10:00:00Z"
			p["head"] = map[string]any{"label": "feature", "ref": "refs/pull/7/head", "sha": headSHA, "repo_id": -1}
		})), merged(pulled(forge.PullState{
			Number: 7, Closed: true, Merged: true, HeadSHA: headSHA, BaseSHA: baseSHA, Base: "main", Head: "feature", MergeSHA: mergeSHA})), nil},
		{"not there", status(404, `{"message":"not found"}`), forge.PullState{}, forge.ErrNotFound},
		{"another number", jsonBody(pullAnswer(func(p map[string]any) { p["number"] = 8 })), forge.PullState{}, forge.ErrUnavailable},
		{"no state", jsonBody(pullAnswer(func(p map[string]any) { p["state"] = "" })), forge.PullState{}, forge.ErrUnavailable},
		{"no base", jsonBody(pullAnswer(func(p map[string]any) { delete(p, "base") })), forge.PullState{}, forge.ErrUnavailable},
		{"a bad commit ID", jsonBody(pullAnswer(func(p map[string]any) { p["head"].(map[string]any)["sha"] = "HEAD" })), forge.PullState{}, forge.ErrUnavailable},
		{"merged without a merge commit", jsonBody(pullAnswer(func(p map[string]any) { p["state"], p["merged"] = "closed", true })), forge.PullState{}, forge.ErrUnavailable},
		{"not JSON", status(200, `<html>`), forge.PullState{}, forge.ErrUnavailable},
		{"Gitea failed", status(500, `{"message":""}`), forge.PullState{}, forge.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fk := newFake(t, map[string]http.HandlerFunc{"GET " + path: tt.answer})
			f := newTestForge(t, fk.srv.URL, clocktest.New(), time.Second)
			got, err := f.PullForMerge(context.Background(), "alice", "acme", "widgets", 7)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
			} else if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
			if reqs := fk.requests(); len(reqs) != 1 || reqs[0].Sudo != "alice" || reqs[0].Auth != "token "+adminToken {
				t.Errorf("requests = %+v, want one as alice through the admin token", reqs)
			}
		})
	}
	// Never cached: each call asks.
	fk := newFake(t, map[string]http.HandlerFunc{"GET " + path: jsonBody(pullAnswer(nil))})
	f := newTestForge(t, fk.srv.URL, clocktest.New(), time.Second)
	for range 2 {
		if _, err := f.PullForMerge(context.Background(), "alice", "acme", "widgets", 7); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(fk.requests()); n != 2 {
		t.Errorf("two calls asked Gitea %d times, want 2", n)
	}
}
