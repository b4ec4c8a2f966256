package contract

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParseCommand holds the parser to what the dispatcher assumes of a
// successful parse, whatever bytes a client sends.
func FuzzParseCommand(f *testing.F) {
	for _, tc := range parseCases {
		f.Add(tc.line, int64(cmdTestMaxTTL))
	}
	f.Add("collab-lease acquire acme/widgets 42 --ttl 100000h", int64(0))
	f.Add("collab-lease acquire acme/widgets 42 --ttl 2s", int64(time.Second))
	f.Add("collab-lease renew acme/widgets 42 --ttl 1s", int64(-1))

	f.Fuzz(func(t *testing.T, line string, maxTTL int64) {
		limit := time.Duration(maxTTL)
		cmd, err := ParseCommand(line, limit)
		if err != nil {
			checkUsageError(t, line, err)
			if !reflect.DeepEqual(cmd, Command{}) {
				t.Fatalf("ParseCommand(%q) returned %+v alongside %v", line, cmd, err)
			}
			return
		}
		if _, err := SplitWords(line); err != nil {
			t.Fatalf("ParseCommand(%q) succeeded but SplitWords failed: %v", line, err)
		}

		switch cmd.Verb {
		case VerbHelp:
			if !reflect.DeepEqual(cmd, Command{Verb: VerbHelp}) {
				t.Fatalf("ParseCommand(%q) = %+v: help carries arguments", line, cmd)
			}
		case VerbList, VerbNext:
			if cmd.Issue != 0 {
				t.Fatalf("ParseCommand(%q) = %+v: %s carries an issue", line, cmd, cmd.Verb)
			}
		case VerbAcquire, VerbRenew, VerbRelease, VerbCheck, VerbHistory, VerbHandoff, VerbMerge, VerbUnquarantine:
			if cmd.Issue <= 0 {
				t.Fatalf("ParseCommand(%q) = %+v: issue not positive", line, cmd)
			}
		case VerbReserve, VerbUnreserve, VerbReservations:
			if cmd.Issue < 0 || (cmd.Verb == VerbReservations && cmd.Issue != 0) || (cmd.Issue != 0 && cmd.TTL != 0) {
				t.Fatalf("ParseCommand(%q) = %+v: bad --issue", line, cmd)
			}
		default:
			t.Fatalf("ParseCommand(%q) = %+v: unknown verb", line, cmd)
		}
		if cmd.Verb != VerbHelp {
			fuzzCheckNamePart(t, line, cmd.Owner)
			fuzzCheckNamePart(t, line, cmd.Name)
			if strings.HasPrefix(cmd.Owner, "-") || strings.HasSuffix(strings.ToLower(cmd.Name), ".git") {
				t.Fatalf("ParseCommand(%q) = %+v: name would not survive re-parsing", line, cmd)
			}
		}
		switch {
		case cmd.Verb == VerbRenew && cmd.TTL == 0:
			t.Fatalf("ParseCommand(%q) = %+v: renew without ttl", line, cmd)
		case cmd.Verb != VerbAcquire && cmd.Verb != VerbRenew && cmd.Verb != VerbNext && cmd.Verb != VerbReserve && cmd.TTL != 0:
			t.Fatalf("ParseCommand(%q) = %+v: ttl on %s", line, cmd, cmd.Verb)
		case (cmd.Verb == VerbMerge) && cmd.Wait == 0, cmd.Wait != 0 && (cmd.Verb != VerbAcquire && cmd.Verb != VerbNext && cmd.Verb != VerbMerge || cmd.Wait < time.Second || cmd.Wait%time.Second != 0 || (limit > 0 && cmd.Wait > limit)):
			t.Fatalf("ParseCommand(%q, %v) = %+v: bad wait", line, limit, cmd)
		case (cmd.Labels != nil || cmd.Pulls) && cmd.Verb != VerbNext, len(cmd.Labels) > MaxLabels:
			t.Fatalf("ParseCommand(%q) = %+v: bad labels", line, cmd)
		case (cmd.Style != "" || cmd.DeleteBranch) && cmd.Verb != VerbMerge, cmd.Style != "" && !ValidMergeStyle(cmd.Style):
			t.Fatalf("ParseCommand(%q) = %+v: bad merge options", line, cmd)
		case (cmd.Verb == VerbReserve) != (len(cmd.Globs) > 0) && cmd.Verb != VerbUnreserve, len(cmd.Globs) > MaxReserveGlobs, cmd.Shared && cmd.Verb != VerbReserve, cmd.Path != "" && cmd.Verb != VerbReservations:
			t.Fatalf("ParseCommand(%q) = %+v: bad reservation arguments", line, cmd)
		case slices.ContainsFunc(cmd.Globs, func(g string) bool { return CheckGlob(g) != nil }):
			t.Fatalf("ParseCommand(%q) = %+v: a glob CheckGlob refuses", line, cmd)
		case cmd.Force && cmd.Verb != VerbRelease && cmd.Verb != VerbUnreserve && cmd.Verb != VerbAcquire:
			t.Fatalf("ParseCommand(%q) = %+v: force on %s", line, cmd, cmd.Verb)
		case cmd.Verb == VerbCheck && cmd.Token <= 0, cmd.Token != 0 && cmd.Verb != VerbCheck && cmd.Verb != VerbMerge, cmd.Token < 0:
			t.Fatalf("ParseCommand(%q) = %+v: bad token", line, cmd)
		case (cmd.Verb == VerbHistory) != (cmd.Limit != 0), cmd.Limit < 0, cmd.Limit > MaxHistoryLimit:
			t.Fatalf("ParseCommand(%q) = %+v: bad limit", line, cmd)
		case cmd.TTL != 0 && (cmd.TTL < time.Second || cmd.TTL%time.Second != 0 || (limit > 0 && cmd.TTL > limit)):
			t.Fatalf("ParseCommand(%q, %v) = %+v: ttl outside whole seconds in [1s, limit]", line, limit, cmd)
		}

		// Round trips: the agents' canonical rendering, and String's.
		rendered := "collab-lease " + string(cmd.Verb)
		if cmd.Verb != VerbHelp {
			rendered += " '" + cmd.Owner + "/" + cmd.Name + "'"
		}
		if s, _ := SyntaxOf(cmd.Verb); s.Takes("--issue") && cmd.Issue != 0 {
			rendered += " --issue=" + strconv.FormatInt(cmd.Issue, 10)
		} else if cmd.Issue != 0 {
			rendered += " " + strconv.FormatInt(cmd.Issue, 10)
		}
		for _, g := range cmd.Globs {
			rendered += " '" + strings.ReplaceAll(g, "'", `'\''`) + "'"
		}
		if cmd.Shared {
			rendered += " --shared"
		}
		if cmd.Path != "" {
			rendered += " --path '" + strings.ReplaceAll(cmd.Path, "'", `'\''`) + "'"
		}
		if cmd.TTL != 0 {
			rendered += " --ttl " + strconv.FormatInt(int64(cmd.TTL/time.Second), 10)
		}
		if cmd.Wait != 0 {
			rendered += " --wait=" + strconv.FormatInt(int64(cmd.Wait/time.Second), 10)
		}
		for _, l := range cmd.Labels {
			rendered += " --label '" + strings.ReplaceAll(l, "'", `'\''`) + "'"
		}
		if cmd.Pulls {
			rendered += " --pulls"
		}
		if cmd.Oldest {
			rendered += " --oldest"
		}
		if cmd.Force {
			rendered += " --force"
		}
		if cmd.Token != 0 {
			rendered += " --token " + strconv.FormatInt(cmd.Token, 10)
		}
		if cmd.Style != "" {
			rendered += " --style " + cmd.Style
		}
		if cmd.DeleteBranch {
			rendered += " --delete-branch"
		}
		if cmd.Verb == VerbHistory {
			rendered += " --limit " + strconv.Itoa(cmd.Limit)
		}
		if cmd.ToLogin != "" {
			rendered += " --to " + cmd.To()
		}
		if cmd.Agent != "" {
			rendered += " --agent=" + cmd.Agent
		}
		for _, again := range []string{rendered, cmd.String()} {
			back, err := ParseCommand(again, limit)
			if err != nil || !reflect.DeepEqual(back, cmd) {
				t.Fatalf("ParseCommand(%q) = %+v, but its rendering %q parses to %+v, %v", line, cmd, again, back, err)
			}
		}
	})
}

// fuzzCheckNamePart: a parsed owner or name is safe to paste, unquoted,
// into a URL path or a single-quoted shell word.
func fuzzCheckNamePart(t *testing.T, line, n string) {
	t.Helper()
	if n == "" || len(n) > maxRepoPartLen || n == "." || strings.Contains(n, "..") {
		t.Fatalf("ParseCommand(%q): bad name part %q", line, n)
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(isDigitByte(c) || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '-' || c == '_' || c == '.') {
			t.Fatalf("ParseCommand(%q): name part %q holds %q", line, n, c)
		}
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{
		"", "0", "1", "300", "00300", "90s", "30m", "2h", "1h30m", "2000ms", "1500ms",
		"1.5s", ".5h", "1.h", "2000000µs", "2000000μs", "1000000000ns", "-5m", "+5m",
		"1d", "169h", "604801", "99999999999999999999", "2562048h", "1h-5m", "NaN",
	} {
		f.Add(s, int64(cmdTestMaxTTL))
	}
	f.Add("100000h", int64(0))
	f.Add("9223372036", int64(-1))

	f.Fuzz(func(t *testing.T, s string, maxTTL int64) {
		limit := time.Duration(maxTTL)
		d, err := ParseDuration(s, limit)
		if err != nil {
			checkUsageError(t, s, err)
			if !errors.Is(err, ErrUsage) || d != 0 {
				t.Fatalf("ParseDuration(%q) = %v, %v", s, d, err)
			}
			return
		}
		if d < time.Second || d%time.Second != 0 || (limit > 0 && d > limit) {
			t.Fatalf("ParseDuration(%q, %v) = %v: outside whole seconds in [1s, limit]", s, limit, d)
		}
		for _, again := range []string{strconv.FormatInt(int64(d/time.Second), 10), formatTTL(d)} {
			if back, err := ParseDuration(again, limit); err != nil || back != d {
				t.Fatalf("ParseDuration(%q) = %v, but %q parses to %v, %v", s, d, again, back, err)
			}
		}
	})
}

// FuzzSplitWords checks the splitter against the quoting a client would
// use: any words it returns, single-quoted and joined, split back to the
// same words.
func FuzzSplitWords(f *testing.F) {
	for _, tc := range parseCases {
		f.Add(tc.line)
	}
	f.Add(`'it'\''s' "a\"b" a\ b`)
	f.Fuzz(func(t *testing.T, line string) {
		words, err := SplitWords(line)
		if err != nil {
			checkUsageError(t, line, err)
			return
		}
		quoted := make([]string, len(words))
		for i, w := range words {
			if w == "" {
				t.Fatalf("SplitWords(%q) returned an empty word", line)
			}
			for j := 0; j < len(w); j++ {
				if c := w[j]; (c < 0x20 && c != '\t') || c == 0x7f {
					t.Fatalf("SplitWords(%q) word %q holds control character %#x", line, w, c)
				}
			}
			quoted[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
		joined := strings.Join(quoted, " ")
		if len(joined) > MaxCommandLen {
			return
		}
		back, err := SplitWords(joined)
		if err != nil || strings.Join(back, "\x00") != strings.Join(words, "\x00") || len(back) != len(words) {
			t.Fatalf("SplitWords(%q) = %q, but re-quoted %q splits to %q, %v", line, words, joined, back, err)
		}
	})
}
