package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// lister lists the paths a push changes: repository.changedPaths.
type lister interface {
	changedPaths(ctx context.Context, refs []contract.GateRef, budget int) (paths []string, dirs bool, err error)
}

var _ lister = repository{}

// preReceive is the hook: it asks the sidecar about the push, with the
// paths repo lists, and returns the exit status Gitea goes by.
func preReceive(dir string, getenv func(string) string, repo lister, stdin io.Reader, stderr io.Writer) int {
	if internal(getenv) {
		// Gitea's own pushes (a pull request's refs/pull/<n>/head) are
		// let in unasked: the ledger allows them whatever it holds.
		return exitAllow
	}
	g, err := loadGate(dir)
	if err != nil {
		// Let the push in, saying so. Only the sidecar puts this
		// program and its script in place, and it writes the
		// configuration first (plugin/gatehook.Prepare): a missing or
		// unreadable one means a gate half installed or half removed,
		// or a secret Gitea's account may not read. Whoever can take
		// the configuration away can take the script away too, so
		// refusing would protect nothing, and would stop every push
		// to every repository until someone noticed.
		fmt.Fprintf(stderr, "collab-lease: the gate is not configured (%v); this push was not checked\n", err)
		return exitAllow
	}
	// The timeout bounds the whole question: listing the paths takes
	// half of it at most, and the sidecar has what is left.
	deadline := time.Now().Add(g.timeout)
	q, err := readQuestion(getenv, stdin)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitRefuse
	}
	if q.Trigger != mergeTrigger {
		if err := addPaths(&q, repo, g.timeout/2); err != nil {
			// Asked anyway, without paths: the sidecar still
			// checks the push's tokens, and no reservations.
			fmt.Fprintln(stderr, unlisted)
		}
	}
	body, err := json.Marshal(q)
	if err == nil && len(body) > contract.MaxGateQuestion {
		err = refused("this push's question is larger than %d MiB; push fewer refs at a time", contract.MaxGateQuestion>>20)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitRefuse
	}
	g.timeout = time.Until(deadline)
	a, err := ask(g, body)
	return settle(stderr, g, a, err)
}

// addPaths puts into q the paths the push changes, listed in repo within
// timeout, in the room the rest of q leaves: or, when they cannot be
// listed, none.
func addPaths(q *contract.GateQuestion, repo lister, timeout time.Duration) error {
	rest, err := json.Marshal(q)
	if err != nil || len(rest) > contract.MaxGateQuestion {
		return err // too large already: refused for that
	}
	budget := contract.MaxGateQuestion - len(rest) - len(`,"paths":[],"paths_are_dirs":true`)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	q.Paths, q.PathsAreDirs, err = repo.changedPaths(ctx, q.Refs, budget)
	return err
}

// ask sends the question to the sidecar and returns its answer, or why
// there is none: any failure to reach it, a status other than 200, or a
// body that is not a GateAnswer.
func ask(g gate, question []byte) (contract.GateAnswer, error) {
	status, reply, err := call(g, http.MethodPost, contract.GatePath, question)
	if err != nil {
		return contract.GateAnswer{}, err
	}
	if status != http.StatusOK {
		return contract.GateAnswer{}, fmt.Errorf("it answered %d %s", status, http.StatusText(status))
	}
	return parseAnswer(reply)
}

// parseAnswer reads a GateAnswer: a JSON object that says, at least,
// whether the push goes in. Fields it does not know are a newer
// sidecar's, and are ignored.
func parseAnswer(reply []byte) (contract.GateAnswer, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(reply, &fields); err != nil || fields == nil {
		return contract.GateAnswer{}, errors.New("its answer is not a JSON object")
	}
	if _, ok := fields["allow"]; !ok {
		return contract.GateAnswer{}, errors.New("its answer does not say whether to allow the push")
	}
	var a contract.GateAnswer
	if err := json.Unmarshal(reply, &a); err != nil {
		return contract.GateAnswer{}, fmt.Errorf("its answer: %v", err)
	}
	return a, nil
}

// settle prints what the pusher reads and returns the exit status: the
// answer's, or, when there is none (err), the configured policy's.
func settle(stderr io.Writer, g gate, a contract.GateAnswer, err error) int {
	if err != nil {
		if g.unreached == contract.GateRefuse {
			fmt.Fprintln(stderr, contract.GateUnansweredRefused)
			return exitRefuse
		}
		fmt.Fprintln(stderr, contract.GateUnansweredAllowed)
		return exitAllow
	}
	for _, line := range a.Lines {
		fmt.Fprintln(stderr, printable(line))
	}
	if a.Allow {
		return exitAllow
	}
	if len(a.Lines) == 0 {
		fmt.Fprintln(stderr, "collab-lease: the sidecar refused this push")
	}
	return exitRefuse
}

// printable keeps a line of the answer to one line of text: Gitea shows
// each line of the hook's stderr as "remote: <line>", so a newline would
// make a line the sidecar did not write, and other control characters
// would reach the pusher's terminal.
func printable(line string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' && r != '\t' || r == 0x7f {
			return ' '
		}
		return r
	}, line)
}
