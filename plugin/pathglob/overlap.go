package pathglob

import (
	"slices"
	"strings"
)

// Overlap reports whether some path matches both globs, and if so
// returns one (the shortest the walk finds). It is exact: false means no
// path matches both.
func Overlap(a, b Glob) (string, bool) {
	segs, ok := overlapSegs(a.segs, b.segs)
	if !ok {
		return "", false
	}
	return strings.Join(segs, "/"), true
}

// overlapSegs walks two lists of segment patterns at once and returns
// the segments of a path both match.
func overlapSegs(a, b []string) ([]string, bool) {
	return walkPairs(len(a), len(b), func(i, j int, visit func(int, int, string)) {
		sa, sb := i < len(a) && a[i] == "**", j < len(b) && b[j] == "**"
		if sa {
			visit(i+1, j, "") // ** ends
		}
		if sb {
			visit(i, j+1, "")
		}
		switch {
		case i == len(a) || j == len(b):
			// One is done and the other still wants segments: only its
			// trailing "**"s may end, above.
		case sa && !sb:
			visit(i, j+1, example(b[j])) // ** takes b's segment
		case sb && !sa:
			visit(i+1, j, example(a[i]))
		case !sa && !sb:
			if seg, ok := overlapSeg([]rune(a[i]), []rune(b[j])); ok {
				visit(i+1, j+1, seg)
			}
		}
	})
}

// walkPairs walks, breadth first, the pairs of positions (i, j) of two
// patterns of lengths la and lb, from (0, 0), by the moves moves offers
// from each (each producing a piece of the common string, or the zero T
// for nothing), and returns what the moves to (la, lb) produced, in
// order, if it is reached.
func walkPairs[T comparable](la, lb int, moves func(i, j int, visit func(i, j int, out T))) ([]T, bool) {
	type step struct {
		from int
		out  T
		seen bool
	}
	var zero T
	w := lb + 1
	steps := make([]step, (la+1)*w)
	queue := []int{0}
	steps[0].seen = true
	for len(queue) > 0 {
		k := queue[0]
		queue = queue[1:]
		i, j := k/w, k%w
		if i == la && j == lb {
			var out []T
			for k != 0 {
				if steps[k].out != zero {
					out = append(out, steps[k].out)
				}
				k = steps[k].from
			}
			slices.Reverse(out)
			return out, true
		}
		moves(i, j, func(ni, nj int, out T) {
			n := ni*w + nj
			if !steps[n].seen {
				steps[n] = step{from: k, out: out, seen: true}
				queue = append(queue, n)
			}
		})
	}
	return nil, false
}

// example is a segment the pattern matches.
func example(p string) string {
	var b strings.Builder
	for _, r := range p {
		switch r {
		case '*':
		case '?':
			b.WriteByte('x')
		default:
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "x" // a segment is never empty
	}
	return b.String()
}

// overlapSeg returns a non-empty segment both patterns ('*', '?',
// literals) match, if there is one: a walk over pairs of positions, each
// move producing one character both sides take, or a star ending.
func overlapSeg(a, b []rune) (string, bool) {
	out, ok := walkPairs(len(a), len(b), func(i, j int, visit func(int, int, rune)) {
		var ca, cb rune = -1, -1 // the current token, -1 past the end
		if i < len(a) {
			ca = a[i]
		}
		if j < len(b) {
			cb = b[j]
		}
		if ca == '*' {
			visit(i+1, j, 0)
		}
		if cb == '*' {
			visit(i, j+1, 0)
		}
		if ca < 0 || cb < 0 {
			return // a character needs both sides to take it
		}
		// The character both take, and where each side goes.
		c := rune('x')
		switch {
		case ca != '*' && ca != '?' && cb != '*' && cb != '?':
			if ca != cb {
				return
			}
			c = ca
		case ca != '*' && ca != '?':
			c = ca
		case cb != '*' && cb != '?':
			c = cb
		}
		ni, nj := i+1, j+1
		if ca == '*' {
			ni = i // the star takes it and goes on
		}
		if cb == '*' {
			nj = j
		}
		if ni != i || nj != j { // both stars taking a character changes nothing
			visit(ni, nj, c)
		}
	})
	switch {
	case !ok:
		return "", false
	case len(out) == 0:
		return "x", true // only stars on both sides: any one character will do
	}
	return string(out), true
}
