package models

import (
	"encoding/json"
	"testing"
	"time"
)

func TestListViewJSON(t *testing.T) {
	exp := time.Date(2026, 9, 5, 14, 5, 0, 999, time.FixedZone("CEST", 2*3600))
	v := NewListView("acme/widgets", []Lease{
		{Key: Key{1, 42}, Holder: Holder{ID: 1, Login: "alice"}, Token: 2, AcquiredAt: time.Date(2026, 9, 5, 12, 0, 0, 0, time.UTC)},
		{Key: Key{1, 7}, Holder: Holder{ID: 1, Login: "bob"}, Token: 1, AcquiredAt: time.Date(2026, 9, 5, 12, 1, 0, 0, time.UTC), ExpiresAt: &exp},
	})
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"repo":"acme/widgets","leases":[{"issue":42,"holder":"alice","token":2,"acquired_at":"2026-09-05T12:00:00Z","expires_at":null},{"issue":7,"holder":"bob","token":1,"acquired_at":"2026-09-05T12:01:00Z","expires_at":"2026-09-05T12:05:00Z"}]}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	b, _ = json.Marshal(NewListView("acme/empty", nil))
	if string(b) != `{"repo":"acme/empty","leases":[]}` {
		t.Fatalf("empty list: %s", b)
	}
}
