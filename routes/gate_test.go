package routes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

const gateSecret = "0123456789abcdef0123456789abcdef"

// gateAdmin is the admin handler with the gate on, answering with answer
// and counting the questions that reached it.
func gateAdmin(t *testing.T, answer func(contract.GateQuestion) (contract.GateAnswer, error)) (http.Handler, *int) {
	t.Helper()
	asked := 0
	h, err := NewAdmin(AdminOptions{
		Database: func(context.Context) error { return nil },
		Gate: func(_ context.Context, q contract.GateQuestion) (contract.GateAnswer, error) {
			asked++
			return answer(q)
		},
		GateSecret: []byte(gateSecret),
	})
	if err != nil {
		t.Fatal(err)
	}
	return h, &asked
}

func gateRequest(h http.Handler, secret, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, contract.GatePath, strings.NewReader(body))
	if secret != "" {
		req.Header.Set(contract.GateSecretHeader, secret)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

const aQuestion = `{"repo_id":1,"owner":"acme","repo":"widgets","pusher_id":2,"pusher":"bot","options":["collab-lease=3:2"],"refs":[{"old":"a","new":"b","name":"refs/heads/work/3"}]}`

func TestGateAnswersTheHookWithItsSecret(t *testing.T) {
	h, asked := gateAdmin(t, func(q contract.GateQuestion) (contract.GateAnswer, error) {
		if q.RepoID != 1 || q.Pusher != "bot" || len(q.Refs) != 1 || q.Options[0] != "collab-lease=3:2" {
			return contract.GateAnswer{}, fmt.Errorf("question %+v", q)
		}
		return contract.GateAnswer{Allow: false, Lines: []string{"collab-lease: work/3 is claimed"}}, nil
	})
	rec := gateRequest(h, gateSecret, aQuestion)
	var a contract.GateAnswer
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &a) != nil || a.Allow || len(a.Lines) != 1 {
		t.Fatalf("answer %d %s", rec.Code, rec.Body)
	}
	if *asked != 1 {
		t.Fatalf("asked %d times, want 1", *asked)
	}
	ping := httptest.NewRequest(http.MethodGet, contract.GatePingPath, nil)
	ping.Header.Set(contract.GateSecretHeader, gateSecret)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, ping)
	if rec.Code != http.StatusNoContent {
		t.Fatalf("ping: %d, want 204", rec.Code)
	}
}

// A forged or missing secret learns nothing: one 401, the same for both,
// and the question never reaches the ledger.
func TestGateRefusesAForgedOrMissingSecret(t *testing.T) {
	h, asked := gateAdmin(t, func(contract.GateQuestion) (contract.GateAnswer, error) {
		return contract.GateAnswer{Allow: true}, nil
	})
	var bodies []string
	for _, secret := range []string{"", "forged", gateSecret[:len(gateSecret)-1], gateSecret + "x", strings.ToUpper(gateSecret)} {
		rec := gateRequest(h, secret, aQuestion)
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("secret %q: %d, want 401", secret, rec.Code)
		}
		bodies = append(bodies, rec.Body.String())
		ping := httptest.NewRequest(http.MethodGet, contract.GatePingPath, nil)
		ping.Header.Set(contract.GateSecretHeader, secret)
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, ping)
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("ping with secret %q: %d, want 401", secret, rec.Code)
		}
	}
	for _, b := range bodies[1:] {
		if b != bodies[0] {
			t.Fatalf("401 bodies differ: %q and %q", bodies[0], b)
		}
	}
	if *asked != 0 {
		t.Fatalf("the gate was asked %d times without the secret", *asked)
	}
}

func TestGateRefusesWhatNoHookSends(t *testing.T) {
	h, _ := gateAdmin(t, func(contract.GateQuestion) (contract.GateAnswer, error) {
		return contract.GateAnswer{}, fmt.Errorf("%w: the gate's question names no repository", lease.ErrInvalid)
	})
	for name, body := range map[string]string{
		"not JSON":            "refs/heads/main",
		"a list for a number": `{"repo_id":[1]}`,
		"too big":             `{"options":["` + strings.Repeat("x", contract.MaxGateQuestion) + `"]}`,
		"invalid":             `{"repo_id":0}`,
	} {
		if rec := gateRequest(h, gateSecret, body); rec.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", name, rec.Code, rec.Body)
		}
	}
	// A newer hook's question, with fields this sidecar does not know, is
	// answered all the same.
	newer, _ := gateAdmin(t, func(contract.GateQuestion) (contract.GateAnswer, error) { return contract.GateAnswer{Allow: true}, nil })
	if rec := gateRequest(newer, gateSecret, strings.Replace(aQuestion, `"repo_id":1`, `"repo_id":1,"paths":["src/a.go"]`, 1)); rec.Code != http.StatusOK {
		t.Fatalf("a newer hook's question: %d %s, want 200", rec.Code, rec.Body)
	}
	down, _ := gateAdmin(t, func(contract.GateQuestion) (contract.GateAnswer, error) {
		return contract.GateAnswer{}, errors.New("database is locked")
	})
	if rec := gateRequest(down, gateSecret, aQuestion); rec.Code != http.StatusServiceUnavailable || strings.Contains(rec.Body.String(), "locked") {
		t.Fatalf("the ledger failing: %d %s, want 503 saying nothing of it", rec.Code, rec.Body)
	}
}

// Without the gate, its paths are not there; with it, a short secret is
// refused at start.
func TestGateIsOffUnlessAsked(t *testing.T) {
	h, err := NewAdmin(AdminOptions{Database: func(context.Context) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if rec := gateRequest(h, gateSecret, aQuestion); rec.Code != http.StatusNotFound {
		t.Fatalf("gate off: %d, want 404", rec.Code)
	}
	if _, err := NewAdmin(AdminOptions{Database: func(context.Context) error { return nil },
		Gate: func(context.Context, contract.GateQuestion) (contract.GateAnswer, error) {
			return contract.GateAnswer{}, nil
		}, GateSecret: []byte("short")}); err == nil {
		t.Fatal("a 5-byte secret was taken")
	}
}
