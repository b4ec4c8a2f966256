package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/BurntSushi/toml"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/gitea"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/proxyheader"
	"github.com/collab-lease/collab-lease/routes"
)

// Config is every setting of collab-sidecar, parsed and validated once here;
// the packages it wires receive plain values.
type Config struct {
	GiteaURL    string
	GiteaToken  string // the secret itself, read from the token file or env
	TokenSource string // where it came from, for messages (never the token)
	SSHListen   string
	HTTPListen  string
	// AdminListen is the address of the operators' endpoints (/metrics,
	// /readyz, /healthz); "" when turned off.
	AdminListen string
	DataDir     string
	// DB is the ledger: a SQLite file, or a PostgreSQL URL, which may
	// hold a password: show it only through models.Redact.
	DB string
	// HostKey and SessionKey are the files of the SSH host key and the
	// session-signing key; replicas behind one load balancer share them.
	HostKey     string
	SessionKey  string
	PublicURL   string
	WebhookURL  string // the base URL Gitea delivers webhooks to; PublicURL unless set
	GiteaCustom string // Gitea's custom directory, for install (and doctor)
	MaxTTL      time.Duration
	LockDelay   time.Duration
	// FencePushes: keep a branch protection rule on every claimed pull
	// request's head branch that lets only the holders push.
	FencePushes bool
	// PriorityLabels are the labels next prefers, highest first.
	PriorityLabels []string
	// Work-in-progress caps: live claims per holder and per account (0: none).
	MaxClaimsPerHolder  int
	MaxClaimsPerAccount int
	// MaxReservationsPerHolder caps one holder's live path reservations
	// (globs), over every repository (0: none).
	MaxReservationsPerHolder int
	// MaxSessionsPerAccount caps one account's agent sessions (0: none).
	MaxSessionsPerAccount int
	ForgeTimeout          time.Duration
	KeyCacheTTL           time.Duration
	PermCacheTTL          time.Duration
	// IssueStateTTL bounds how long the ledger's record of an issue's
	// state is trusted without asking Gitea; Reconcile is how often
	// missed webhook deliveries are looked for.
	IssueStateTTL time.Duration
	Reconcile     time.Duration
	// The live event streams (the badges) one signed-in account, and one
	// client address, may hold at once.
	StreamsPerViewer  int
	StreamsPerAddress int
	LogFormat         string
	LogLevel          string
	// Limits per client: SSH connections per address and per account,
	// and requests to Gitea per second that one address's HTTP requests
	// may cause (0: no limit).
	MaxConnsPerAddr    int
	MaxConnsPerAccount int
	ForgeRatePerAddr   int
	// ProxyProtocolFrom are the load balancers whose connections to the
	// SSH and HTTP listeners begin with a PROXY protocol header naming
	// the client (nil: none; no connection may send one).
	ProxyProtocolFrom []netip.Prefix
	// Gate: keep the gate's pre-receive hook in every repository under
	// RepoRoot (Gitea's repository root), which asks GateURL (an admin
	// listener's URL as Gitea reaches it; "" derives it from AdminListen)
	// and does GateUnreachable (contract.GateAllow or GateRefuse) when no
	// answer comes. GateProgram is the hook program to install ("": the
	// collab-gate-hook beside this executable). RenewOnPush: an allowed
	// push renews the claim whose current token it carries.
	Gate            bool
	RepoRoot        string
	GateURL         string
	GateUnreachable string
	GateProgram     string
	RenewOnPush     bool
}

// setting is one row of the settings table: the single source for flags,
// environment names, TOML keys, defaults and --help.
type setting struct {
	name string // flag name and TOML key ("gitea-url" or "gitea_url")
	env  string
	def  string
	help string
}

// boolSettings are the settings that are switches: --fence-pushes alone
// turns one on, as does true (or 1) in the environment or the file.
var boolSettings = map[string]bool{"fence-pushes": true, "gate": true, "renew-on-push": true}

// switchFlag is a switch's flag.Value: the setting's text, "true" when
// the flag is given alone.
type switchFlag struct{ s *string }

func (f switchFlag) String() string {
	if f.s == nil {
		return ""
	}
	return *f.s
}
func (f switchFlag) Set(v string) error { *f.s = v; return nil }
func (f switchFlag) IsBoolFlag() bool   { return true }

var settings = []setting{
	{"gitea-url", "COLLAB_GITEA_URL", "", "Gitea's base URL, e.g. https://git.example.com (required)"},
	{"gitea-token-file", "COLLAB_GITEA_TOKEN_FILE", "", "file holding a Gitea site-admin API token (required unless COLLAB_GITEA_TOKEN is set)"},
	{"ssh-listen", "COLLAB_SSH_LISTEN", ":2222", "address of the SSH server (host:0 picks a free port)"},
	{"http-listen", "COLLAB_HTTP_LISTEN", ":8787", "address of the HTTP server (host:0 picks a free port)"},
	{"admin-listen", "COLLAB_ADMIN_LISTEN", "127.0.0.1:" + defaultAdminPort, "address of the operators' HTTP server: /metrics, /readyz, /healthz (off: none); keep it off the public network"},
	{"data-dir", "COLLAB_DATA_DIR", "./data", "directory holding " + ledgerFile + ", the SSH host key, " + sessionKeyFile + ", " + oauthAppFile + " and " + webhookSecretFile},
	{"db", "COLLAB_DB", "", "the ledger: a SQLite file (default <data-dir>/" + ledgerFile + "), or a PostgreSQL database, postgres://user@host/dbname (docs/operating.md: PostgreSQL)"},
	{"host-key", "COLLAB_HOST_KEY", "", "file of the SSH host key (default <data-dir>/" + hostKeyFile + "; created, mode 0600, if missing); replicas share one"},
	{"session-key", "COLLAB_SESSION_KEY", "", "file of the key that signs sign-in cookies (default <data-dir>/" + sessionKeyFile + "; created, mode 0600, if missing); replicas share one"},
	{"public-url", "COLLAB_PUBLIC_URL", "http://localhost:8787", "URL at which browsers reach this sidecar"},
	{"webhook-url", "COLLAB_WEBHOOK_URL", "", "URL at which Gitea reaches this sidecar, if not the public URL (install registers <webhook-url>" + routes.WebhookPath + ")"},
	{"gitea-custom", "COLLAB_GITEA_CUSTOM", "", "Gitea's custom directory ($GITEA_CUSTOM), where install writes templates/custom/footer.tmpl"},
	{"max-ttl", "COLLAB_MAX_TTL", durationSetting(lease.DefaultMaxTTL), "largest --ttl a claim may ask for"},
	{"max-claims-per-holder", "COLLAB_MAX_CLAIMS_PER_HOLDER", "0", "live claims one holder (an account's agent, or the account itself) may hold at once, over every repository (0: no cap)"},
	{"max-claims-per-account", "COLLAB_MAX_CLAIMS_PER_ACCOUNT", "0", "live claims one account may hold at once, all its agents together (0: no cap)"},
	{"max-reservations-per-holder", "COLLAB_MAX_RESERVATIONS_PER_HOLDER", strconv.Itoa(defaultReservationCap), "live path reservations (globs of collab-lease reserve) one holder may hold at once, over every repository (0: no cap)"},
	{"max-sessions-per-account", "COLLAB_MAX_SESSIONS_PER_ACCOUNT", "64", "agent sessions (collab-lease session) one account may have open at once, over every replica (0: no cap)"},
	{"priority-labels", "COLLAB_PRIORITY_LABELS", "", "labels next prefers, highest first, comma-separated (e.g. priority/critical,priority/high): the oldest issue of the highest priority there is goes first, issues with none of them last"},
	{"lock-delay", "COLLAB_LOCK_DELAY", "0s", "after a claim lapses, how long nobody but its holder may claim the issue (0s: off; at most 5m), so that a frozen holder gets time to stop"},
	{"fence-pushes", "COLLAB_FENCE_PUSHES", "false", "while a pull request, or an issue it closes, is claimed, let only the holder's account push to its head branch (a branch protection rule of the sidecar's; the Gitea token needs write:repository)"},
	{"gate", "COLLAB_GATE", "false", "keep the gate, a pre-receive hook, in every repository under gitea-repo-root: Gitea then refuses a push to a claimed pull request's branch unless it carries the claim's current token (-o collab-lease=<issue>:<token>) from the holder's account (needs admin-listen)"},
	{"gitea-repo-root", "COLLAB_GITEA_REPO_ROOT", "", "Gitea's repository root ([repository] ROOT of app.ini; read from <gitea-custom>/conf/app.ini if not given), for the gate"},
	{"gate-url", "COLLAB_GATE_URL", "", "URL at which Gitea's hooks reach this sidecar's admin listener, or a load balancer in front of the replicas' (default http://127.0.0.1:<admin port>)"},
	{"gate-unreachable", "COLLAB_GATE_UNREACHABLE", "allow", "what the gate does when no sidecar answered within 2s: allow (the push goes in, with a warning line) or refuse"},
	{"gate-program", "COLLAB_GATE_PROGRAM", "", "the gate's hook program to install (default: collab-gate-hook beside collab-sidecar)"},
	{"renew-on-push", "COLLAB_RENEW_ON_PUSH", "false", "with the gate, a push carrying a claim's current token renews the claim by the TTL its holder last gave it"},
	{"forge-timeout", "COLLAB_FORGE_TIMEOUT", durationSetting(gitea.DefaultTimeout), "deadline of each question to Gitea"},
	{"key-cache-ttl", "COLLAB_KEY_CACHE_TTL", durationSetting(gitea.DefaultKeyCacheTTL), "how long a resolved SSH key is remembered"},
	{"perm-cache-ttl", "COLLAB_PERM_CACHE_TTL", durationSetting(gitea.DefaultPermCacheTTL), "how long a repository permission is remembered"},
	{"issue-state-ttl", "COLLAB_ISSUE_STATE_TTL", durationSetting(lease.DefaultIssueTTL), "how long an issue's open or closed state is trusted without asking Gitea (webhooks keep it current)"},
	{"reconcile-interval", "COLLAB_RECONCILE_INTERVAL", "5m", "how often closes that no webhook delivered are looked for in Gitea (jittered), and, with fence-pushes, how often the branch protection rules the push fence carries are looked at again"},
	{"max-conns-per-addr", "COLLAB_MAX_CONNS_PER_ADDR", "128", "SSH connections one client address may hold (IPv6: one /64); raise it for a fleet behind one NAT address"},
	{"max-conns-per-account", "COLLAB_MAX_CONNS_PER_ACCOUNT", "256", "SSH connections one Gitea account may hold; past it they answer exit 75"},
	{"forge-rate-per-addr", "COLLAB_FORGE_RATE_PER_ADDR", "20", "requests to Gitea per second one client address's HTTP requests may cause, in bursts of 5 s worth (answers from the caches are free); past it 429; 0 turns it off"},
	{"proxy-protocol-from", "COLLAB_PROXY_PROTOCOL_FROM", "", "load balancers (addresses or CIDR ranges, comma-separated) whose connections to the SSH and HTTP listeners must begin with a PROXY protocol v1 or v2 header naming the client, which the limits per address then count; no other address may send one"},
	{"event-streams-per-viewer", "COLLAB_EVENT_STREAMS_PER_VIEWER", strconv.Itoa(routes.DefaultStreamsPerViewer), "live event streams (badges kept current) one signed-in account may hold at once"},
	{"event-streams-per-address", "COLLAB_EVENT_STREAMS_PER_ADDRESS", strconv.Itoa(routes.DefaultStreamsPerAddress), "live event streams one client address may hold at once (raise it behind a proxy that sends no PROXY protocol header)"},
	{"log-format", "COLLAB_LOG_FORMAT", "text", "log format: text or json"},
	{"log-level", "COLLAB_LOG_LEVEL", "info", "log level: debug, info, warn or error"},
}

// defaultReservationCap is --max-reservations-per-holder's default: a
// holder keeps a few globs per claim, and a runaway agent's reserves
// stop long before they slow down every other reserve in the repository.
const defaultReservationCap = 256

// maxEventStreams bounds the stream caps one may configure.
const maxEventStreams = 100_000

// tokenEnv holds the token itself; the file is preferred because an
// environment variable can leak through /proc and crash reports.
const tokenEnv = "COLLAB_GITEA_TOKEN"

// errHelp is returned when -h or --help was asked for; usage was printed.
var errHelp = errors.New("help requested")

// loadConfig parses args (after the subcommand) with precedence flags, then
// environment, then the TOML file named by --config (or COLLAB_CONFIG), then
// defaults. getenv is os.Getenv in production.
// extra defines flags of one subcommand only (e.g. install --uninstall);
// they are not settings and have no environment or file form.
func loadConfig(cmd string, args []string, getenv func(string) string, usageOut io.Writer, extra ...func(*flag.FlagSet)) (Config, error) {
	c, err := parseConfig(cmd, args, getenv, usageOut, extra...)
	if err != nil && !errors.Is(err, errHelp) {
		// Messages quote what they were given (a flag, a TOML line), which
		// may hold control characters: a refusal is one printable line.
		err = errors.New(oneLine(err.Error()))
	}
	return c, err
}

// oneLine escapes control characters, so s prints as one line.
func oneLine(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// parseConfig is loadConfig before its refusals are made one line.
func parseConfig(cmd string, args []string, getenv func(string) string, usageOut io.Writer, extra ...func(*flag.FlagSet)) (Config, error) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	flags := map[string]*string{}
	for _, s := range settings {
		if boolSettings[s.name] {
			flags[s.name] = new(string)
			fs.Var(switchFlag{flags[s.name]}, s.name, s.help)
			continue
		}
		flags[s.name] = fs.String(s.name, "", s.help)
	}
	configPath := fs.String("config", "", "TOML file of settings (keys as the flag names)")
	for _, e := range extra {
		e(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(usageOut, cmd)
			fs.VisitAll(func(f *flag.Flag) {
				if _, isSetting := flags[f.Name]; !isSetting && f.Name != "config" {
					fmt.Fprintf(usageOut, "  --%-18s %-26s %-24s %s\n", f.Name, "-", f.DefValue, f.Usage)
				}
			})
			return Config{}, errHelp
		}
		return Config{}, fmt.Errorf("%v (see collab-sidecar %s --help)", err, cmd)
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q (see collab-sidecar %s --help)", fs.Arg(0), cmd)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	if *configPath == "" {
		*configPath = getenv("COLLAB_CONFIG")
	}
	file := map[string]string{}
	if *configPath != "" {
		var err error
		if file, err = readTOML(*configPath); err != nil {
			return Config{}, err
		}
	}
	val := map[string]string{}
	for _, s := range settings {
		switch {
		case set[s.name]:
			val[s.name] = *flags[s.name]
		case getenv(s.env) != "":
			val[s.name] = getenv(s.env)
		case file[s.name] != "":
			val[s.name] = file[s.name]
		default:
			val[s.name] = s.def
		}
	}
	return buildConfig(val, getenv)
}

func readTOML(path string) (map[string]string, error) {
	var raw map[string]any
	if _, err := toml.DecodeFile(path, &raw); err != nil {
		return nil, fmt.Errorf("config file %s: %v", path, err)
	}
	known := map[string]bool{}
	for _, s := range settings {
		known[s.name] = true
	}
	out := map[string]string{}
	for k, v := range raw {
		name := strings.ReplaceAll(k, "_", "-")
		if !known[name] {
			return nil, fmt.Errorf("config file %s: unknown setting %q (known: %s)", path, k, knownNames())
		}
		switch v := v.(type) {
		case string:
			out[name] = v
		case int64:
			out[name] = fmt.Sprint(v) // whole seconds, for durations
		case bool:
			if !boolSettings[name] {
				return nil, fmt.Errorf("config file %s: %s must be a string", path, k)
			}
			out[name] = strconv.FormatBool(v)
		default:
			return nil, fmt.Errorf("config file %s: %s must be a string", path, k)
		}
	}
	return out, nil
}

func knownNames() string {
	var names []string
	for _, s := range settings {
		names = append(names, s.name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// buildConfig validates the merged values; each error names the setting
// and how to fix it.
func buildConfig(v map[string]string, getenv func(string) string) (Config, error) {
	c := Config{
		GiteaURL:    strings.TrimRight(v["gitea-url"], "/"),
		SSHListen:   v["ssh-listen"],
		HTTPListen:  v["http-listen"],
		DataDir:     v["data-dir"],
		DB:          v["db"],
		HostKey:     v["host-key"],
		SessionKey:  v["session-key"],
		PublicURL:   strings.TrimRight(v["public-url"], "/"),
		WebhookURL:  strings.TrimRight(v["webhook-url"], "/"),
		GiteaCustom: v["gitea-custom"],
		LogFormat:   v["log-format"],
		LogLevel:    v["log-level"],
	}
	if c.GiteaURL == "" {
		return c, errors.New("gitea-url is required: pass --gitea-url https://git.example.com or set COLLAB_GITEA_URL")
	}
	if err := checkURL("gitea-url", c.GiteaURL); err != nil {
		return c, err
	}
	if err := checkURL("public-url", c.PublicURL); err != nil {
		return c, err
	}
	if c.WebhookURL == "" {
		c.WebhookURL = c.PublicURL
	}
	if err := checkURL("webhook-url", c.WebhookURL); err != nil {
		return c, err
	}
	if u, _ := url.Parse(c.WebhookURL); u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.User != nil {
		return c, fmt.Errorf("webhook-url %q must be a base URL without user, query or fragment (the path %s is added to it)", c.WebhookURL, routes.WebhookPath)
	}
	for _, name := range []string{"ssh-listen", "http-listen"} {
		if _, _, err := net.SplitHostPort(v[name]); err != nil {
			return c, fmt.Errorf("%s %q is not host:port (e.g. :2222 or 127.0.0.1:0)", name, v[name])
		}
	}
	admin, err := adminListen(v)
	if err != nil {
		return c, err
	}
	c.AdminListen = admin
	if c.DataDir == "" {
		return c, errors.New("data-dir must not be empty")
	}
	if c.DB == "" {
		c.DB = filepath.Join(c.DataDir, ledgerFile)
	}
	if c.HostKey == "" {
		c.HostKey = filepath.Join(c.DataDir, hostKeyFile)
	}
	if c.SessionKey == "" {
		c.SessionKey = filepath.Join(c.DataDir, sessionKeyFile)
	}
	if err := models.CheckDB(c.DB); err != nil {
		return c, fmt.Errorf("db %v", err)
	}
	durations := []struct {
		name     string
		dst      *time.Duration
		min, max time.Duration
	}{
		{"max-ttl", &c.MaxTTL, time.Second, 100 * 365 * 24 * time.Hour},
		{"lock-delay", &c.LockDelay, 0, models.MaxLockDelay},
		{"forge-timeout", &c.ForgeTimeout, 100 * time.Millisecond, time.Minute},
		{"key-cache-ttl", &c.KeyCacheTTL, 0, time.Hour},
		{"perm-cache-ttl", &c.PermCacheTTL, 0, time.Hour},
		{"issue-state-ttl", &c.IssueStateTTL, 0, 24 * time.Hour},
		{"reconcile-interval", &c.Reconcile, 10 * time.Second, 24 * time.Hour},
	}
	for _, d := range durations {
		parsed, err := parseDuration(v[d.name])
		if err != nil || parsed < d.min || parsed > d.max {
			return c, fmt.Errorf("%s %q must be a duration between %s and %s (e.g. 30s, 5m, 168h)", d.name, v[d.name], d.min, d.max)
		}
		*d.dst = parsed
	}
	if v["priority-labels"] != "" {
		for _, l := range strings.Split(v["priority-labels"], ",") {
			switch l = strings.TrimSpace(l); {
			case l == "":
				return c, fmt.Errorf("priority-labels %q has an empty label; name labels separated by commas, highest first", v["priority-labels"])
			case len(l) > 255:
				return c, fmt.Errorf("priority-labels names a label of %d bytes; Gitea's labels have at most 255", len(l))
			case slices.Contains(c.PriorityLabels, l):
				return c, fmt.Errorf("priority-labels names %q twice", l)
			}
			c.PriorityLabels = append(c.PriorityLabels, l)
		}
	}
	if c.FencePushes, err = strconv.ParseBool(v["fence-pushes"]); err != nil {
		return c, fmt.Errorf("fence-pushes %q must be true or false", v["fence-pushes"])
	}
	if err := gateConfig(&c, v); err != nil {
		return c, err
	}
	if c.LockDelay%time.Second != 0 {
		return c, fmt.Errorf("lock-delay %q must be whole seconds", v["lock-delay"])
	}
	counts := []struct {
		name     string
		dst      *int
		min, max int
	}{
		{"max-conns-per-addr", &c.MaxConnsPerAddr, 1, 1 << 20},
		{"max-claims-per-holder", &c.MaxClaimsPerHolder, 0, 1 << 20},
		{"max-claims-per-account", &c.MaxClaimsPerAccount, 0, 1 << 20},
		{"max-reservations-per-holder", &c.MaxReservationsPerHolder, 0, 1 << 20},
		{"max-sessions-per-account", &c.MaxSessionsPerAccount, 0, 1 << 20},
		{"max-conns-per-account", &c.MaxConnsPerAccount, 1, 1 << 20},
		{"forge-rate-per-addr", &c.ForgeRatePerAddr, 0, 1 << 20},
		{"event-streams-per-viewer", &c.StreamsPerViewer, 1, maxEventStreams},
		{"event-streams-per-address", &c.StreamsPerAddress, 1, maxEventStreams},
	}
	for _, n := range counts {
		parsed, err := strconv.Atoi(v[n.name])
		if err != nil || parsed < n.min || parsed > n.max {
			return c, fmt.Errorf("%s %q must be a whole number from %d to %d", n.name, v[n.name], n.min, n.max)
		}
		*n.dst = parsed
	}
	if c.ProxyProtocolFrom, err = proxyheader.ParseFrom(v["proxy-protocol-from"]); err != nil {
		return c, fmt.Errorf("proxy-protocol-from %v: give the balancers' addresses or CIDR ranges, comma-separated (e.g. 10.0.0.5,10.1.0.0/24)", err)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return c, fmt.Errorf("log-format %q must be text or json", c.LogFormat)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return c, fmt.Errorf("log-level %q must be debug, info, warn or error", c.LogLevel)
	}
	token, source, err := readToken(v["gitea-token-file"], getenv)
	if err != nil {
		return c, err
	}
	c.GiteaToken, c.TokenSource = token, source
	return c, nil
}

// defaultAdminPort is the port of the operators' endpoints, next to the
// HTTP API's 8787.
const defaultAdminPort = "8788"

// adminListen validates admin-listen: host:port, or off (or empty, as
// --admin-listen ” gives) for no operators' server. It may not be
// another listener's address: its endpoints would then be public.
func adminListen(v map[string]string) (string, error) {
	addr := v["admin-listen"]
	if addr == "" || addr == "off" {
		return "", nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("admin-listen %q is not host:port (e.g. 127.0.0.1:%s), or off", addr, defaultAdminPort)
	}
	for _, other := range []string{"http-listen", "ssh-listen"} {
		if port != "0" && sameListenAddr(addr, v[other]) {
			return "", fmt.Errorf("admin-listen %q is also %s: give the operators' endpoints an address of their own (default 127.0.0.1:%s), or off", addr, other, defaultAdminPort)
		}
	}
	return addr, nil
}

// sameListenAddr reports whether two listen addresses would take the
// same port on a shared interface (a wildcard host overlaps any host).
func sameListenAddr(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || pa != pb {
		return false
	}
	wild := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wild(ha) || wild(hb)
}

func checkURL(name, s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s %q must be an http:// or https:// URL", name, s)
	}
	return nil
}

// parseDuration accepts a Go duration or whole seconds.
func parseDuration(s string) (time.Duration, error) {
	var secs int64
	if _, err := fmt.Sscanf(s, "%d", &secs); err == nil && fmt.Sprint(secs) == s {
		return time.Duration(secs) * time.Second, nil
	}
	return time.ParseDuration(s)
}

// readToken reads the admin token from its file (which must not be
// readable by others) or, failing that, from COLLAB_GITEA_TOKEN.
func readToken(path string, getenv func(string) string) (string, string, error) {
	if path == "" {
		if t := strings.TrimSpace(getenv(tokenEnv)); t != "" {
			return t, tokenEnv, nil
		}
		return "", "", errors.New("gitea-token-file is required: put a Gitea site-admin token in a file (chmod 600) and pass --gitea-token-file FILE or set COLLAB_GITEA_TOKEN_FILE")
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", "", fmt.Errorf("gitea-token-file: %v", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", "", fmt.Errorf("gitea-token-file %s has mode %04o: others may read the token; run chmod 600 %s", path, st.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", fmt.Errorf("gitea-token-file: %v", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" || strings.ContainsAny(t, " \t\r\n") {
		return "", "", fmt.Errorf("gitea-token-file %s must hold exactly one token", path)
	}
	return t, path, nil
}

func printUsage(w io.Writer, cmd string) {
	fmt.Fprintf(w, "Usage: collab-sidecar %s [flags]\n\nSettings come from flags, then environment variables, then the TOML file of\n--config (keys as the flag names), then the defaults.\n\n", cmd)
	fmt.Fprintf(w, "  %-20s %-26s %-24s %s\n", "flag", "environment", "default", "")
	for _, s := range settings {
		def := s.def
		if def == "" {
			def = "-"
		}
		fmt.Fprintf(w, "  --%-18s %-26s %-24s %s\n", s.name, s.env, def, s.help)
	}
	fmt.Fprintf(w, "  --%-18s %-26s %-24s %s\n", "config", "COLLAB_CONFIG", "-", "TOML file of settings")
	fmt.Fprintf(w, "  %-20s %-26s %-24s %s\n", "", tokenEnv, "-", "the token itself, if no token file is given")
}
