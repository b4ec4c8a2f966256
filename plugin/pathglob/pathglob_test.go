package pathglob

import (
	"errors"
	"strings"
	"testing"
)

func mustParse(t testing.TB, s string) Glob {
	t.Helper()
	g, err := Parse(s)
	if err != nil {
		t.Fatalf("Parse(%q): %v", s, err)
	}
	return g
}

func TestParseRefusesWhatIsNoGlob(t *testing.T) {
	for _, s := range []string{"", "/src", "a//b", "a/./b", "../x", "a/..", strings.Repeat("a", MaxLen+1), "a\nb", "\xff"} {
		if _, err := Parse(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q): %v, want invalid", s, err)
		}
	}
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		glob string
		yes  []string
		no   []string
	}{
		{"src/auth/login.go", []string{"src/auth/login.go"}, []string{"src/auth/login.go2", "src/auth", "Src/auth/login.go"}},
		{"src/auth/", []string{"src/auth/login.go", "src/auth/a/b/c"}, []string{"src/auth", "src/authz/x", "src/x"}},
		{"src/auth/**", []string{"src/auth/login.go", "src/auth/a/b"}, []string{"src/auth"}},
		{"**/login.go", []string{"login.go", "src/auth/login.go"}, []string{"src/auth/login.go.bak"}},
		{"src/**/test", []string{"src/test", "src/a/b/test"}, []string{"test", "src/a/test/x"}},
		{"src/*.go", []string{"src/a.go", "src/.go"}, []string{"src/a/b.go", "src/a.gox"}},
		{"src/?.go", []string{"src/a.go", "src/é.go"}, []string{"src/ab.go", "src/.go"}},
		{"**", []string{"a", "a/b/c"}, nil},
		{"a**b/c", []string{"ab/c", "axxb/c"}, []string{"a/b/c"}},
		// A trailing ** is one or more segments however it is written.
		{"src/**/", []string{"src/a", "src/a/b"}, []string{"src"}},
		{"src/**/**", []string{"src/a", "src/a/b"}, []string{"src"}},
		{"src/*/**/**", []string{"src/a/b", "src/a/b/c"}, []string{"src", "src/a"}},
		{"src/**/**/x", []string{"src/x", "src/a/x"}, []string{"x"}},
	} {
		g := mustParse(t, c.glob)
		for _, p := range c.yes {
			if !g.Match(p) {
				t.Errorf("%q does not match %q", c.glob, p)
			}
		}
		for _, p := range c.no {
			if g.Match(p) {
				t.Errorf("%q matches %q", c.glob, p)
			}
		}
	}
}

func TestOverlapTable(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"src/auth/login.go", "src/auth/login.go", true},
		{"src/auth/login.go", "src/auth/logout.go", false},
		{"src/auth/", "src/auth/login.go", true},
		{"src/auth/", "src/authz/login.go", false},
		{"src/auth/**", "src/auth", false}, // a directory's contents, not a file of its name
		{"src/", "docs/", false},
		{"src/", "src/a/", true},
		{"**/login.go", "src/auth/login.go", true},
		{"**/login.go", "src/auth/logout.go", false},
		{"src/*.go", "src/a.txt", false},
		{"src/*.go", "src/*_test.go", true},
		{"src/a*", "src/*b", true},
		{"src/a*c", "src/*b", false},
		{"src/?", "src/ab", false},
		{"src/??", "src/a*", true},
		{"**/x/**", "a/**/y", true},
		{"**", "anything/at/all", true},
		{"a/**/b", "a/b", true},
		{"a/*/b", "a/b", false},
		{"docs/*.md", "src/**", false},
	} {
		a, b := mustParse(t, c.a), mustParse(t, c.b)
		for _, pair := range [][2]Glob{{a, b}, {b, a}} {
			w, got := Overlap(pair[0], pair[1])
			if got != c.want {
				t.Errorf("Overlap(%q, %q) = %v (%q), want %v", pair[0], pair[1], got, w, c.want)
				continue
			}
			if got && (!pair[0].Match(w) || !pair[1].Match(w)) {
				t.Errorf("Overlap(%q, %q) gave %q, which does not match both", pair[0], pair[1], w)
			}
		}
	}
}

// samplePaths are paths over a small alphabet, to search by brute force.
func samplePaths(depth int) []string {
	segs := []string{"a", "b", "ab", "ba", "x.go", "a.go", "aa"}
	out := []string{}
	var grow func(prefix string, d int)
	grow = func(prefix string, d int) {
		if d == 0 {
			return
		}
		for _, s := range segs {
			p := s
			if prefix != "" {
				p = prefix + "/" + s
			}
			out = append(out, p)
			grow(p, d-1)
		}
	}
	grow("", depth)
	return out
}

// Overlap is never less conservative than brute force (a path that
// matches both means they overlap), and when it says they overlap, its
// path matches both: so it is exact.
func FuzzOverlap(f *testing.F) {
	for _, s := range [][2]string{{"a/*", "*/b"}, {"**/a.go", "a/**"}, {"a?/b", "*a/**"}, {"a/", "a"}, {"*", "**/x.go"}} {
		f.Add(s[0], s[1])
	}
	paths := samplePaths(3)
	f.Fuzz(func(t *testing.T, sa, sb string) {
		a, err1 := Parse(sa)
		b, err2 := Parse(sb)
		if err1 != nil || err2 != nil {
			return
		}
		w, ok := Overlap(a, b)
		if ok && (!a.Match(w) || !b.Match(w)) {
			t.Fatalf("Overlap(%q, %q) gave %q, which does not match both", sa, sb, w)
		}
		if ok {
			return
		}
		for _, p := range paths {
			if a.Match(p) && b.Match(p) {
				t.Fatalf("Overlap(%q, %q) = false, but %q matches both", sa, sb, p)
			}
		}
	})
}

func TestPrefix(t *testing.T) {
	for glob, want := range map[string]string{
		"src/auth/*.go": "src/auth", "**/x.go": "", "src/": "src", "src/auth/login.go": "src/auth", "a": "", "a/b?/c": "a", "a/**/b": "a",
	} {
		g := mustParse(t, glob)
		if got := g.Prefix(); got != want {
			t.Errorf("Prefix(%q) = %q, want %q", glob, got, want)
		}
		// Every sample path it matches is under its prefix.
		for _, p := range samplePaths(3) {
			if g.Match(p) && want != "" && !strings.HasPrefix(p, want+"/") {
				t.Errorf("%q matches %q, which is not under %q", glob, p, want)
			}
		}
	}
}
