package ssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

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

// mergeLeases is a lease service whose merge answers merged or err, as
// the test says, after telling its caller the places in ahead; it keeps
// what it was asked. Its every other call is not expected.
type mergeLeases struct {
	Leases
	merged contract.Merged
	err    error
	ahead  []int

	asked  lease.MergeRequest
	viewer lease.Viewer
	repo   string
}

func (f *mergeLeases) Recheck(_ context.Context, _ string, was forge.User) (lease.Viewer, error) {
	return lease.Viewer{User: was}, nil
}

func (f *mergeLeases) Merge(_ context.Context, v lease.Viewer, owner, name string, m lease.MergeRequest, told func(ahead int)) (contract.Merged, error) {
	f.viewer, f.repo, f.asked = v, owner+"/"+name, m
	for _, n := range f.ahead {
		told(n)
	}
	return f.merged, f.err
}

// Each answer of merge, as the verb gives it: merged is exit 0, the
// refusals the service answers with the contract's JSON (refused, busy,
// stale, not_holder) exit 4 with that JSON, a forge that cannot be
// reached exit 75, and the rest their error line, exit 1. While it waits
// for its turn the caller hears its place on stderr, as acquire --wait's
// callers do.
func TestMergeAnswersByItsReply(t *testing.T) {
	alice := ConnInfo{Fingerprint: "SHA256:a", UserID: 7, Login: "alice"}
	token := int64(9)
	for _, c := range []struct {
		name    string
		merged  contract.Merged
		err     error
		code    int
		stdout  string
		stderr  string
		outcome string
	}{
		{name: "merged", merged: contract.Merged{Status: contract.StatusMerged, Repo: "acme/widgets", Pull: 7, SHA: "0123abcd", Issue: 7, Token: 3},
			code: contract.ExitOK, stdout: `{"status":"merged","repo":"acme/widgets","pull":7,"sha":"0123abcd","issue":7,"token":3}` + "\n", outcome: contract.StatusMerged},
		{name: "refused", err: &lease.ConflictError{Reply: contract.MergeRefused{Status: contract.StatusRefused, Repo: "acme/widgets", Pull: 7, Reason: "Please try again later"}},
			code: contract.ExitConflict, stdout: `{"status":"refused","repo":"acme/widgets","pull":7,"reason":"Please try again later"}` + "\n", outcome: contract.StatusRefused},
		{name: "busy", err: &lease.ConflictError{Reply: contract.MergeBusy{Status: contract.StatusBusy, Repo: "acme/widgets", Pull: 7, Ahead: 2}},
			code: contract.ExitConflict, stdout: `{"status":"busy","repo":"acme/widgets","pull":7,"ahead":2}` + "\n", outcome: contract.StatusBusy},
		{name: "stale", err: &lease.ConflictError{Reply: contract.Stale{Status: contract.StatusStale, Repo: "acme/widgets", Issue: 7, Token: &token}},
			code: contract.ExitConflict, stdout: `{"status":"stale","repo":"acme/widgets","issue":7,"token":9}` + "\n", outcome: contract.StatusStale},
		{name: "not the holder", err: &lease.ConflictError{Reply: contract.Conflict{Status: contract.StatusNotHolder, Repo: "acme/widgets", Issue: 7}},
			code: contract.ExitConflict, stdout: `{"status":"not_holder","repo":"acme/widgets","issue":7,"holder":null,"agent":null,"expires_at":null}` + "\n", outcome: contract.StatusNotHolder},
		{name: "Gitea unreachable", err: fmt.Errorf("merge: %w", forge.ErrUnavailable),
			code: contract.ExitTempFail, stderr: contract.LineForgeUnavailable + "\n", outcome: "forge_unavailable"},
		{name: "an invisible repository", err: fmt.Errorf("acme/widgets: %w", lease.ErrRepoNotFound),
			code: contract.ExitError, stderr: contract.LineRepoNotFound + "\n", outcome: "repo_not_found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &mergeLeases{merged: c.merged, err: c.err, ahead: []int{2, 0}}
			v := &LeaseVerb{Leases: f, Logger: slog.New(slog.DiscardHandler)}
			var waiting bytes.Buffer
			got := v.ExecStreaming(context.Background(), alice, "collab-lease merge acme/widgets '#7' --token 3 --style squash --delete-branch --wait 30s --agent agent-7", &waiting)
			if got.Code != c.code || string(got.Stdout) != c.stdout || got.Stderr != c.stderr || got.Outcome != c.outcome {
				t.Errorf("got exit %d %q %q (%s), want exit %d %q %q (%s)", got.Code, got.Stdout, got.Stderr, got.Outcome, c.code, c.stdout, c.stderr, c.outcome)
			}
			if want := (lease.MergeRequest{Pull: 7, Token: 3, Style: "squash", DeleteBranch: true, Wait: 30 * time.Second}); f.asked != want {
				t.Errorf("asked %+v, want %+v", f.asked, want)
			}
			if f.repo != "acme/widgets" || f.viewer.Login != "alice" || f.viewer.Agent != "agent-7" {
				t.Errorf("merged %s as %+v", f.repo, f.viewer)
			}
			if waiting.String() != "waiting: 2 ahead of you\nwaiting: 0 ahead of you\n" {
				t.Errorf("stderr while waiting: %q", waiting.String())
			}
		})
	}
}

// A merge without flags asks for the caller's current token, the forge's
// own style, and the default wait for its turn.
func TestMergeDefaults(t *testing.T) {
	f := &mergeLeases{merged: contract.Merged{Status: contract.StatusMerged, Repo: "acme/widgets", Pull: 7, SHA: "0123abcd", Issue: 7, Token: 3}}
	v := &LeaseVerb{Leases: f, Logger: slog.New(slog.DiscardHandler)}
	r := v.Exec(context.Background(), ConnInfo{Fingerprint: "SHA256:a", UserID: 7, Login: "alice"}, "collab-lease merge acme/widgets 7")
	if r.Code != contract.ExitOK {
		t.Fatalf("%+v", r)
	}
	if want := (lease.MergeRequest{Pull: 7, Wait: contract.DefaultMergeWait}); f.asked != want {
		t.Errorf("asked %+v, want %+v", f.asked, want)
	}
}

// A command may run for the server's bound and, on top of it, what it
// waits for; a merge also for the time the sidecar gives itself to merge.
func TestCommandsRunForTheirWaits(t *testing.T) {
	v := &LeaseVerb{}
	def := 15 * time.Second
	for line, want := range map[string]time.Duration{
		"collab-lease acquire acme/widgets 42":                    def,
		"collab-lease acquire acme/widgets 42 --wait 5m":          def + 5*time.Minute,
		"collab-lease merge acme/widgets 7":                       def + contract.DefaultMergeWait + contract.MergeTicketMax,
		"collab-lease merge acme/widgets 7 --wait 10m":            def + 10*time.Minute + contract.MergeTicketMax,
		"collab-lease merge acme/widgets 7 --style nonsense":      def, // not run at all
		"collab-lease next acme/widgets --wait 1m --label bug":    def + time.Minute,
		"collab-lease check acme/widgets 42 --token 3 --agent a1": def,
	} {
		if got := v.Timeout(line, def); got != want {
			t.Errorf("%s: %s, want %s", line, got, want)
		}
	}
}
