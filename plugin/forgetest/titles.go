package forgetest

import (
	"context"
	"fmt"
	"strings"
)

// SetTitle gives issue (or pull request) n of fullName a title.
func (f *Forge) SetTitle(fullName string, n int64, title string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.titles == nil {
		f.titles = map[string]string{}
	}
	f.titles[fmt.Sprintf("%s#%d", strings.ToLower(fullName), n)] = title
}

// IssueTitles implements lease.Forge: the titles SetTitle gave, as the
// admin sees them.
func (f *Forge) IssueTitles(ctx context.Context, _ int64, owner, name string, numbers []int64) (map[int64]string, error) {
	if err := f.enter(ctx, "IssueTitles"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int64]string{}
	for _, n := range numbers {
		if t, ok := f.titles[fmt.Sprintf("%s/%s#%d", strings.ToLower(owner), strings.ToLower(name), n)]; ok {
			out[n] = t
		}
	}
	return out, nil
}
