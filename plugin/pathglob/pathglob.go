// Package pathglob is the language of path reservations, which keep two
// agents off the same files: globs over a repository's paths, their
// matching, and whether two of them may match a common path. The
// ledger's reservations (models/reservations.go) decide their conflicts
// with it.
//
// A glob is '/'-separated segments of a repository path: '*' matches any
// run of characters within a segment, '?' one character, a segment '**'
// any number of whole segments (as .gitignore: "**/x" is x at any depth,
// "a/**/b" b anywhere under a, "a/**" everything under a but not a
// itself), and a trailing '/' means the whole directory ("src/" is
// "src/**"). Every other character is itself. It may not start with
// '/', and no segment may be empty, "." or "..". Matching is of bytes,
// with regard to case, as git's paths are.
//
// Overlap is exact: two globs overlap if and only if some path matches
// both, and then it returns such a path. Each segment's pattern is a
// regular language, and so is a glob's; their intersection is decided
// by walking both patterns at once.
//
// Files: pathglob.go (parsing, Match), overlap.go (Overlap).
package pathglob

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// MaxLen bounds a glob's length in bytes.
const MaxLen = contract.MaxGlobLen

// Glob is a parsed glob: its segments, "**" standing for any number of
// segments (zero or more; a trailing "**" was parsed into "*" then "**",
// one or more).
type Glob struct {
	text string
	segs []string
}

// String is the glob as it was given.
func (g Glob) String() string { return g.text }

// ErrInvalid says a glob is not one.
var ErrInvalid = errors.New("not a path glob")

// Parse reads a glob.
func Parse(s string) (Glob, error) {
	// The rules every surface reads a glob by are the contract's; its
	// usage error's detail is this error's.
	if err := contract.CheckGlob(s); err != nil {
		return Glob{}, fmt.Errorf("%w: %s", ErrInvalid, strings.TrimPrefix(err.Error(), "usage: "))
	}
	body := s
	if strings.HasSuffix(body, "/") {
		body += "**" // a whole directory
	}
	var segs []string
	parts := strings.Split(body, "/")
	for i, p := range parts {
		switch {
		case p == "":
			return Glob{}, fmt.Errorf("%w: %q has an empty segment", ErrInvalid, s)
		case p == "." || p == "..":
			return Glob{}, fmt.Errorf("%w: %q has a segment %q", ErrInvalid, s, p)
		case p == "**":
			if len(segs) > 0 && segs[len(segs)-1] == "**" {
				if i == len(parts)-1 {
					// a/**/** (and a/**/) end in one or more
					// segments, as a/** does: not a itself.
					segs = append(segs[:len(segs)-1], "*", "**")
				}
				continue // a/**/**/b is a/**/b
			}
			if i == len(parts)-1 {
				segs = append(segs, "*") // a trailing ** is one or more segments
			}
			segs = append(segs, "**")
		case strings.Contains(p, "**"):
			// Other runs of stars are stars within the segment.
			for strings.Contains(p, "**") {
				p = strings.ReplaceAll(p, "**", "*")
			}
			segs = append(segs, p)
		default:
			segs = append(segs, p)
		}
	}
	return Glob{text: s, segs: segs}, nil
}

// Prefix is the glob's literal leading directories: the segments before
// its first one with a wildcard, joined by '/' ("src/auth" for
// "src/auth/*.go", "" for "**/x.go"). Every path the glob matches is
// under it; a glob without wildcards gives its parent directory (its
// last segment is the file's name, not a directory the path is under).
func (g Glob) Prefix() string {
	n := 0
	for n < len(g.segs)-1 && !strings.ContainsAny(g.segs[n], "*?") {
		n++
	}
	return strings.Join(g.segs[:n], "/")
}

// Match reports whether path matches the glob.
func (g Glob) Match(path string) bool {
	if path == "" || strings.HasPrefix(path, "/") {
		return false
	}
	return matchSegs(g.segs, strings.Split(path, "/"))
}

// matchSegs matches segment patterns to a path's segments.
func matchSegs(pat, segs []string) bool {
	// reach[j]: pat[:i] can match segs[:j].
	reach := make([]bool, len(segs)+1)
	reach[0] = true
	for _, p := range pat {
		next := make([]bool, len(segs)+1)
		for j, ok := range reach {
			if !ok {
				continue
			}
			if p == "**" {
				for k := j; k <= len(segs); k++ {
					next[k] = true
				}
				break
			}
			if j < len(segs) && segs[j] != "" && matchSeg(p, segs[j]) {
				next[j+1] = true
			}
		}
		reach = next
	}
	return reach[len(segs)]
}

// matchSeg matches one segment's pattern ('*', '?', literals) to a
// segment.
func matchSeg(p, s string) bool {
	// Classic greedy matching with backtracking to the last star.
	pi, si, star, mark := 0, 0, -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case pi < len(p) && (p[pi] == '?' || p[pi] == s[si]):
			if p[pi] == '?' {
				// '?' is one character, not one byte.
				_, n := utf8.DecodeRuneInString(s[si:])
				si += n
			} else {
				si++
			}
			pi++
		case star >= 0:
			pi = star + 1
			_, n := utf8.DecodeRuneInString(s[mark:])
			mark += n
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}
