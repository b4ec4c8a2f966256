package routes

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
)

const reservations = "/api/v1/repos/acme/widgets/reservations"

// Path reservations through HTTP, with the replies of the SSH verbs: a
// reserve for a ttl and one with a claim, a conflict naming what stands
// in the way, the listing (of one path too), check listing its claim's,
// unreserve of one's own and, by a repository admin, of another's.
func TestReservationsWithAToken(t *testing.T) {
	f := newWriteFixture(t)
	f.forge.Grant("acme/widgets", "alice", forgetest.Admin)
	bob, carol := "Authorization: token bob-write", "Authorization: token carol-write"
	bobAuth := `{"glob":"src/auth/**","shared":false,"holder":"bob","agent":null,"issue":null,"expires_at":"2026-09-05T12:30:00Z"}`
	carolDocs := `{"glob":"docs/","shared":true,"holder":"carol","agent":"c1","issue":1,"expires_at":null}`

	r := f.doBody("POST", reservations, `{"globs":["src/auth/**"],"ttl":"30m"}`, bob, "Content-Type: application/json")
	expectReply(t, "reserve", r, 200, `{"status":"reserved","repo":"acme/widgets","reservations":[`+bobAuth+`]}`)
	if r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("reserve headers: %v", r.Header)
	}
	expectReply(t, "reserve in the way", f.doBody("POST", reservations, `{"globs":["docs/","src/auth/login.go"],"ttl":"1h"}`, carol), 409,
		`{"status":"conflict","repo":"acme/widgets","with":[`+bobAuth+`]}`)
	expectReply(t, "reserve with a claim not held", f.doBody("POST", reservations, `{"globs":["docs/"],"issue":1}`, carol), 409,
		`{"status":"not_holder","repo":"acme/widgets","issue":1,"holder":null,"agent":null,"expires_at":null}`)
	if r := f.doBody("POST", lease1, `{"agent":"c1"}`, carol); r.Code != 201 {
		t.Fatalf("acquire: %d %s", r.Code, r.Body)
	}
	expectReply(t, "reserve with the claim", f.doBody("POST", reservations, `{"globs":["docs/"],"shared":true,"issue":1,"agent":"c1"}`, carol), 200,
		`{"status":"reserved","repo":"acme/widgets","reservations":[`+carolDocs+`]}`)

	expectReply(t, "the listing", f.do("GET", reservations), 200,
		`{"status":"reservations","repo":"acme/widgets","reservations":[`+bobAuth+`,`+carolDocs+`]}`)
	expectReply(t, "the listing of a path", f.do("GET", reservations+"?path=docs/a%20b.md"), 200,
		`{"status":"reservations","repo":"acme/widgets","reservations":[`+carolDocs+`]}`)
	expectReply(t, "the listing of an unreserved path", f.do("GET", reservations+"?path=README.md"), 200,
		`{"status":"reservations","repo":"acme/widgets","reservations":[]}`)
	expectReply(t, "check", f.do("GET", lease1+"/check?token=1"), 200,
		`{"status":"current","repo":"acme/widgets","issue":1,"holder":"carol","agent":"c1","token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":null,"reservations":[`+carolDocs+`]}`)

	unreserved := `{"status":"unreserved","repo":"acme/widgets","reservations":[]}`
	expectReply(t, "unreserve of another's", f.do("DELETE", reservations+"?glob=docs/", bob), 200, unreserved)
	expectReply(t, "unreserve of another agent's", f.do("DELETE", reservations+"?glob=docs/", carol), 200, unreserved)
	expectReply(t, "unreserve by force, a writer", f.do("DELETE", reservations+"?force=true", bob), 403,
		`{"error":"admin access to acme/widgets is required"}`)
	expectReply(t, "unreserve by force, an admin", f.do("DELETE", reservations+"?glob=docs/&glob=lib/&force=true", "Authorization: token alice-token"), 200,
		`{"status":"unreserved","repo":"acme/widgets","reservations":[`+carolDocs+`]}`)
	expectReply(t, "unreserve of a claim's, as an agent with none", f.doBody("DELETE", reservations+"?issue=1", `{"agent":"c1"}`, bob), 200, unreserved)
	expectReply(t, "unreserve all one's own", f.do("DELETE", reservations, bob), 200,
		`{"status":"unreserved","repo":"acme/widgets","reservations":[`+bobAuth+`]}`)
	expectReply(t, "the listing at the end", f.do("GET", reservations), 200, `{"status":"reservations","repo":"acme/widgets","reservations":[]}`)
}

// The answers of a reservation request that could not be done: what the
// request itself gets wrong, refused before anything is looked up, with
// the grammar's words.
func TestReservationStatuses(t *testing.T) {
	f := newWriteFixture(t)
	bob := "Authorization: token bob-write"
	needToken := `{"error":"writes need an API token: Authorization: token \u003cgitea token\u003e"}`
	like := `{"error":"the body must be a JSON object like {\"globs\":[\"src/auth/**\"],\"ttl\":\"30m\"}"}`
	globs := make([]string, contract.MaxReserveGlobs+1)
	for i := range globs {
		globs[i] = fmt.Sprintf("src/%d/", i)
	}
	many, _ := json.Marshal(map[string]any{"globs": globs, "ttl": "5m"})
	for _, c := range []struct {
		name, method, path, body string
		headers                  []string
		code                     int
		want                     string
	}{
		{"no token", "POST", reservations, `{"globs":["a"],"ttl":"5m"}`, nil, 401, needToken},
		{"a session cookie alone (CSRF)", "DELETE", reservations, "", []string{f.sessionFor("bob")}, 401, needToken},
		{"no body", "POST", reservations, "", []string{bob}, 422, `{"error":"globs is required: 1 to 64 path globs, e.g. {\"globs\":[\"src/auth/**\"],\"ttl\":\"30m\"}"}`},
		{"globs not a list", "POST", reservations, `{"globs":"src/","ttl":"5m"}`, []string{bob}, 422, like},
		{"an unknown field", "POST", reservations, `{"globs":["src/"],"ttl":"5m","path":"x"}`, []string{bob}, 422, like},
		{"a handoff's field", "POST", reservations, `{"globs":["src/"],"ttl":"5m","to":"carol"}`, []string{bob}, 422, `{"error":"only a handoff takes to"}`},
		{"a glob from the root", "POST", reservations, `{"globs":["/src"],"ttl":"5m"}`, []string{bob}, 422,
			`{"error":"glob \"/src\" starts with /: name paths from the repository's root"}`},
		{"a glob with ..", "POST", reservations, `{"globs":["src/../x"],"ttl":"5m"}`, []string{bob}, 422,
			`{"error":"glob \"src/../x\" has a segment \"..\"; name paths from the repository's root"}`},
		{"an empty glob", "POST", reservations, `{"globs":[""],"ttl":"5m"}`, []string{bob}, 422,
			`{"error":"a glob is empty; expected a path glob like src/auth/** or docs/"}`},
		{"too many globs", "POST", reservations, string(many), []string{bob}, 422, `{"error":"more than 64 globs; reserve them in several calls"}`},
		{"issue 0", "POST", reservations, `{"globs":["src/"],"issue":0}`, []string{bob}, 422, `{"error":"issue must be a positive number, got 0"}`},
		{"issue and ttl", "POST", reservations, `{"globs":["src/"],"issue":1,"ttl":"5m"}`, []string{bob}, 422,
			`{"error":"issue and ttl both given: a reservation of a claim lives as long as the claim"}`},
		{"neither issue nor ttl", "POST", reservations, `{"globs":["src/"],"shared":true}`, []string{bob}, 422,
			`{"error":"a reservation needs issue (a claim it lives with) or ttl, e.g. {\"globs\":[\"src/auth/**\"],\"ttl\":\"30m\"}"}`},
		{"a ttl past the maximum", "POST", reservations, `{"globs":["src/"],"ttl":"169h"}`, []string{bob}, 422, `{"error":"ttl \"169h\" is more than the maximum of 168h"}`},
		{"a bad agent", "POST", reservations, `{"globs":["src/"],"ttl":"5m","agent":"-x"}`, []string{bob}, 422,
			`{"error":"agent must be 1 to 40 of A-Z a-z 0-9 . _ - starting with a letter or digit, got \"-x\""}`},
		{"a path from the root", "GET", reservations + "?path=/src", "", nil, 400,
			`{"error":"path \"/src\" starts with /: name paths from the repository's root"}`},
		{"an empty path", "GET", reservations + "?path=", "", nil, 400, `{"error":"path is empty; expected a path like src/auth/login.go"}`},
		{"a glob with .. to unreserve", "DELETE", reservations + "?glob=../x", "", []string{bob}, 400,
			`{"error":"glob \"../x\" has a segment \"..\"; name paths from the repository's root"}`},
		{"issue x to unreserve", "DELETE", reservations + "?issue=x", "", []string{bob}, 400, `{"error":"issue must be a positive integer of at most 9223372036854775807"}`},
		{"force maybe", "DELETE", reservations + "?force=maybe", "", []string{bob}, 400, `{"error":"force must be true or false"}`},
		{"a ttl to unreserve", "DELETE", reservations, `{"ttl":"5m"}`, []string{bob}, 422, `{"error":"this write takes no ttl"}`},
		{"globs in the body to unreserve", "DELETE", reservations, `{"globs":["src/"]}`, []string{bob}, 422, `{"error":"only a reserve takes globs, shared and issue"}`},
	} {
		expectReply(t, c.name, f.doBody(c.method, c.path, c.body, c.headers...), c.code, c.want)
	}
	if rs, err := f.store.Reservations(bg, 1, ""); err != nil || len(rs) != 0 {
		t.Fatalf("a refused request reserved %+v (%v)", rs, err)
	}
}

// Past the sidecar's reservation cap, a reserve is 409 limit, as the
// document says, and reserves nothing; a reserve of globs the holder
// already holds does not count them twice.
func TestReservationCapOverHTTP(t *testing.T) {
	f := writable(newFixtureWith(t, []models.Option{models.WithReservationCap(2)}))
	spec := loadSpec(t, f)
	bob := "Authorization: token bob-write"
	call := func(name, body string, code int) reply {
		return spec.do(t, f, apiCall{name: name, method: "POST", path: reservations, body: body, headers: []string{bob, "Content-Type: application/json"}, valid: true, code: code})
	}
	call("two", `{"globs":["a/","b/"],"ttl":"5m"}`, 200)
	call("the same two again", `{"globs":["b/","a/"],"ttl":"10m"}`, 200)
	call("a third, another holder's", `{"globs":["c/"],"ttl":"5m","agent":"b1"}`, 200)
	r := call("a third of the account's", `{"globs":["d/"],"ttl":"5m"}`, 409)
	expectReply(t, "past the cap", r, 409,
		`{"status":"limit","repo":"acme/widgets","issue":null,"holder":"bob","agent":null,"scope":"reservations","limit":2,"live":2}`)
	if rs, err := f.store.Reservations(bg, 1, ""); err != nil || len(rs) != 3 {
		t.Fatalf("after the refusal: %+v (%v)", rs, err)
	}
}
