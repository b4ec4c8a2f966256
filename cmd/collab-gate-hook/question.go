package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// The environment Gitea gives its hooks (modules/repository/env.go), and
// git's push options.
const (
	envRepoID      = "GITEA_REPO_ID"
	envOwner       = "GITEA_REPO_USER_NAME"
	envRepo        = "GITEA_REPO_NAME"
	envPusherID    = "GITEA_PUSHER_ID"
	envPusher      = "GITEA_PUSHER_NAME"
	envKeyID       = "GITEA_KEY_ID"
	envTrigger     = "GITEA_PUSH_TRIGGER"
	envPullIndex   = "GITEA_PR_INDEX"
	envInternal    = "GITEA_INTERNAL_PUSH"
	envOptionCount = "GIT_PUSH_OPTION_COUNT"
	envOptionN     = "GIT_PUSH_OPTION_" // + the option's index from 0
)

// mergeTrigger is GITEA_PUSH_TRIGGER for Gitea's merge of a pull
// request, whose question carries no paths.
const mergeTrigger = "pr-merge-to-base"

// maxRefLine bounds one line of the hook's stdin: two object names and a
// ref name, which git keeps far shorter.
const maxRefLine = 16 << 10

// internal says whether Gitea marked the push as its own (opening a pull
// request pushes refs/pull/<n>/head so): the gate lets it in unasked.
func internal(getenv func(string) string) bool {
	return getenv(envInternal) == "true"
}

// A refusal is why a push cannot even be asked about: its message is the
// one line the pusher reads, and the push is refused.
type refusal string

func (r refusal) Error() string { return string(r) }

func refused(format string, args ...any) error {
	return refusal(fmt.Sprintf("collab-lease: "+format+"; this push was refused", args...))
}

// readQuestion builds the question about one push from the environment
// and the "<old> <new> <ref>" lines on stdin, within the contract's
// bounds. Its errors are refusals.
func readQuestion(getenv func(string) string, stdin io.Reader) (contract.GateQuestion, error) {
	q := contract.GateQuestion{
		Owner:    getenv(envOwner),
		Repo:     getenv(envRepo),
		Pusher:   getenv(envPusher),
		Trigger:  getenv(envTrigger),
		Internal: internal(getenv),
		Options:  []string{},
		Refs:     []contract.GateRef{},
	}
	for _, f := range []struct {
		name string
		to   *int64
	}{{envRepoID, &q.RepoID}, {envPusherID, &q.PusherID}, {envKeyID, &q.KeyID}, {envPullIndex, &q.PullIndex}} {
		n, err := number(getenv, f.name)
		if err != nil {
			return contract.GateQuestion{}, err
		}
		*f.to = n
	}
	count, err := number(getenv, envOptionCount)
	if err != nil {
		return contract.GateQuestion{}, err
	}
	if count > contract.MaxGateOptions {
		return contract.GateQuestion{}, refused("this push carries %d push options, more than %d", count, contract.MaxGateOptions)
	}
	for i := range count {
		q.Options = append(q.Options, getenv(envOptionN+strconv.FormatInt(i, 10)))
	}
	if q.Refs, err = readRefs(stdin); err != nil {
		return contract.GateQuestion{}, err
	}
	return q, nil
}

// number reads a variable holding a decimal number: 0 when it is unset
// or empty (Gitea sets GITEA_KEY_ID over SSH only).
func number(getenv func(string) string, name string) (int64, error) {
	s := getenv(name)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		if len(s) > 32 {
			s = s[:32] + "…"
		}
		return 0, refused("%s=%q is not a number", name, s)
	}
	return n, nil
}

// readRefs reads the hook's stdin: one "<old> <new> <ref>" line per ref,
// at most contract.MaxGateRefs of them, and contract.MaxGateQuestion
// bytes in all. Blank lines are skipped: Gitea's pre-receive script hands
// each hook its stdin through echo, which ends it with a newline even
// when there was nothing.
func readRefs(stdin io.Reader) ([]contract.GateRef, error) {
	refs := []contract.GateRef{}
	lines := bufio.NewScanner(io.LimitReader(stdin, contract.MaxGateQuestion+1))
	lines.Buffer(make([]byte, 0, 4096), maxRefLine)
	read := 0
	for lines.Scan() {
		line := lines.Text()
		if read += len(line) + 1; read > contract.MaxGateQuestion {
			return nil, refused("this push's list of refs is larger than %d MiB; push fewer refs at a time", contract.MaxGateQuestion>>20)
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		if len(refs) == contract.MaxGateRefs {
			return nil, refused("this push updates more than %d refs; push fewer at a time", contract.MaxGateRefs)
		}
		ref, ok := parseRef(line)
		if !ok {
			if len(line) > 100 {
				line = line[:100] + "…"
			}
			return nil, refused("the hook read a line it does not understand: %q", line)
		}
		refs = append(refs, ref)
	}
	if err := lines.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, refused("a line of this push's refs is longer than %d KiB", maxRefLine>>10)
		}
		return nil, refused("reading the push's refs: %v", err)
	}
	return refs, nil
}

// parseRef reads one "<old> <new> <ref>" line: two object names in hex
// (SHA-1 or SHA-256) and a ref name.
func parseRef(line string) (contract.GateRef, bool) {
	old, rest, ok1 := strings.Cut(line, " ")
	next, name, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || !objectName(old) || !objectName(next) || name == "" || strings.ContainsAny(name, " \t\r") {
		return contract.GateRef{}, false
	}
	return contract.GateRef{Old: old, New: next, Name: name}, true
}

// objectName says whether s is an object name as git writes one: 40 or
// 64 lower-case hex digits.
func objectName(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
