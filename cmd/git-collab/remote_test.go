package main

import (
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

var remoteURLCases = []struct {
	url  string
	want Remote // zero: an error is expected
}{
	// scp-like, as Gitea shows it.
	{"git@forge.example:acme/widgets.git", Remote{Host: "forge.example", User: "git", Owner: "acme", Name: "widgets"}},
	{"git@forge.example:acme/widgets", Remote{Host: "forge.example", User: "git", Owner: "acme", Name: "widgets"}},
	{"forge.example:acme/widgets.git", Remote{Host: "forge.example", Owner: "acme", Name: "widgets"}},
	{"git@forge.example:/acme/widgets.git", Remote{Host: "forge.example", User: "git", Owner: "acme", Name: "widgets"}},
	{"git@forge.example:acme/widgets.git/", Remote{Host: "forge.example", User: "git", Owner: "acme", Name: "widgets"}},
	{"alice.b@10.0.0.7:Acme-Co/my_repo.v2.GIT", Remote{Host: "10.0.0.7", User: "alice.b", Owner: "Acme-Co", Name: "my_repo.v2"}},
	{"git@[::1]:acme/widgets.git", Remote{Host: "::1", User: "git", Owner: "acme", Name: "widgets"}},
	{"[::1]:acme/widgets", Remote{Host: "::1", Owner: "acme", Name: "widgets"}},
	{"[git@forge.example:2200]:acme/widgets.git", Remote{Host: "forge.example", Port: "2200", User: "git", Owner: "acme", Name: "widgets"}},
	{"git@[forge.example:2200]:acme/widgets.git", Remote{Host: "forge.example", Port: "2200", User: "git", Owner: "acme", Name: "widgets"}},
	{"[forge.example:2200]:acme/widgets.git", Remote{Host: "forge.example", Port: "2200", Owner: "acme", Name: "widgets"}},
	// ssh URLs.
	{"ssh://git@forge.example:22/acme/widgets.git", Remote{Host: "forge.example", Port: "22", User: "git", Owner: "acme", Name: "widgets"}},
	{"ssh://git@forge.example/acme/widgets", Remote{Host: "forge.example", User: "git", Owner: "acme", Name: "widgets"}},
	{"ssh://forge.example/acme/widgets", Remote{Host: "forge.example", Owner: "acme", Name: "widgets"}},
	{"SSH://git@Forge.Example/acme/widgets.git", Remote{Host: "Forge.Example", User: "git", Owner: "acme", Name: "widgets"}},
	{"git+ssh://alice@forge.example:2200/acme/widgets.git", Remote{Host: "forge.example", Port: "2200", User: "alice", Owner: "acme", Name: "widgets"}},
	{"ssh+git://alice@forge.example/acme/widgets.git", Remote{Host: "forge.example", User: "alice", Owner: "acme", Name: "widgets"}},
	{"ssh://git@[::1]:2222/acme/widgets.git", Remote{Host: "::1", Port: "2222", User: "git", Owner: "acme", Name: "widgets"}},
	{"ssh://git@[fe80::1%25eth0]/acme/widgets.git", Remote{Host: "fe80::1%eth0", User: "git", Owner: "acme", Name: "widgets"}},
	{"ssh://git@forge.example/gitea/acme/widgets.git", Remote{Host: "forge.example", User: "git", Owner: "acme", Name: "widgets"}},
	// http(s) and git: the URL's user is a web login (maybe with a
	// password), never the ssh user.
	{"https://forge.example/acme/widgets.git", Remote{Host: "forge.example", Owner: "acme", Name: "widgets"}},
	{"https://forge.example/acme/widgets", Remote{Host: "forge.example", Owner: "acme", Name: "widgets"}},
	{"https://forge.example/acme/widgets/", Remote{Host: "forge.example", Owner: "acme", Name: "widgets"}},
	{"https://forge.example:3000/gitea/acme/widgets", Remote{Host: "forge.example", Port: "3000", Owner: "acme", Name: "widgets"}},
	{"https://forge.example/a/b/gitea/acme/widgets.git", Remote{Host: "forge.example", Owner: "acme", Name: "widgets"}},
	{"http://alice:s3cret@forge.example/acme/widgets.git", Remote{Host: "forge.example", Owner: "acme", Name: "widgets"}},
	{"https://forge.example/acme/my%2Drepo", Remote{Host: "forge.example", Owner: "acme", Name: "my-repo"}},
	{"git://forge.example/acme/widgets.git", Remote{Host: "forge.example", Owner: "acme", Name: "widgets"}},
	{"https://[2001:db8::7]:3000/acme/widgets", Remote{Host: "2001:db8::7", Port: "3000", Owner: "acme", Name: "widgets"}},
	// Local paths name no host; owner/repo still come from the path.
	{"/srv/gitea/repositories/acme/widgets.git", Remote{Owner: "acme", Name: "widgets"}},
	{"../acme/widgets", Remote{Owner: "acme", Name: "widgets"}},
	{"./x:y/acme/widgets", Remote{Owner: "acme", Name: "widgets"}}, // a "/" before the ":": a path
	{"file:///srv/git/acme/widgets.git", Remote{Owner: "acme", Name: "widgets"}},
	{"file://localhost/srv/git/acme/widgets.git", Remote{Owner: "acme", Name: "widgets"}},
	{`C:\repos\acme\widgets.git`, Remote{Owner: "acme", Name: "widgets"}},
	{"C:/repos/acme/widgets", Remote{Owner: "acme", Name: "widgets"}},

	// Errors.
	{"", Remote{}},
	{"git@forge.example:widgets.git", Remote{}},           // one segment
	{"https://forge.example/widgets", Remote{}},           //
	{"widgets", Remote{}},                                 // a local path with one segment
	{"git@forge.example:acme/widgets.wiki.git", Remote{}}, // a wiki
	{"git@forge.example:acme/widgets.git.git", Remote{}},
	{"git@forge.example:acme/..", Remote{}},
	{"git@forge.example:../widgets", Remote{}},
	{"git@forge.example:acme/-", Remote{}},
	{"git@forge.example:-acme/widgets", Remote{}},
	{"git@forge.example:acme/wid gets", Remote{}},
	{"git@forge.example:acme/wid'gets", Remote{}},
	{"git@forge.example:acme/wid$(id)gets", Remote{}},
	{"git@forge.example:acme/widgets\n", Remote{}},
	{"-oProxyCommand=touch /tmp/x:acme/widgets", Remote{}}, // a "/" first: a path with a bad owner
	{"-oProxyCommand=id:acme/widgets", Remote{}},
	{"git@-oProxyCommand=id:acme/widgets", Remote{}},
	{"-l@forge.example:acme/widgets", Remote{}},
	{"ssh://-oProxyCommand=id/acme/widgets", Remote{}},
	{"ssh://-lx@forge.example/acme/widgets", Remote{}},
	{"ssh://git@forge.example:99999/acme/widgets", Remote{}},
	{"ssh://git@forge.example:0/acme/widgets", Remote{}},
	{"ssh:///acme/widgets", Remote{}},
	{"ftp://forge.example/acme/widgets", Remote{}},
	{"file://otherhost/srv/acme/widgets", Remote{}},
	{"git@[::1:acme/widgets", Remote{}},
	{"git@forge.example::acme/widgets", Remote{}},
	{"git@fe80::1:acme/widgets", Remote{}},
	{"[not::an::ip]:acme/widgets", Remote{}},
	{"@forge.example:acme/widgets", Remote{}},
	{"a b@forge.example:acme/widgets", Remote{}},
	{"forge_1.example!:acme/widgets", Remote{}},
}

func TestParseRemoteURL(t *testing.T) {
	for _, c := range remoteURLCases {
		got, err := ParseRemoteURL(c.url)
		if c.want == (Remote{}) {
			if err == nil {
				t.Errorf("ParseRemoteURL(%q) = %+v, want an error", c.url, got)
			} else if !errors.Is(err, errNotRepoURL) {
				t.Errorf("ParseRemoteURL(%q): error %v is not errNotRepoURL", c.url, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseRemoteURL(%q) = %+v, %v; want %+v", c.url, got, err, c.want)
		}
	}
}

func TestParseRemoteURLErrorNamesTheURL(t *testing.T) {
	_, err := ParseRemoteURL("git@forge.example:widgets.git")
	if err == nil || !strings.Contains(err.Error(), `"git@forge.example:widgets.git"`) || !strings.Contains(err.Error(), "<owner>/<repo>") {
		t.Fatalf("error %v", err)
	}
}

// FuzzParseRemoteURL checks that whatever ParseRemoteURL accepts is safe to
// hand to ssh and to the sidecar, and that an accepted remote survives
// being written back as an ssh URL.
func FuzzParseRemoteURL(f *testing.F) {
	for _, c := range remoteURLCases {
		f.Add(c.url)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r, err := ParseRemoteURL(raw)
		if err != nil {
			if !errors.Is(err, errNotRepoURL) {
				t.Fatalf("error %v is not errNotRepoURL", err)
			}
			return
		}
		// What the client accepts, the sidecar's grammar reads unchanged.
		if owner, name, err := contract.ParseRepo(r.FullName()); err != nil || owner != r.Owner || name != r.Name {
			t.Fatalf("owner/name %q/%q from %q: the sidecar reads %q/%q, %v", r.Owner, r.Name, raw, owner, name, err)
		}
		if strings.HasSuffix(strings.ToLower(r.Name), ".git") {
			t.Fatalf("name %q keeps .git", r.Name)
		}
		if r.User != "" && !safeUser(r.User) {
			t.Fatalf("unsafe user %q from %q", r.User, raw)
		}
		if r.Local() {
			if r.User != "" || r.Port != "" {
				t.Fatalf("a local path with a user or port: %+v", r)
			}
			return
		}
		if checkHost(r.Host) != nil || strings.HasPrefix(r.Host, "-") {
			t.Fatalf("unsafe host %q from %q", r.Host, raw)
		}
		cmd, _, err := RemoteCommand("acquire", r.FullName(), 1, nil)
		if err != nil || strings.ContainsAny(cmd, "\n\r\x00") || strings.Count(cmd, "'") != 4 {
			t.Fatalf("remote command %q, %v", cmd, err)
		}

		// Written back as an ssh URL, it parses to the same remote.
		u := url.URL{Scheme: "ssh", Host: r.Host, Path: "/" + r.FullName() + ".git"}
		if strings.Contains(r.Host, ":") {
			u.Host = "[" + r.Host + "]"
		}
		if r.Port != "" {
			u.Host = net.JoinHostPort(r.Host, r.Port)
		}
		if r.User != "" {
			u.User = url.User(r.User)
		}
		back, err := ParseRemoteURL(u.String())
		if err != nil || back != r {
			t.Fatalf("%q parsed to %+v; written back as %q it parses to %+v, %v", raw, r, u.String(), back, err)
		}
		// And as an scp-like address, when it has no port.
		if r.Port == "" {
			scp := r.Host + ":" + r.FullName()
			if strings.Contains(r.Host, ":") {
				scp = "[" + r.Host + "]:" + r.FullName()
			}
			if r.User != "" {
				scp = r.User + "@" + scp
			}
			back, err := ParseRemoteURL(scp)
			if err != nil || back != r {
				t.Fatalf("%q parsed to %+v; written back as %q it parses to %+v, %v", raw, r, scp, back, err)
			}
		}
	})
}
