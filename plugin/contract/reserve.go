package contract

import (
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"
)

// reserve, unreserve, reservations: path reservations, a holder's claim
// on paths of one repository given as globs, which keep two agents off
// the same files (docs/ssh.md, Reserving paths).

// MaxReserveGlobs bounds the globs of one reserve or unreserve;
// MaxGlobLen a glob's length in bytes.
const (
	MaxReserveGlobs = 64
	MaxGlobLen      = 255
)

// The statuses only the reservation verbs answer.
const (
	StatusReserved     = "reserved"     // reserve: all the globs are the caller's (exit 0)
	StatusConflict     = "conflict"     // reserve: others' reservations stand in the way, nothing reserved (exit 4)
	StatusUnreserved   = "unreserved"   // unreserve (exit 0), also of nothing
	StatusReservations = "reservations" // reservations (exit 0)
)

// CheckGlob accepts a path glob as reserve and unreserve take it: 1 to
// MaxGlobLen bytes of UTF-8 without control characters, relative to the
// repository's root (no leading "/"), no segment empty, "." or "..".
// Whether two globs overlap is for the ledger (plugin/pathglob, whose
// Parse applies these rules too).
func CheckGlob(s string) error {
	if s == "" {
		return usageErrorf("a glob is empty; expected a path glob like src/auth/** or docs/")
	}
	return checkRepoPath("glob", s, MaxGlobLen, true)
}

// MaxPathLen bounds reservations --path.
const MaxPathLen = 4096

// ParsePath accepts reservations --path: a path in the repository, 1 to
// MaxPathLen bytes of UTF-8 without control characters, no leading or
// trailing "/", no segment empty, "." or "..".
func ParsePath(s string) (string, error) {
	if s == "" {
		return "", usageErrorf("--path is empty; expected a path like src/auth/login.go")
	}
	return s, checkRepoPath("--path", s, MaxPathLen, false)
}

// checkRepoPath applies the rules globs and paths share; a glob may end
// in "/" (a whole directory).
func checkRepoPath(what, s string, maxLen int, glob bool) error {
	switch {
	case len(s) > maxLen:
		return usageErrorf("%s %s is longer than %d bytes", what, quoteArg(s), maxLen)
	case !utf8.ValidString(s):
		return usageErrorf("%s %s is not UTF-8", what, quoteArg(s))
	case strings.HasPrefix(s, "/"):
		return usageErrorf("%s %s starts with /: name paths from the repository's root", what, quoteArg(s))
	}
	for _, r := range s {
		// Control characters (C0, DEL, C1) and the marks that reorder or
		// hide text: a glob is shown to others as it was given.
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return usageErrorf("%s %s holds a control or formatting character", what, quoteArg(s))
		}
	}
	if glob {
		s = strings.TrimSuffix(s, "/")
	}
	for _, seg := range strings.Split(s, "/") {
		switch seg {
		case "":
			return usageErrorf("%s %s has an empty segment", what, quoteArg(s))
		case ".", "..":
			return usageErrorf("%s %s has a segment %q; name paths from the repository's root", what, quoteArg(s), seg)
		}
	}
	return nil
}

// Reservation is one glob of one holder, as every reply, listing and
// event shows it: Issue is the claim it lives with (nil: none, it lives
// with a session or its own TTL), ExpiresAt its anchor's expiry (nil:
// open-ended).
//
//	{"glob":"src/auth/**","shared":false,"holder":"bot","agent":"a1","issue":1,"expires_at":null}
type Reservation struct {
	Glob      string  `json:"glob"`
	Shared    bool    `json:"shared"`
	Holder    string  `json:"holder"`
	Agent     *string `json:"agent"` // nil: the account itself
	Issue     *int64  `json:"issue"`
	ExpiresAt *Time   `json:"expires_at"`
}

// Reservations answers reserve (StatusReserved: the caller's
// reservations of the globs it gave), unreserve (StatusUnreserved: those
// it removed, maybe none) and reservations (StatusReservations: the live
// ones, oldest first, with --path those whose glob matches the path).
//
//	{"status":"reserved","repo":"acme/widgets","reservations":[{"glob":"src/auth/**",…}]}
type Reservations struct {
	Status       string        `json:"status"`
	Repo         string        `json:"repo"`
	Reservations []Reservation `json:"reservations"` // marshalled as [] when empty, never null
}

// MarshalJSON writes a nil Reservations as [].
func (r Reservations) MarshalJSON() ([]byte, error) {
	type plain Reservations // without this method
	if r.Reservations == nil {
		r.Reservations = []Reservation{}
	}
	return json.Marshal(plain(r))
}

// ReserveConflict answers a reserve refused for others' reservations
// (exit 4): With are those that stand in the way; nothing was reserved.
//
//	{"status":"conflict","repo":"acme/widgets","with":[{"glob":"src/auth/**","shared":false,"holder":"bot","agent":"a1","issue":1,"expires_at":"…"}]}
type ReserveConflict struct {
	Status string        `json:"status"` // StatusConflict
	Repo   string        `json:"repo"`
	With   []Reservation `json:"with"`
}

// The live events of reservations (docs/http.md, Live events): data is
// one Reservation.
const (
	EventReserved   = "reserved"   // a reservation was made (or made anew by its holder's reserve of its glob)
	EventUnreserved = "unreserved" // a reservation ended: unreserved, its claim's or session's end, or its ttl's
)
