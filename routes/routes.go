package routes

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/collab-lease/collab-lease/assets"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// Leases is what the HTTP API asks of the lease service (lease.Service):
// it decides who may see what; the handlers only bind, call and translate.
type Leases interface {
	ByToken(ctx context.Context, token string) (lease.Viewer, error)
	ListPage(ctx context.Context, v lease.Viewer, owner, name string, q lease.ListQuery) (contract.List, int, error)
	Lease(ctx context.Context, v lease.Viewer, owner, name string, n int64) (contract.IssueLease, error)
	Acquire(ctx context.Context, v lease.Viewer, owner, name string, n int64, ttl time.Duration) (contract.Tenure, error)
	Renew(ctx context.Context, v lease.Viewer, owner, name string, n int64, ttl time.Duration) (contract.Tenure, error)
	Release(ctx context.Context, v lease.Viewer, owner, name string, n int64) (contract.Released, error)
	Check(ctx context.Context, v lease.Viewer, owner, name string, n, token int64) (contract.Tenure, error)
	History(ctx context.Context, v lease.Viewer, owner, name string, n int64, limit int) (contract.History, error)
	ForceRelease(ctx context.Context, v lease.Viewer, owner, name string, n int64) (contract.Released, error)
	Handoff(ctx context.Context, v lease.Viewer, owner, name string, n int64, toLogin, toAgent string) (contract.HandedOff, error)
	Merge(ctx context.Context, v lease.Viewer, owner, name string, m lease.MergeRequest, told func(ahead int)) (contract.Merged, error)
	Reservations(ctx context.Context, v lease.Viewer, owner, name, path string) (contract.Reservations, error)
	Reserve(ctx context.Context, v lease.Viewer, owner, name string, r lease.ReserveRequest) (contract.Reservations, error)
	Unreserve(ctx context.Context, v lease.Viewer, owner, name string, globs []string, issue int64, force bool) (contract.Reservations, error)
	Unquarantine(ctx context.Context, v lease.Viewer, owner, name string, n int64) (contract.Unquarantined, error)
	Watch(ctx context.Context, v lease.Viewer, owner, name, lastID string) (*lease.Watch, error)
	Board(ctx context.Context, v lease.Viewer, owner, name string, q lease.BoardQuery) (lease.Board, error)
	Boards(ctx context.Context, v lease.Viewer, q lease.BoardQuery) (lease.Boards, error)
	Apply(ctx context.Context, e forge.Event) (lease.Applied, error)
	// A signed-in browser's session is valid only while it carries its
	// account's session epoch; logout moves the epoch on.
	SessionEpoch(ctx context.Context, u forge.User) (int64, error)
	EndSessions(ctx context.Context, u forge.User) error
}

var _ Leases = (*lease.Service)(nil)

// Defaults for the zero values of Options.
const (
	DefaultRequestTimeout = 10 * time.Second
	DefaultSessionTTL     = 12 * time.Hour
)

// Options are the dependencies and settings of the HTTP API.
type Options struct {
	Leases Leases
	// Webhook receives Gitea's system webhook at WebhookPath; nil: that
	// path is not served (install has not registered one).
	Webhook *Webhook
	// GiteaURL is Gitea's base URL as browsers reach it. Its origin is the
	// only one answered with CORS, and a sign-in may return only to it or
	// to PublicURL.
	GiteaURL string
	// PublicURL is this sidecar's base URL as browsers reach it; the
	// OAuth2 redirect URI is RedirectURI(PublicURL).
	PublicURL string
	// SignIn is Gitea's OAuth2 provider, for the sidecar's registered
	// application; nil disables sign-in (private repositories are then
	// visible only with a token).
	SignIn SignIn
	// SessionKey signs the session and sign-in cookies (at least 32
	// bytes when SignIn is set).
	SessionKey []byte
	// SessionTTL is how long a sign-in lasts. Zero means DefaultSessionTTL.
	SessionTTL time.Duration
	Assets     assets.Bundle
	Logger     *slog.Logger
	// Clock tells the time for cookie expiry. Nil means time.Now.
	Clock func() time.Time
	// Rand is the source of sign-in states and PKCE verifiers. Nil means
	// crypto/rand.
	Rand io.Reader
	// RequestTimeout bounds each request's calls to the forge, the ledger
	// and Gitea's OAuth2 provider. Zero means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxTTL is the largest ttl a write may ask for. Zero means
	// plugin.DefaultMaxTTL.
	MaxTTL time.Duration
	// ForgeBudgets, if set, is each client address's share of requests
	// to Gitea (see forge.Budget): a request that would ask past it is
	// answered 429. Nil: no limit.
	ForgeBudgets *forge.AddrBudgets
	// Streams bounds the live event streams (events.go).
	Streams StreamOptions
	// RegisterOnShutdown is the server's (http.Server.RegisterOnShutdown):
	// the event streams end when it shuts down, where they would
	// otherwise hold its shutdown for the whole grace. Nil: they end only
	// with their clients.
	RegisterOnShutdown func(func())
}

// handler holds the validated options every handler reads: those of New,
// or those of NewAdmin (database and ready, and the middleware's).
type handler struct {
	leases     Leases
	database   func(ctx context.Context) error
	hook       *Webhook
	gitea      *url.URL // Gitea's base URL, no trailing slash
	giteaOrig  string   // "scheme://host[:port]", as browsers send Origin
	public     *url.URL
	publicOrig string
	signIn     SignIn
	cookies    cookieJar
	assets     assets.Bundle
	log        *slog.Logger
	now        func() time.Time
	rand       io.Reader
	ready      func(ctx context.Context) error
	timeout    time.Duration
	maxTTL     time.Duration
	budgets    *forge.AddrBudgets
	streams    *streams
}

// New returns the sidecar's public HTTP handler: the API, sign-in, the
// badge assets and /healthz. The operators' endpoints are NewAdmin's.
func New(o Options) (http.Handler, error) {
	h, err := newHandler(o)
	if err != nil {
		return nil, err
	}
	// gin's mode is its own process-wide switch; release mode keeps it
	// from printing routes and warnings to stdout.
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.RedirectTrailingSlash = false // no redirects that would make two 404s differ
	r.RedirectFixedPath = false
	r.HandleMethodNotAllowed = false
	if err := r.SetTrustedProxies(nil); err != nil {
		return nil, err
	}
	r.Use(h.recover, h.accessLog, h.deadline, h.budget, h.cors)
	r.NoRoute(notFound)
	r.OPTIONS("/*any", h.preflight)

	// Liveness only: /readyz and /metrics are the operators' (NewAdmin).
	r.GET("/healthz", h.healthz)

	r.GET("/api/v1/repos/:owner/:repo/leases", h.listLeases)
	r.GET(EventsPath, h.leaseEvents)
	r.GET("/api/v1/repos/:owner/:repo/issues/:n/lease", h.issueLease)
	r.POST("/api/v1/repos/:owner/:repo/issues/:n/lease", h.acquireLease)
	r.PATCH("/api/v1/repos/:owner/:repo/issues/:n/lease", h.renewLease)
	r.DELETE("/api/v1/repos/:owner/:repo/issues/:n/lease", h.releaseLease)
	r.POST("/api/v1/repos/:owner/:repo/issues/:n/lease/handoff", h.handoffLease)
	r.GET("/api/v1/repos/:owner/:repo/issues/:n/lease/check", h.checkLease)
	r.GET("/api/v1/repos/:owner/:repo/issues/:n/lease/history", h.leaseHistory)
	r.POST("/api/v1/repos/:owner/:repo/issues/:n/lease/force-release", h.forceRelease)
	r.POST("/api/v1/repos/:owner/:repo/issues/:n/lease/claim", h.claimButton)
	r.POST("/api/v1/repos/:owner/:repo/issues/:n/lease/release", h.releaseButton)
	r.POST(mergePath, h.mergePull)
	r.GET(reservationsPath, h.listReservations)
	r.POST(reservationsPath, h.reserve)
	r.DELETE(reservationsPath, h.unreserve)
	r.POST("/api/v1/repos/:owner/:repo/issues/:n/unquarantine", h.unquarantine)
	r.GET("/api/v1/session", h.session)
	r.GET(OpenAPIPath, serveOpenAPI())
	if o.Webhook != nil {
		r.POST(WebhookPath, h.webhook)
	}

	r.GET(loginPath, h.login)
	r.GET(CallbackPath, h.callback)
	r.POST(logoutPath, h.logout)

	r.GET(boardPath, h.board)
	r.GET(allBoardPath, h.allBoards)

	r.GET("/assets/:name", h.asset)
	r.HEAD("/assets/:name", h.asset)
	return r, nil
}

func newHandler(o Options) (*handler, error) {
	if o.Webhook != nil && (len(o.Webhook.Secret) < 16 || o.Webhook.Parse == nil) {
		return nil, errors.New("routes: the webhook needs a secret of at least 16 bytes and a parser")
	}
	if o.Leases == nil {
		return nil, errors.New("routes: Leases is required")
	}
	gitea, err := baseURL("Gitea URL", o.GiteaURL)
	if err != nil {
		return nil, err
	}
	public, err := baseURL("public URL", o.PublicURL)
	if err != nil {
		return nil, err
	}
	if o.SignIn != nil && len(o.SessionKey) < 32 {
		return nil, errors.New("routes: the session key must be at least 32 bytes")
	}
	h := &handler{
		leases:     o.Leases,
		hook:       o.Webhook,
		gitea:      gitea,
		giteaOrig:  origin(gitea),
		public:     public,
		publicOrig: origin(public),
		signIn:     o.SignIn,
		assets:     o.Assets,
		log:        o.Logger,
		now:        o.Clock,
		rand:       o.Rand,
		timeout:    o.RequestTimeout,
		maxTTL:     o.MaxTTL,
		budgets:    o.ForgeBudgets,
		streams:    newStreams(o.Streams),
	}
	if o.RegisterOnShutdown != nil {
		o.RegisterOnShutdown(h.streams.closeAll)
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.rand == nil {
		h.rand = rand.Reader
	}
	if h.timeout == 0 {
		h.timeout = DefaultRequestTimeout
	}
	if h.maxTTL <= 0 {
		h.maxTTL = lease.DefaultMaxTTL
	}
	ttl := o.SessionTTL
	if ttl == 0 {
		ttl = DefaultSessionTTL
	}
	h.cookies = cookieJar{key: o.SessionKey, secure: public.Scheme == "https", path: public.Path + "/", ttl: ttl}
	return h, nil
}

// baseURL parses an http(s) base URL and drops a trailing slash.
func baseURL(what, s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimRight(s, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("routes: the %s %q is not an http(s) URL", what, s)
	}
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

// origin is the serialized origin of u as a browser sends it in an Origin
// header: lower-case scheme and host, default ports left out.
func origin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	port := u.Port()
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	if port != "" {
		host += ":" + port
	}
	return scheme + "://" + host
}

// mergePath is the route of a merge, whose handler bounds what it does
// itself: a merge may wait its turn.
const mergePath = "/api/v1/repos/:owner/:repo/pulls/:n/merge"

// deadline bounds everything a request does (forge, ledger, OAuth calls);
// an event stream bounds what it does before it starts itself, and a
// merge what it does on top of a request's work.
func (h *handler) deadline(c *gin.Context) {
	if p := c.FullPath(); p == EventsPath || p == mergePath {
		c.Next()
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), h.timeout)
	defer cancel()
	c.Request = c.Request.WithContext(ctx)
	c.Next()
}

// budget charges what the request asks of Gitea to its address's share
// (gin's ClientIP is the connection's address, no forwarding header is
// trusted; behind a balancer that sends a PROXY protocol header, the
// listener makes it the client's address the header names).
func (h *handler) budget(c *gin.Context) {
	if b := h.budgets.For(c.ClientIP()); b != nil {
		c.Request = c.Request.WithContext(forge.WithBudget(c.Request.Context(), b))
	}
	c.Next()
}

// accessLog logs each request's method, path (never the query: it carries
// OAuth codes and states), status and duration; health probes and metrics
// scrapes only at debug level, so they do not drown the rest.
func (h *handler) accessLog(c *gin.Context) {
	start := time.Now()
	c.Next()
	level := slog.LevelInfo
	if p := c.Request.URL.Path; p == "/healthz" || p == "/readyz" || p == "/metrics" {
		level = slog.LevelDebug
	}
	h.log.Log(context.Background(), level, "http request", "method", c.Request.Method, "path", c.Request.URL.Path,
		"status", c.Writer.Status(), "duration", time.Since(start).Round(time.Microsecond).String())
}

// recover turns a panic into a logged 500 with the JSON error shape.
func (h *handler) recover(c *gin.Context) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			h.log.Error("http handler panicked", "path", c.Request.URL.Path, "panic", fmt.Sprint(p))
			if !c.Writer.Written() {
				serverError(c)
			}
			c.Abort()
		}
	}()
	c.Next()
}
