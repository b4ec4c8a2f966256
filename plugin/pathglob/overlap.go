package pathglob

import "strings"

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

// step is how a walk over two patterns reached a state: from which
// state, having produced what ("" for a move that produces nothing).
type step struct {
	from int
	out  string
	seen bool
}

// overlapSegs walks two lists of segment patterns at once, breadth first
// over the pairs of positions, and returns the segments of a path both
// match.
func overlapSegs(a, b []string) ([]string, bool) {
	w := len(b) + 1
	steps := make([]step, (len(a)+1)*w)
	queue := []int{0}
	steps[0].seen = true
	visit := func(from, i, j int, out string) {
		k := i*w + j
		if !steps[k].seen {
			steps[k] = step{from: from, out: out, seen: true}
			queue = append(queue, k)
		}
	}
	for len(queue) > 0 {
		k := queue[0]
		queue = queue[1:]
		i, j := k/w, k%w
		if i == len(a) && j == len(b) {
			var out []string
			for k != 0 {
				if steps[k].out != "" {
					out = append(out, steps[k].out)
				}
				k = steps[k].from
			}
			for l, r := 0, len(out)-1; l < r; l, r = l+1, r-1 {
				out[l], out[r] = out[r], out[l]
			}
			return out, true
		}
		sa, sb := i < len(a) && a[i] == "**", j < len(b) && b[j] == "**"
		if sa {
			visit(k, i+1, j, "") // ** ends
		}
		if sb {
			visit(k, i, j+1, "")
		}
		switch {
		case i == len(a) || j == len(b):
			// One is done and the other still wants segments: only its
			// trailing "**"s may end, above.
		case sa && !sb:
			visit(k, i, j+1, example(b[j])) // ** takes b's segment
		case sb && !sa:
			visit(k, i+1, j, example(a[i]))
		case !sa && !sb:
			if seg, ok := overlapSeg([]rune(a[i]), []rune(b[j])); ok {
				visit(k, i+1, j+1, seg)
			}
		}
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
	w := len(b) + 1
	type cstep struct {
		from int
		out  rune // 0: nothing
		seen bool
	}
	steps := make([]cstep, (len(a)+1)*w)
	queue := []int{0}
	steps[0].seen = true
	visit := func(from, i, j int, out rune) {
		k := i*w + j
		if !steps[k].seen {
			steps[k] = cstep{from: from, out: out, seen: true}
			queue = append(queue, k)
		}
	}
	for len(queue) > 0 {
		k := queue[0]
		queue = queue[1:]
		i, j := k/w, k%w
		if i == len(a) && j == len(b) {
			var out []rune
			for k != 0 {
				if steps[k].out != 0 {
					out = append(out, steps[k].out)
				}
				k = steps[k].from
			}
			for l, r := 0, len(out)-1; l < r; l, r = l+1, r-1 {
				out[l], out[r] = out[r], out[l]
			}
			if len(out) == 0 {
				// Only stars on both sides: any one character will do.
				return "x", true
			}
			return string(out), true
		}
		var ca, cb rune = -1, -1 // the current token, -1 past the end
		if i < len(a) {
			ca = a[i]
		}
		if j < len(b) {
			cb = b[j]
		}
		if ca == '*' {
			visit(k, i+1, j, 0)
		}
		if cb == '*' {
			visit(k, i, j+1, 0)
		}
		if ca < 0 || cb < 0 {
			continue // a character needs both sides to take it
		}
		// The character both take, and where each side goes.
		c := rune('x')
		switch {
		case ca != '*' && ca != '?' && cb != '*' && cb != '?':
			if ca != cb {
				continue
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
		if ni == i && nj == j {
			continue // both stars taking a character changes nothing
		}
		visit(k, ni, nj, c)
	}
	return "", false
}
