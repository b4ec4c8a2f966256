package lease

import (
	"fmt"
	"testing"
)

func TestClosingRefs(t *testing.T) {
	for text, want := range map[string][]int64{
		"Fixes #1":                              {1},
		"fixes #1 and closes #2, resolves: #3.": {1, 2, 3},
		"Fix #12\n\nAlso Resolved #4":           {4, 12},
		"Fixes acme/widgets#5":                  {5},
		"Fixes ACME/Widgets#5":                  {5},
		"Fixes other/repo#5":                    nil,
		"Fixes !7 (the pull request)":           {7},
		"(closes #8)":                           {8},
		"Refs #1":                               nil,
		"Fixes#1":                               nil,
		"Fixes  #1":                             nil,
		"prefix fixes #1":                       {1},
		"suffixfixes #1":                        nil,
		"Fixes #1x":                             nil,
		"Fixes #0":                              nil,
		"Fixes #3 fixes #3":                     {3},
		"":                                      nil,
	} {
		if got := closingRefs("acme/widgets", text); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("closingRefs(%q) = %v, want %v", text, got, want)
		}
	}
}
