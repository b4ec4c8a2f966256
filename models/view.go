package models

import (
	"time"
)

// The JSON shapes of the contract that show leases (SPEC §3, §4) are
// defined once, here, so the SSH verb and the HTTP API cannot drift apart.

// Time marshals as RFC 3339 in UTC with whole seconds and a "Z".
type Time time.Time

// MarshalJSON renders t as "2026-09-05T12:00:00Z".
func (t Time) MarshalJSON() ([]byte, error) {
	// time.RFC3339 has no fractional seconds. Appended into one buffer:
	// a list of thousands of leases marshals two of these per lease.
	b := make([]byte, 0, len(`"2006-01-02T15:04:05Z"`))
	b = append(b, '"')
	b = time.Time(t).UTC().AppendFormat(b, time.RFC3339)
	return append(b, '"'), nil
}

// UnmarshalJSON reads the form MarshalJSON writes (any RFC 3339 time).
func (t *Time) UnmarshalJSON(b []byte) error {
	var parsed time.Time
	if err := parsed.UnmarshalJSON(b); err != nil {
		return err
	}
	*t = Time(parsed.UTC())
	return nil
}

// TimePtr converts an optional time; nil stays nil (JSON null).
func TimePtr(t *time.Time) *Time {
	if t == nil {
		return nil
	}
	v := Time(*t)
	return &v
}

// View is one live lease as lists show it.
type View struct {
	Issue      int64  `json:"issue"`
	Holder     string `json:"holder"`
	Token      int64  `json:"token"`
	AcquiredAt Time   `json:"acquired_at"`
	ExpiresAt  *Time  `json:"expires_at"`
}

// ViewOf renders l.
func ViewOf(l Lease) View {
	return View{Issue: l.Issue, Holder: l.Holder.Login, Token: l.Token, AcquiredAt: Time(l.AcquiredAt), ExpiresAt: TimePtr(l.ExpiresAt)}
}

// ListView is the reply of `collab-lease list` and of GET …/leases.
type ListView struct {
	Repo   string `json:"repo"`
	Leases []View `json:"leases"` // never null: an empty list is []
}

// NewListView renders the live leases of the repository named repo.
func NewListView(repo string, leases []Lease) ListView {
	v := ListView{Repo: repo, Leases: make([]View, len(leases))}
	for i, l := range leases {
		v.Leases[i] = ViewOf(l)
	}
	return v
}
