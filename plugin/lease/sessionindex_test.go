package lease

import (
	"slices"
	"testing"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
)

// The index hands a change to exactly the sessions holding a claim it
// touches: an issue's change to its holders, a repository's to the
// sessions with a claim there, everything's to every open session; a
// claim dropped or a session closed hears nothing more.
func TestSessionIndexHandsChangesToTheSessionsTheyTouch(t *testing.T) {
	x := newSessionIndex()
	a, b, c := &Session{}, &Session{}, &Session{}
	k1, k2, k3 := models.Key{RepoID: 1, Issue: 1}, models.Key{RepoID: 1, Issue: 2}, models.Key{RepoID: 2, Issue: 1}
	x.opened(a, []models.Key{k1})
	x.opened(b, nil)
	x.opened(c, nil)
	x.add(b, k2)
	x.add(b, k3)
	x.add(b, k3) // twice: still one claim
	names := map[*Session]string{a: "a", b: "b", c: "c"}
	touched := func(keys ...models.Key) []string {
		set := changes.Set{}
		for _, k := range keys {
			set.Changes = append(set.Changes, changes.Change{Key: k})
		}
		var got []string
		for _, ss := range x.touchedLocked(set) {
			got = append(got, names[ss])
		}
		slices.Sort(got)
		return got
	}
	for _, tc := range []struct {
		keys []models.Key
		want []string
	}{
		{[]models.Key{k1}, []string{"a"}},
		{[]models.Key{k2}, []string{"b"}},
		{[]models.Key{{RepoID: 3, Issue: 1}}, nil},
		{[]models.Key{{RepoID: 1}}, []string{"a", "b"}},
		{[]models.Key{{RepoID: 2}}, []string{"b"}},
		{[]models.Key{k2, k3, {RepoID: 1}}, []string{"a", "b"}}, // b once
		{[]models.Key{k1, models.Everything}, []string{"a", "b", "c"}},
	} {
		if got := touched(tc.keys...); !slices.Equal(got, tc.want) {
			t.Errorf("change of %v reached %v, want %v", tc.keys, got, tc.want)
		}
	}
	x.remove(b, k3)
	if got := touched(models.Key{RepoID: 2}); got != nil {
		t.Errorf("after b dropped its only claim in repository 2, its change reached %v", got)
	}
	if got := touched(k3); got != nil {
		t.Errorf("after b dropped %v, its change reached %v", k3, got)
	}
	x.closed(b)
	if got := touched(k2, models.Everything); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("after b closed, everything's change reached %v", got)
	}
	x.add(b, k2) // a claim tracked as the session closes: not indexed
	if len(x.byKey) != 1 || len(x.byRepo) != 1 {
		t.Errorf("closed sessions left %d keys and %d repositories indexed, want 1 and 1 (a's)", len(x.byKey), len(x.byRepo))
	}
}
