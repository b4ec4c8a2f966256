package contract

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// The replies of docs/ssh.md and docs/http.md, byte for byte: field order, null for a
// missing holder or expiry, [] for no leases, times in UTC whole seconds.
func TestRepliesMarshalAsTheSpecShowsThem(t *testing.T) {
	at := Time(time.Date(2026, 9, 5, 12, 0, 0, 0, time.UTC))
	// Another zone and a fraction of a second: shown in UTC, truncated.
	exp := Time(time.Date(2026, 9, 5, 14, 5, 0, 999, time.FixedZone("CEST", 2*3600)))
	bob, three, forced := "bob", int64(3), EndForceReleased
	for _, c := range []struct {
		v    any
		want string
	}{
		{Tenure{Status: StatusAcquired, Repo: "acme/widgets", Issue: 42, Holder: "alice", Token: 1, AcquiredAt: at},
			`{"status":"acquired","repo":"acme/widgets","issue":42,"holder":"alice","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":null}`},
		{Tenure{Status: StatusRenewed, Repo: "acme/widgets", Issue: 42, Holder: "alice", Token: 1, AcquiredAt: at, ExpiresAt: &exp},
			`{"status":"renewed","repo":"acme/widgets","issue":42,"holder":"alice","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":"2026-09-05T12:05:00Z"}`},
		{Conflict{Status: StatusHeld, Repo: "acme/widgets", Issue: 42, Holder: &bob, ExpiresAt: &exp},
			`{"status":"held","repo":"acme/widgets","issue":42,"holder":"bob","agent":null,"expires_at":"2026-09-05T12:05:00Z"}`},
		{Conflict{Status: StatusNotHolder, Repo: "acme/widgets", Issue: 42},
			`{"status":"not_holder","repo":"acme/widgets","issue":42,"holder":null,"agent":null,"expires_at":null}`},
		{Released{Status: StatusReleased, Repo: "acme/widgets", Issue: 42},
			`{"status":"released","repo":"acme/widgets","issue":42}`},
		{List{Repo: "acme/widgets", Leases: []LeaseView{{Issue: 42, Holder: "alice", Token: 2, AcquiredAt: at}, {Issue: 7, Holder: "bob", Token: 1, AcquiredAt: at, ExpiresAt: &exp}}},
			`{"repo":"acme/widgets","leases":[{"issue":42,"holder":"alice","agent":null,"token":2,"acquired_at":"2026-09-05T12:00:00Z","expires_at":null},{"issue":7,"holder":"bob","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":"2026-09-05T12:05:00Z"}]}`},
		{List{Repo: "acme/empty"}, `{"repo":"acme/empty","leases":[]}`},
		{&List{Repo: "acme/empty"}, `{"repo":"acme/empty","leases":[]}`},
		{IssueLease{Lease: &LeaseView{Issue: 42, Holder: "alice", Token: 2, AcquiredAt: at}},
			`{"lease":{"issue":42,"holder":"alice","agent":null,"token":2,"acquired_at":"2026-09-05T12:00:00Z","expires_at":null}}`},
		{IssueLease{}, `{"lease":null}`},
		{None{Status: StatusNone, Repo: "acme/widgets"}, `{"status":"none","repo":"acme/widgets"}`},
		{Stale{Status: StatusStale, Repo: "acme/widgets", Issue: 42, Token: &three},
			`{"status":"stale","repo":"acme/widgets","issue":42,"token":3}`},
		{Stale{Status: StatusStale, Repo: "acme/widgets", Issue: 42}, `{"status":"stale","repo":"acme/widgets","issue":42,"token":null}`},
		{History{Repo: "acme/widgets", Issue: 42, Tenures: []TenureView{
			{Token: 3, Holder: "bob", AcquiredAt: at},
			{Token: 2, Holder: "alice", AcquiredAt: at, EndedAt: &exp, EndedBy: &forced, ForcedBy: "root"}}},
			`{"repo":"acme/widgets","issue":42,"tenures":[{"token":3,"holder":"bob","agent":null,"acquired_at":"2026-09-05T12:00:00Z","ended_at":null,"ended_by":null},` +
				`{"token":2,"holder":"alice","agent":null,"acquired_at":"2026-09-05T12:00:00Z","ended_at":"2026-09-05T12:05:00Z","ended_by":"force_released","forced_by":"root"}]}`},
		{History{Repo: "acme/widgets", Issue: 1}, `{"repo":"acme/widgets","issue":1,"tenures":[]}`},
		{ReleasedEvent{Issue: 42}, `{"issue":42}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("%T:\n got %s %v\nwant %s", c.v, b, err, c.want)
		}
	}
}

// What the server writes, a client reads back unchanged (times in UTC at
// whole seconds), and a null holder or expiry stays nil.
func TestRepliesDecode(t *testing.T) {
	at := Time(time.Date(2026, 9, 5, 12, 0, 0, 0, time.UTC))
	exp := Time(time.Date(2026, 9, 5, 12, 5, 0, 0, time.UTC))
	bob := "bob"
	for _, v := range []any{
		&Tenure{Status: StatusAcquired, Repo: "acme/widgets", Issue: 42, Holder: "alice", Token: 1, AcquiredAt: at},
		&Tenure{Status: StatusRenewed, Repo: "acme/widgets", Issue: 42, Holder: "alice", Token: 3, AcquiredAt: at, ExpiresAt: &exp},
		&Conflict{Status: StatusHeld, Repo: "acme/widgets", Issue: 42, Holder: &bob, ExpiresAt: &exp},
		&Conflict{Status: StatusNotHolder, Repo: "acme/widgets", Issue: 42},
		&Released{Status: StatusReleased, Repo: "acme/widgets", Issue: 42},
		&List{Repo: "acme/widgets", Leases: []LeaseView{{Issue: 42, Holder: "alice", Token: 2, AcquiredAt: at, ExpiresAt: &exp}}},
		&List{Repo: "acme/empty", Leases: []LeaseView{}},
		&IssueLease{Lease: &LeaseView{Issue: 42, Holder: "alice", Token: 2, AcquiredAt: at}},
		&IssueLease{},
	} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		back := reflect.New(reflect.TypeOf(v).Elem()).Interface()
		if err := json.Unmarshal(b, back); err != nil || !reflect.DeepEqual(back, v) {
			t.Errorf("%s decodes to %+v, %v; want %+v", b, back, err, v)
		}
	}
}

func TestTimeUnmarshal(t *testing.T) {
	var got Time
	if err := json.Unmarshal([]byte(`"2026-09-05T14:05:00+02:00"`), &got); err != nil ||
		!time.Time(got).Equal(time.Date(2026, 9, 5, 12, 5, 0, 0, time.UTC)) || time.Time(got).Location() != time.UTC {
		t.Errorf("offset time: %v, %v", time.Time(got), err)
	}
	for _, bad := range []string{`"yesterday"`, `42`, `"2026-09-05"`} {
		if err := json.Unmarshal([]byte(bad), &got); err == nil {
			t.Errorf("%s decoded to %v", bad, time.Time(got))
		}
	}
	// null leaves the value alone, as encoding/json expects.
	want := got
	if err := json.Unmarshal([]byte(`null`), &got); err != nil || got != want {
		t.Errorf("null: %v, %v", time.Time(got), err)
	}
}

func TestTimePtr(t *testing.T) {
	if TimePtr(nil) != nil {
		t.Error("TimePtr(nil) is not nil")
	}
	now := time.Date(2026, 9, 5, 12, 0, 0, 0, time.UTC)
	if p := TimePtr(&now); p == nil || time.Time(*p) != now {
		t.Errorf("TimePtr(%v) = %v", now, p)
	}
}
