package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The sidecar's JSON replies (SPEC §3), as far as the human rendering
// needs them. They are declared here rather than imported from models so
// the client stays a small, pure-Go binary without the ledger's database
// driver.
type (
	leaseReply struct {
		Status     string     `json:"status"`
		Repo       string     `json:"repo"`
		Issue      int64      `json:"issue"`
		Holder     *string    `json:"holder"`
		Token      int64      `json:"token"`
		AcquiredAt *time.Time `json:"acquired_at"`
		ExpiresAt  *time.Time `json:"expires_at"`
	}
	listReply struct {
		Repo   string `json:"repo"`
		Leases []struct {
			Issue     int64      `json:"issue"`
			Holder    string     `json:"holder"`
			Token     int64      `json:"token"`
			ExpiresAt *time.Time `json:"expires_at"`
		} `json:"leases"`
	}
)

// rendered is the human form of a reply: text for stdout or for stderr.
type rendered struct {
	stdout, stderr string
}

// Render turns the sidecar's reply to v (exit status 0 or 4) into the
// human form, reading times relative to now.
func Render(v *verb, code int, body []byte, now time.Time) (rendered, error) {
	if v.remote == "list" {
		if code != exitOK {
			return rendered{}, fmt.Errorf("list answered with exit status %d", code)
		}
		var l listReply
		if err := decodeOne(body, &l); err != nil {
			return rendered{}, err
		}
		return rendered{stdout: renderList(l, now)}, nil
	}
	var r leaseReply
	if err := decodeOne(body, &r); err != nil {
		return rendered{}, err
	}
	name := clean(r.Repo) + "#" + strconv.FormatInt(r.Issue, 10)
	want := map[string]string{"acquire": "acquired", "renew": "renewed", "release": "released"}[v.remote]
	switch {
	case code == exitOK && r.Status == want && want == "released":
		return rendered{stdout: "released " + name + "\n"}, nil
	case code == exitOK && r.Status == want:
		done := map[string]string{"acquired": "claimed", "renewed": "renewed"}[r.Status]
		return rendered{stdout: fmt.Sprintf("%s %s (token %d, %s)\n", done, name, r.Token, expiresPhrase(r.ExpiresAt, now))}, nil
	case code == exitConflict && r.Status == "held" && r.Holder != nil:
		return rendered{stderr: claimedBy(name, *r.Holder, r.ExpiresAt, now) + "\n"}, nil
	case code == exitConflict && r.Status == "not_holder":
		what := map[string]string{"renew": "not renewed", "release": "not released"}[v.remote]
		if r.Holder == nil {
			return rendered{stderr: fmt.Sprintf("%s: you do not hold %s (nobody does; claim it again)\n", what, name)}, nil
		}
		return rendered{stderr: what + ": " + claimedBy(name, *r.Holder, r.ExpiresAt, now) + "\n"}, nil
	}
	return rendered{}, fmt.Errorf("unexpected status %s with exit status %d", quote(r.Status), code)
}

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

func renderList(l listReply, now time.Time) string {
	if len(l.Leases) == 0 {
		return "no claims on " + clean(l.Repo) + "\n"
	}
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ISSUE\tHOLDER\tTOKEN\tEXPIRES")
	for _, x := range l.Leases {
		exp := "open-ended"
		if x.ExpiresAt != nil {
			exp = fmt.Sprintf("%s (%s)", clock(*x.ExpiresAt, now), untilPhrase(*x.ExpiresAt, now))
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
