package main

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// environ is a hook's environment, as getenv.
type environ map[string]string

func (e environ) get(k string) string { return e[k] }

// gitea is the environment Gitea gives a hook for an HTTP push by bot to
// acme/widgets (as verified on Gitea 1.26, docs/operating.md, The gate), with kv added or replaced.
func gitea(kv ...string) environ {
	e := environ{
		envRepoID: "3", envOwner: "acme", envRepo: "widgets",
		envPusherID: "7", envPusher: "bot", envPullIndex: "0",
	}
	for _, x := range kv {
		k, v, _ := strings.Cut(x, "=")
		e[k] = v
	}
	return e
}

const (
	zero = "0000000000000000000000000000000000000000"
	sha1 = "1111111111111111111111111111111111111111"
	sha2 = "2222222222222222222222222222222222222222"
	s256 = "3333333333333333333333333333333333333333333333333333333333333333"
)

func ref(old, next, name string) contract.GateRef {
	return contract.GateRef{Old: old, New: next, Name: name}
}

// base is the question gitea() gives, with no options and refs.
func base() contract.GateQuestion {
	return contract.GateQuestion{RepoID: 3, Owner: "acme", Repo: "widgets", PusherID: 7, Pusher: "bot",
		Options: []string{}, Refs: []contract.GateRef{}}
}

func TestQuestionFromTheEnvironmentAndStdin(t *testing.T) {
	with := func(f func(*contract.GateQuestion)) contract.GateQuestion {
		q := base()
		f(&q)
		return q
	}
	for _, tc := range []struct {
		name  string
		env   environ
		stdin string
		want  contract.GateQuestion
	}{
		{"a push of one branch", gitea(), zero + " " + sha1 + " refs/heads/work/1\n",
			with(func(q *contract.GateQuestion) {
				q.Refs = []contract.GateRef{ref(zero, sha1, "refs/heads/work/1")}
			})},
		{"push options, in order", gitea(envOptionCount+"=2", envOptionN+"0=collab-lease=1:7", envOptionN+"1=second=x"), "",
			with(func(q *contract.GateQuestion) { q.Options = []string{"collab-lease=1:7", "second=x"} })},
		{"an empty push option is kept", gitea(envOptionCount+"=1", envOptionN+"0="), "",
			with(func(q *contract.GateQuestion) { q.Options = []string{""} })},
		{"several refs, SHA-256 too, and Gitea's echo's blank line",
			gitea(), zero + " " + sha1 + " refs/heads/a\n" + sha1 + " " + zero + " refs/tags/v1\n" + s256 + " " + s256 + " refs/heads/b\n\n",
			with(func(q *contract.GateQuestion) {
				q.Refs = []contract.GateRef{ref(zero, sha1, "refs/heads/a"), ref(sha1, zero, "refs/tags/v1"), ref(s256, s256, "refs/heads/b")}
			})},
		{"no trailing newline", gitea(), sha1 + " " + sha2 + " refs/heads/main",
			with(func(q *contract.GateQuestion) { q.Refs = []contract.GateRef{ref(sha1, sha2, "refs/heads/main")} })},
		{"a merge", gitea(envTrigger+"=pr-merge-to-base", envPullIndex+"=7"), sha1 + " " + sha2 + " refs/heads/main\n",
			with(func(q *contract.GateQuestion) {
				q.Trigger, q.PullIndex = "pr-merge-to-base", 7
				q.Refs = []contract.GateRef{ref(sha1, sha2, "refs/heads/main")}
			})},
		{"over SSH, with a key", gitea(envKeyID + "=12"), "",
			with(func(q *contract.GateQuestion) { q.KeyID = 12 })},
		{"internal", gitea(envInternal + "=true"), "",
			with(func(q *contract.GateQuestion) { q.Internal = true })},
		{"internal only when true", gitea(envInternal + "=1"), "", base()},
		{"nothing set", environ{}, "", contract.GateQuestion{Options: []string{}, Refs: []contract.GateRef{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readQuestion(tc.env.get, strings.NewReader(tc.stdin))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// What the hook cannot ask about is refused with one line saying why.
func TestQuestionRefusals(t *testing.T) {
	manyRefs := strings.Repeat(zero+" "+sha1+" refs/heads/x\n", contract.MaxGateRefs+1)
	for _, tc := range []struct {
		name  string
		env   environ
		stdin string
		want  string
	}{
		{"too many options", gitea(fmt.Sprintf("%s=%d", envOptionCount, contract.MaxGateOptions+1)), "",
			fmt.Sprintf("carries %d push options, more than %d", contract.MaxGateOptions+1, contract.MaxGateOptions)},
		{"too many refs", gitea(), manyRefs, fmt.Sprintf("updates more than %d refs", contract.MaxGateRefs)},
		{"a line too long", gitea(), zero + " " + sha1 + " refs/heads/" + strings.Repeat("x", maxRefLine) + "\n", "longer than"},
		{"too much in all", gitea(), strings.Repeat(zero+" "+sha1+" refs/heads/"+strings.Repeat("x", 8000)+"\n", 600), "larger than 4 MiB"},
		{"a line of two fields", gitea(), zero + " " + sha1 + "\n", "does not understand"},
		{"an object name that is not one", gitea(), "xyz " + sha1 + " refs/heads/a\n", "does not understand"},
		{"upper-case hex", gitea(), strings.ToUpper(sha1[:1]+"a"+sha1[2:]) + " " + sha1 + " refs/heads/a\n", "does not understand"},
		{"a space in the ref", gitea(), zero + " " + sha1 + " refs/heads/a b\n", "does not understand"},
		{"a repository ID that is not a number", gitea(envRepoID + "=three"), "", `GITEA_REPO_ID="three" is not a number`},
		{"a negative pusher", gitea(envPusherID + "=-1"), "", "GITEA_PUSHER_ID"},
		{"an option count that is not a number", gitea(envOptionCount + "=two"), "", "GIT_PUSH_OPTION_COUNT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readQuestion(tc.env.get, strings.NewReader(tc.stdin))
			var r refusal
			if !errors.As(err, &r) {
				t.Fatalf("got %v, want a refusal", err)
			}
			line := err.Error()
			if !strings.Contains(line, tc.want) || !strings.HasPrefix(line, "collab-lease: ") ||
				!strings.HasSuffix(line, "; this push was refused") || strings.Contains(line, "\n") {
				t.Errorf("refusal %q: want one line with %q", line, tc.want)
			}
		})
	}
}

// The bounds are inclusive: exactly MaxGateRefs refs and MaxGateOptions
// options are asked about.
func TestQuestionAtItsBounds(t *testing.T) {
	env := gitea(envOptionCount + "=" + strconv.Itoa(contract.MaxGateOptions))
	for i := range contract.MaxGateOptions {
		env[envOptionN+strconv.Itoa(i)] = "o" + strconv.Itoa(i)
	}
	stdin := strings.Repeat(zero+" "+sha1+" refs/heads/x\n", contract.MaxGateRefs)
	q, err := readQuestion(env.get, strings.NewReader(stdin))
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Options) != contract.MaxGateOptions || q.Options[contract.MaxGateOptions-1] != "o99" || len(q.Refs) != contract.MaxGateRefs {
		t.Errorf("%d options, %d refs", len(q.Options), len(q.Refs))
	}
}

// Whatever arrives on stdin, readRefs returns refs or a refusal and
// never more than the bound.
func FuzzReadRefs(f *testing.F) {
	f.Add(zero + " " + sha1 + " refs/heads/a\n")
	f.Add("\n\n" + sha1 + " " + sha2 + " refs/heads/main")
	f.Add("x y z\n")
	f.Fuzz(func(t *testing.T, stdin string) {
		refs, err := readRefs(strings.NewReader(stdin))
		var r refusal
		if err != nil && !errors.As(err, &r) {
			t.Fatalf("not a refusal: %v", err)
		}
		if len(refs) > contract.MaxGateRefs {
			t.Fatalf("%d refs", len(refs))
		}
		for _, ref := range refs {
			if !objectName(ref.Old) || !objectName(ref.New) || ref.Name == "" {
				t.Fatalf("ref %+v", ref)
			}
		}
	})
}
