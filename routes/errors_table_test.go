package routes

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/ssh"
)

// The two transports answer every error of the lease service, the forge,
// the live hub and the ledger from their tables (ssh's exitCodes, and
// replies here), and agree on which of them say "try again": exit 75 over
// SSH, 429 or 503 with Retry-After over HTTP.

// sentinelDirs are the packages whose exported sentinels (package-level
// variables named Err…) and error types (exported types with an Error
// method) the transports may be handed.
var sentinelDirs = []string{"../plugin/lease", "../plugin/forge", "../plugin/live", "../models"}

// sentinelValues are the values of the sentinels the walk finds (Go has
// no lookup of a variable by its name), and of two errors of the standard
// library the transports answer deliberately. A sentinel the walk finds in
// neither this list nor notSeen fails the test.
var sentinelValues = map[string]error{
	"lease.ErrRepoNotFound":      lease.ErrRepoNotFound,
	"lease.ErrIssueNotFound":     lease.ErrIssueNotFound,
	"lease.ErrIssueClosed":       lease.ErrIssueClosed,
	"lease.ErrRevoked":           lease.ErrRevoked,
	"lease.ErrInvalid":           lease.ErrInvalid,
	"lease.ErrBusy":              lease.ErrBusy,
	"lease.ErrLedgerUnreachable": lease.ErrLedgerUnreachable,
	"lease.ErrTryAgain":          lease.ErrTryAgain,
	"lease.ErrTooManyWaiters":    lease.ErrTooManyWaiters,
	"lease.ErrTooManySessions":   lease.ErrTooManySessions,
	"lease.ErrSessionMoved":      lease.ErrSessionMoved,
	"lease.ErrSessionGone":       lease.ErrSessionGone,
	"*lease.ConflictError": &lease.ConflictError{Reply: contract.Conflict{
		Status: contract.StatusHeld, Repo: "acme/widgets", Issue: 42}},
	"*lease.WriteRequiredError":     &lease.WriteRequiredError{Repo: "acme/widgets", Unit: "issues"},
	"*lease.TargetMayNotClaimError": &lease.TargetMayNotClaimError{Login: "bob", Repo: "acme/widgets"},
	"*lease.TargetHoldsError":       &lease.TargetHoldsError{Holder: "bob/b7", Repo: "acme/widgets", Issue: 42},
	"forge.ErrNotFound":             forge.ErrNotFound,
	"forge.ErrUnavailable":          forge.ErrUnavailable,
	"forge.ErrConfig":               forge.ErrConfig,
	"forge.ErrRateLimited":          forge.ErrRateLimited,
	"models.ErrInvalid":             models.ErrInvalid,
	"models.ErrBusy":                models.ErrBusy,
	"models.ErrUnreachable":         models.ErrUnreachable,
	"models.ErrTooManySessions":     models.ErrTooManySessions,
	"models.ErrSessionMoved":        models.ErrSessionMoved,
	"models.ErrSessionGone":         models.ErrSessionGone,
	"context.Canceled":              context.Canceled,
	"context.DeadlineExceeded":      context.DeadlineExceeded,
}

// stdlibErrors are the entries of sentinelValues the walk does not find.
var stdlibErrors = []string{"context.Canceled", "context.DeadlineExceeded"}

// notSeen are the sentinels no transport is handed, and why.
var notSeen = map[string]string{
	"lease.ErrConflict":       "only ever what a *lease.ConflictError is (its Is); the *ConflictError rows answer it",
	"lease.ErrReconciling":    "only Service.Reconcile returns it, to collab-sidecar serve's loop, which skips that turn",
	"live.ErrFellBehind":      "it ends an event stream whose 200 was sent (events.go); the browser resumes from its last id",
	"models.ErrHeld":          "the lease service answers it as a *lease.ConflictError (held)",
	"*models.HeldError":       "the lease service answers it as a *lease.ConflictError (held)",
	"models.ErrNotHolder":     "the lease service answers it as a *lease.ConflictError (not_holder)",
	"*models.NotHolderError":  "the lease service answers it as a *lease.ConflictError (not_holder)",
	"models.ErrClosed":        "the lease service answers it as lease.ErrIssueClosed",
	"models.ErrCooling":       "the lease service answers it as a *lease.ConflictError (cooling)",
	"models.ErrLimit":         "the lease service answers it as a *lease.ConflictError (limit)",
	"models.ErrAlreadyHolder": "the lease service answers it as a *lease.TargetHoldsError",
	"forge.ErrExists":         "only the fence worker meets it, making a branch rule; no request is answered with it",
	"*models.LimitError":      "the lease service answers it as a *lease.ConflictError (limit)",
	"*models.CoolingError":    "the lease service answers it as a *lease.ConflictError (cooling)",
	"models.ErrNoneFree":      "next answers it as a *lease.ConflictError (none)",
	"*models.UnverifiedError": "next asks the forge about the candidates it names and tries again",
	"lease.ErrSessionLost":    "only Session.Run returns it, to the SSH session, which ends the session as a loss (ssh/agentsession.go)",
	"lease.ErrSessionIdle":    "only Session.Run returns it, to the SSH session, which ends the session cleanly (ssh/agentsession.go)",
}

func TestErrorTablesAnswerEverySentinelAlike(t *testing.T) {
	var found []string
	for _, dir := range sentinelDirs {
		names, err := sentinelsIn(dir)
		if err != nil {
			t.Fatal(err)
		}
		found = append(found, names...)
	}
	for _, must := range []string{"lease.ErrBusy", "*lease.ConflictError", "forge.ErrConfig", "models.ErrUnreachable"} {
		if !slices.Contains(found, must) {
			t.Fatalf("the walk found no %s among %v: it would pass vacuously", must, found)
		}
	}
	var checked []namedError
	for _, name := range found {
		_, seen := sentinelValues[name]
		_, unseen := notSeen[name]
		switch {
		case seen && unseen:
			t.Errorf("%s is both in sentinelValues and in notSeen", name)
		case seen:
			checked = append(checked, namedError{name, sentinelValues[name]})
		case !unseen:
			t.Errorf("%s is a new sentinel: give it a row in ssh's exitCodes and in routes' replies "+
				"(or a reason in notSeen), and its value in sentinelValues", name)
		}
	}
	for _, name := range stdlibErrors {
		checked = append(checked, namedError{name, sentinelValues[name]})
	}
	for name := range sentinelValues {
		if !slices.Contains(found, name) && !slices.Contains(stdlibErrors, name) {
			t.Errorf("sentinelValues names %s, which the walk no longer finds", name)
		}
	}
	for name := range notSeen {
		if !slices.Contains(found, name) {
			t.Errorf("notSeen names %s, which the walk no longer finds", name)
		}
	}
	for _, p := range checkErrorTables(checked, sshVerdict, httpVerdict(replies)) {
		t.Error(p)
	}
}

// The check fails where it should: it finds sentinels and error types in
// source, and reports a table without a row, two tables that disagree, and
// a "try again" without Retry-After.
func TestErrorTablesCheckCanFail(t *testing.T) {
	dir := t.TempDir()
	src := `package fake

import "errors"

var ErrA = errors.New("a")

var (
	ErrB         = other.ErrC
	errPrivate   = errors.New("private")
	ErrTyped error = typed{}
	NotAnError   = 1
)

type BadError struct{}

func (*BadError) Error() string { return "bad" }

type Value struct{}

func (Value) Error() string { return "value" }

type typed struct{}

func (typed) Error() string { return "typed" }

type Other struct{}

func (Other) Error(n int) string { return "not an error" }
`
	if err := os.WriteFile(filepath.Join(dir, "fake.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := sentinelsIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"*fake.BadError", "fake.ErrA", "fake.ErrB", "fake.ErrTyped", "fake.Value"}; !slices.Equal(got, want) {
		t.Errorf("sentinels of the synthetic package: %v, want %v", got, want)
	}

	unknown := errors.New("no sentinel")
	if sshVerdict(unknown).row || httpVerdict(replies)(unknown).row {
		t.Fatal("an unknown error has a row: the check cannot see a missing one")
	}

	without := func(drop error) []errorRow {
		return slices.DeleteFunc(slices.Clone(replies), func(r errorRow) bool { return r.is == drop })
	}
	with := func(of error, say answer) []errorRow {
		rows := slices.Clone(replies)
		for i := range rows {
			if rows[i].is == of {
				rows[i].say = say
			}
		}
		return rows
	}
	for _, c := range []struct {
		what string
		ssh  func(error) verdict
		rows []errorRow
		want []string
	}{
		{"no HTTP row for ErrBusy", sshVerdict, without(lease.ErrBusy),
			[]string{"lease.ErrBusy: no row of routes' replies", "lease.ErrBusy: SSH says try again"}},
		{"ErrConfig a 500 over HTTP", sshVerdict, with(forge.ErrConfig, internalAnswer),
			[]string{"forge.ErrConfig: SSH says try again (exit 75 config) but HTTP does not (500"}},
		{"a 503 without Retry-After", sshVerdict, with(lease.ErrBusy, answer{status: http.StatusServiceUnavailable, msg: "busy"}),
			[]string{"lease.ErrBusy: HTTP 503 without Retry-After"}},
		{"no SSH row", func(err error) verdict {
			if errors.Is(err, lease.ErrTryAgain) {
				return sshVerdict(unknown)
			}
			return sshVerdict(err)
		}, replies, []string{"lease.ErrTryAgain: no row of ssh's exitCodes"}},
	} {
		errs := []namedError{{"lease.ErrBusy", lease.ErrBusy}, {"lease.ErrTryAgain", lease.ErrTryAgain}, {"forge.ErrConfig", forge.ErrConfig}}
		got := strings.Join(checkErrorTables(errs, c.ssh, httpVerdict(c.rows)), "\n")
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: the check does not report %q; it says:\n%s", c.what, w, got)
			}
		}
	}
}

// The replies the table decides rather than inherits: a misconfigured
// sidecar and a canceled request say "try again" (as SSH's exit 75).
func TestRepliesOfTheDecidedErrors(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	h := &handler{log: slog.New(slog.DiscardHandler)}
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
		{errors.New("disk I/O error"), 500, `{"error":"internal error"}`, ""},
	} {
		w := httptest.NewRecorder()
		ctx, _ := gin.CreateTestContext(w)
		ctx.Request = httptest.NewRequest(http.MethodGet, "/api/v1/repos/acme/widgets/leases", nil)
		h.fail(ctx, c.err)
		if w.Code != c.status || w.Body.String() != c.body || w.Header().Get("Retry-After") != c.retryAfter {
			t.Errorf("fail(%v): %d %s Retry-After %q, want %d %s %q", c.err, w.Code, w.Body, w.Header().Get("Retry-After"),
				c.status, c.body, c.retryAfter)
		}
	}
}

type namedError struct {
	name string
	err  error
}

// A verdict is how one transport answers one error.
type verdict struct {
	row   bool   // a row of its table answers it, not the fallback
	retry bool   // the answer says "try again"
	says  string // the answer, for messages
	odd   string // what is inconsistent in the answer itself
}

// checkErrorTables reports each error of errs that a transport answers
// with its fallback, or that the two transports disagree on retrying.
func checkErrorTables(errs []namedError, sshOf, httpOf func(error) verdict) []string {
	var out []string
	for _, e := range errs {
		// Wrapped, as the service returns them.
		err := fmt.Errorf("acquire acme/widgets#42: %w", e.err)
		s, h := sshOf(err), httpOf(err)
		if !s.row {
			out = append(out, fmt.Sprintf("%s: no row of ssh's exitCodes answers it (the fallback says %s)", e.name, s.says))
		}
		if !h.row {
			out = append(out, fmt.Sprintf("%s: no row of routes' replies answers it (the fallback says %s)", e.name, h.says))
		}
		if h.odd != "" {
			out = append(out, fmt.Sprintf("%s: HTTP %s", e.name, h.odd))
		}
		switch {
		case s.retry && !h.retry:
			out = append(out, fmt.Sprintf("%s: SSH says try again (%s) but HTTP does not (%s)", e.name, s.says, h.says))
		case !s.retry && h.retry:
			out = append(out, fmt.Sprintf("%s: HTTP says try again (%s) but SSH does not (%s)", e.name, h.says, s.says))
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
func httpVerdict(rows []errorRow) func(error) verdict {
	gin.SetMode(gin.ReleaseMode) // as New does
	return func(err error) verdict {
		r := lookup(rows, err)
		w := httptest.NewRecorder()
		c, _ := gin.CreateTestContext(w)
		r.say.write(c, err)
		after := w.Header().Get("Retry-After")
		v := verdict{row: r != &internalReply, retry: after != "", says: fmt.Sprintf("%d %s", w.Code, strings.TrimSpace(w.Body.String()))}
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

// sentinelsIn lists the exported sentinels of the package in dir, as
// pkg.ErrX, and its exported error types, as pkg.T or *pkg.T (after the
// receiver of their Error method).
func sentinelsIn(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var out []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		pkg := f.Name.Name
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				if d.Tok != token.VAR {
					continue
				}
				for _, spec := range d.Specs {
					for _, id := range spec.(*ast.ValueSpec).Names {
						if id.IsExported() && strings.HasPrefix(id.Name, "Err") {
							out = append(out, pkg+"."+id.Name)
						}
					}
				}
			case *ast.FuncDecl:
				if d.Recv == nil || d.Name.Name != "Error" || d.Type.Params.NumFields() != 0 ||
					d.Type.Results.NumFields() != 1 || !isIdent(d.Type.Results.List[0].Type, "string") {
					continue
				}
				recv, star := d.Recv.List[0].Type, ""
				if s, ok := recv.(*ast.StarExpr); ok {
					recv, star = s.X, "*"
				}
				if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
					out = append(out, star+pkg+"."+id.Name)
				}
			}
		}
	}
	return out, nil
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}
