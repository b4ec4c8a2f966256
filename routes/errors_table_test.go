package routes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/ssh"
)

// lease.Classify classifies every error (its own test walks the
// sentinels); the two transports answer every class, and agree on which
// of them say "try again": exit 75 over SSH, 429 or 503 with Retry-After
// over HTTP.
func TestBothTransportsAnswerEveryClassAlike(t *testing.T) {
	if len(lease.Classes()) < 10 {
		t.Fatalf("only %d classes: the check would pass vacuously", len(lease.Classes()))
	}
	for _, p := range checkClasses(lease.Classes(), sshVerdict, httpVerdict(replies)) {
		t.Error(p)
	}
}

// The check fails where it should: it reports a class without an HTTP
// answer, two transports that disagree on retrying, and a "try again"
// without Retry-After.
func TestClassCheckCanFail(t *testing.T) {
	without := func(drop lease.Class) map[lease.Class]answer {
		rows := maps.Clone(replies)
		delete(rows, drop)
		return rows
	}
	with := func(of lease.Class, say answer) map[lease.Class]answer {
		rows := maps.Clone(replies)
		rows[of] = say
		return rows
	}
	for _, c := range []struct {
		what string
		ssh  func(error) verdict
		rows map[lease.Class]answer
		want []string
	}{
		{"no HTTP answer for Unavailable", sshVerdict, without(lease.Unavailable),
			[]string{"unavailable: no answer in routes' replies"}},
		{"Misconfigured a 500 over HTTP", sshVerdict, with(lease.Misconfigured, internalAnswer),
			[]string{"misconfigured: SSH says try again (exit 75 misconfigured) but HTTP does not (500"}},
		{"a 503 without Retry-After", sshVerdict, with(lease.Unavailable, answer{status: http.StatusServiceUnavailable, msg: "busy"}),
			[]string{"unavailable: HTTP 503 without Retry-After"}},
		{"SSH's fallback", func(err error) verdict {
			if lease.Classify(err).Class == lease.Closed {
				return sshVerdict(errors.New("no sentinel"))
			}
			return sshVerdict(err)
		}, replies, []string{"closed: SSH answers it as an internal error"}},
	} {
		got := strings.Join(checkClasses(lease.Classes(), c.ssh, httpVerdict(c.rows)), "\n")
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: the check does not report %q; it says:\n%s", c.what, w, got)
			}
		}
	}
}

// The replies the classification decides rather than inherits: a
// misconfigured sidecar and a canceled request say "try again" (as SSH's
// exit 75), and the forge's not-found is a repository's not-found.
func TestRepliesOfTheDecidedErrors(t *testing.T) {
	for _, c := range []struct {
		err        error
		status     int
		body       string
		retryAfter string
	}{
		{fmt.Errorf("token: %w: fix it", forge.ErrConfig), 503,
			`{"error":"the sidecar is misconfigured; ask the forge admin to run collab-sidecar doctor"}`, "60"},
		{fmt.Errorf("list: %w", context.Canceled), 503, `{"error":"temporarily unavailable, try again"}`, "5"},
		{fmt.Errorf("list: %w", context.DeadlineExceeded), 503, `{"error":"temporarily unavailable, try again"}`, "5"},
		{fmt.Errorf("issue: %w", forge.ErrNotFound), 404, `{"error":"not found"}`, ""},
		{errors.New("disk I/O error"), 500, `{"error":"internal error"}`, ""},
	} {
		w := failWith(c.err, slog.New(slog.DiscardHandler))
		if w.Code != c.status || w.Body.String() != c.body || w.Header().Get("Retry-After") != c.retryAfter {
			t.Errorf("fail(%v): %d %s Retry-After %q, want %d %s %q", c.err, w.Code, w.Body, w.Header().Get("Retry-After"),
				c.status, c.body, c.retryAfter)
		}
	}
}

// The forge's not-found, should one reach the transport, is answered
// exactly as a repository the viewer may not see (which is answered as
// one that does not exist): nothing tells them apart. Unlike that one, it
// is logged, as an error: it is a bug of the lease service.
func TestForgeNotFoundRevealsNothing(t *testing.T) {
	var logged strings.Builder
	hidden := failWith(fmt.Errorf("acme/secret: %w", lease.ErrRepoNotFound), slog.New(slog.NewTextHandler(&logged, nil)))
	if logged.Len() != 0 {
		t.Errorf("a hidden repository is logged: %s", logged.String())
	}
	leaked := failWith(fmt.Errorf("issue 42: %w", forge.ErrNotFound), slog.New(slog.NewTextHandler(&logged, nil)))
	if leaked.Code != hidden.Code || leaked.Body.String() != hidden.Body.String() ||
		fmt.Sprint(leaked.Header()) != fmt.Sprint(hidden.Header()) {
		t.Errorf("forge.ErrNotFound: %d %v %s; a hidden repository: %d %v %s", leaked.Code, leaked.Header(), leaked.Body,
			hidden.Code, hidden.Header(), hidden.Body)
	}
	if !strings.Contains(logged.String(), "level=ERROR") || !strings.Contains(logged.String(), "issue 42") {
		t.Errorf("forge.ErrNotFound is not logged as an error: %q", logged.String())
	}
}

// This transport's own refusals keep their replies.
func TestRepliesOfTheOwnRefusals(t *testing.T) {
	for _, c := range []struct {
		err        error
		status     int
		body       string
		retryAfter string
		challenge  bool
	}{
		{malformed("issue number must be a positive integer"), 400, `{"error":"issue number must be a positive integer"}`, "", false},
		{unprocessable("this write takes no ttl"), 422, `{"error":"this write takes no ttl"}`, "", false},
		{fmt.Errorf("callback: %w", errSignInState), 400,
			`{"error":"sign-in does not match the one this browser started: start again from Gitea"}`, "", false},
		{fmt.Errorf("%w: %w", errSignIn, forge.ErrNotFound), 400, `{"error":"sign-in failed or expired: start again from Gitea"}`, "", false},
		{errSignInCookie, 400,
			`{"error":"sign-in was not started in this browser, or its cookie is invalid: start again from Gitea"}`, "", false},
		{errSignInExpired, 400, `{"error":"sign-in took longer than 10 minutes and expired: start again from Gitea"}`, "", false},
		{fmt.Errorf("%w: %w", errUnauthorized, forge.ErrNotFound), 401, `{"error":"invalid token"}`, "", true},
		{errTokenRequired, 401, `{"error":"writes need an API token: Authorization: token \u003cgitea token\u003e"}`, "", true},
		{errTooManyStreams, 429, `{"error":"too many event streams: close one and try again"}`, "10", false},
		{errShuttingDown, 503, `{"error":"temporarily unavailable, try again"}`, "5", false},
	} {
		w := failWith(c.err, slog.New(slog.DiscardHandler))
		challenge := w.Header().Get("WWW-Authenticate") != ""
		if w.Code != c.status || w.Body.String() != c.body || w.Header().Get("Retry-After") != c.retryAfter || challenge != c.challenge {
			t.Errorf("fail(%v): %d %s Retry-After %q challenge %v, want %d %s %q %v", c.err, w.Code, w.Body,
				w.Header().Get("Retry-After"), challenge, c.status, c.body, c.retryAfter, c.challenge)
		}
	}
}

// failWith is the reply of fail to a request that fails with err.
func failWith(err error, log *slog.Logger) *httptest.ResponseRecorder {
	gin.SetMode(gin.ReleaseMode)
	h := &handler{log: log}
	w := httptest.NewRecorder()
	ctx, _ := gin.CreateTestContext(w)
	ctx.Request = httptest.NewRequest(http.MethodGet, "/api/v1/repos/acme/widgets/leases", nil)
	h.fail(ctx, err)
	return w
}

// A verdict is how one transport answers one error.
type verdict struct {
	row   bool   // its table answers it, not its fallback
	retry bool   // the answer says "try again"
	says  string // the answer, for messages
	odd   string // what is inconsistent in the answer itself
}

// errorOf is an error of class c, as the service or a transport makes one.
func errorOf(c lease.Class) error {
	if c == lease.Conflict {
		return &lease.ConflictError{Reply: contract.Conflict{Status: contract.StatusHeld, Repo: "acme/widgets", Issue: 42}}
	}
	return &lease.Refusal{Class: c, Msg: "refused as " + c.String()}
}

// checkClasses reports each class that a transport answers with its
// fallback (or not at all), or that the two transports disagree on
// retrying, or whose answer disagrees with the class's Retry.
func checkClasses(classes []lease.Class, sshOf, httpOf func(error) verdict) []string {
	var out []string
	for _, c := range classes {
		// Wrapped, as the service returns them.
		err := fmt.Errorf("acquire acme/widgets#42: %w", errorOf(c))
		s, h := sshOf(err), httpOf(err)
		if c != lease.Internal && !s.row {
			out = append(out, fmt.Sprintf("%s: SSH answers it as an internal error (%s)", c, s.says))
		}
		if !h.row {
			out = append(out, fmt.Sprintf("%s: no answer in routes' replies", c))
			continue
		}
		if h.odd != "" {
			out = append(out, fmt.Sprintf("%s: HTTP %s", c, h.odd))
		}
		switch {
		case s.retry && !h.retry:
			out = append(out, fmt.Sprintf("%s: SSH says try again (%s) but HTTP does not (%s)", c, s.says, h.says))
		case !s.retry && h.retry:
			out = append(out, fmt.Sprintf("%s: HTTP says try again (%s) but SSH does not (%s)", c, h.says, s.says))
		case s.retry != c.Retry():
			out = append(out, fmt.Sprintf("%s: both transports say try again is %v, the class %v", c, s.retry, c.Retry()))
		}
	}
	return out
}

// sshVerdict is the verb's answer to a command whose call of the lease
// service fails with err.
func sshVerdict(err error) verdict {
	answer := func(err error) ssh.Reply {
		v := &ssh.LeaseVerb{Leases: failingLeases{err: err}, Logger: slog.New(slog.DiscardHandler)}
		return v.Exec(context.Background(), ssh.ConnInfo{Fingerprint: "SHA256:test", UserID: 1, Login: "alice"},
			"collab-lease list acme/widgets")
	}
	r, fallback := answer(err), answer(errors.New("no sentinel"))
	return verdict{
		row:   r.Outcome != fallback.Outcome,
		retry: r.Code == contract.ExitTempFail,
		says:  fmt.Sprintf("exit %d %s", r.Code, r.Outcome),
	}
}

// failingLeases is a lease service whose every call fails with err (the
// first call of every command re-resolves the key).
type failingLeases struct {
	ssh.Leases
	err error
}

func (f failingLeases) Recheck(context.Context, string, forge.User) (lease.Viewer, error) {
	return lease.Viewer{}, f.err
}

// httpVerdict is the reply, from the table rows, to a request that fails
// with err, as fail writes it.
func httpVerdict(rows map[lease.Class]answer) func(error) verdict {
	gin.SetMode(gin.ReleaseMode) // as New does
	return func(err error) verdict {
		info := lease.Classify(err)
		a, ok := rows[info.Class]
		if !ok {
			return verdict{says: "no answer"}
		}
		w := httptest.NewRecorder()
		c, _ := gin.CreateTestContext(w)
		a.write(c, info)
		after := w.Header().Get("Retry-After")
		v := verdict{row: true, retry: after != "", says: fmt.Sprintf("%d %s", w.Code, strings.TrimSpace(w.Body.String()))}
		tryAgain := w.Code == http.StatusTooManyRequests || w.Code == http.StatusServiceUnavailable
		switch {
		case tryAgain && after == "":
			v.odd = fmt.Sprintf("%d without Retry-After", w.Code)
		case !tryAgain && after != "":
			v.odd = fmt.Sprintf("%d with Retry-After", w.Code)
		}
		return v
	}
}
