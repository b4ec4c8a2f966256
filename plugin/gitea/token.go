package gitea

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	sdk "code.gitea.io/sdk/gitea"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// What a caller's API token may see. Repo answers for a user through the
// admin token and Sudo, which knows nothing of the caller's token: a token
// limited to read:user would read private leases that way. So the token
// itself asks Gitea, and Gitea enforces its scopes (Gitea 1.26,
// routers/api/v1/api.go):
//
//   - Every API route group requires a scope category, and
//     tokenRequiresScopes refuses a token without it with 403 before
//     anything else happens (a GET needs read:<category>, anything else
//     write:<category>; write implies read, "all" is everything). The
//     refusal does not depend on the repository, so it reveals nothing.
//     GET /repos/{o}/{r} is in the "repository" group; the issues, labels
//     and milestones of a repository are in the "issue" group (pull
//     requests read as issues too: GET …/issues/{n} answers for them).
//   - repoAssignment then answers 404 unless the token's user may see the
//     repository.
//   - checkTokenPublicOnly answers 403 for a "public-only" token on a
//     private repository, in both groups.
//   - OAuth2 access tokens carry scopes the same way (the grant's scopes;
//     none at all means "all"), and "token" and "bearer" are one scheme.
//
// GET /repos/{o}/{r} with the token therefore tells whether it may read
// the repository, and GET /repos/{o}/{r}/labels?limit=1 (the cheapest
// request of the issue group, answered whatever the repository's units)
// whether it may read its issues and pull requests. Both are intersected
// with the user's own permissions from Repo, which Gitea does not reduce
// for a token in its answers.
//
// Writes through a token (the HTTP API's acquire, renew and release) keep
// the user's write permissions only if the token's scopes let it write
// issues: write:issue (or "all"). Gitea reports a token's scopes nowhere
// a token can read them (GET /users/{u}/tokens wants basic auth), so the
// token asks for a write that Gitea refuses before doing anything:
// DELETE /repos/{o}/{r}/issues/comments/0. tokenRequiresScopes checks the
// scope of a DELETE (write:issue) before any handler runs, and answers
// 403 "token does not have at least one of required scope(s)" without it;
// with it the handler looks up comment 0, which cannot exist (IDs start
// at 1), and answers 404. Nothing is written either way. A repository
// admin's force-release through a token is allowed on the same terms, as
// Gitea lets a write:issue token do what the user's admin role allows.

// TokenRepo returns owner/name as user u sees it through the API token
// token (see above); a repository the token may not read is
// forge.ErrNotFound. Its answers are kept like Repo's (a success for
// PermCacheTTL, a "not found" for MissTTL), keyed by a hash of the token
// (tokenKey), the user and the repository.
func (f *Forge) TokenRepo(ctx context.Context, u forge.User, token, owner, name string) (forge.Repo, error) {
	what := owner + "/" + name
	token = strings.TrimSpace(token)
	if !validName(owner) || !validName(name) || !validName(u.Login) || !validToken(token) {
		return forge.Repo{}, fmt.Errorf("repository %s through a token: %w", what, forge.ErrNotFound)
	}
	key := tokenKey(token) + "\x00" + strings.ToLower(u.Login+"\x00"+what)
	return cachedOrAsk(f.perms, key, f.misses, "repo", func() (forge.Repo, error) {
		return f.tokenRepo(ctx, u, token, owner, name)
	})
}

// tokenRepo asks Gitea what TokenRepo answers.
func (f *Forge) tokenRepo(ctx context.Context, u forge.User, token, owner, name string) (forge.Repo, error) {
	what := owner + "/" + name
	ctx, cancel := f.within(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mine     forge.Repo
		viaToken *sdk.Repository
		issues   bool
		writes   bool
		errs     [4]error
	)
	wg.Go(func() { mine, errs[0] = f.Repo(ctx, u.Login, owner, name) })
	wg.Go(func() { viaToken, errs[1] = f.tokenRepoView(ctx, token, owner, name) })
	wg.Go(func() { issues, errs[2] = f.tokenReadsIssues(ctx, token, owner, name) })
	wg.Go(func() { writes, errs[3] = f.tokenWritesIssues(ctx, token, owner, name) })
	wg.Wait()
	if err := worst(errs[:]); err != nil {
		return forge.Repo{}, fmt.Errorf("repository %s through a token of %s: %w", what, u.Login, err)
	}
	if viaToken.ID != mine.ID {
		// Renamed, and another repository took the name, between the
		// requests: ask again later.
		return forge.Repo{}, fmt.Errorf("repository %s through a token of %s: %w: the token sees repository %d, the user %d",
			what, u.Login, forge.ErrUnavailable, viaToken.ID, mine.ID)
	}
	r := mine
	if !issues {
		r.CanReadIssues, r.CanReadPulls = false, false
	}
	if !issues || !writes {
		r.CanWriteIssues, r.CanWritePulls, r.Admin = false, false, false
	}
	return r, nil
}

// tokenKey stands for a token in cache keys, so the caches never hold one.
func tokenKey(token string) string {
	sum := sha256.Sum256([]byte("collab-lease token\x00" + token))
	return "token:" + hex.EncodeToString(sum[:])
}

// validToken reports whether token can be an API or OAuth2 access token
// (anything else is not sent to Gitea).
func validToken(token string) bool {
	return token != "" && len(token) <= 4096 && !strings.ContainsAny(token, " \r\n\t")
}

// tokenRepoView is GET /repos/{o}/{r} with the caller's token.
func (f *Forge) tokenRepoView(ctx context.Context, token, owner, name string) (*sdk.Repository, error) {
	id := asToken(token)
	repo, resp, err := f.sdk(ctx, id).GetRepo(owner, name)
	if err := sdkErr("GET /api/v1/repos/"+owner+"/"+name+" with the token", id, resp, err); err != nil {
		return nil, err
	}
	if repo.ID <= 0 {
		return nil, fmt.Errorf("GET /api/v1/repos/%s/%s with the token: %w: malformed response: no id", owner, name, forge.ErrUnavailable)
	}
	return repo, nil
}

// tokenReadsIssues is GET /repos/{o}/{r}/labels?limit=1 with the caller's
// token: whether its scopes let it read the repository's issues.
func (f *Forge) tokenReadsIssues(ctx context.Context, token, owner, name string) (bool, error) {
	id := asToken(token)
	_, resp, err := f.sdk(ctx, id).ListRepoLabels(owner, name, sdk.ListLabelsOptions{ListOptions: sdk.ListOptions{Page: 1, PageSize: 1}})
	err = sdkErr("GET /api/v1/repos/"+owner+"/"+name+"/labels with the token", id, resp, err)
	if errors.Is(err, forge.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// tokenWritesIssues is DELETE /repos/{o}/{r}/issues/comments/0 with the
// caller's token: whether its scopes let it write the repository's issues
// (see above). 404 (no comment 0) means the scope check passed; 403 means
// it did not.
func (f *Forge) tokenWritesIssues(ctx context.Context, token, owner, name string) (bool, error) {
	id := asToken(token)
	resp, err := f.sdk(ctx, id).DeleteIssueComment(owner, name, 0)
	if resp != nil && resp.Response != nil {
		switch resp.StatusCode {
		case http.StatusNotFound:
			return true, nil
		case http.StatusForbidden, http.StatusUnauthorized:
			// No write:issue (or a public-only token on a private
			// repository, or an invalid token: the reads say so too).
			return false, nil
		}
	}
	if err := sdkErr("DELETE /api/v1/repos/"+owner+"/"+name+"/issues/comments/0 with the token", id, resp, err); err != nil {
		return false, err
	}
	// A success deleted nothing (there is no comment 0), but the scope
	// check passed all the same.
	return true, nil
}
