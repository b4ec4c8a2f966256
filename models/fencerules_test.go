package models

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestFenceRulesAreRememberedAndForgotten(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, _, _ := e.open(t)
		if got, err := s.FenceRuleOf(bg, 1, "feature"); err != nil || got != nil {
			t.Fatalf("an unknown branch: %+v %v, want nil", got, err)
		}
		// The intent is recorded before the rule exists in the forge.
		if err := s.IntendFenceRule(bg, 1, "feature"); err != nil {
			t.Fatal(err)
		}
		if got, err := s.FenceRuleOf(bg, 1, "feature"); err != nil || got == nil || *got != (FenceRule{RepoID: 1, Branch: "feature", Created: -1}) {
			t.Fatalf("after the intent: %+v %v", got, err)
		}
		if err := s.SaveFenceRule(bg, FenceRule{RepoID: 1, Branch: "feature", Created: 1700000000}); err != nil {
			t.Fatal(err)
		}
		// A second intent (another replica's) keeps what is known.
		if err := s.IntendFenceRule(bg, 1, "feature"); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.FenceRuleOf(bg, 1, "feature"); got == nil || got.Created != 1700000000 {
			t.Fatalf("after a second intent: %+v, want the creation time kept", got)
		}
		if err := s.SaveFenceRule(bg, FenceRule{RepoID: 2, Branch: "main", Admin: true}); err != nil {
			t.Fatal(err)
		}
		all, err := s.FenceRules(bg)
		want := []FenceRule{{RepoID: 1, Branch: "feature", Created: 1700000000}, {RepoID: 2, Branch: "main", Admin: true}}
		if err != nil || !reflect.DeepEqual(all, want) {
			t.Fatalf("all rules: %+v %v, want %+v", all, err, want)
		}
		if err := s.DropFenceRule(bg, 1, "feature"); err != nil {
			t.Fatal(err)
		}
		if got, err := s.FenceRuleOf(bg, 1, "feature"); err != nil || got != nil {
			t.Fatalf("after the drop: %+v %v", got, err)
		}
		for _, bad := range []FenceRule{{RepoID: 0, Branch: "x"}, {RepoID: 1}, {RepoID: 1, Branch: strings.Repeat("b", MaxBranchLen+1)}} {
			if err := s.SaveFenceRule(bg, bad); !errors.Is(err, ErrInvalid) {
				t.Errorf("save %+v: %v, want invalid", bad, err)
			}
			if err := s.IntendFenceRule(bg, bad.RepoID, bad.Branch); !errors.Is(err, ErrInvalid) {
				t.Errorf("intend %+v: %v, want invalid", bad, err)
			}
		}
	})
}

func TestPullsOnBranch(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, _, _ := e.open(t)
		author := Holder{ID: 3, Login: "alice"}
		for _, p := range []Pull{
			{RepoID: 1, Number: 7, Head: "a1", Branch: "feature", Author: author, Open: true, Version: 1, Links: []int64{3, 7}},
			{RepoID: 1, Number: 8, Head: "a2", Branch: "feature", Author: author, Open: false, Version: 1, Links: []int64{8}},
			{RepoID: 1, Number: 9, Head: "a3", Branch: "", Author: author, Open: true, Version: 1, Links: []int64{9}},
			{RepoID: 2, Number: 7, Head: "a4", Branch: "feature", Author: author, Open: true, Version: 1, Links: []int64{7}},
		} {
			if _, err := s.RecordPull(bg, p, ""); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.PullsOnBranch(bg, 1, "feature")
		if err != nil || len(got) != 1 || got[0].Number != 7 || got[0].Branch != "feature" || !reflect.DeepEqual(got[0].Links, []int64{3, 7}) {
			t.Fatalf("open pulls on feature of repo 1: %+v %v, want #7", got, err)
		}
		if got, err := s.PullsOnBranch(bg, 1, ""); err != nil || len(got) != 0 {
			t.Fatalf("a fork's head (no branch): %+v %v, want none", got, err)
		}
		if _, err := s.RecordPull(bg, Pull{RepoID: 1, Number: 10, Branch: strings.Repeat("b", MaxBranchLen+1), Version: 1}, ""); !errors.Is(err, ErrInvalid) {
			t.Fatalf("a branch over %d bytes: %v, want invalid", MaxBranchLen, err)
		}
	})
}

// A ledger of schema 9 is upgraded in place: its pull requests keep their
// records (with no head branch known until the forge tells it again) and
// the table of fence rules is made.
func TestUpgradeToFencedPushesKeepsEveryPull(t *testing.T) {
	s, _, path := sqliteEngine.open(t)
	p := Pull{RepoID: 1, Number: 7, Head: "a1", Branch: "feature", Author: Holder{ID: 3, Login: "alice"}, Open: true, Version: 5, Links: []int64{3, 7}}
	if _, err := s.RecordPull(bg, p, ""); err != nil {
		t.Fatal(err)
	}
	s2 := reopenFrom(t, s, path, "DROP INDEX idx_pull_requests_branch", "ALTER TABLE pull_requests DROP COLUMN branch", "DROP TABLE fence_rules", "PRAGMA user_version = 9")
	got, err := s2.PullOf(bg, 1, 7)
	p.Branch = ""
	if err != nil || got == nil || !reflect.DeepEqual(*got, p) {
		t.Fatalf("after the upgrade: %+v %v, want %+v", got, err, p)
	}
	if err := s2.IntendFenceRule(bg, 1, "feature"); err != nil {
		t.Fatalf("the upgraded ledger remembers no fence rule: %v", err)
	}
	var version int
	if err := s2.db.Raw("PRAGMA user_version").Scan(&version).Error; err != nil || version != schemaVersion {
		t.Fatalf("user_version %d (%v), want %d", version, err, schemaVersion)
	}
}
