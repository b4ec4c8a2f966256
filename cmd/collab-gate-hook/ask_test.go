package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

const testSecret = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

// writeGate writes the gate's files into a new directory, as the
// sidecar's installer does, and returns it.
func writeGate(t *testing.T, cfg contract.GateConfig) string {
	t.Helper()
	dir := t.TempDir()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, contract.GateConfigFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, contract.GateSecretFile), []byte(testSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// sidecar is a stand-in for the sidecar's admin listener on 127.0.0.1:
// it records each request it is asked and answers with answer.
type sidecar struct {
	*httptest.Server
	mu       sync.Mutex
	asked    []asked
	answer   func(w http.ResponseWriter, r *http.Request)
	released chan struct{}
}

type asked struct {
	method, path, secret, contentType string
	question                          contract.GateQuestion
}

func newSidecar(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *sidecar {
	s := &sidecar{answer: answer, released: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := asked{method: r.Method, path: r.URL.Path, secret: r.Header.Get(contract.GateSecretHeader), contentType: r.Header.Get("Content-Type")}
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			if err := json.Unmarshal(body, &a.question); err != nil {
				t.Errorf("the question is not JSON: %v: %s", err, body)
			}
		}
		s.mu.Lock()
		s.asked = append(s.asked, a)
		s.mu.Unlock()
		s.answer(w, r)
	}))
	t.Cleanup(func() { close(s.released); s.Close() })
	return s
}

func (s *sidecar) requests() []asked {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]asked(nil), s.asked...)
}

// answering answers 200 with a.
func answering(a contract.GateAnswer) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a)
	}
}

func replying(status int, body string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// hook runs the program as Gitea would for a push of one branch that
// changes no paths, with dir as its directory, and returns its exit
// status and stderr.
func hook(t *testing.T, dir string, env environ) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	stdin := strings.NewReader(zero + " " + sha1 + " refs/heads/work/1\n")
	code := run([]string{"--dir", dir}, env.get, listed{}, stdin, &stdout, &stderr)
	if stdout.Len() > 0 {
		t.Errorf("the hook wrote to stdout (Gitea does not show it): %q", stdout.String())
	}
	if strings.Contains(stderr.String(), testSecret) {
		t.Errorf("the hook printed the secret: %q", stderr.String())
	}
	return code, stderr.String()
}

func TestTheSidecarsAnswerDecides(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer contract.GateAnswer
		code   int
		stderr string
	}{
		{"allowed, with a line", contract.GateAnswer{Allow: true, Lines: []string{"collab-lease: renewed acme/widgets#1"}},
			exitAllow, "collab-lease: renewed acme/widgets#1\n"},
		{"allowed, silently", contract.GateAnswer{Allow: true}, exitAllow, ""},
		{"refused, with its lines", contract.GateAnswer{Lines: []string{
			"collab-lease: work/1 is claimed: acme/widgets#1 by bot · agent-8 (token 8); this push carries token 7, which is stale",
			"collab-lease: second line"}},
			exitRefuse, "collab-lease: work/1 is claimed: acme/widgets#1 by bot · agent-8 (token 8); this push carries token 7, which is stale\ncollab-lease: second line\n"},
		{"refused without a word", contract.GateAnswer{}, exitRefuse, "collab-lease: the sidecar refused this push\n"},
		{"a line is kept to one line", contract.GateAnswer{Lines: []string{"one\ntwo\x1b[31m"}}, exitRefuse, "one two [31m\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSidecar(t, answering(tc.answer))
			dir := writeGate(t, contract.GateConfig{URL: s.URL, Unreachable: contract.GateRefuse})
			code, stderr := hook(t, dir, gitea(envOptionCount+"=1", envOptionN+"0=collab-lease=1:7"))
			if code != tc.code || stderr != tc.stderr {
				t.Errorf("exit %d, stderr %q; want %d, %q", code, stderr, tc.code, tc.stderr)
			}
			reqs := s.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests", len(reqs))
			}
			r := reqs[0]
			if r.method != http.MethodPost || r.path != contract.GatePath || r.secret != testSecret || r.contentType != "application/json" {
				t.Errorf("request %s %s, secret %q, type %q", r.method, r.path, r.secret, r.contentType)
			}
			want := base()
			want.Options = []string{"collab-lease=1:7"}
			want.Refs = []contract.GateRef{{Old: zero, New: sha1, Name: "refs/heads/work/1"}}
			if got, _ := json.Marshal(r.question); string(got) != mustJSON(t, want) {
				t.Errorf("question %s\nwant     %s", got, mustJSON(t, want))
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Without an answer the configured policy decides, and says so in the
// contract's words.
func TestNoAnswerFollowsThePolicy(t *testing.T) {
	// Nothing listens on port 1 of the loopback (tcpmux is long gone).
	const refused = "http://127.0.0.1:1"
	if c, err := net.Dial("tcp", "127.0.0.1:1"); err == nil {
		c.Close()
		t.Skip("something listens on 127.0.0.1:1")
	}
	for _, tc := range []struct {
		name   string
		answer func(http.ResponseWriter, *http.Request)
		url    string // instead of the server's
	}{
		{"401", replying(http.StatusUnauthorized, `{"allow":true}`), ""},
		{"500", replying(http.StatusInternalServerError, "oops"), ""},
		{"a redirect is not followed", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		}, ""},
		{"bad JSON", replying(http.StatusOK, `{"allow":tru`), ""},
		{"not an object", replying(http.StatusOK, `null`), ""},
		{"an answer that does not say", replying(http.StatusOK, `{"lines":["x"]}`), ""},
		{"allow of the wrong type", replying(http.StatusOK, `{"allow":"yes"}`), ""},
		{"an answer too large", replying(http.StatusOK, `{"allow":true,"lines":["`+strings.Repeat("x", contract.MaxGateAnswer)+`"]}`), ""},
		{"connection refused", nil, refused},
	} {
		for _, policy := range []string{contract.GateAllow, contract.GateRefuse, ""} {
			t.Run(tc.name+"/"+policy, func(t *testing.T) {
				url := tc.url
				if url == "" {
					url = newSidecar(t, tc.answer).URL
				}
				dir := writeGate(t, contract.GateConfig{URL: url, Unreachable: policy})
				code, stderr := hook(t, dir, gitea())
				wantCode, wantLine := exitAllow, contract.GateUnansweredAllowed
				if policy == contract.GateRefuse {
					wantCode, wantLine = exitRefuse, contract.GateUnansweredRefused
				}
				if code != wantCode || stderr != wantLine+"\n" {
					t.Errorf("exit %d, stderr %q; want %d, %q", code, stderr, wantCode, wantLine)
				}
			})
		}
	}
}

// A sidecar that never answers is given up on within TimeoutMS, for the
// whole exchange: here the headers come at once and the body never does.
func TestASilentSidecarTimesOut(t *testing.T) {
	for name, answer := range map[string]func(http.ResponseWriter, *http.Request){
		"no headers": nil,
		"no body": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, `{"allow":`)
			w.(http.Flusher).Flush()
		},
	} {
		t.Run(name, func(t *testing.T) {
			var s *sidecar
			s = newSidecar(t, func(w http.ResponseWriter, r *http.Request) {
				if answer != nil {
					answer(w, r)
				}
				select {
				case <-r.Context().Done():
				case <-s.released:
				}
			})
			dir := writeGate(t, contract.GateConfig{URL: s.URL, Unreachable: contract.GateRefuse, TimeoutMS: 200})
			start := time.Now()
			code, stderr := hook(t, dir, gitea())
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("gave up after %v", took)
			}
			if code != exitRefuse || stderr != contract.GateUnansweredRefused+"\n" {
				t.Errorf("exit %d, stderr %q", code, stderr)
			}
		})
	}
}

// The timeout is taken from the configuration, 2 s when it gives none.
func TestTimeoutDefault(t *testing.T) {
	dir := writeGate(t, contract.GateConfig{URL: "http://127.0.0.1:1"})
	g, err := loadGate(dir)
	if err != nil || g.timeout != 2*time.Second || g.unreached != contract.GateAllow {
		t.Fatalf("%+v, %v", g, err)
	}
}

// An internal push is let in without asking, silently, whatever the
// configuration.
func TestAnInternalPushIsNotAsked(t *testing.T) {
	s := newSidecar(t, answering(contract.GateAnswer{}))
	dir := writeGate(t, contract.GateConfig{URL: s.URL, Unreachable: contract.GateRefuse})
	code, stderr := hook(t, dir, gitea(envInternal+"=true"))
	if code != exitAllow || stderr != "" || len(s.requests()) != 0 {
		t.Errorf("exit %d, stderr %q, %d requests", code, stderr, len(s.requests()))
	}
}

// A question the hook cannot ask is refused before anything is sent.
func TestAnUnaskableQuestionIsRefused(t *testing.T) {
	s := newSidecar(t, answering(contract.GateAnswer{Allow: true}))
	dir := writeGate(t, contract.GateConfig{URL: s.URL})
	code, stderr := hook(t, dir, gitea(envOptionCount+"=101"))
	if code != exitRefuse || !strings.HasPrefix(stderr, "collab-lease: this push carries 101 push options") || len(s.requests()) != 0 {
		t.Errorf("exit %d, stderr %q, %d requests", code, stderr, len(s.requests()))
	}
}

// A gate without its files, or with files it cannot use, lets the push
// in and says that it was not checked, naming the file but not where it is.
func TestAGateNotConfiguredLetsThePushIn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(dir string)
		want  string
	}{
		{"no configuration", func(dir string) { os.Remove(filepath.Join(dir, contract.GateConfigFile)) }, "gate.json: no such file or directory"},
		{"no secret", func(dir string) { os.Remove(filepath.Join(dir, contract.GateSecretFile)) }, "gate.secret: no such file or directory"},
		{"an empty secret", func(dir string) { os.WriteFile(filepath.Join(dir, contract.GateSecretFile), []byte("\n"), 0o600) }, "gate.secret is empty"},
		{"a secret no header can carry", func(dir string) {
			os.WriteFile(filepath.Join(dir, contract.GateSecretFile), []byte("ab cd"), 0o600)
		}, "gate.secret holds a character"},
		{"not JSON", func(dir string) { os.WriteFile(filepath.Join(dir, contract.GateConfigFile), []byte("{"), 0o644) }, "gate.json: unexpected end of JSON input"},
		{"no URL", func(dir string) { os.WriteFile(filepath.Join(dir, contract.GateConfigFile), []byte(`{}`), 0o644) }, "gate.json: url is empty"},
		{"not http", func(dir string) {
			os.WriteFile(filepath.Join(dir, contract.GateConfigFile), []byte(`{"url":"ftp://x"}`), 0o644)
		}, "gate.json: url ftp://x is not an http or https URL"},
		{"an unknown policy", func(dir string) {
			os.WriteFile(filepath.Join(dir, contract.GateConfigFile), []byte(`{"url":"http://x","unreachable":"maybe"}`), 0o644)
		}, `gate.json: unreachable is "maybe"`},
		{"a negative timeout", func(dir string) {
			os.WriteFile(filepath.Join(dir, contract.GateConfigFile), []byte(`{"url":"http://x","timeout_ms":-1}`), 0o644)
		}, "gate.json: timeout_ms is -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeGate(t, contract.GateConfig{URL: "http://127.0.0.1:1", Unreachable: contract.GateRefuse})
			tc.setup(dir)
			code, stderr := hook(t, dir, gitea())
			want := "collab-lease: the gate is not configured (" + tc.want
			if code != exitAllow || !strings.HasPrefix(stderr, want) || !strings.HasSuffix(stderr, "); this push was not checked\n") ||
				strings.Count(stderr, "\n") != 1 || strings.Contains(stderr, dir) {
				t.Errorf("exit %d, stderr %q; want 0 and %q…", code, stderr, want)
			}
		})
	}
	t.Run("no directory", func(t *testing.T) {
		var stderr bytes.Buffer
		if code := preReceive("", gitea().get, noGit, strings.NewReader(""), &stderr); code != exitAllow ||
			!strings.Contains(stderr.String(), "not configured") {
			t.Errorf("exit %d, stderr %q", code, stderr.String())
		}
	})
}
