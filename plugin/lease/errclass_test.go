package lease_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// lease.Classify classifies every error of the lease service, the forge,
// the live hub, the ledger and the contract that the transports may be
// handed; they answer it by its class (ssh's exitOf, routes' replies,
// whose own tests hold them to every class).

// sentinelDirs are the packages whose exported sentinels (package-level
// variables named Err…) and error types (exported types with an Error
// method) the transports may be handed.
var sentinelDirs = []string{".", "../forge", "../live", "../../models", "../contract"}

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
	"*lease.Refusal":                &lease.Refusal{Class: lease.Unavailable, Msg: "shutting down"},
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
	"contract.ErrUsage":             contract.ErrUsage,
	"*contract.UsageError":          &contract.UsageError{Detail: "unknown verb \"frob\""},
	"context.Canceled":              context.Canceled,
	"context.DeadlineExceeded":      context.DeadlineExceeded,
}

// stdlibErrors are the entries of sentinelValues the walk does not find.
var stdlibErrors = []string{"context.Canceled", "context.DeadlineExceeded"}

// notSeen are the sentinels no transport is handed, and why.
var notSeen = map[string]string{
	"lease.ErrConflict":        "only ever what a *lease.ConflictError is (its Is); the *ConflictError row answers it",
	"lease.ErrReconciling":     "only Service.Reconcile returns it, to collab-sidecar serve's loop, which skips that turn",
	"live.ErrFellBehind":       "it ends an event stream whose 200 was sent (routes/events.go); the browser resumes from its last id",
	"models.ErrHeld":           "the lease service answers it as a *lease.ConflictError (held)",
	"*models.HeldError":        "the lease service answers it as a *lease.ConflictError (held)",
	"models.ErrNotHolder":      "the lease service answers it as a *lease.ConflictError (not_holder)",
	"*models.NotHolderError":   "the lease service answers it as a *lease.ConflictError (not_holder)",
	"models.ErrClosed":         "the lease service answers it as lease.ErrIssueClosed",
	"models.ErrCooling":        "the lease service answers it as a *lease.ConflictError (cooling)",
	"models.ErrLimit":          "the lease service answers it as a *lease.ConflictError (limit)",
	"models.ErrAlreadyHolder":  "the lease service answers it as a *lease.TargetHoldsError",
	"forge.ErrExists":          "only the fence worker meets it, making a branch rule; no request is answered with it",
	"*models.LimitError":       "the lease service answers it as a *lease.ConflictError (limit)",
	"*models.CoolingError":     "the lease service answers it as a *lease.ConflictError (cooling)",
	"models.ErrQuarantined":    "the lease service answers it as a *lease.ConflictError (quarantined)",
	"*models.QuarantinedError": "the lease service answers it as a *lease.ConflictError (quarantined)",
	"models.ErrNoneFree":       "next answers it as a *lease.ConflictError (none)",
	"*models.UnverifiedError":  "next asks the forge about the candidates it names and tries again",
	"lease.ErrSessionLost":     "only Session.Run returns it, to the SSH session, which ends the session as a loss (ssh/agentsession.go)",
	"lease.ErrSessionIdle":     "only Session.Run returns it, to the SSH session, which ends the session cleanly (ssh/agentsession.go)",

	// The merge's answers (plugin/forge/merge.go, models/merges.go).
	"forge.ErrMergeNotYet":     "Service.Merge waits it out (merge.go); no transport is handed it",
	"forge.ErrBaseMoved":       "Service.Merge tries once more, then answers a *lease.ConflictError (refused)",
	"*forge.MergeRefusedError": "Service.Merge answers it as a *lease.ConflictError (refused)",
	"models.ErrMergeBusy":      "Service.Merge waits it out, then answers a *lease.ConflictError (busy)",
	"*models.MergeBusyError":   "Service.Merge waits it out, then answers a *lease.ConflictError (busy)",
	"models.ErrStale":          "Service.Merge answers it as a *lease.ConflictError (stale)",
	"*models.StaleTokenError":  "Service.Merge answers it as a *lease.ConflictError (stale)",
	"models.ErrReserved":       "Service.Reserve turns it into a ConflictError (reserve.go)",
	"*models.ReservedError":    "Service.Reserve turns it into a ConflictError (reserve.go)",
}

// Every sentinel and error type the transports may be handed has its one
// class, decided by a row of the classification, not by its fallback.
func TestClassifyAnswersEverySentinel(t *testing.T) {
	var found []string
	for _, dir := range sentinelDirs {
		names, err := sentinelsIn(dir)
		if err != nil {
			t.Fatal(err)
		}
		found = append(found, names...)
	}
	for _, must := range []string{"lease.ErrBusy", "*lease.ConflictError", "forge.ErrConfig", "models.ErrUnreachable", "contract.ErrUsage"} {
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
			t.Errorf("%s is a new sentinel: give it a row in lease's classified (errclass.go) "+
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
	for _, p := range checkClassified(checked, lease.Classify) {
		t.Error(p)
	}
}

// The check fails where it should: it finds sentinels and error types in
// source, and reports an error left to the fallback and an answer that is
// not whole.
func TestClassifyCheckCanFail(t *testing.T) {
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

	if info := lease.Classify(errors.New("no sentinel")); info.Class != lease.Internal || info.Outcome != "internal" {
		t.Fatalf("an unknown error is %+v: the check cannot see a missing row", info)
	}
	errs := []namedError{{"lease.ErrBusy", lease.ErrBusy}, {"lease.ErrTryAgain", lease.ErrTryAgain}}
	for _, c := range []struct {
		what     string
		classify func(error) lease.Info
		want     string
	}{
		{"no row for ErrBusy", func(err error) lease.Info {
			if errors.Is(err, lease.ErrBusy) {
				return lease.Classify(errors.New("no sentinel"))
			}
			return lease.Classify(err)
		}, "lease.ErrBusy: no row of lease's classified answers it"},
		{"a row without a line", func(err error) lease.Info {
			info := lease.Classify(err)
			if errors.Is(err, lease.ErrTryAgain) {
				info.Line = ""
			}
			return info
		}, `lease.ErrTryAgain: its line "" is no error line`},
		{"a row without an outcome", func(err error) lease.Info {
			info := lease.Classify(err)
			info.Outcome = ""
			return info
		}, "lease.ErrBusy: no outcome"},
	} {
		got := strings.Join(checkClassified(errs, c.classify), "\n")
		if !strings.Contains(got, c.want) {
			t.Errorf("%s: the check does not report %q; it says:\n%s", c.what, c.want, got)
		}
	}
}

// The decided answers: the forge's not-found reveals nothing (it is
// answered as a repository the viewer may not see, yet logged, as a bug
// of the service), a misconfigured sidecar and a canceled request say
// "try again", and the ledger's two kinds of busy differ only in Health.
func TestClassifyTheDecidedErrors(t *testing.T) {
	hidden := lease.Classify(fmt.Errorf("acme/secret: %w", lease.ErrRepoNotFound))
	leaked := lease.Classify(fmt.Errorf("issue: %w", forge.ErrNotFound))
	if leaked.Class != hidden.Class || leaked.Line != hidden.Line || leaked.Retry() || !leaked.Logged ||
		leaked.Outcome != "forge_not_found" {
		t.Errorf("forge.ErrNotFound is %+v; want the answer of a hidden repository (%+v), logged, as forge_not_found", leaked, hidden)
	}
	for _, c := range []struct {
		err  error
		want lease.Info
	}{
		{fmt.Errorf("token: %w: fix it", forge.ErrConfig), lease.Info{Class: lease.Misconfigured, Line: contract.LineMisconfigured,
			Outcome: "config", Logged: true, Health: "misconfigured (see the sidecar's log)"}},
		{fmt.Errorf("GET /api/v1/version: %w: %w", forge.ErrConfig, forge.ErrNotFound), lease.Info{Class: lease.Misconfigured,
			Line: contract.LineMisconfigured, Outcome: "config", Logged: true, Health: "misconfigured (see the sidecar's log)"}},
		{fmt.Errorf("acquire --wait: %w", context.Canceled), lease.Info{Class: lease.Unavailable, Line: contract.LineCanceled, Outcome: "canceled"}},
		{fmt.Errorf("ping: %w", lease.ErrLedgerUnreachable), lease.Info{Class: lease.Unavailable, Line: contract.LineBusy, Outcome: "busy", Health: "unreachable"}},
		{fmt.Errorf("ping: %w", lease.ErrBusy), lease.Info{Class: lease.Unavailable, Line: contract.LineBusy, Outcome: "busy", Health: "busy"}},
		{fmt.Errorf("acquire: %w: no account", lease.ErrInvalid), lease.Info{Class: lease.Invalid,
			Line: "error: usage: acquire: invalid lease request: no account", Outcome: "invalid"}},
		{errors.New("disk I/O error"), lease.Info{Class: lease.Internal, Line: "error: internal error", Outcome: "internal", Logged: true}},
	} {
		if got := lease.Classify(c.err); got != c.want {
			t.Errorf("Classify(%v) = %+v, want %+v", c.err, got, c.want)
		}
	}
}

// A typed refusal's line is its own message, each time.
func TestClassifyTellsEachTypedRefusalItsOwnLine(t *testing.T) {
	for _, err := range []error{
		&lease.WriteRequiredError{Repo: "acme/widgets", Unit: "issues"},
		&lease.WriteRequiredError{Repo: "acme/gadgets", Admin: true},
		&contract.UsageError{Detail: "unknown verb \"frob\""},
		&contract.UsageError{Detail: "--ttl is required"},
		fmt.Errorf("acquire: %w: no account", lease.ErrInvalid),
		fmt.Errorf("next: %w: no account", lease.ErrInvalid),
	} {
		want := contract.ErrorLine(err.Error())
		if errors.Is(err, lease.ErrInvalid) {
			want = contract.ErrorLine("usage: " + err.Error())
		}
		if got := lease.Classify(err).Line; got != want {
			t.Errorf("Classify(%v).Line = %q, want %q", err, got, want)
		}
	}
}

// Every class has a name of its own.
func TestClassesAreNamed(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range lease.Classes() {
		name := c.String()
		if name == "" || name == "unknown" || seen[name] {
			t.Errorf("class %d is named %q", int(c), name)
		}
		seen[name] = true
	}
	if len(seen) < 10 {
		t.Fatalf("only %d classes: the check would pass vacuously", len(seen))
	}
}

type namedError struct {
	name string
	err  error
}

// checkClassified reports each error of errs (wrapped, as the service
// returns them) that classify leaves to the fallback, or answers with
// an Info that is not whole.
func checkClassified(errs []namedError, classify func(error) lease.Info) []string {
	var out []string
	for _, e := range errs {
		info := classify(fmt.Errorf("acquire acme/widgets#42: %w", e.err))
		switch {
		case info.Class == lease.Internal:
			out = append(out, fmt.Sprintf("%s: no row of lease's classified answers it (the fallback says %q)", e.name, info.Line))
		case info.Class == lease.Conflict && info.Reply == nil:
			out = append(out, fmt.Sprintf("%s: a conflict without its reply", e.name))
		case info.Class != lease.Conflict && (!strings.HasPrefix(info.Line, contract.ErrorPrefix) || info.Line == contract.ErrorPrefix):
			out = append(out, fmt.Sprintf("%s: its line %q is no error line", e.name, info.Line))
		}
		if info.Outcome == "" {
			out = append(out, fmt.Sprintf("%s: no outcome", e.name))
		}
	}
	return out
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
