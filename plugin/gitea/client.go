package gitea

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	sdk "code.gitea.io/sdk/gitea"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// How requests are made: through the Gitea SDK where it has the call, and
// plain net/http (send) for what it lacks (the key search by fingerprint,
// the OAuth2 token endpoint, the admin hooks' names). The SDK keeps the context and the Sudo user in
// the client itself, so every request gets a fresh, cheap SDK client;
// SetGiteaVersion("") keeps the SDK from asking Gitea for its version, so
// nothing touches the network before the first real request (the sidecar
// must start while Gitea is down). Either way, every answer goes through
// classify: the one place that turns Gitea's statuses into the forge's
// sentinel errors.

// tokenFix tells an operator how to fix a rejected admin token.
const tokenFix = "the Gitea token is invalid or lacks admin rights: create an access token " +
	"for a site administrator with the scopes read:user, read:repository and read:issue, " +
	"plus write:user and write:admin for install (Gitea: Site Administration or `gitea admin user generate-access-token`) and set --gitea-token-file"

// identity is who a request is made as, and so what it means when Gitea
// refuses it.
type identity struct {
	token string // "" = anonymous
	sudo  string // a login to impersonate with the admin token
	// fix marks the sidecar's own token: Gitea refusing it (401, 403) is a
	// configuration error, forge.ErrConfig, and fix says how to mend it.
	// Without fix the credential is a caller's (a user's API or OAuth2
	// token, an authorization code) or there is none, and a refusal means
	// there is nothing this caller may see: forge.ErrNotFound.
	fix string
	// grant marks a request to the OAuth2 token endpoint, which refuses a
	// code (expired, used, or not this client's) with 400.
	grant bool
	// keys sends the request through the key lookups' own connections.
	keys bool
	// merge marks the merge of a pull request (POST …/pulls/{n}/merge),
	// whose 404, 405, 409, 422, 423 and 500 are answers about the pull
	// request (mergeAnswer, merge.go), and whose only success is 200.
	merge bool
}

func (f *Forge) asAdmin() identity { return identity{token: f.token, fix: tokenFix} }

// asViewer is login's view (through the admin token and Sudo), or the
// anonymous view for "".
func (f *Forge) asViewer(login string) identity {
	if login == "" {
		return identity{}
	}
	return identity{token: f.token, sudo: login, fix: tokenFix}
}

// asToken is the view of a caller's own API or OAuth2 access token.
func asToken(token string) identity { return identity{token: token} }

func (f *Forge) sdk(ctx context.Context, id identity) *sdk.Client {
	opts := []sdk.ClientOption{
		sdk.SetHTTPClient(f.http),
		sdk.SetContext(ctx),
		sdk.SetGiteaVersion(""),
		sdk.SetUserAgent(userAgent),
	}
	if id.token != "" {
		opts = append(opts, sdk.SetToken(id.token))
	}
	if id.sudo != "" {
		opts = append(opts, sdk.SetSudo(id.sudo))
	}
	c, err := sdk.NewClient(f.base.String(), opts...)
	if err != nil {
		// Only the version check can fail, and it is switched off.
		panic(fmt.Sprintf("gitea: new SDK client: %v", err))
	}
	return c
}

const userAgent = "collab-lease"

// classify is the one mapping of Gitea's answers onto the forge's sentinel
// errors, for every request the package makes. status is 0 when no
// response arrived; err is the transport's or the decoder's error.
//
//	not sent: the request's budget spent  forge.ErrRateLimited
//	no answer, 5xx, anything unexpected   forge.ErrUnavailable (retry)
//	2xx that does not decode              forge.ErrUnavailable
//	404                                   forge.ErrNotFound
//	401, 403 for the sidecar's own token  forge.ErrConfig, with the fix
//	401, 403 for anyone else's            forge.ErrNotFound
//	400 from the OAuth2 token endpoint    forge.ErrNotFound (code refused)
//	a merge's 404, 405, 409, 422, 423,    forge.ErrMergeNotYet, forge.ErrBaseMoved or a
//	500                                   *forge.MergeRefusedError (mergeAnswer, merge.go)
//	a merge's 2xx but 200                 forge.ErrUnavailable
func classify(op string, id identity, status int, body []byte, err error) error {
	refused := status == http.StatusUnauthorized || status == http.StatusForbidden ||
		(id.grant && status == http.StatusBadRequest)
	switch {
	case status == 0 && errors.Is(err, forge.ErrRateLimited):
		return fmt.Errorf("%s: %w", op, forge.ErrRateLimited)
	case status == 0:
		return fmt.Errorf("%s: %w: %w", op, forge.ErrUnavailable, err)
	case id.merge && isMergeAnswer(status):
		return mergeAnswer(op, status, body)
	case id.merge && status >= 200 && status < 300 && status != http.StatusOK:
		return fmt.Errorf("%s: %w: unexpected HTTP %d", op, forge.ErrUnavailable, status)
	case status >= 200 && status < 300 && err != nil:
		return fmt.Errorf("%s: %w: malformed response: %w", op, forge.ErrUnavailable, err)
	case status >= 200 && status < 300:
		return nil
	case status == http.StatusNotFound:
		return fmt.Errorf("%s: %w", op, forge.ErrNotFound)
	case refused && id.fix != "":
		return fmt.Errorf("%s: HTTP %d %s: %w: %s", op, status, detail(body), forge.ErrConfig, id.fix)
	case refused:
		// An anonymous viewer on a Gitea that requires sign-in, a user
		// token that is invalid or lacks the scope, a code Gitea will
		// not trade: either way there is nothing this caller may see.
		return fmt.Errorf("%s: HTTP %d %s: %w", op, status, detail(body), forge.ErrNotFound)
	default:
		return fmt.Errorf("%s: %w: HTTP %d %s", op, forge.ErrUnavailable, status, detail(body))
	}
}

// detail is a short, single-line excerpt of an error body: Gitea's API
// "message", or its OAuth2 endpoint's "error" and "error_description".
func detail(body []byte) string {
	var m struct {
		Message     string `json:"message"`
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	s := string(body)
	if json.Unmarshal(body, &m) == nil {
		switch {
		case m.Message != "":
			s = m.Message
		case m.Error != "":
			s = strings.TrimSuffix(m.Error+": "+m.Description, ": ")
		}
	}
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		return ""
	}
	return "(" + s + ")"
}

// sdkErr classifies the result of an SDK call.
func sdkErr(op string, id identity, resp *sdk.Response, err error) error {
	if resp == nil || resp.Response == nil {
		if err == nil {
			err = errors.New("no response")
		}
		return classify(op, id, 0, nil, err)
	}
	var body []byte
	if err != nil && (resp.StatusCode < 200 || resp.StatusCode >= 300) {
		body = []byte(err.Error()) // the SDK folds the body's message into err
	}
	return classify(op, id, resp.StatusCode, body, err)
}

// maxBody bounds what is read of one answer.
const maxBody = 8 << 20

// send is the plain net/http path: method path?query as id, with body (if
// not nil) as a URL-encoded form when it is url.Values and as JSON
// otherwise, decoding a 2xx body into out (if not nil). path is relative to
// Gitea's base URL ("/api/v1/user/keys").
func (f *Forge) send(ctx context.Context, id identity, method, path string, query url.Values, body, out any) error {
	u := f.base.JoinPath(path)
	u.RawQuery = query.Encode()
	op := method + " /" + strings.TrimPrefix(u.Path, "/") // JoinPath on an empty path drops the slash
	var r io.Reader
	contentType := ""
	switch b := body.(type) {
	case nil:
	case url.Values:
		r, contentType = strings.NewReader(b.Encode()), "application/x-www-form-urlencoded"
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		r, contentType = bytes.NewReader(j), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), r)
	if err != nil {
		return classify(op, id, 0, nil, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)
	if id.token != "" {
		req.Header.Set("Authorization", "token "+id.token)
	}
	if id.sudo != "" {
		req.Header.Set("Sudo", id.sudo)
	}
	client := f.http
	if id.keys {
		client = f.keysHTTP
	}
	resp, err := client.Do(req)
	if err != nil {
		return classify(op, id, 0, nil, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return classify(op, id, 0, nil, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode >= 300 || out == nil {
		return classify(op, id, resp.StatusCode, b, nil)
	}
	return classify(op, id, resp.StatusCode, nil, json.Unmarshal(b, out))
}

// keysByFingerprint searches all users' keys (and deploy keys) for this
// fingerprint. Plain net/http: the SDK's key listing has no fingerprint
// parameter. Fingerprints are unique among user keys, so one page is
// plenty.
func (f *Forge) keysByFingerprint(ctx context.Context, fingerprint string) ([]*sdk.PublicKey, error) {
	var keys []*sdk.PublicKey
	q := url.Values{"fingerprint": {fingerprint}, "limit": {"50"}}
	id := f.asAdmin()
	id.keys = true
	err := f.send(ctx, id, http.MethodGet, "/api/v1/user/keys", q, nil, &keys)
	return keys, err
}

// keyOwner picks the one user key with this fingerprint and checks that its
// owner may log in.
func keyOwner(keys []*sdk.PublicKey, fingerprint string) (forge.User, error) {
	var found *sdk.PublicKey
	n := 0
	for _, k := range keys {
		if k == nil || k.Fingerprint != fingerprint {
			continue
		}
		switch k.KeyType {
		case "user":
			found = k
			n++
		case "deploy", "unknown":
			// Deploy keys open one repository, principals are for
			// certificates: neither names a user.
		default:
			// Gitea names the key type and owner only to site
			// administrators (and to the key's owner).
			return forge.User{}, fmt.Errorf("%w: the key search does not name key owners: %s", forge.ErrConfig, tokenFix)
		}
	}
	switch {
	case n == 0:
		return forge.User{}, fmt.Errorf("no user key has this fingerprint: %w", forge.ErrNotFound)
	case n > 1:
		return forge.User{}, fmt.Errorf("%d user keys have this fingerprint: %w", n, forge.ErrNotFound)
	}
	o := found.Owner
	switch {
	case o == nil || o.ID <= 0 || o.UserName == "":
		return forge.User{}, fmt.Errorf("%w: the key search does not name key owners: %s", forge.ErrConfig, tokenFix)
	case !o.IsActive:
		return forge.User{}, fmt.Errorf("key owner %s is not active: %w", o.UserName, forge.ErrNotFound)
	case o.ProhibitLogin:
		return forge.User{}, fmt.Errorf("key owner %s is prohibited from logging in: %w", o.UserName, forge.ErrNotFound)
	}
	return forge.User{ID: o.ID, Login: o.UserName}, nil
}

// tokenUser is GET /user with a user's own token.
func (f *Forge) tokenUser(ctx context.Context, token string) (*sdk.User, error) {
	id := asToken(token)
	u, resp, err := f.sdk(ctx, id).GetMyUserInfo()
	if err := sdkErr("GET /api/v1/user", id, resp, err); err != nil {
		return nil, err
	}
	return u, wellFormedUser(u)
}

// mayLogIn refuses an account that Gitea would not let sign in (its own
// view of itself, or a site administrator's, carries the flags).
func mayLogIn(u *sdk.User) error {
	if !u.IsActive || u.ProhibitLogin {
		return fmt.Errorf("%s may not log in: %w", u.UserName, forge.ErrNotFound)
	}
	return nil
}

func wellFormedUser(u *sdk.User) error {
	if u.ID <= 0 || u.UserName == "" {
		return fmt.Errorf("GET /api/v1/user: %w: malformed response: no id or login", forge.ErrUnavailable)
	}
	return nil
}

// userByLogin is GET /users/{login} with the admin token (which follows a
// rename), then GET /users/search?uid= to tell a person from an
// organization: the search lists individual accounts only, the lookup by
// name answers for both.
func (f *Forge) userByLogin(ctx context.Context, login string) (*sdk.User, error) {
	id := f.asAdmin()
	c := f.sdk(ctx, id)
	u, resp, err := c.GetUserInfo(login)
	if err := sdkErr("GET /api/v1/users/"+login, id, resp, err); err != nil {
		return nil, err
	}
	if err := wellFormedUser(u); err != nil {
		return nil, err
	}
	found, resp, err := c.SearchUsers(sdk.SearchUsersOption{UID: u.ID, ListOptions: sdk.ListOptions{Page: 1, PageSize: 1}})
	if err := sdkErr(fmt.Sprintf("GET /api/v1/users/search?uid=%d", u.ID), id, resp, err); err != nil {
		return nil, err
	}
	for _, p := range found {
		if p != nil && p.ID == u.ID {
			return u, nil
		}
	}
	return nil, fmt.Errorf("%s is an organization, not an account: %w", u.UserName, forge.ErrNotFound)
}

// adminUser is GET /user with the admin token.
func (f *Forge) adminUser(ctx context.Context) (*sdk.User, error) {
	id := f.asAdmin()
	u, resp, err := f.sdk(ctx, id).GetMyUserInfo()
	if err := sdkErr("GET /api/v1/user", id, resp, err); err != nil {
		return nil, err
	}
	return u, wellFormedUser(u)
}

// issue is GET /repos/{o}/{r}/issues/{n} as id.
func (f *Forge) issue(ctx context.Context, id identity, owner, name string, n int64) (*sdk.Issue, error) {
	is, resp, err := f.sdk(ctx, id).GetIssue(owner, name, n)
	op := fmt.Sprintf("GET /api/v1/repos/%s/%s/issues/%d", owner, name, n)
	if err := sdkErr(op, id, resp, err); err != nil {
		return nil, err
	}
	if is.Index != n || (is.State != sdk.StateOpen && is.State != sdk.StateClosed) {
		return nil, fmt.Errorf("%s: %w: malformed response: number %d, state %q", op, forge.ErrUnavailable, is.Index, is.State)
	}
	return is, nil
}
