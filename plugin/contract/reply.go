package contract

import (
	"encoding/json"
	"time"
)

// Status is the "status" of a reply (docs/ssh.md).
const (
	StatusAcquired  = "acquired"
	StatusHeld      = "held"
	StatusRenewed   = "renewed"
	StatusNotHolder = "not_holder"
	StatusReleased  = "released"
	StatusNone      = "none"    // next: nothing qualifies (exit 4)
	StatusCurrent   = "current" // check: the token is the live tenure's
	StatusStale     = "stale"   // check: it is not (exit 4)
	StatusCooling   = "cooling" // acquire: the issue's claim lapsed less than the lock-delay ago (exit 4)
	StatusLimit     = "limit"   // acquire, next: the caller holds as many claims as its cap allows (exit 4)
	StatusHandedOff = "handed_off"
	// StatusQuarantined: acquire of an issue whose last claims each
	// lapsed (exit 4).
	StatusQuarantined = "quarantined"
	// StatusUnquarantined: unquarantine (exit 0), also of an issue that
	// was not quarantined.
	StatusUnquarantined = "unquarantined"
)

// The reasons a tenure ended, in History (docs/ssh.md, The agent verbs).
const (
	EndReleased      = "released"       // its holder released it
	EndExpired       = "expired"        // its expiry passed; nobody has taken the issue since
	EndTakenOver     = "taken_over"     // its expiry passed and a new tenure began
	EndClosed        = "closed"         // the issue was closed at the forge
	EndMerged        = "merged"         // the pull request was merged
	EndDeleted       = "deleted"        // the issue or its repository was deleted
	EndForceReleased = "force_released" // a repository admin released it
	EndHandedOff     = "handed_off"     // its holder (or an admin) handed the issue to another holder
	EndSessionLost   = "session_lost"   // the session keeping it alive was lost, and its grace ran out
)

// None answers a next that found nothing to claim (exit 4).
//
//	{"status":"none","repo":"acme/widgets"}
type None struct {
	Status string `json:"status"` // StatusNone
	Repo   string `json:"repo"`
}

// Stale answers a check whose token is not the live tenure's (exit 4):
// Token is the live tenure's token, or nil when nobody holds the issue.
//
//	{"status":"stale","repo":"acme/widgets","issue":42,"token":3}
type Stale struct {
	Status string `json:"status"` // StatusStale
	Repo   string `json:"repo"`
	Issue  int64  `json:"issue"`
	Token  *int64 `json:"token"`
}

// Cooling answers an acquire of an issue whose last claim lapsed less
// than the sidecar's lock-delay ago (exit 4): nobody but the holder whose
// claim lapsed may claim it before Until.
//
//	{"status":"cooling","repo":"acme/widgets","issue":42,"until":"2026-09-05T12:05:00Z"}
type Cooling struct {
	Status string `json:"status"` // StatusCooling
	Repo   string `json:"repo"`
	Issue  int64  `json:"issue"`
	Until  Time   `json:"until"`
}

// Quarantined answers an acquire of a quarantined issue (exit 4): its
// last claims each ended involuntarily (expired or session_lost), the
// last of them at Since; it stays so until a repository admin lifts it
// (unquarantine, or removing the label in Gitea). A repository admin's
// acquire --force takes it all the same.
//
//	{"status":"quarantined","repo":"acme/widgets","issue":42,"since":"2026-09-05T12:05:00Z"}
type Quarantined struct {
	Status string `json:"status"` // StatusQuarantined
	Repo   string `json:"repo"`
	Issue  int64  `json:"issue"`
	Since  Time   `json:"since"`
}

// Unquarantined answers unquarantine (exit 0): Lifted says whether the
// issue was quarantined.
//
//	{"status":"unquarantined","repo":"acme/widgets","issue":42,"lifted":true}
type Unquarantined struct {
	Status string `json:"status"` // StatusUnquarantined
	Repo   string `json:"repo"`
	Issue  int64  `json:"issue"`
	Lifted bool   `json:"lifted"`
}

// HandedOff answers a handoff (exit 0): the target's new tenure, and
// the one it replaced.
//
//	{"status":"handed_off","repo":"acme/widgets","issue":42,"holder":"bob","agent":"agent-8","token":4,"expires_at":"…","from":{"holder":"bot","agent":"agent-7","token":3}}
type HandedOff struct {
	Status    string  `json:"status"` // StatusHandedOff
	Repo      string  `json:"repo"`
	Issue     int64   `json:"issue"`
	Holder    string  `json:"holder"`
	Agent     *string `json:"agent"`
	Token     int64   `json:"token"`
	ExpiresAt *Time   `json:"expires_at"`
	From      From    `json:"from"`
}

// From is the tenure a handoff ended.
type From struct {
	Holder string  `json:"holder"`
	Agent  *string `json:"agent"`
	Token  int64   `json:"token"`
}

// Limit answers an acquire or next that would take the caller past the
// sidecar's work-in-progress cap (exit 4): Scope "holder" (the account
// and the agent: --max-claims-per-holder) or "account" (all the account's
// agents: --max-claims-per-account), the cap, and the live claims the
// scope holds now. Issue is null for next.
//
//	{"status":"limit","repo":"acme/widgets","issue":42,"holder":"bot","agent":"agent-7","scope":"holder","limit":3,"live":3}
type Limit struct {
	Status string  `json:"status"` // StatusLimit
	Repo   string  `json:"repo"`
	Issue  *int64  `json:"issue"`
	Holder string  `json:"holder"`
	Agent  *string `json:"agent"`
	Scope  string  `json:"scope"`
	Limit  int64   `json:"limit"`
	Live   int64   `json:"live"`
}

// TenureView is one tenure of an issue in its history. EndedAt and EndedBy
// are nil while it is live; an expired tenure ended at its expiry instant.
// ForcedBy names the admin who force-released it (only then). Where a
// person or agent ended it (released, force_released), EndedByLogin and
// EndedByAgent say who; they are left out otherwise.
type TenureView struct {
	Token        int64   `json:"token"`
	Holder       string  `json:"holder"`
	Agent        *string `json:"agent"`
	AcquiredAt   Time    `json:"acquired_at"`
	EndedAt      *Time   `json:"ended_at"`
	EndedBy      *string `json:"ended_by"`
	ForcedBy     string  `json:"forced_by,omitempty"`
	EndedByLogin *string `json:"ended_by_login,omitempty"`
	EndedByAgent *string `json:"ended_by_agent,omitempty"`
}

// MarshalJSON writes ended_by_agent whenever ended_by_login is there:
// null for an account that ended it itself.
func (t TenureView) MarshalJSON() ([]byte, error) {
	type plain TenureView // without this method
	b, err := json.Marshal(plain(t))
	if err != nil || t.EndedByLogin == nil || t.EndedByAgent != nil {
		return b, err
	}
	return append(b[:len(b)-1], `,"ended_by_agent":null}`...), nil
}

// History answers `collab-lease history` and GET …/lease/history: the
// issue's tenures, newest first.
//
//	{"repo":"acme/widgets","issue":42,"tenures":[{"token":3,"holder":"bob","agent":null,"acquired_at":"…","ended_at":null,"ended_by":null}]}
type History struct {
	Repo    string       `json:"repo"`
	Issue   int64        `json:"issue"`
	Tenures []TenureView `json:"tenures"` // [] when empty, never null
}

// MarshalJSON writes a nil Tenures as [].
func (h History) MarshalJSON() ([]byte, error) {
	type plain History
	if h.Tenures == nil {
		h.Tenures = []TenureView{}
	}
	return json.Marshal(plain(h))
}

// Tenure answers a successful acquire, renew or next (exit 0): the
// caller's live tenure; and a check whose token is current (Status
// StatusCurrent), with the tenure's holder and its reservations (only
// check has "reservations", [] when it has none).
//
//	{"status":"acquired","repo":"acme/widgets","issue":42,"holder":"alice","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":null}
type Tenure struct {
	Status     string  `json:"status"` // StatusAcquired, StatusRenewed or StatusCurrent
	Repo       string  `json:"repo"`
	Issue      int64   `json:"issue"`
	Holder     string  `json:"holder"`
	Agent      *string `json:"agent"` // nil: the account itself
	Token      int64   `json:"token"`
	AcquiredAt Time    `json:"acquired_at"`
	ExpiresAt  *Time   `json:"expires_at"` // nil: open-ended
	// Reservations (check): the path reservations that live with the
	// claim.
	Reservations *[]Reservation `json:"reservations,omitempty"`
}

// Conflict answers a refused acquire (StatusHeld) or a refused renew or
// release (StatusNotHolder), exit 4. Holder, Agent and ExpiresAt are
// those of the live tenure; all are nil (null) for not_holder when nobody
// holds it, and Agent is nil for a holder that is an account itself.
//
//	{"status":"held","repo":"acme/widgets","issue":42,"holder":"bob","agent":"agent-7","expires_at":"2026-09-05T12:05:00Z"}
type Conflict struct {
	Status    string  `json:"status"`
	Repo      string  `json:"repo"`
	Issue     int64   `json:"issue"`
	Holder    *string `json:"holder"`
	Agent     *string `json:"agent"`
	ExpiresAt *Time   `json:"expires_at"`
}

// Released answers a successful release (exit 0), also of nothing.
//
//	{"status":"released","repo":"acme/widgets","issue":42}
type Released struct {
	Status string `json:"status"` // StatusReleased
	Repo   string `json:"repo"`
	Issue  int64  `json:"issue"`
}

// LeaseView is one live lease as List and IssueLease show it.
type LeaseView struct {
	Issue      int64   `json:"issue"`
	Holder     string  `json:"holder"`
	Agent      *string `json:"agent"` // nil: the account itself
	Token      int64   `json:"token"`
	AcquiredAt Time    `json:"acquired_at"`
	ExpiresAt  *Time   `json:"expires_at"` // nil: open-ended
}

// List answers `collab-lease list` and GET …/leases: the live leases the
// viewer may see, oldest first.
//
//	{"repo":"acme/widgets","leases":[{"issue":42,"holder":"alice","agent":null,"token":2,"acquired_at":"…","expires_at":null}]}
type List struct {
	Repo   string      `json:"repo"`
	Leases []LeaseView `json:"leases"` // marshalled as [] when empty, never null
}

// MarshalJSON writes a nil Leases as [], so a client can always iterate.
func (l List) MarshalJSON() ([]byte, error) {
	type plain List // without this method
	if l.Leases == nil {
		l.Leases = []LeaseView{}
	}
	return json.Marshal(plain(l))
}

// IssueLease answers GET …/issues/{n}/lease: the issue's live lease, or
// {"lease":null}.
type IssueLease struct {
	Lease *LeaseView `json:"lease"`
}

// The live events of GET …/leases/events (docs/http.md, Live events), as Server-Sent
// Events: the event's name, and the JSON of its data line.
const (
	// EventLease: an issue's live lease began or changed (acquired,
	// renewed, taken over); data is its LeaseView, as List shows it.
	EventLease = "lease"
	// EventReleased: an issue's live lease ended (released,
	// force-released, expired, closed, merged or deleted); data is
	// ReleasedEvent.
	EventReleased = "released"
	// EventReset: the events since the client's Last-Event-ID are no
	// longer known (or cannot be told to this viewer one by one); data is
	// {}. The client fetches the list again.
	EventReset = "reset"
)

// ReleasedEvent is the data of an EventReleased: the issue that no longer
// has a live lease.
//
//	{"issue":42}
type ReleasedEvent struct {
	Issue int64 `json:"issue"`
}

// AgentPtr is an agent name as the replies show it: "" (none) is nil.
func AgentPtr(agent string) *string {
	if agent == "" {
		return nil
	}
	return &agent
}

// Time marshals as RFC 3339 in UTC with whole seconds and a "Z":
// "2026-09-05T12:00:00Z".
type Time time.Time

// TimePtr converts an optional time; nil stays nil (JSON null).
func TimePtr(t *time.Time) *Time {
	if t == nil {
		return nil
	}
	v := Time(*t)
	return &v
}

// MarshalJSON renders t as "2026-09-05T12:00:00Z".
func (t Time) MarshalJSON() ([]byte, error) {
	// time.RFC3339 has no fractional seconds. Appended into one buffer:
	// a list of thousands of leases marshals two of these per lease.
	b := make([]byte, 0, len(`"2006-01-02T15:04:05Z"`))
	b = append(b, '"')
	b = time.Time(t).UTC().AppendFormat(b, time.RFC3339)
	return append(b, '"'), nil
}

// UnmarshalJSON reads any RFC 3339 time, in UTC; null leaves t unchanged,
// as encoding/json expects of an Unmarshaler.
func (t *Time) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var parsed time.Time
	if err := parsed.UnmarshalJSON(b); err != nil {
		return err
	}
	*t = Time(parsed.UTC())
	return nil
}

// The lines of `collab-lease session` (docs/ssh.md, Sessions).
const (
	StatusSession     = "session"      // the session's first line
	StatusSessionGone = "session_gone" // --resume of a session that is not alive (exit 4)
	StatusLost        = "lost"         // a claim of the session ended by anything but its own release
	StatusError       = "error"        // a command's error, in a session
	StatusHelp        = "help"         // help, in a session
)

// SessionOpened is a session's first line; a resumed session's carries
// the live claims it took over.
//
//	{"status":"session","session":"…","holder":"bot","agent":"agent-7","grace_seconds":30}
type SessionOpened struct {
	Status       string  `json:"status"` // StatusSession
	Session      string  `json:"session"`
	Holder       string  `json:"holder"`
	Agent        *string `json:"agent"`
	GraceSeconds int64   `json:"grace_seconds"`
	// Leases are a resumed session's claims (empty, not absent, if it
	// kept none); nil for a new session.
	Leases *[]SessionLease `json:"leases,omitempty"`
}

// SessionLease is one claim of a resumed session: a lease of List, with
// its repository.
type SessionLease struct {
	Repo string `json:"repo"`
	LeaseView
}

// SessionGone answers a --resume of a session that is not alive (exit 4).
//
//	{"status":"session_gone","session":"…"}
type SessionGone struct {
	Status  string `json:"status"` // StatusSessionGone
	Session string `json:"session"`
}

// Lost is the line a session writes, unasked, the moment one of its
// claims ends by anything but its own release.
//
//	{"status":"lost","repo":"acme/widgets","issue":42,"token":3,"ended_by":"force_released"}
type Lost struct {
	Status  string `json:"status"` // StatusLost
	Repo    string `json:"repo"`
	Issue   int64  `json:"issue"`
	Token   int64  `json:"token"`
	EndedBy string `json:"ended_by"`
}
