package main

import (
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// now is the clock of every rendering test: 11:35 UTC, 30m before 12:05.
var now = time.Date(2026, 9, 5, 11, 35, 0, 0, time.UTC)

// request is the command the sidecar reads when git collab runs with args
// (split at spaces) in a checkout of acme/widgets.
func request(t *testing.T, args string) contract.Command {
	t.Helper()
	inv, err := ParseArgs(strings.Fields(args))
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	_, cmd, err := RemoteCommand(findVerb(inv.Verb).remote, "acme/widgets", inv.Issue, inv.Flags, inv.Globs...)
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return cmd
}

func TestRender(t *testing.T) {
	cases := []struct {
		args, body     string
		code           int
		stdout, stderr string
	}{
		{"claim 42", `{"status":"acquired","repo":"acme/widgets","issue":42,"holder":"alice","agent":null,"token":3,"acquired_at":"2026-09-05T11:35:00Z","expires_at":"2026-09-05T12:05:00Z"}`, 0,
			"claimed acme/widgets#42 (token 3, expires 12:05 UTC, in 30m)\n", ""},
		{"claim 42", `{"status":"acquired","repo":"acme/widgets","issue":42,"holder":"alice","agent":null,"token":3,"acquired_at":"2026-09-05T11:35:00Z","expires_at":null}`, 0,
			"claimed acme/widgets#42 (token 3, open-ended)\n", ""},
		{"claim 42", `{"status":"held","repo":"acme/widgets","issue":42,"holder":"bob","agent":null,"expires_at":"2026-09-05T12:05:00Z"}`, 4,
			"", "acme/widgets#42 is claimed by bob until 12:05 UTC\n"},
		{"claim 42", `{"status":"limit","repo":"acme/widgets","issue":42,"holder":"bot","agent":"a1","scope":"holder","limit":3,"live":3}`, 4,
			"", "not claimed: you hold 3 live claims, the sidecar's cap of 3; unclaim one first\n"},
		{"next", `{"status":"limit","repo":"acme/widgets","issue":null,"holder":"bot","agent":null,"scope":"account","limit":5,"live":5}`, 4,
			"", "not claimed: your account holds 5 live claims, the sidecar's cap of 5; unclaim one first\n"},
		{"handoff 42 --to bob/b7", `{"status":"limit","repo":"acme/widgets","issue":42,"holder":"bob","agent":"b7","scope":"holder","limit":2,"live":2}`, 4,
			"", "not handed off: bob/b7 holds 2 live claims, the sidecar's cap of 2 per holder\n"},
		{"claim 42", `{"status":"cooling","repo":"acme/widgets","issue":42,"until":"2026-09-05T12:05:00Z"}`, 4,
			"", "acme/widgets#42 cools down until 12:05 UTC: its last claim lapsed, and only its holder may claim it before then\n"},
		{"claim 42", `{"status":"held","repo":"acme/widgets","issue":42,"holder":"bot","agent":"agent-7","expires_at":"2026-09-05T12:05:00Z"}`, 4,
			"", "acme/widgets#42 is claimed by bot/agent-7 until 12:05 UTC\n"},
		{"claims", `{"repo":"acme/widgets","leases":[{"issue":42,"holder":"bot","agent":"agent-7","token":3,"acquired_at":"2026-09-05T11:35:00Z","expires_at":null}]}`, 0,
			"ISSUE  HOLDER       TOKEN  EXPIRES\n#42    bot/agent-7  3      open-ended\n", ""},
		{"history 42", `{"repo":"acme/widgets","issue":42,"tenures":[{"token":3,"holder":"bot","agent":"agent-7","acquired_at":"2026-09-05T11:35:00Z","ended_at":"2026-09-05T11:40:00Z","ended_by":"released","ended_by_login":"bot","ended_by_agent":null}]}`, 0,
			"TOKEN  HOLDER       ACQUIRED   ENDED      HOW\n3      bot/agent-7  11:35 UTC  11:40 UTC  released by bot\n", ""},
		{"claim 42", `{"status":"held","repo":"acme/widgets","issue":42,"holder":"bob","agent":null,"expires_at":null}`, 4,
			"", "acme/widgets#42 is claimed by bob (open-ended)\n"},
		{"renew 42 --ttl 1h", `{"status":"renewed","repo":"acme/widgets","issue":42,"holder":"alice","agent":null,"token":3,"acquired_at":"2026-09-05T11:00:00Z","expires_at":"2026-09-05T13:35:00Z"}`, 0,
			"renewed acme/widgets#42 (token 3, expires 13:35 UTC, in 2h)\n", ""},
		{"renew 42 --ttl 1h", `{"status":"not_holder","repo":"acme/widgets","issue":42,"holder":null,"agent":null,"expires_at":null}`, 4,
			"", "not renewed: you do not hold acme/widgets#42 (nobody does; claim it again)\n"},
		{"renew 42 --ttl 1h", `{"status":"not_holder","repo":"acme/widgets","issue":42,"holder":"bob","agent":null,"expires_at":"2026-09-06T09:00:00Z"}`, 4,
			"", "not renewed: acme/widgets#42 is claimed by bob until 2026-09-06 09:00 UTC\n"},
		{"unclaim 42", `{"status":"released","repo":"acme/widgets","issue":42}`, 0, "released acme/widgets#42\n", ""},
		{"unclaim 42", `{"status":"not_holder","repo":"acme/widgets","issue":42,"holder":"bob","agent":null,"expires_at":null}`, 4,
			"", "not released: acme/widgets#42 is claimed by bob (open-ended)\n"},
		// The repository as the sidecar names it now (after a rename).
		{"unclaim 42", `{"status":"released","repo":"acme/gadgets","issue":42}`, 0, "released acme/gadgets#42\n", ""},
		{"claims", `{"repo":"acme/widgets","leases":[]}`, 0, "no claims on acme/widgets\n", ""},
		{"claims", `{"repo":"acme/widgets","leases":[` +
			`{"issue":42,"holder":"alice","agent":null,"token":3,"acquired_at":"2026-09-05T11:35:00Z","expires_at":"2026-09-05T12:05:00Z"},` +
			`{"issue":7,"holder":"bartholomew","agent":null,"token":12,"acquired_at":"2026-09-05T11:36:00Z","expires_at":null},` +
			`{"issue":1234,"holder":"c","agent":null,"token":1,"acquired_at":"2026-09-05T11:37:00Z","expires_at":"2026-09-08T11:35:00Z"}]}` + "\n", 0,
			"ISSUE  HOLDER       TOKEN  EXPIRES\n" +
				"#42    alice        3      12:05 UTC (in 30m)\n" +
				"#7     bartholomew  12     open-ended\n" +
				"#1234  c            1      2026-09-08 11:35 UTC (in 3d)\n", ""},
		// Control characters from a server never reach the terminal raw.
		{"claim 42", `{"status":"held","repo":"acme/widgets","issue":42,"holder":"b\u001b[2Job","expires_at":null}`, 4,
			"", "acme/widgets#42 is claimed by \"b\\x1b[2Job\" (open-ended)\n"},

		// The agent verbs.
		{"next --ttl 30m", `{"status":"acquired","repo":"acme/widgets","issue":7,"holder":"alice","agent":null,"token":3,"acquired_at":"2026-09-05T11:35:00Z","expires_at":"2026-09-05T12:05:00Z"}`, 0,
			"claimed acme/widgets#7 (token 3, expires 12:05 UTC, in 30m)\n", ""},
		{"next --label bug --pulls", `{"status":"acquired","repo":"acme/widgets","issue":8,"holder":"alice","agent":null,"token":1,"acquired_at":"2026-09-05T11:35:00Z","expires_at":null}`, 0,
			"claimed acme/widgets#8 (token 1, open-ended)\n", ""},
		{"next", `{"status":"none","repo":"acme/widgets"}`, 4, "", "nothing to claim in acme/widgets\n"},
		{"claim 42 --wait 5m", `{"status":"acquired","repo":"acme/widgets","issue":42,"holder":"alice","agent":null,"token":4,"acquired_at":"2026-09-05T11:35:00Z","expires_at":null}`, 0,
			"claimed acme/widgets#42 (token 4, open-ended)\n", ""},
		{"claim 42 --wait 5m", `{"status":"held","repo":"acme/widgets","issue":42,"holder":"bob","agent":null,"expires_at":"2026-09-05T12:05:00Z"}`, 4,
			"", "acme/widgets#42 is claimed by bob until 12:05 UTC\n"},
		{"check 7 --token 3", `{"status":"current","repo":"acme/widgets","issue":7,"holder":"alice","agent":null,"token":3,"acquired_at":"2026-09-05T11:35:00Z","expires_at":"2026-09-05T12:05:00Z"}`, 0,
			"token 3 is current: acme/widgets#7 held by alice (expires 12:05 UTC, in 30m)\n", ""},
		{"check 7 --token 3", `{"status":"current","repo":"acme/widgets","issue":7,"holder":"alice","agent":null,"token":3,"acquired_at":"2026-09-05T11:35:00Z","expires_at":null}`, 0,
			"token 3 is current: acme/widgets#7 held by alice (open-ended)\n", ""},
		{"check 7 --token 3", `{"status":"stale","repo":"acme/widgets","issue":7,"token":5}`, 4,
			"", "token 3 is stale: acme/widgets#7 is now at token 5\n"},
		{"check 7 --token 3", `{"status":"stale","repo":"acme/widgets","issue":7,"token":null}`, 4,
			"", "token 3 is stale: nobody holds acme/widgets#7\n"},
		{"unclaim 42 --force", `{"status":"released","repo":"acme/widgets","issue":42}`, 0, "released acme/widgets#42\n", ""},
		{"history 7", `{"repo":"acme/widgets","issue":7,"tenures":[]}`, 0, "acme/widgets#7 has never been claimed\n", ""},
		{"history 7 --limit 5", `{"repo":"acme/widgets","issue":7,"tenures":[` +
			`{"token":6,"holder":"bartholomew","agent":null,"acquired_at":"2026-09-05T11:30:00Z","ended_at":null,"ended_by":null},` +
			`{"token":5,"holder":"alice","agent":null,"acquired_at":"2026-09-05T10:00:00Z","ended_at":"2026-09-05T11:00:00Z","ended_by":"force_released","forced_by":"root"},` +
			`{"token":4,"holder":"bob","agent":null,"acquired_at":"2026-09-04T09:00:00Z","ended_at":"2026-09-04T09:30:00Z","ended_by":"expired"},` +
			`{"token":3,"holder":"bob","agent":null,"acquired_at":"2026-09-04T08:00:00Z","ended_at":"2026-09-04T08:10:00Z","ended_by":"released"}]}` + "\n", 0,
			"TOKEN  HOLDER       ACQUIRED              ENDED                 HOW\n" +
				"6      bartholomew  11:30 UTC             live\n" +
				"5      alice        10:00 UTC             11:00 UTC             force_released by root\n" +
				"4      bob          2026-09-04 09:00 UTC  2026-09-04 09:30 UTC  expired\n" +
				"3      bob          2026-09-04 08:00 UTC  2026-09-04 08:10 UTC  released\n", ""},
		// merge, and every answer of it that is not a merge.
		{"merge 7", `{"status":"merged","repo":"acme/widgets","pull":7,"sha":"6f1c0e2d9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e","issue":7,"token":3}`, 0,
			"merged acme/widgets!7 under token 3: 6f1c0e2d9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e\n", ""},
		{"merge 7", `{"status":"refused","repo":"acme/widgets","pull":7,"reason":"Please try again later"}`, 4,
			"", "not merged: Gitea refused acme/widgets!7: Please try again later\n"},
		{"merge 7", `{"status":"busy","repo":"acme/widgets","pull":7,"ahead":2}`, 4,
			"", "not merged: acme/widgets!7 did not get its turn within 2m (2 merges ahead); merge again later, or with a longer --wait\n"},
		{"merge 7 --wait 90", `{"status":"busy","repo":"acme/widgets","pull":7,"ahead":1}`, 4,
			"", "not merged: acme/widgets!7 did not get its turn within 1m30s (1 merge ahead); merge again later, or with a longer --wait\n"},
		{"merge 7 --token 3", `{"status":"stale","repo":"acme/widgets","issue":42,"token":5}`, 4,
			"", "not merged: token 3 is stale: acme/widgets#42 is now at token 5\n"},
		{"merge 7", `{"status":"stale","repo":"acme/widgets","issue":7,"token":null}`, 4,
			"", "not merged: your token is stale: nobody holds acme/widgets#7\n"},
		{"merge 7", `{"status":"not_holder","repo":"acme/widgets","issue":7,"holder":"bob","agent":"b1","expires_at":"2026-09-05T12:05:00Z"}`, 4,
			"", "not merged: acme/widgets!7 is claimed by bob/b1 until 12:05 UTC\n"},
		{"merge 7", `{"status":"not_holder","repo":"acme/widgets","issue":7,"holder":null,"agent":null,"expires_at":null}`, 4,
			"", "not merged: nobody holds acme/widgets!7 or an issue it closes; claim it first\n"},
		{"merge 7", `{"status":"not_holder","repo":"acme/widgets","issue":42,"holder":"bob","agent":null,"expires_at":null}`, 4,
			"", "not merged: acme/widgets#42 is claimed by bob (open-ended)\n"},
		{"merge 7", `{"status":"refused","repo":"acme/widgets","pull":7,"reason":"conflict\u001b[2J"}`, 4,
			"", "not merged: Gitea refused acme/widgets!7: \"conflict\\x1b[2J\"\n"},
		// The reservations: one line each, the conflict in the gate's words.
		{"reserve src/auth/** docs/ --issue 12", `{"status":"reserved","repo":"acme/widgets","reservations":[` +
			`{"glob":"src/auth/**","shared":false,"holder":"bot","agent":"agent-3","issue":12,"expires_at":"2026-09-05T12:05:00Z"},` +
			`{"glob":"docs/","shared":true,"holder":"bot","agent":null,"issue":null,"expires_at":null}]}`, 0,
			"reserved src/auth/** · bot · agent-3 · #12 · until 12:05 UTC\nreserved docs/ (shared) · bot · no expiry\n", ""},
		{"reserve src/** --ttl 1h", `{"status":"conflict","repo":"acme/widgets","with":[` +
			`{"glob":"src/auth/login.go","shared":false,"holder":"bot","agent":"agent-3","issue":12,"expires_at":"2026-09-05T12:05:00Z"},` +
			`{"glob":"src/*.md","shared":true,"holder":"carol","agent":null,"issue":null,"expires_at":null}]}`, 4,
			"", "not reserved: src/auth/login.go is reserved by bot · agent-3 for acme/widgets#12 until 12:05 UTC\n" +
				"not reserved: src/*.md (shared) is reserved by carol (no expiry)\n"},
		{"reserve src/** --issue 12", `{"status":"not_holder","repo":"acme/widgets","issue":12,"holder":"bob","agent":null,"expires_at":null}`, 4,
			"", "not reserved: acme/widgets#12 is claimed by bob (open-ended)\n"},
		{"reserve src/** --ttl 1h", `{"status":"limit","repo":"acme/widgets","issue":null,"holder":"bot","agent":null,"scope":"reservations","limit":100,"live":100}`, 4,
			"", "not reserved: you hold 100 reservations, the sidecar's cap of 100; unreserve some first\n"},
		{"unreserve", `{"status":"unreserved","repo":"acme/widgets","reservations":[]}`, 0, "nothing to unreserve in acme/widgets\n", ""},
		{"unreserve src/** --force", `{"status":"unreserved","repo":"acme/widgets","reservations":[` +
			`{"glob":"src/**","shared":false,"holder":"bob","agent":"b\u001b[2J","issue":3,"expires_at":"2026-09-06T08:00:00Z"}]}`, 0,
			"unreserved src/** · bob · \"b\\x1b[2J\" · #3 · until 2026-09-06 08:00 UTC\n", ""},
		{"reservations", `{"status":"reservations","repo":"acme/widgets","reservations":[]}`, 0, "no reservations in acme/widgets\n", ""},
		{"reservations --path src/a.go", `{"status":"reservations","repo":"acme/widgets","reservations":[]}`, 0,
			"no reservation in acme/widgets matches src/a.go\n", ""},
		{"reservations --path src/a.go", `{"status":"reservations","repo":"acme/widgets","reservations":[` +
			`{"glob":"src/**","shared":false,"holder":"bot","agent":"agent-3","issue":12,"expires_at":null}]}`, 0,
			"src/** · bot · agent-3 · #12 · no expiry\n", ""},
		// check lists the claim's reservations.
		{"check 12 --token 3", `{"status":"current","repo":"acme/widgets","issue":12,"holder":"bot","agent":"agent-3","token":3,"acquired_at":"2026-09-05T11:00:00Z","expires_at":null,` +
			`"reservations":[{"glob":"src/auth/**","shared":false,"holder":"bot","agent":"agent-3","issue":12,"expires_at":null}]}`, 0,
			"token 3 is current: acme/widgets#12 held by bot/agent-3 (open-ended)\n  reserved: src/auth/** · bot · agent-3 · #12 · no expiry\n", ""},
		// A tenure that ended without saying how, and a holder with a
		// control character.
		{"history 7", `{"repo":"acme/widgets","issue":7,"tenures":[` +
			`{"token":2,"holder":"b\u0007b","acquired_at":"2026-09-05T10:00:00Z","ended_at":"2026-09-05T11:00:00Z","ended_by":null}]}`, 0,
			"TOKEN  HOLDER  ACQUIRED   ENDED      HOW\n" +
				"2      \"b\\ab\"  10:00 UTC  11:00 UTC  -\n", ""},
	}
	for _, c := range cases {
		got, err := Render(request(t, c.args), c.code, []byte(c.body), now)
		if err != nil || got.stdout != c.stdout || got.stderr != c.stderr {
			t.Errorf("%s %s:\n got %q %q %v\nwant %q %q", c.args, c.body, got.stdout, got.stderr, err, c.stdout, c.stderr)
		}
	}
}

func TestRenderRefusesWhatItDoesNotKnow(t *testing.T) {
	for _, c := range []struct {
		args, body string
		code       int
	}{
		{"claim 42", ``, 0},
		{"claim 42", `not json`, 0},
		{"claim 42", `{"status":"acquired"} {"status":"acquired"}`, 0},
		{"claim 42", `{"status":"renewed","repo":"a/b","issue":1}`, 0}, // the wrong verb's reply
		{"claim 42", `{"status":"held","repo":"a/b","issue":1,"holder":null}`, 4},
		{"claim 42", `{"status":"acquired","repo":"a/b","issue":1}`, 4},
		{"claims", `{"repo":"a/b","leases":[]}`, 4},
		{"claims", `[]`, 0},
		{"next", `{"status":"held","repo":"a/b","issue":1,"holder":"bob","agent":null,"expires_at":null}`, 4}, // not next's refusal
		{"next", `{"status":"acquired","repo":"a/b"}`, 4},
		{"next", `{"status":"none","repo":"a/b"}`, 0},
		{"check 1 --token 1", `{"status":"acquired","repo":"a/b","issue":1,"holder":"bob","agent":null,"token":1}`, 0},
		{"check 1 --token 1", `{"status":"current","repo":"a/b","issue":1,"holder":"bob","agent":null,"token":1}`, 4},
		{"check 1 --token 1", `{"status":"held","repo":"a/b","issue":1,"holder":"bob","agent":null,"expires_at":null}`, 4},
		{"renew 1 --ttl 1m", `{"status":"held","repo":"a/b","issue":1,"holder":"bob","agent":null,"expires_at":null}`, 4}, // acquire's refusal
		{"history 1", `{"repo":"a/b","issue":1,"tenures":[]}`, 4},
		{"history 1", `{"repo":"a/b","issue":1,"tenures":{}}`, 0},
		{"claim 1", `{"status":"acquired","repo":"a/b","issue":1}`, 1}, // errors are on stderr already
		{"merge 7", `{"status":"merged","repo":"a/b","pull":7,"sha":"x","issue":7,"token":1}`, 4},
		{"reserve x --ttl 1h", `{"status":"unreserved","repo":"a/b","reservations":[]}`, 0},
		{"reserve x --ttl 1h", `{"status":"reserved","repo":"a/b","reservations":[]}`, 4},
		{"reserve x --ttl 1h", `{"status":"held","repo":"a/b","issue":7,"holder":"bob","agent":null,"expires_at":null}`, 4},
		{"unreserve", `{"status":"conflict","repo":"a/b","with":[]}`, 4},
		{"unreserve", `{"status":"not_holder","repo":"a/b","issue":7,"holder":null,"agent":null,"expires_at":null}`, 4},
		{"reservations", `{"status":"reserved","repo":"a/b","reservations":[]}`, 0},
		{"reservations", `{"status":"reservations","repo":"a/b","reservations":{}}`, 0},
		{"reservations", `{"status":"limit","repo":"a/b","issue":null,"holder":"bot","agent":null,"scope":"reservations","limit":1,"live":1}`, 4},
		{"merge 7", `{"status":"refused","repo":"a/b","pull":7,"reason":"no"}`, 0},
		{"merge 7", `{"status":"held","repo":"a/b","issue":7,"holder":"bob","agent":null,"expires_at":null}`, 4}, // acquire's refusal
		{"merge 7", `{"status":"none","repo":"a/b"}`, 4},
		{"merge 7", `{"status":"current","repo":"a/b","issue":7,"holder":"bob","agent":null,"token":1}`, 0},
	} {
		if got, err := Render(request(t, c.args), c.code, []byte(c.body), now); err == nil {
			t.Errorf("%s %q (exit %d): rendered %+v, want an error", c.args, c.body, c.code, got)
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
		if !strings.HasPrefix(h, "usage: "+v.synopsis+"\n") {
			t.Errorf("help of %s:\n%s", v.name, h)
		}
		// Its help lists exactly the sidecar options it takes, and every
		// one of them is in its synopsis.
		for _, o := range options {
			if !o.sidecar {
				continue
			}
			listed := strings.Contains(h, "\n  "+o.name+" ")
			inSynopsis := strings.Contains(v.synopsis+" ", o.name+" ") || strings.Contains(v.synopsis, o.name+"]") // --to is no --token
			if listed != v.takes(o.name) || listed != inSynopsis {
				t.Errorf("help of %s lists %s: %v, takes it: %v\n%s", v.name, o.name, listed, v.takes(o.name), h)
			}
		}
		if v.required != "" && !v.takes(v.required) {
			t.Errorf("%s requires %s, which it does not take", v.name, v.required)
		}
	}
	// The commands and options fit a terminal.
	for _, text := range []string{main, verbHelp(findVerb("next"))} {
		text, _, _ = strings.Cut(text, "\nexit status:")
		for _, line := range strings.Split(text, "\n") {
			if len(line) > 80 && !strings.HasPrefix(line, "usage: ") {
				t.Errorf("help line longer than 80: %q", line)
			}
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
