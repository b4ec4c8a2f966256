package main

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// The gate in Gitea's push path takes a push to a branch a claim fences
// only when the push carries the claim's token as the push option
// collab-lease=<issue>:<token>. So that an agent's own code need not know
// of it, git collab puts the option where git push finds it by itself:
// git collab run in its command's environment, as a config entry of
// GIT_CONFIG_COUNT's; claim, next, unclaim and the MCP server in the
// checkout's own config. Both are values of push.pushOption, whose rules
// (git 2.39 and later) they rely on:
//
//   - every value of push.pushOption is sent, in the order git reads its
//     config: the files (system, global, the repository's), then
//     GIT_CONFIG_COUNT's entries, then git -c's; an empty value empties
//     the list read so far. So an entry added after the caller's own, or
//     a value added at the end of the repository's file, is sent whatever
//     came before it;
//   - `git push -o <option>` sends only the options on its command line,
//     none of push.pushOption's, and `git -c push.pushOption= push` none;
//   - a remote that does not advertise push options refuses any push that
//     carries one ("the receiving end does not support push options").
//     Gitea advertises them.

// pushOptionKey is git's multi-valued key of the options every push sends.
const pushOptionKey = "push.pushOption"

// gateOption is the push option that names issue's claim with token.
func gateOption(issue, token int64) string {
	return gateOptionPrefix(issue) + strconv.FormatInt(token, 10)
}

// gateOptionPrefix begins every gate option of issue: "collab-lease=42:".
func gateOptionPrefix(issue int64) string {
	return contract.GatePushOption + "=" + strconv.FormatInt(issue, 10) + ":"
}

// gitConfigCount is the number of config entries the environment gives
// git (GIT_CONFIG_COUNT, GIT_CONFIG_KEY_<n>, GIT_CONFIG_VALUE_<n>), read
// as git reads it: unset or empty is none, and a count git would refuse
// (not a number, or naming an entry that is not there) is an error.
func gitConfigCount(lookup func(string) (string, bool)) (int, error) {
	v, _ := lookup("GIT_CONFIG_COUNT")
	if v == "" {
		return 0, nil
	}
	// git reads it with strtoul: blanks and a "+" may lead.
	digits := strings.TrimPrefix(strings.TrimLeft(v, " \t\n\v\f\r"), "+")
	n, err := strconv.ParseUint(digits, 10, 31)
	if err != nil || !allDigits(digits) {
		return 0, fmt.Errorf("GIT_CONFIG_COUNT %s is not a number of config entries; git would refuse it too: fix or unset it", quote(v))
	}
	for i := range int(n) {
		for _, name := range []string{"GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"} {
			if _, ok := lookup(name + strconv.Itoa(i)); !ok {
				return 0, fmt.Errorf("GIT_CONFIG_COUNT is %s, but %s%d is not set; git would refuse it too: fix or unset it", quote(v), name, i)
			}
		}
	}
	return int(n), nil
}

// pushOptionEnv are the environment entries that add option to
// push.pushOption after the n config entries the caller's environment
// gives git: its own are kept, and ours adds to whatever they and the
// config files say.
func pushOptionEnv(n int, option string) []string {
	i := strconv.Itoa(n)
	return []string{
		"GIT_CONFIG_KEY_" + i + "=" + pushOptionKey,
		"GIT_CONFIG_VALUE_" + i + "=" + option,
		"GIT_CONFIG_COUNT=" + strconv.Itoa(n+1),
	}
}

// The checkout's own config (.git/config) holds one gate option per
// claim made from it: a claim sets its issue's, replacing any older one
// of that issue; a release, a handoff, a merge of the pull request, or
// news that the claim is gone removes it. Values of other issues, and
// every other value of push.pushOption, stay as they are. Outside a
// repository there is no checkout to push from: nothing is done and
// nothing said.

// setGateOption makes collab-lease=<issue>:<token> the checkout's one
// gate option of issue, and says so ("" outside a repository).
func setGateOption(g Git, issue, token int64) (note string, err error) {
	option := gateOption(issue, token)
	old, err := gateOptions(g, issue)
	if errors.Is(err, errNoRepository) {
		return "", nil
	}
	if err == nil && len(old) > 0 {
		err = g.UnsetLocal(pushOptionKey, "^"+regexp.QuoteMeta(gateOptionPrefix(issue)))
	}
	if err == nil {
		err = g.AddLocal(pushOptionKey, option)
	}
	if err != nil {
		return "", fmt.Errorf("could not set push option %s in this checkout (%s); push with -o %s", option, oneLine(err), option)
	}
	note = "push option " + option + " set in this checkout"
	if stale := slices.DeleteFunc(old, func(v string) bool { return v == option }); len(stale) > 0 {
		note += " (in place of " + strings.Join(stale, ", ") + ")"
	}
	return note, nil
}

// removeGateOptions removes the checkout's gate options of issue (token 0),
// or the one of issue's claim with token, and says which it removed (""
// if none, or outside a repository).
func removeGateOptions(g Git, issue, token int64) (note string, err error) {
	what := gateOptionPrefix(issue) + "*"
	if token != 0 {
		what = gateOption(issue, token)
	}
	old, err := gateOptions(g, issue)
	if errors.Is(err, errNoRepository) {
		return "", nil
	}
	if err == nil && token != 0 {
		old = slices.DeleteFunc(old, func(v string) bool { return v != what })
	}
	if err == nil && len(old) > 0 {
		pattern := "^" + regexp.QuoteMeta(gateOptionPrefix(issue))
		if token != 0 {
			pattern = "^" + regexp.QuoteMeta(what) + "$"
		}
		err = g.UnsetLocal(pushOptionKey, pattern)
	}
	if err != nil {
		return "", fmt.Errorf("could not remove push option %s from this checkout (%s)", what, oneLine(err))
	}
	switch len(old) {
	case 0:
		return "", nil
	case 1:
		return "push option " + old[0] + " removed from this checkout", nil
	}
	return "push options " + strings.Join(old, ", ") + " removed from this checkout", nil
}

// oneLine is err's message on one line, as a warning shows it.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}

// gateOptions are the checkout's gate options of issue.
func gateOptions(g Git, issue int64) ([]string, error) {
	values, err := g.LocalValues(pushOptionKey)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, v := range values {
		if strings.HasPrefix(v, gateOptionPrefix(issue)) {
			out = append(out, v)
		}
	}
	return out, nil
}

// gateOptionChange is what a reply to req means for the checkout's gate
// option of its issue: set to token (set), removed (remove), or neither.
func gateOptionChange(req contract.Command, reply any) (issue, token int64, set, remove bool) {
	switch r := reply.(type) {
	case *contract.Tenure:
		if r.Status == contract.StatusAcquired {
			return r.Issue, r.Token, true, false
		}
	case *contract.Released:
		return r.Issue, 0, false, true
	case *contract.HandedOff:
		return r.Issue, 0, false, true // the target's now, under its own token
	case *contract.Merged:
		return r.Pull, 0, false, true // the merge ended the pull request's claim, whoever held it
	case *contract.Conflict:
		// Not released, not renewed, not handed off, not merged: not ours
		// (any more).
		if r.Status == contract.StatusNotHolder {
			return r.Issue, 0, false, true
		}
	}
	return 0, 0, false, false
}

// followReply keeps the checkout's gate option of req's issue in step with
// the sidecar's reply to req: the note to show with the reply ("" if
// nothing changed), or why the checkout could not follow (the reply
// stands either way).
func followReply(g Git, req contract.Command, reply any) (note string, err error) {
	switch issue, token, set, remove := gateOptionChange(req, reply); {
	case set:
		return setGateOption(g, issue, token)
	case remove:
		if m, ok := reply.(*contract.Merged); ok {
			return followMerge(g, *m)
		}
		return removeGateOptions(g, issue, 0)
	}
	return "", nil
}

// followMerge takes the gate options of the claims the merge ended out
// of the checkout: the pull request's own, and that of the issue it was
// merged under. (The issues it closes ended too; an option of one of
// them stays until git collab unclaim, which is harmless: no push
// carries a token of an ended claim into anything.)
func followMerge(g Git, m contract.Merged) (note string, err error) {
	note, err = removeGateOptions(g, m.Pull, 0)
	if errors.Is(err, errNoRepository) {
		return "", nil
	}
	if err != nil || m.Issue == 0 || m.Issue == m.Pull {
		return note, err
	}
	more, err := removeGateOptions(g, m.Issue, 0)
	return strings.Trim(note+"\n"+more, "\n"), err
}
