package main

import (
	"strings"
	"testing"
	"time"
)

// now is the clock of every rendering test: 11:35 UTC, 30m before 12:05.
var now = time.Date(2026, 9, 5, 11, 35, 0, 0, time.UTC)

func TestRender(t *testing.T) {
	cases := []struct {
		verb, body     string
		code           int
		stdout, stderr string
	}{
		{"claim", `{"status":"acquired","repo":"acme/widgets","issue":42,"holder":"alice","token":3,"acquired_at":"2026-09-05T11:35:00Z","expires_at":"2026-09-05T12:05:00Z"}`, 0,
			"claimed acme/widgets#42 (token 3, expires 12:05 UTC, in 30m)\n", ""},
		{"claim", `{"status":"acquired","repo":"acme/widgets","issue":42,"holder":"alice","token":3,"acquired_at":"2026-09-05T11:35:00Z","expires_at":null}`, 0,
			"claimed acme/widgets#42 (token 3, open-ended)\n", ""},
		{"claim", `{"status":"held","repo":"acme/widgets","issue":42,"holder":"bob","expires_at":"2026-09-05T12:05:00Z"}`, 4,
			"", "acme/widgets#42 is claimed by bob until 12:05 UTC\n"},
		{"claim", `{"status":"held","repo":"acme/widgets","issue":42,"holder":"bob","expires_at":null}`, 4,
			"", "acme/widgets#42 is claimed by bob (open-ended)\n"},
		{"renew", `{"status":"renewed","repo":"acme/widgets","issue":42,"holder":"alice","token":3,"acquired_at":"2026-09-05T11:00:00Z","expires_at":"2026-09-05T13:35:00Z"}`, 0,
			"renewed acme/widgets#42 (token 3, expires 13:35 UTC, in 2h)\n", ""},
		{"renew", `{"status":"not_holder","repo":"acme/widgets","issue":42,"holder":null,"expires_at":null}`, 4,
			"", "not renewed: you do not hold acme/widgets#42 (nobody does; claim it again)\n"},
		{"renew", `{"status":"not_holder","repo":"acme/widgets","issue":42,"holder":"bob","expires_at":"2026-09-06T09:00:00Z"}`, 4,
			"", "not renewed: acme/widgets#42 is claimed by bob until 2026-09-06 09:00 UTC\n"},
		{"unclaim", `{"status":"released","repo":"acme/widgets","issue":42}`, 0, "released acme/widgets#42\n", ""},
		{"unclaim", `{"status":"not_holder","repo":"acme/widgets","issue":42,"holder":"bob","expires_at":null}`, 4,
			"", "not released: acme/widgets#42 is claimed by bob (open-ended)\n"},
		// The repository as the sidecar names it now (after a rename).
		{"unclaim", `{"status":"released","repo":"acme/gadgets","issue":42}`, 0, "released acme/gadgets#42\n", ""},
		{"claims", `{"repo":"acme/widgets","leases":[]}`, 0, "no claims on acme/widgets\n", ""},
		{"claims", `{"repo":"acme/widgets","leases":[` +
			`{"issue":42,"holder":"alice","token":3,"acquired_at":"2026-09-05T11:35:00Z","expires_at":"2026-09-05T12:05:00Z"},` +
			`{"issue":7,"holder":"bartholomew","token":12,"acquired_at":"2026-09-05T11:36:00Z","expires_at":null},` +
			`{"issue":1234,"holder":"c","token":1,"acquired_at":"2026-09-05T11:37:00Z","expires_at":"2026-09-08T11:35:00Z"}]}` + "\n", 0,
			"ISSUE  HOLDER       TOKEN  EXPIRES\n" +
				"#42    alice        3      12:05 UTC (in 30m)\n" +
				"#7     bartholomew  12     open-ended\n" +
				"#1234  c            1      2026-09-08 11:35 UTC (in 3d)\n", ""},
		// Control characters from a server never reach the terminal raw.
		{"claim", `{"status":"held","repo":"acme/widgets","issue":42,"holder":"b\u001b[2Job","expires_at":null}`, 4,
			"", "acme/widgets#42 is claimed by \"b\\x1b[2Job\" (open-ended)\n"},
	}
	for _, c := range cases {
		got, err := Render(findVerb(c.verb), c.code, []byte(c.body), now)
		if err != nil || got.stdout != c.stdout || got.stderr != c.stderr {
			t.Errorf("%s %s:\n got %q %q %v\nwant %q %q", c.verb, c.body, got.stdout, got.stderr, err, c.stdout, c.stderr)
		}
	}
}

func TestRenderRefusesWhatItDoesNotKnow(t *testing.T) {
	for _, c := range []struct {
		verb, body string
		code       int
	}{
		{"claim", ``, 0},
		{"claim", `not json`, 0},
		{"claim", `{"status":"acquired"} {"status":"acquired"}`, 0},
		{"claim", `{"status":"renewed","repo":"a/b","issue":1}`, 0}, // the wrong verb's reply
		{"claim", `{"status":"held","repo":"a/b","issue":1,"holder":null}`, 4},
		{"claim", `{"status":"acquired","repo":"a/b","issue":1}`, 4},
		{"claims", `{"repo":"a/b","leases":[]}`, 4},
		{"claims", `[]`, 0},
	} {
		if got, err := Render(findVerb(c.verb), c.code, []byte(c.body), now); err == nil {
			t.Errorf("%s %q (exit %d): rendered %+v, want an error", c.verb, c.body, c.code, got)
		}
	}
}

func TestUntilPhrase(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Minute, "expired"},
		{0, "expired"},
		{time.Second, "in 1s"},
		{45 * time.Second, "in 45s"},
		{59 * time.Second, "in 59s"},
		{59*time.Second + 600*time.Millisecond, "in 1m"},
		{29*time.Minute + 59*time.Second, "in 30m"}, // the answer left the sidecar a moment ago
		{30 * time.Minute, "in 30m"},
		{30*time.Minute + 29*time.Second, "in 30m"},
		{time.Hour, "in 1h"},
		{2*time.Hour + 5*time.Minute, "in 2h5m"},
		{23*time.Hour + 59*time.Minute, "in 23h59m"},
		{23*time.Hour + 59*time.Minute + 45*time.Second, "in 1d"},
		{36 * time.Hour, "in 1d12h"},
		{168 * time.Hour, "in 7d"},
	} {
		if got := untilPhrase(now.Add(c.d), now); got != c.want {
			t.Errorf("untilPhrase(%s) = %q, want %q", c.d, got, c.want)
		}
	}
}

func TestClockShowsTheDateOnlyOnAnotherDay(t *testing.T) {
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{time.Date(2026, 9, 5, 23, 59, 0, 0, time.UTC), "23:59 UTC"},
		{time.Date(2026, 9, 6, 0, 0, 0, 0, time.UTC), "2026-09-06 00:00 UTC"},
		{time.Date(2027, 9, 5, 12, 0, 0, 0, time.UTC), "2027-09-05 12:00 UTC"},
		{time.Date(2026, 9, 5, 14, 5, 0, 0, time.FixedZone("CEST", 2*3600)), "12:05 UTC"},
	} {
		if got := clock(c.t, now); got != c.want {
			t.Errorf("clock(%s) = %q, want %q", c.t, got, c.want)
		}
	}
}

func TestHelpCoversEveryVerb(t *testing.T) {
	main, man := mainHelp(), manPage()
	for _, v := range verbs {
		if !strings.Contains(main, v.name+" ") || !strings.Contains(man, roff(v.synopsis)) {
			t.Errorf("%s missing from the help or the manual page", v.name)
		}
		h := verbHelp(&v)
		if !strings.HasPrefix(h, "usage: "+v.synopsis+"\n") || strings.Contains(h, "--ttl <dur>  ") != v.ttl {
			t.Errorf("help of %s:\n%s", v.name, h)
		}
	}
	for _, line := range strings.Split(man, "\n") {
		if strings.HasPrefix(line, "'") || (strings.HasPrefix(line, ".") && !strings.HasPrefix(line, ".TH") &&
			!strings.HasPrefix(line, ".SH") && !strings.HasPrefix(line, ".TP") && !strings.HasPrefix(line, ".B ") &&
			!strings.HasPrefix(line, ".PP") && !strings.HasPrefix(line, ".nf") && !strings.HasPrefix(line, ".fi")) {
			t.Errorf("manual page line reads as a roff request: %q", line)
		}
	}
}
