// Package bench holds no code of its own: bench/run.sh writes RESULTS.md
// from one run of the benchmarks, and this test reads it back.
package bench

import (
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// Every figure RESULTS.md states must come from the run it records: each
// number in its tables and notes appears in the raw output at the back of
// the file (to the precision it is printed with), or, for a ratio (×, %),
// is the quotient of two figures stated on its line; a converted unit (ns to ms, a
// fraction to a per cent) counts as the same number. What is not a figure
// of the run is left out: the machine and the run's start (dates, commit),
// the goals' thresholds (after ≤, ≥, "goal"), the issues' numbers, and
// the rows' names.
func TestResultsStateOnlyFiguresOfTheirRun(t *testing.T) {
	b, err := os.ReadFile("RESULTS.md")
	if err != nil {
		t.Fatal(err)
	}
	checked, bad := unsupported(t, string(b))
	for _, f := range bad {
		t.Errorf("%q states %s, which is not in the raw output (nor a ratio of two figures beside it)", f.context, f.text)
	}
	if checked < 100 {
		t.Fatalf("only %d figures checked: the reader missed the tables", checked)
	}
	t.Logf("%d figures checked against the raw output", checked)
}

// The check can fail: a figure changed in the tables, one invented in
// the notes, and a ratio that no two figures of the run give are each
// caught.
func TestResultsCheckCatchesFiguresNotOfTheRun(t *testing.T) {
	b, err := os.ReadFile("RESULTS.md")
	if err != nil {
		t.Fatal(err)
	}
	results := string(b)
	prose, raw, _ := strings.Cut(results, "\n## Raw output\n")
	for name, doctored := range map[string]string{
		"an invented note":            strings.Replace(prose, "\n## Notes from the run\n", "\n## Notes from the run\n\n- the fix took it from 29.37 ms to 9.81 ms\n", 1),
		"an invented ratio":           strings.Replace(prose, "\n## Notes from the run\n", "\n## Notes from the run\n\n- 2.417× faster\n", 1),
		"a goal row's figure changed": regexp.MustCompile(`(\| 1 \| fresh-OpenSSH[^|]*\| [^*]*\*\*)\d+\.\d+`).ReplaceAllString(prose, "${1}7.777"),
		// A ratio that happens to be a raw figure in other units (a
		// thousandth of 394.7 ops/s) is still not of the run.
		"a ratio in a unit's reach": regexp.MustCompile(`(\| 1 \| fresh-OpenSSH[^|]*\| [^*]*\*\*)\d+\.\d+`).ReplaceAllString(prose, "${1}"+thousandthOfRaw(t, raw)),
	} {
		if doctored == prose {
			t.Fatalf("%s: the doctoring did not apply", name)
		}
		if _, bad := unsupported(t, doctored+"\n## Raw output\n"+raw); len(bad) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
}

// unsupported returns how many figures the prose of results states, and
// those the run's raw output does not give.
func unsupported(t *testing.T, results string) (int, []figure) {
	t.Helper()
	prose, raw, ok := strings.Cut(results, "\n## Raw output\n")
	if !ok {
		t.Fatal("RESULTS.md has no raw output section")
	}
	rawNums := numbersIn(raw)
	if len(rawNums) < 50 {
		t.Fatalf("only %d numbers in the raw output", len(rawNums))
	}
	figs := figuresIn(t, prose)
	var bad []figure
	for _, f := range figs {
		if !fromRun(f, rawNums) {
			bad = append(bad, f)
		}
	}
	return len(figs), bad
}

// A figure is one number stated in the prose.
type figure struct {
	text     string  // as printed
	value    float64 // its value
	decimals int     // digits after the point
	ratio    bool    // followed by × or %
	percent  bool
	context  string
	line     []float64 // the numbers of its line, which a ratio may divide
}

var number = regexp.MustCompile(`\d[\d,]*(?:\.\d+)?`)

func numbersIn(s string) []float64 {
	var out []float64
	for _, m := range number.FindAllString(s, -1) {
		if v, err := strconv.ParseFloat(strings.ReplaceAll(m, ",", ""), 64); err == nil {
			out = append(out, v)
		}
	}
	return out
}

// skipBefore are what, just before a number, makes it no figure of the
// run: a threshold, a section or an issue, a name.
var skipBefore = regexp.MustCompile(`(≤ |≥ |§|issue |issues |row |goal |[A-Za-z_/#-]|\d[.\d]*[–-])$`)

// figuresIn returns the numbers of the prose that are figures of the run.
func figuresIn(t *testing.T, prose string) []figure {
	var out []figure
	section := ""
	for _, line := range strings.Split(prose, "\n") {
		if strings.HasPrefix(line, "## ") {
			section = line
			continue
		}
		if section == "" || strings.HasPrefix(section, "## Machine") || strings.HasPrefix(section, "## Before and after") {
			continue // the run's start and machine; or only what was not measured
		}
		text := line
		if strings.HasPrefix(line, "|") {
			cells := strings.Split(strings.Trim(line, "|"), "|")
			if len(cells) < 3 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
				continue
			}
			// The row's name; in the goals table, the goal itself.
			first := 1
			if strings.HasPrefix(section, "## Goals") {
				first = 2
			}
			if first >= len(cells) {
				continue
			}
			text = strings.Join(cells[first:], "|")
		}
		// Parenthesised goals ("(goal ≤ 1.25×: met)") are thresholds.
		text = regexp.MustCompile(`\(goal[^)]*\)`).ReplaceAllString(text, "")
		text = regexp.MustCompile(`\(p50[^)]*issue[^)]*\)`).ReplaceAllString(text, "")
		text = regexp.MustCompile("`[^`]*`").ReplaceAllString(text, "") // commands and paths
		for _, loc := range number.FindAllStringIndex(text, -1) {
			s := text[loc[0]:loc[1]]
			if skipBefore.MatchString(text[:loc[0]]) {
				continue
			}
			after := text[loc[1]:]
			// Part of a name (a3f9c…, 2xx, the 100th): a letter right after
			// it that starts no unit.
			if r, _ := utf8.DecodeRuneInString(after); unicode.IsLetter(r) && !strings.HasPrefix(after, "ms") && !strings.HasPrefix(after, "s") && !strings.HasPrefix(after, "x") {
				continue
			}
			v, err := strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64)
			if err != nil {
				t.Fatalf("%q: %v", s, err)
			}
			dec := 0
			if i := strings.IndexByte(s, '.'); i >= 0 {
				dec = len(s) - i - 1
			}
			a := strings.TrimLeft(after, " *")
			out = append(out, figure{text: s, value: v, decimals: dec, context: strings.TrimSpace(line), line: numbersIn(text),
				ratio: strings.HasPrefix(a, "×") || strings.HasPrefix(a, "%"), percent: strings.HasPrefix(a, "%")})
		}
	}
	return out
}

// fromRun reports whether f is in raw, or a ratio of two numbers of raw.
func fromRun(f figure, raw []float64) bool {
	// Printed to its decimals, or (for %.3g and %.4g) to its significant
	// digits: half a unit of its last digit either way.
	tol := 0.5*math.Pow(10, -float64(f.decimals)) + 1e-9
	near := func(v float64) bool { return math.Abs(v-f.value) <= tol }
	for _, r := range raw {
		// A figure with a unit may be in another unit in the raw output
		// (ns, ms, s; bytes, KiB); a ratio has none, so it is only itself
		// (or, as a percentage, a hundred times a raw fraction).
		if near(r) || (!f.ratio && (near(r/1e6) || near(r*1e3) || near(r/1e3) || near(r/1024))) || (f.percent && near(r*100)) {
			return true
		}
	}
	if !f.ratio {
		return false
	}
	// A ratio the script computes divides two figures it states beside it
	// ("2964 ÷ 7735 ops/s = 0.383×"), each of them checked on its own.
	for _, a := range f.line {
		for _, b := range f.line {
			if b != 0 && (near(a/b) || (f.percent && near(100*a/b))) {
				return true
			}
		}
	}
	return false
}

// thousandthOfRaw returns, to three decimals, a thousandth of a figure of
// raw between 100 and 1000, a value raw itself does not give.
func thousandthOfRaw(t *testing.T, raw string) string {
	t.Helper()
	for _, m := range regexp.MustCompile(`\b[1-9]\d\d\.\d+\b`).FindAllString(raw, -1) {
		v, _ := strconv.ParseFloat(m, 64)
		s := strconv.FormatFloat(v/1e3, 'f', 3, 64)
		// A trailing zero (0.200) is also a shorter figure (0.2) that the
		// run may well print somewhere.
		if !strings.HasSuffix(s, "0") && !strings.Contains(raw, s) {
			return s
		}
	}
	t.Fatal("the raw output has no figure between 100 and 1000")
	return ""
}
