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

// The answers exitCodes decides rather than inherits: a misconfigured
// sidecar and a canceled command are exit 75 (as HTTP's 503), the
// forge's not-found is an internal error of its own, and whatever the
// table does not know is an internal error.
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
			Reply{Stderr: "error: internal error\n", Code: contract.ExitError, Outcome: "forge_not_found"}, true},
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
