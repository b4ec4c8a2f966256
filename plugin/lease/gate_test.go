package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// The service hands the hook's question to the ledger and, with
// --renew-on-push, renews the claim an allowed push carried by its TTL,
// publishing the change like any renewal.
func TestGateRenewsOnPushAndPublishes(t *testing.T) {
	ctx := context.Background()
	w := leasetest.New(t, leasetest.Options{Service: []lease.Option{lease.WithRenewOnPush(true)}})
	bot := models.Holder{ID: 7, Login: "bot", Agent: "a1"}
	k := models.Key{RepoID: 1, Issue: 4}
	if _, err := w.Ledger.RecordPull(ctx, models.Pull{RepoID: 1, Number: 4, Head: "h", Branch: "work-4", Author: bot, Open: true, Version: 1, Links: []int64{4}}, ""); err != nil {
		t.Fatal(err)
	}
	l, err := w.Ledger.Acquire(ctx, k, bot, 10*time.Minute, models.Observed{Kind: models.KindPull})
	if err != nil {
		t.Fatal(err)
	}
	var heard []changes.Set
	w.Bus.Subscribe(func(s changes.Set) { heard = append(heard, s) })
	w.Clock.Advance(3 * time.Minute)
	q := contract.GateQuestion{RepoID: 1, Owner: "acme", Repo: "widgets", PusherID: 7, Pusher: "bot",
		Options: []string{"collab-lease=4:1"}, Refs: []contract.GateRef{{Old: "a", New: "b", Name: "refs/heads/work-4"}}}
	a, res, err := w.Service.Gate(ctx, q)
	if err != nil || !a.Allow || res.Renewed != 1 || res.RenewErr != nil {
		t.Fatalf("answer %+v %+v %v, want allowed and one renewal", a, res, err)
	}
	now, err := w.Ledger.Current(ctx, k)
	if err != nil || now == nil || !now.ExpiresAt.Equal(l.ExpiresAt.Add(3*time.Minute)) {
		t.Fatalf("after the push: %+v %v, want the expiry 3 minutes later", now, err)
	}
	if len(heard) != 1 || heard[0].Changes[0].Key != k {
		t.Fatalf("published %+v, want the renewal of %v", heard, k)
	}
	// A refused push renews nothing.
	q.Options = []string{"collab-lease=4:9"}
	if a, res, err := w.Service.Gate(ctx, q); err != nil || a.Allow || res.Renewed != 0 || len(a.Lines) != 1 || !strings.Contains(a.Lines[0], "never had") {
		t.Fatalf("a wrong token: %+v %+v %v", a, res, err)
	}
}

func TestGateRefusesAQuestionNoHookAsks(t *testing.T) {
	w := leasetest.New(t, leasetest.Options{})
	ref := []contract.GateRef{{Old: "a", New: "b", Name: "refs/heads/x"}}
	for name, q := range map[string]contract.GateQuestion{
		"no repository":     {Refs: ref},
		"a negative pusher": {RepoID: 1, PusherID: -1, Refs: ref},
		"not a ref":         {RepoID: 1, Refs: []contract.GateRef{{Name: "main"}}},
		"too many options":  {RepoID: 1, Options: make([]string, contract.MaxGateOptions+1)},
	} {
		if _, _, err := w.Service.Gate(context.Background(), q); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
}
