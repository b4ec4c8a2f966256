package ssh

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// The verb's answers that need neither the forge nor the ledger: help,
// usage errors, and exit 75 for a connection the forge could not identify.
func TestLeaseVerbWithoutForgeOrLedger(t *testing.T) {
	var logs bytes.Buffer
	var observed []string
	v := &LeaseVerb{Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Observe: func(verb contract.Verb, outcome string, _ time.Duration) {
			observed = append(observed, string(verb)+":"+outcome)
		}}
	alice := ConnInfo{Fingerprint: "SHA256:a", UserID: 7, Login: "alice"}
	nobody := ConnInfo{Fingerprint: "SHA256:n", Unavailable: true}
	for _, c := range []struct {
		conn ConnInfo
		line string
		want Reply
	}{
		{alice, "collab-lease help", Reply{Stdout: []byte(contract.Usage), Outcome: "help"}},
		{nobody, "collab-lease help", Reply{Stdout: []byte(contract.Usage), Outcome: "help"}},
		{nobody, "collab-lease acquire acme/widgets 42", Reply{Stderr: contract.LineForgeUnavailable + "\n", Code: contract.ExitTempFail, Outcome: "forge_unavailable"}},
		{alice, "collab-lease acquire 'acme/widgets 42", Reply{Stderr: `error: usage: unclosed single quote in "'acme/widgets 42"` + "\n", Code: contract.ExitError, Outcome: "usage"}},
		{alice, "collab-lease acquire acme/widgets 42 --ttl 169h", Reply{Stderr: `error: usage: --ttl "169h" is more than the maximum of 168h` + "\n", Code: contract.ExitError, Outcome: "usage"}},
	} {
		got := v.Exec(context.Background(), c.conn, c.line)
		if string(got.Stdout) != string(c.want.Stdout) || got.Stderr != c.want.Stderr || got.Code != c.want.Code || got.Outcome != c.want.Outcome {
			t.Errorf("%+v %q:\n got %+v\nwant %+v", c.conn, c.line, got, c.want)
		}
	}
	if strings.Count(logs.String(), "msg=collab-lease") != 5 || !strings.Contains(logs.String(), "fingerprint=SHA256:n") {
		t.Errorf("log lines:\n%s", logs.String())
	}
	if strings.Join(observed, " ") != "help:help help:help acquire:forge_unavailable :usage :usage" {
		t.Errorf("observed %q", observed)
	}

	if r := v.Greet(alice); r.Code != contract.ExitError || !strings.HasPrefix(r.Stderr, "Hi alice!") || !strings.HasSuffix(r.Stderr, contract.Usage) {
		t.Errorf("greeting: %+v", r)
	}
	if r := v.Greet(nobody); r.Code != contract.ExitError || !strings.Contains(r.Stderr, "forge is unavailable") {
		t.Errorf("greeting without an identity: %+v", r)
	}
}
