package gitea

import (
	"context"
	"fmt"
	"net/http"

	"github.com/collab-lease/collab-lease/plugin/forge"
)

// PostStatus implements fence.Forge: POST /repos/{o}/{r}/statuses/{sha}.
func (f *Forge) PostStatus(ctx context.Context, owner, name, sha string, st forge.CommitStatus) error {
	if !validName(owner) || !validName(name) || !validSHA(sha) {
		return fmt.Errorf("status of %s/%s@%s: %w", owner, name, sha, forge.ErrNotFound)
	}
	ctx, cancel := f.within(ctx)
	defer cancel()
	body := map[string]string{"state": st.State, "description": st.Description, "target_url": st.TargetURL, "context": st.Context}
	if err := f.send(ctx, f.asAdmin(), http.MethodPost, "/api/v1/repos/"+owner+"/"+name+"/statuses/"+sha, nil, body, nil); err != nil {
		return fmt.Errorf("status of %s/%s@%s: %w", owner, name, sha, err)
	}
	return nil
}

// validSHA accepts a commit ID as Gitea names one: 40 (SHA-1) or 64
// (SHA-256) lower-case hexadecimal digits.
func validSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}
