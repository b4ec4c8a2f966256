package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// rendered is the human form of a reply: text for stdout or for stderr.
type rendered struct {
	stdout, stderr string
}

// addNote adds a line after the reply's, on the same stream: a note of
// what the reply changed in the checkout ("" adds nothing).
func (r *rendered) addNote(note string) {
	switch {
	case note == "":
	case r.stdout != "":
		r.stdout += note + "\n"
	default:
		r.stderr += note + "\n"
	}
}

// Render turns the sidecar's reply to req (exit status 0 or 4, in the
// shapes of plugin/contract) into the human form, reading times relative
// to now. What it cannot read is an error, and the caller shows the reply
// as it is.
func Render(req contract.Command, code int, body []byte, now time.Time) (rendered, error) {
	reply, err := decodeReply(req, code, body)
	if err != nil {
		return rendered{}, err
	}
	return renderReply(req, reply, now), nil
}

// renderReply is the human form of a reply decodeReply read: a success
// (exit 0) on stdout; on stderr, an answer that is not one (exit 4):
// nothing to claim, a stale token, someone else's claim.
func renderReply(req contract.Command, reply any, now time.Time) rendered {
	switch r := reply.(type) {
	case *contract.List:
		return rendered{stdout: renderList(*r, now)}
	case *contract.History:
		return rendered{stdout: renderHistory(*r, now)}
	case *contract.HandedOff:
		return rendered{stdout: fmt.Sprintf("handed %s to %s (token %d, %s)\n", named(r.Repo, r.Issue), who(r.Holder, r.Agent), r.Token,
			expiresPhrase(stdTime(r.ExpiresAt), now))}
	case *contract.Released:
		return rendered{stdout: "released " + named(r.Repo, r.Issue) + "\n"}
	case *contract.Merged:
		return rendered{stdout: fmt.Sprintf("merged %s under token %d: %s\n", pullNamed(r.Repo, r.Pull), r.Token, clean(r.SHA))}
	case *contract.MergeRefused:
		return rendered{stderr: fmt.Sprintf("not merged: Gitea refused %s: %s\n", pullNamed(r.Repo, r.Pull), clean(r.Reason))}
	case *contract.MergeBusy:
		return rendered{stderr: fmt.Sprintf("not merged: %s did not get its turn within %s (%s ahead); merge again later, or with a longer --wait\n",
			pullNamed(r.Repo, r.Pull), contract.FormatDuration(req.Wait), merges(r.Ahead))}
	case *contract.Reservations:
		return rendered{stdout: renderReservations(req, *r, now)}
	case *contract.ReserveConflict:
		var b strings.Builder
		for _, x := range r.With {
			b.WriteString("not reserved: " + reservedBy(r.Repo, x, now) + "\n")
		}
		if b.Len() == 0 {
			b.WriteString("not reserved: another holder's reservation is in the way\n")
		}
		return rendered{stderr: b.String()}
	case *contract.Tenure:
		if r.Status == contract.StatusCurrent {
			out := fmt.Sprintf("token %d is current: %s held by %s (%s)\n", r.Token, named(r.Repo, r.Issue),
				who(r.Holder, r.Agent), expiresPhrase(stdTime(r.ExpiresAt), now))
			if r.Reservations != nil {
				for _, x := range *r.Reservations {
					out += "  reserved: " + reservationLine(x, now) + "\n"
				}
			}
			return rendered{stdout: out}
		}
		done := map[string]string{contract.StatusAcquired: "claimed", contract.StatusRenewed: "renewed"}[r.Status]
		return rendered{stdout: fmt.Sprintf("%s %s (token %d, %s)\n", done, named(r.Repo, r.Issue), r.Token,
			expiresPhrase(stdTime(r.ExpiresAt), now))}
	case *contract.None:
		return rendered{stderr: "nothing to claim in " + clean(r.Repo) + "\n"}
	case *contract.Limit:
		if req.Verb == contract.VerbHandoff {
			// The cap is the target's, whom the reply names.
			return rendered{stderr: fmt.Sprintf("not handed off: %s holds %d live claims, the sidecar's cap of %d per %s\n",
				who(r.Holder, r.Agent), r.Live, r.Limit, r.Scope)}
		}
		if req.Verb == contract.VerbReserve {
			return rendered{stderr: fmt.Sprintf("not reserved: you hold %d reservations, the sidecar's cap of %d; unreserve some first\n", r.Live, r.Limit)}
		}
		scope := map[string]string{"holder": "you hold", "account": "your account holds"}[r.Scope]
		return rendered{stderr: fmt.Sprintf("not claimed: %s %d live claims, the sidecar's cap of %d; unclaim one first\n", scope, r.Live, r.Limit)}
	case *contract.Cooling:
		return rendered{stderr: fmt.Sprintf("%s cools down until %s: its last claim lapsed, and only its holder may claim it before then\n",
			named(r.Repo, r.Issue), clock(time.Time(r.Until), now))}
	case *contract.Stale:
		// The reply names the current token, not the one asked about.
		if req.Verb == contract.VerbMerge {
			return rendered{stderr: "not merged: " + staleMerge(req.Token, *r) + "\n"}
		}
		if r.Token == nil {
			return rendered{stderr: fmt.Sprintf("token %d is stale: nobody holds %s\n", req.Token, named(r.Repo, r.Issue))}
		}
		return rendered{stderr: fmt.Sprintf("token %d is stale: %s is now at token %d\n", req.Token, named(r.Repo, r.Issue), *r.Token)}
	case *contract.Conflict:
		name := named(r.Repo, r.Issue)
		if r.Status == contract.StatusHeld {
			return rendered{stderr: claimedBy(name, who(*r.Holder, r.Agent), stdTime(r.ExpiresAt), now) + "\n"}
		}
		what := map[contract.Verb]string{contract.VerbRenew: "not renewed", contract.VerbRelease: "not released", contract.VerbHandoff: "not handed off",
			contract.VerbMerge: "not merged", contract.VerbReserve: "not reserved"}[req.Verb]
		if req.Verb == contract.VerbMerge && r.Issue == req.Issue {
			// The pull request's claim; else the reply names the claim of
			// an issue it closes, by the issue.
			name = pullNamed(r.Repo, r.Issue)
			if r.Holder == nil {
				return rendered{stderr: fmt.Sprintf("%s: nobody holds %s or an issue it closes; claim it first\n", what, name)}
			}
		}
		if r.Holder == nil {
			return rendered{stderr: fmt.Sprintf("%s: you do not hold %s (nobody does; claim it again)\n", what, name)}
		}
		return rendered{stderr: what + ": " + claimedBy(name, who(*r.Holder, r.Agent), stdTime(r.ExpiresAt), now) + "\n"}
	}
	panic(fmt.Sprintf("renderReply: %T is not a reply decodeReply makes", reply))
}

// named is how a reply's issue is shown: "acme/widgets#42".
func named(repo string, issue int64) string { return clean(repo) + "#" + strconv.FormatInt(issue, 10) }

// pullNamed is how a merge's pull request is shown: "acme/widgets!7", as
// the sidecar's own lines name one.
func pullNamed(repo string, pull int64) string {
	return clean(repo) + "!" + strconv.FormatInt(pull, 10)
}

// staleMerge says why a merge under token (0: the caller's current one)
// was stale: the claim it named is at another token now, or nobody's.
func staleMerge(token int64, r contract.Stale) string {
	yours := "your token"
	if token != 0 {
		yours = fmt.Sprintf("token %d", token)
	}
	if r.Token == nil {
		return fmt.Sprintf("%s is stale: nobody holds %s", yours, named(r.Repo, r.Issue))
	}
	return fmt.Sprintf("%s is stale: %s is now at token %d", yours, named(r.Repo, r.Issue), *r.Token)
}

// merges is "1 merge" or "2 merges".
func merges(n int) string {
	if n == 1 {
		return "1 merge"
	}
	return strconv.Itoa(n) + " merges"
}

// stdTime reads an optional contract time (nil: open-ended).
func stdTime(t *contract.Time) *time.Time { return (*time.Time)(t) }

// who is a holder as git collab shows it: "bot/agent-7" for an agent of
// the account bot, "bot" for the account itself.
func who(login string, agent *string) string {
	if agent == nil {
		return clean(login)
	}
	return clean(login) + "/" + clean(*agent)
}

// claimedBy says that name is claimed by holder (shown by who).
func claimedBy(name, holder string, exp *time.Time, now time.Time) string {
	if exp == nil {
		return fmt.Sprintf("%s is claimed by %s (open-ended)", name, holder)
	}
	return fmt.Sprintf("%s is claimed by %s until %s", name, holder, clock(*exp, now))
}

// expiresPhrase is "expires 12:05 UTC, in 30m" or "open-ended".
func expiresPhrase(exp *time.Time, now time.Time) string {
	if exp == nil {
		return "open-ended"
	}
	return fmt.Sprintf("expires %s, %s", clock(*exp, now), untilPhrase(*exp, now))
}

// renderReservations is a line per reservation of r, the reply to req:
// those reserved or unreserved, or the live ones.
func renderReservations(req contract.Command, r contract.Reservations, now time.Time) string {
	if len(r.Reservations) == 0 {
		switch {
		case req.Verb == contract.VerbUnreserve:
			return "nothing to unreserve in " + clean(r.Repo) + "\n"
		case req.Path != "":
			return fmt.Sprintf("no reservation in %s matches %s\n", clean(r.Repo), clean(req.Path))
		}
		return "no reservations in " + clean(r.Repo) + "\n"
	}
	done := map[contract.Verb]string{contract.VerbReserve: "reserved ", contract.VerbUnreserve: "unreserved "}[req.Verb]
	var b strings.Builder
	for _, x := range r.Reservations {
		b.WriteString(done + reservationLine(x, now) + "\n")
	}
	return b.String()
}

// reservationLine is one reservation on a line: its glob (marked if
// shared), holder, agent, the issue whose claim it lives with, and its
// end: "src/auth/** · bot · a1 · #12 · until 12:05 UTC".
func reservationLine(x contract.Reservation, now time.Time) string {
	parts := []string{reservedGlob(x), dotted(x.Holder, x.Agent)}
	if x.Issue != nil {
		parts = append(parts, "#"+strconv.FormatInt(*x.Issue, 10))
	}
	if t := stdTime(x.ExpiresAt); t != nil {
		return strings.Join(append(parts, "until "+clock(*t, now)), " · ")
	}
	return strings.Join(append(parts, "no expiry"), " · ")
}

// reservedBy says whose reservation x of repo is, as the gate words a
// refused push: "src/auth/** is reserved by bot · a1 for acme/widgets#12
// until 12:05 UTC".
func reservedBy(repo string, x contract.Reservation, now time.Time) string {
	s := reservedGlob(x) + " is reserved by " + dotted(x.Holder, x.Agent)
	if x.Issue != nil {
		s += " for " + named(repo, *x.Issue)
	}
	if t := stdTime(x.ExpiresAt); t != nil {
		return s + " until " + clock(*t, now)
	}
	return s + " (no expiry)"
}

// reservedGlob is a reservation's glob, "(shared)" after it if it is.
func reservedGlob(x contract.Reservation) string {
	if x.Shared {
		return clean(x.Glob) + " (shared)"
	}
	return clean(x.Glob)
}

// dotted is a holder as reservations show it: "bot · a1", or "bot" for
// the account itself.
func dotted(login string, agent *string) string {
	if agent == nil {
		return clean(login)
	}
	return clean(login) + " · " + clean(*agent)
}

func renderList(l contract.List, now time.Time) string {
	if len(l.Leases) == 0 {
		return "no claims on " + clean(l.Repo) + "\n"
	}
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ISSUE\tHOLDER\tTOKEN\tEXPIRES")
	for _, x := range l.Leases {
		exp := "open-ended"
		if t := stdTime(x.ExpiresAt); t != nil {
			exp = fmt.Sprintf("%s (%s)", clock(*t, now), untilPhrase(*t, now))
		}
		fmt.Fprintf(tw, "#%d\t%s\t%d\t%s\n", x.Issue, who(x.Holder, x.Agent), x.Token, exp)
	}
	tw.Flush()
	// tabwriter pads the last column too when a cell is empty; no cell is.
	return b.String()
}

// renderHistory is a table of an issue's tenures, newest first.
func renderHistory(h contract.History, now time.Time) string {
	if len(h.Tenures) == 0 {
		return named(h.Repo, h.Issue) + " has never been claimed\n"
	}
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOKEN\tHOLDER\tACQUIRED\tENDED\tHOW")
	for _, x := range h.Tenures {
		ended, how := "live", ""
		if t := stdTime(x.EndedAt); t != nil {
			ended, how = clock(*t, now), "-"
		}
		if x.EndedBy != nil {
			how = clean(*x.EndedBy)
			switch {
			case x.EndedByLogin != nil && (*x.EndedByLogin != x.Holder || !equalAgent(x.EndedByAgent, x.Agent)):
				how += " by " + who(*x.EndedByLogin, x.EndedByAgent)
			case *x.EndedBy == contract.EndForceReleased && x.ForcedBy != "":
				how += " by " + clean(x.ForcedBy)
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", x.Token, who(x.Holder, x.Agent), clock(time.Time(x.AcquiredAt), now), ended, how)
	}
	tw.Flush()
	// tabwriter pads a cell before an empty last one (a live tenure's
	// HOW): trim what it leaves at the end of the line.
	var out strings.Builder
	for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		out.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	return out.String()
}

// clock shows an instant in UTC: "12:05 UTC" on now's (UTC) day, else with
// its date.
func clock(t, now time.Time) string {
	t, now = t.UTC(), now.UTC()
	if t.Year() == now.Year() && t.YearDay() == now.YearDay() {
		return t.Format("15:04 UTC")
	}
	return t.Format("2006-01-02 15:04 UTC")
}

// untilPhrase is "in 30m": rounded to the nearest unit that matters, so a
// 30m claim answered a moment ago still reads "in 30m".
func untilPhrase(t, now time.Time) string {
	d := t.Sub(now)
	switch {
	case d < time.Second:
		return "expired"
	case d < time.Minute-time.Second/2:
		return fmt.Sprintf("in %ds", int64(d.Round(time.Second)/time.Second))
	case d < 24*time.Hour-30*time.Second:
		d = d.Round(time.Minute)
		h, m := d/time.Hour, d%time.Hour/time.Minute
		switch {
		case h == 0:
			return fmt.Sprintf("in %dm", m)
		case m == 0:
			return fmt.Sprintf("in %dh", h)
		}
		return fmt.Sprintf("in %dh%dm", h, m)
	}
	d = d.Round(time.Hour)
	days, h := d/(24*time.Hour), d%(24*time.Hour)/time.Hour
	if h == 0 {
		return fmt.Sprintf("in %dd", days)
	}
	return fmt.Sprintf("in %dd%dh", days, h)
}

// clean keeps a server-supplied string from reaching the terminal with
// control characters in it.
func clean(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }) >= 0 {
		return quote(s)
	}
	return s
}

func equalAgent(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
