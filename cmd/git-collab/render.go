package main

import (
	"bytes"
	"encoding/json"
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

// Render turns the sidecar's reply to v (exit status 0 or 4, in the shapes
// of plugin/contract) into the human form, reading times relative to now.
func Render(v *verb, code int, body []byte, now time.Time) (rendered, error) {
	if v.remote == contract.VerbList {
		if code != contract.ExitOK {
			return rendered{}, fmt.Errorf("list answered with exit status %d", code)
		}
		var l contract.List
		if err := decodeOne(body, &l); err != nil {
			return rendered{}, err
		}
		return rendered{stdout: renderList(l, now)}, nil
	}
	named := func(repo string, issue int64) string { return clean(repo) + "#" + strconv.FormatInt(issue, 10) }
	switch code {
	case contract.ExitOK:
		want := map[contract.Verb]string{contract.VerbAcquire: contract.StatusAcquired,
			contract.VerbRenew: contract.StatusRenewed, contract.VerbRelease: contract.StatusReleased}[v.remote]
		if want == contract.StatusReleased {
			var r contract.Released
			if err := decodeOne(body, &r); err != nil {
				return rendered{}, err
			}
			if r.Status != want {
				return rendered{}, unexpected(r.Status, code)
			}
			return rendered{stdout: "released " + named(r.Repo, r.Issue) + "\n"}, nil
		}
		var r contract.Tenure
		if err := decodeOne(body, &r); err != nil {
			return rendered{}, err
		}
		if r.Status != want {
			return rendered{}, unexpected(r.Status, code)
		}
		done := map[string]string{contract.StatusAcquired: "claimed", contract.StatusRenewed: "renewed"}[r.Status]
		return rendered{stdout: fmt.Sprintf("%s %s (token %d, %s)\n", done, named(r.Repo, r.Issue), r.Token,
			expiresPhrase(stdTime(r.ExpiresAt), now))}, nil
	case contract.ExitConflict:
		var r contract.Conflict
		if err := decodeOne(body, &r); err != nil {
			return rendered{}, err
		}
		name := named(r.Repo, r.Issue)
		switch {
		case r.Status == contract.StatusHeld && r.Holder != nil:
			return rendered{stderr: claimedBy(name, *r.Holder, stdTime(r.ExpiresAt), now) + "\n"}, nil
		case r.Status == contract.StatusNotHolder:
			what := map[contract.Verb]string{contract.VerbRenew: "not renewed", contract.VerbRelease: "not released"}[v.remote]
			if r.Holder == nil {
				return rendered{stderr: fmt.Sprintf("%s: you do not hold %s (nobody does; claim it again)\n", what, name)}, nil
			}
			return rendered{stderr: what + ": " + claimedBy(name, *r.Holder, stdTime(r.ExpiresAt), now) + "\n"}, nil
		}
		return rendered{}, unexpected(r.Status, code)
	}
	return rendered{}, fmt.Errorf("unexpected exit status %d", code)
}

func unexpected(status string, code int) error {
	return fmt.Errorf("unexpected status %s with exit status %d", quote(status), code)
}

// stdTime reads an optional contract time (nil: open-ended).
func stdTime(t *contract.Time) *time.Time { return (*time.Time)(t) }

func claimedBy(name, holder string, exp *time.Time, now time.Time) string {
	if exp == nil {
		return fmt.Sprintf("%s is claimed by %s (open-ended)", name, clean(holder))
	}
	return fmt.Sprintf("%s is claimed by %s until %s", name, clean(holder), clock(*exp, now))
}

// expiresPhrase is "expires 12:05 UTC, in 30m" or "open-ended".
func expiresPhrase(exp *time.Time, now time.Time) string {
	if exp == nil {
		return "open-ended"
	}
	return fmt.Sprintf("expires %s, %s", clock(*exp, now), untilPhrase(*exp, now))
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
		fmt.Fprintf(tw, "#%d\t%s\t%d\t%s\n", x.Issue, clean(x.Holder), x.Token, exp)
	}
	tw.Flush()
	// tabwriter pads the last column too when a cell is empty; no cell is.
	return b.String()
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

// decodeOne reads exactly one JSON object from body.
func decodeOne(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not the JSON reply expected: %v", err)
	}
	if dec.More() {
		return fmt.Errorf("more than one JSON value")
	}
	return nil
}

// clean keeps a server-supplied string from reaching the terminal with
// control characters in it.
func clean(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }) >= 0 {
		return quote(s)
	}
	return s
}
