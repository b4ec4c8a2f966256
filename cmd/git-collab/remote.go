package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Remote is what a git remote's URL says about the repository: where the
// forge is and which owner/name it serves.
type Remote struct {
	// Host is the forge's host name or IP address (IPv6 without brackets);
	// empty for a local path, which names no host.
	Host string
	// Port is the port of the URL ("" if none); it is the forge's git
	// port, not the sidecar's, and is kept only so the parse is complete.
	Port string
	// User is the SSH user the URL names ("" if none, or if the URL is not
	// an SSH URL: the user of an https URL is a web login, maybe with a
	// password, and must not travel as an SSH user name).
	User string
	// Owner and Name are the last two path segments, a trailing ".git"
	// removed: Gitea serves owner/name at the end of every URL form, below
	// any sub-path the forge is installed under.
	Owner, Name string
}

// FullName is "owner/name".
func (r Remote) FullName() string { return r.Owner + "/" + r.Name }

// Local reports whether the URL is a path on this machine.
func (r Remote) Local() bool { return r.Host == "" }

// errNotRepoURL is the category of every ParseRemoteURL error.
var errNotRepoURL = errors.New("not a repository URL git-collab understands")

type remoteURLError struct {
	url, detail string
}

func (e *remoteURLError) Error() string {
	return fmt.Sprintf("remote URL %s: %s", quote(e.url), e.detail)
}

func (e *remoteURLError) Is(target error) bool { return target == errNotRepoURL }

// ParseRemoteURL reads a remote URL in the forms git accepts, deciding
// between them the way git does:
//
//   - "<scheme>://..." for ssh, git+ssh, ssh+git, git, http, https and file;
//   - otherwise, if a ":" comes before any "/", the scp-like
//     "[user@]host:path", where the host may be bracketed ("[::1]:path",
//     "[host:port]:path", "user@[host:port]:path");
//   - otherwise a local path.
//
// Owner and name must be what Gitea allows (letters, digits, '-', '_', '.';
// no "..") so they can travel in a remote command; a host or user may not
// start with "-", so neither can be read as an ssh option.
func ParseRemoteURL(raw string) (Remote, error) {
	fail := func(format string, args ...any) (Remote, error) {
		return Remote{}, &remoteURLError{url: raw, detail: fmt.Sprintf(format, args...)}
	}
	if raw == "" {
		return fail("empty")
	}
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c < 0x20 || c == 0x7f {
			return fail("contains a control character")
		}
	}

	var r Remote
	var path string
	switch scheme, rest, isURL := cutScheme(raw); {
	case isURL:
		u, err := url.Parse(scheme + "://" + rest)
		if err != nil {
			return fail("%v", unwrapURLError(err))
		}
		switch scheme {
		case "ssh", "git+ssh", "ssh+git":
			r.User = u.User.Username()
		case "git", "http", "https":
		case "file":
			if u.Host != "" && u.Host != "localhost" {
				return fail("a file URL on another host")
			}
			return localRemote(raw, u.Path)
		default:
			return fail("unsupported scheme %s (use ssh, https or a git@host:owner/repo address)", quote(scheme))
		}
		r.Host, r.Port, path = u.Hostname(), u.Port(), u.Path
	case isLocalPath(raw):
		return localRemote(raw, raw)
	default:
		var hostPart string
		var err error
		hostPart, path, err = cutSCP(raw)
		if err != nil {
			return fail("%v", err)
		}
		if r.User, r.Host, r.Port, err = splitSCPHost(hostPart); err != nil {
			return fail("%v", err)
		}
	}

	if err := checkHost(r.Host); err != nil {
		return fail("%v", err)
	}
	if r.Port != "" {
		if n, err := strconv.Atoi(r.Port); err != nil || !allDigits(r.Port) || n < 1 || n > 65535 {
			return fail("port %s is not a port number", quote(r.Port))
		}
	}
	if r.User != "" && !safeUser(r.User) {
		return fail("user %s is not a user name ssh can take", quote(r.User))
	}
	var err error
	if r.Owner, r.Name, err = ownerName(path); err != nil {
		return fail("%v", err)
	}
	return r, nil
}

// cutScheme splits "scheme://rest" (the scheme lower-cased); isURL is
// false when raw does not start with a URL scheme, as git decides: letters,
// digits, '+', '-' and '.' before "://".
func cutScheme(raw string) (scheme, rest string, isURL bool) {
	i := strings.Index(raw, "://")
	if i <= 0 {
		return "", "", false
	}
	for j := 0; j < i; j++ {
		c := raw[j]
		if !isAlnum(c) && c != '+' && c != '-' && c != '.' {
			return "", "", false
		}
	}
	return strings.ToLower(raw[:i]), raw[i+3:], true
}

// isLocalPath is git's url_is_local_not_ssh: no ":" at all, or a "/"
// before the first ":". A Windows drive ("C:\x", "C:/x") is a path too.
func isLocalPath(s string) bool {
	colon := strings.IndexByte(s, ':')
	slash := strings.IndexByte(s, '/')
	if colon < 0 || (slash >= 0 && slash < colon) {
		return true
	}
	return colon == 1 && isAlpha(s[0]) && len(s) > 2 && (s[2] == '\\' || s[2] == '/')
}

// cutSCP splits an scp-like address at the ":" that ends its host part,
// skipping a bracketed host ("[::1]", "[host:port]", "user@[host:port]").
func cutSCP(s string) (hostPart, path string, err error) {
	from := 0
	start := 0
	if i := strings.Index(s, "@["); i >= 0 {
		start = i + 1
	}
	if s[start] == '[' {
		end := strings.IndexByte(s[start:], ']')
		if end < 0 {
			return "", "", errors.New("unclosed \"[\"")
		}
		from = start + end
	}
	colon := strings.IndexByte(s[from:], ':')
	if colon < 0 {
		return "", "", errors.New("no \":\" after the bracketed host")
	}
	return s[:from+colon], s[from+colon+1:], nil
}

// splitSCPHost reads "[user@]host", "[user@host:port]", "user@[host:port]"
// or a bracketed IPv6 address.
func splitSCPHost(h string) (user, host, port string, err error) {
	bracketed := false
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h, bracketed = h[1:len(h)-1], true
	}
	if i := strings.LastIndexByte(h, '@'); i >= 0 {
		user, h = h[:i], h[i+1:]
		if user == "" {
			return "", "", "", errors.New("empty user name")
		}
	}
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h, bracketed = h[1:len(h)-1], true
	}
	if strings.ContainsAny(h, "[]") {
		return "", "", "", errors.New("misplaced \"[\" or \"]\"")
	}
	if bracketed && strings.Count(h, ":") == 1 {
		host, port, _ = strings.Cut(h, ":")
		return user, host, port, nil
	}
	if !bracketed && strings.Contains(h, ":") {
		return "", "", "", errors.New("an IPv6 address must be bracketed")
	}
	return user, h, "", nil
}

func localRemote(raw, path string) (Remote, error) {
	owner, name, err := ownerName(strings.ReplaceAll(path, `\`, "/"))
	if err != nil {
		return Remote{}, &remoteURLError{url: raw, detail: err.Error()}
	}
	return Remote{Owner: owner, Name: name}, nil
}

// ownerName takes the last two non-empty segments of path, one trailing
// ".git" (any case) removed from the last, and holds them to the rules the
// sidecar applies (contract.ParseRepo), so a name that passes is safe in a
// remote command and one that fails would only earn a usage error there.
func ownerName(path string) (owner, name string, err error) {
	var segs []string
	for _, s := range strings.Split(path, "/") {
		if s != "" {
			segs = append(segs, s)
		}
	}
	if len(segs) < 2 {
		return "", "", fmt.Errorf("path %s does not end in <owner>/<repo>", quote(path))
	}
	owner, name, err = contract.ParseRepo(segs[len(segs)-2] + "/" + segs[len(segs)-1])
	if err != nil {
		return "", "", contractUsage(err)
	}
	return owner, name, nil
}

// checkHost accepts DNS names, IPv4 and IPv6 literals (with a %zone), and
// nothing ssh could take for an option or a second argument.
func checkHost(h string) error {
	if h == "" {
		return errors.New("no host")
	}
	if h[0] == '-' {
		return fmt.Errorf("host %s starts with \"-\"", quote(h))
	}
	if strings.Contains(h, ":") {
		// An IPv6 literal, maybe with a zone ("fe80::1%eth0").
		addr, zone, hasZone := strings.Cut(h, "%")
		if net.ParseIP(addr) == nil || hasZone && zone == "" {
			return fmt.Errorf("host %s is not an IPv6 address", quote(h))
		}
		h = addr + zone // the zone's characters are checked below
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !isAlnum(c) && c != '-' && c != '.' && c != '_' && c != ':' {
			return fmt.Errorf("host %s is not a host name", quote(h))
		}
	}
	return nil
}

// safeUser accepts the user names forges and sshd use; never one ssh could
// read as an option.
func safeUser(u string) bool {
	if u == "" || u[0] == '-' || len(u) > 64 {
		return false
	}
	for i := 0; i < len(u); i++ {
		if c := u[i]; !isAlnum(c) && c != '-' && c != '.' && c != '_' {
			return false
		}
	}
	return true
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func isAlpha(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isAlnum(c byte) bool { return isAlpha(c) || isDigit(c) }

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return s != ""
}

// quote renders a word from the user or the server for a message: one line
// of printable text, cut short.
func quote(s string) string {
	const keep = 80
	if len(s) > keep {
		return strconv.Quote(s[:keep]) + "…"
	}
	return strconv.Quote(s)
}
