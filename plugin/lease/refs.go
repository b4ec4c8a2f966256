package lease

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Which issues a pull request would close on merge, read as Gitea reads
// them (modules/references, v1.26): a closing keyword (close, closes,
// closed, fix, fixes, fixed, resolve, resolves, resolved; any case),
// optionally followed by a colon, one space, then a reference to an issue
// of the same repository: #N, !N, or owner/name#N naming this repository.
// Gitea's own defaults; an instance that changed [repository.issue]
// CLOSE_KEYWORDS in app.ini is not followed.

var (
	closeKeyword = regexp.MustCompile(`(?i)(?:\s|^|\(|\[)(?:close|closes|closed|fix|fixes|fixed|resolve|resolves|resolved):? `)
	issueRef     = regexp.MustCompile(`^(?:([0-9a-zA-Z_.-]+/[0-9a-zA-Z_.-]+))?[#!]([0-9]+)(?:\s|$|\)|\]|'|"|[:;,.?!]\s|[:;,.?!]$)`)
)

// closingRefs returns the numbers of the issues of repo ("owner/name")
// that text closes, ascending, without repeats.
func closingRefs(repo, text string) []int64 {
	var out []int64
	for _, m := range closeKeyword.FindAllStringIndex(text, -1) {
		ref := issueRef.FindStringSubmatch(text[m[1]:])
		if ref == nil || (ref[1] != "" && !strings.EqualFold(ref[1], repo)) {
			continue
		}
		if n, err := strconv.ParseInt(ref[2], 10, 64); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
