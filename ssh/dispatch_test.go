package ssh

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// The answers the classification decides rather than inherits: a
// misconfigured sidecar and a canceled command are exit 75 (as HTTP's
// 503), the forge's not-found is a repository's not-found (logged, with
// an outcome of its own), and whatever it does not know is an internal
// error.
func TestExitCodesOfTheDecidedErrors(t *testing.T) {
	for _, c := range []struct {
		err    error
		want   Reply
		logged bool
	}{
		{fmt.Errorf("token: %w: fix it", forge.ErrConfig),
			Reply{Stderr: contract.LineMisconfigured + "\n", Code: contract.ExitTempFail, Outcome: "config"}, true},
		{fmt.Errorf("acquire --wait: %w", context.Canceled),
			Reply{Stderr: contract.LineCanceled + "\n", Code: contract.ExitTempFail, Outcome: "canceled"}, false},
		{fmt.Errorf("list: %w", context.DeadlineExceeded),
			Reply{Stderr: contract.LineBusy + "\n", Code: contract.ExitTempFail, Outcome: "busy"}, false},
		{fmt.Errorf("ping: %w", lease.ErrLedgerUnreachable),
			Reply{Stderr: contract.LineBusy + "\n", Code: contract.ExitTempFail, Outcome: "busy"}, false},
		{fmt.Errorf("issue: %w", forge.ErrNotFound),
			Reply{Stderr: contract.LineRepoNotFound + "\n", Code: contract.ExitError, Outcome: "forge_not_found"}, true},
		{errors.New("disk I/O error"),
			Reply{Stderr: "error: internal error\n", Code: contract.ExitError, Outcome: "internal"}, true},
	} {
		got := exitCode(c.err)
		if got.Stderr != c.want.Stderr || got.Code != c.want.Code || got.Outcome != c.want.Outcome ||
			len(got.Stdout) != 0 || (got.Err != nil) != c.logged {
			t.Errorf("exitCode(%v) = %+v, want %+v (logged %v)", c.err, got, c.want, c.logged)
		}
	}
}

// The forge's not-found, should one reach the verb, is answered exactly
// as a repository the caller may not see (which is answered as one that
// does not exist): nothing the client reads tells them apart. Unlike that
// one, its detail goes to the log: it is a bug of the lease service.
func TestForgeNotFoundRevealsNothing(t *testing.T) {
	hidden := exitCode(fmt.Errorf("acme/secret: %w", lease.ErrRepoNotFound))
	leaked := exitCode(fmt.Errorf("issue 42: %w", forge.ErrNotFound))
	if leaked.Code != hidden.Code || leaked.Stderr != hidden.Stderr || string(leaked.Stdout) != string(hidden.Stdout) {
		t.Errorf("forge.ErrNotFound: exit %d %q %q; a hidden repository: exit %d %q %q",
			leaked.Code, leaked.Stdout, leaked.Stderr, hidden.Code, hidden.Stdout, hidden.Stderr)
	}
	if hidden.Err != nil || leaked.Err == nil {
		t.Errorf("logged: a hidden repository %v, forge.ErrNotFound %v; want only the latter", hidden.Err, leaked.Err)
	}
}

// Every class has its exit code: 4 for a conflict, 75 exactly for the
// classes that say "try again", 1 for the rest.
func TestEveryClassHasAnExitCode(t *testing.T) {
	for _, c := range lease.Classes() {
		want := contract.ExitError
		switch {
		case c == lease.Conflict:
			want = contract.ExitConflict
		case c.Retry():
			want = contract.ExitTempFail
		}
		if got := exitOf(c); got != want {
			t.Errorf("exitOf(%s) = %d, want %d", c, got, want)
		}
	}
}
