package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/collab-lease/collab-lease/assets"
	"github.com/collab-lease/collab-lease/buildinfo"
	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/fence"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/gitea"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/live"
	"github.com/collab-lease/collab-lease/plugin/proxyheader"
	"github.com/collab-lease/collab-lease/routes"
	"github.com/collab-lease/collab-lease/ssh"
)

var _ routes.SignIn = (*gitea.OAuthClient)(nil)

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// serve wires the ledger, the forge, the SSH server, the HTTP server and
// the operators' HTTP server (unless admin-listen is off), and runs until
// ctx ends (SIGINT, SIGTERM); then it stops accepting, lets
// running commands and requests finish within shutdownGrace, and closes
// the database.
func serve(ctx context.Context, cfg Config, logw io.Writer) error {
	log := newLogger(cfg, logw)
	build := buildinfo.Read(version)
	log.Info("collab-sidecar starting", "version", build.Version, "commit", build.Revision, "modified", build.Dirty, "go", build.GoVersion)
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data-dir: %w", err)
	}
	limits := []models.Option{models.WithMaxTTL(cfg.MaxTTL), models.WithLockDelay(cfg.LockDelay),
		models.WithClaimCaps(cfg.MaxClaimsPerHolder, cfg.MaxClaimsPerAccount), models.WithReservationCap(cfg.MaxReservationsPerHolder)}
	store, err := models.Open(cfg.DB, append(limits, models.WithClockStep(func(back time.Duration) {
		log.Warn("the clock stepped back; the ledger keeps using its latest time until the clock catches up, so no expired lease comes back", "by", back.String())
	}), models.WithListenLost(func(err error) {
		log.Warn("lost the PostgreSQL connection that hears the other replicas' changes; connecting again; once connected, every waiter and live feed looks again", "err", err)
	}))...)
	if err != nil {
		return err
	}
	defer store.Close()
	met := newMetrics(store)
	met.reg.MustRegister(buildInfoMetric(build))
	fg, err := newForge(cfg, func(o *gitea.Options) { o.WrapTransport = met.wrapGitea })
	if err != nil {
		return err
	}
	hostKey, err := ssh.LoadOrCreateHostKey(cfg.HostKey)
	if err != nil {
		return err
	}
	// One bus carries every committed change, expiry instant and other
	// replica's change to the waiters, the live feeds, the fence worker
	// and the other replicas. Its expiry queue waits for the ledger's
	// expiries, so it reads the ledger's clock (on PostgreSQL, the
	// database server's), as the hub and the service do. The hub hears
	// the bus before the service does: it subscribes first.
	now := store.Clock().Now
	bus := changes.New(now, changes.RealAfter)
	hub := live.New(store, bus, now, changes.RealAfter, live.Options{Recheck: liveRecheck(cfg)})
	leases, err := lease.NewService(fg, store, bus, hub, lease.WithClock(now), lease.WithIssueTTL(cfg.IssueStateTTL), lease.WithPriorityLabels(cfg.PriorityLabels...), lease.WithMaxSessionsPerAccount(cfg.MaxSessionsPerAccount), lease.WithNextObserver(met.next), lease.WithRenewOnPush(cfg.RenewOnPush), mergeConflictTest(cfg))
	if err != nil {
		return err
	}
	met.watchWaiters(leases.Waiters)
	met.watchStreams(func() int { _, n := hub.Counts(); return n })
	met.watchSessions(leases.SessionCounts)
	fences := fence.New(store, fg, bus, fence.Options{GiteaURL: cfg.GiteaURL, Observe: met.fencePosted,
		FencePushes: cfg.FencePushes, ObservePush: met.fenceRuled, Recheck: cfg.Reconcile, Log: log.Warn, Now: now})
	if cfg.FencePushes {
		log.Info("fencing pushes: a claimed pull request's branch takes pushes only from the holder's account")
	}
	var gate *gateRun // set once the admin listener is bound (the hook's URL names it)
	afterSweep := func(ctx context.Context) {
		if gate != nil {
			gate.sweep(ctx)
		}
	}
	loops := []loop{
		// Finishing an upgrade from holders by login needs Gitea, which
		// may be down now: it goes on beside the servers.
		{name: "holder upgrade", run: func(ctx context.Context) error { resolveHolders(ctx, log, leases, store); return nil }},
		{name: "reconcile", run: func(ctx context.Context) error {
			reconcile(ctx, log, leases, cfg.Reconcile, met.reconciled, afterSweep)
			return nil
		}},
		// Changes other replicas on the same PostgreSQL database make
		// reach this one's bus, and this one's reach theirs (nothing to
		// follow on SQLite).
		{name: "replica changes", run: func(ctx context.Context) error { return changes.Follow(ctx, store, bus) }},
		{name: "fence worker", run: fences.Run},
	}
	hs := newHTTPServer(cfg, nil, log)
	repoCreated := func(repo string) {
		if gate != nil {
			gate.created(repo)
		}
	}
	if hs.Handler, err = newHTTPHandler(cfg, fg, leases, met, log, hs.RegisterOnShutdown, repoCreated); err != nil {
		return err
	}

	sshL, err := net.Listen("tcp", cfg.SSHListen)
	if err != nil {
		return fmt.Errorf("ssh-listen: %w", err)
	}
	httpL, err := net.Listen("tcp", cfg.HTTPListen)
	if err != nil {
		sshL.Close()
		return fmt.Errorf("http-listen: %w", err)
	}
	if len(cfg.ProxyProtocolFrom) > 0 {
		// Behind a TCP load balancer: the client's address comes in a
		// PROXY header, which the limits per address and the logs use.
		sshL = &proxyheader.Listener{Listener: sshL, From: cfg.ProxyProtocolFrom, Timeout: proxyHeaderTimeout, Logger: log}
		httpL = &proxyheader.Listener{Listener: httpL, From: cfg.ProxyProtocolFrom, Timeout: proxyHeaderTimeout, Logger: log}
		log.Info("PROXY protocol headers required from the load balancers, refused from anyone else", "from", prefixList(cfg.ProxyProtocolFrom))
	}
	var adminL net.Listener
	if cfg.AdminListen != "" {
		if adminL, err = net.Listen("tcp", cfg.AdminListen); err != nil {
			sshL.Close()
			httpL.Close()
			return fmt.Errorf("admin-listen: %w", err)
		}
	}
	adminOpts := routes.AdminOptions{
		Database: store.Ping, Metrics: met.handler(), Logger: log, RequestTimeout: operationTimeout(cfg),
		Ready: func(ctx context.Context) error {
			_, err := fg.Check(ctx)
			return err
		},
	}
	if cfg.Gate {
		if gate, err = startGate(cfg, gateURLFor(cfg, adminL.Addr()), leases, met, log); err != nil {
			sshL.Close()
			httpL.Close()
			adminL.Close()
			return err
		}
		adminOpts.Gate, adminOpts.GateSecret = gate.answer, gate.secret
	}
	admin, err := routes.NewAdmin(adminOpts)
	if err != nil {
		sshL.Close()
		httpL.Close()
		if adminL != nil {
			adminL.Close()
		}
		return err
	}
	verb := &ssh.LeaseVerb{Leases: leases, MaxTTL: cfg.MaxTTL, Logger: log, Observe: met.observe}
	srv := &ssh.Server{HostKey: hostKey, Keys: fg, Handler: verb, Logger: log,
		CommandTimeout: operationTimeout(cfg), WriteTimeout: sshWriteTimeout, ConnDelta: met.connDelta,
		MaxConnsPerAddr: cfg.MaxConnsPerAddr, MaxConnsPerAccount: cfg.MaxConnsPerAccount}
	log.Info("ssh listening", "addr", sshL.Addr().String(), "gitea", cfg.GiteaURL, "db", models.Redact(cfg.DB))
	log.Info("http listening", "addr", httpL.Addr().String(), "public_url", cfg.PublicURL)

	servers := []runner{
		{name: "ssh server", serve: func() error { return srv.Serve(sshL) }, closed: ssh.ErrServerClosed,
			shutdown: func(ctx context.Context) {
				if err := srv.Shutdown(ctx); err != nil {
					log.Warn("shutdown cut running commands short", "err", err)
				}
			}},
		httpRunner("http server", hs, httpL, log),
	}
	if adminL != nil {
		as := newHTTPServer(cfg, admin, log)
		serves := "/metrics /readyz /healthz"
		if cfg.Gate {
			serves += " " + contract.GatePath
		}
		log.Info("admin listening", "addr", adminL.Addr().String(), "serves", serves)
		if !loopback(adminL.Addr()) {
			log.Warn("the admin address is not loopback: /metrics counts the live leases of private repositories and /readyz asks Gitea; let only operators reach it",
				"addr", adminL.Addr().String())
		}
		servers = append(servers, httpRunner("admin http server", as, adminL, log))
	} else {
		log.Info("admin endpoints off: no /metrics or /readyz (admin-listen off)")
	}
	err = runServers(ctx, log, shutdownGrace, loops, servers...)
	if err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// newHTTPServer is an HTTP server of handler with the sidecar's time and
// size bounds.
func newHTTPServer(cfg Config, handler http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout(cfg),
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// httpRunner runs hs on l.
func httpRunner(name string, hs *http.Server, l net.Listener, log *slog.Logger) runner {
	return runner{name: name, serve: func() error { return hs.Serve(l) }, closed: http.ErrServerClosed,
		shutdown: func(ctx context.Context) {
			if err := hs.Shutdown(ctx); err != nil {
				log.Warn("shutdown cut running requests short", "server", name, "err", err)
				_ = hs.Close()
			}
		}}
}

// prefixList is ranges as the flag takes them.
func prefixList(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// loopback reports whether a bound address is reachable from this machine
// only.
func loopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// runner is one server as runServers runs it.
type runner struct {
	name  string
	serve func() error // blocks until the server stops
	// closed is what serve returns once shutdown stopped it.
	closed   error
	shutdown func(ctx context.Context) // stop accepting, let running work finish within ctx
}

// loop is a background task that runs beside the servers: run returns
// nil once its ctx ends, or earlier when it has nothing more to do; an
// error says it stopped for good.
type loop struct {
	name string
	run  func(ctx context.Context) error
}

// runServers runs the servers and the loops in one errgroup until ctx
// ends or a server fails, whichever is first; then it shuts all the
// servers down together within grace (each stops accepting and lets
// running commands and requests finish), then stops the loops, and
// returns once every serve and every loop has returned: the first
// server's failure, or nil. A loop that fails is logged and does not stop
// the servers. The caller closes what the servers and the loops used (the
// ledger) only after that, when nothing is running any more.
func runServers(ctx context.Context, log *slog.Logger, grace time.Duration, loops []loop, servers ...runner) error {
	g, gctx := errgroup.WithContext(ctx)
	// The loops outlive the servers' shutdown: what a command that
	// finishes within the grace changes still reaches the fence worker
	// and the other replicas.
	lctx, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLoops()
	for _, l := range loops {
		g.Go(func() error {
			err := l.run(lctx)
			if err != nil && (lctx.Err() == nil || !errors.Is(err, context.Canceled)) {
				log.Error("a background task stopped; the servers go on without it", "task", l.name, "err", err)
			}
			return nil
		})
	}
	for _, r := range servers {
		g.Go(func() error {
			err := r.serve()
			switch {
			case errors.Is(err, r.closed):
				return nil
			case err == nil:
				err = errors.New("stopped on its own")
			}
			return fmt.Errorf("%s: %w", r.name, err)
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		log.Info("shutting down", "grace", grace.String())
		sctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		var wg sync.WaitGroup
		for _, r := range servers {
			wg.Go(func() { r.shutdown(sctx) })
		}
		wg.Wait()
		stopLoops()
		return nil
	})
	return g.Wait()
}

// newHTTPHandler wires the public HTTP API: the badge assets, the session
// key and, if `collab-sidecar install` registered one, the OAuth2
// application; onShutdown is the server's, which ends the event streams.
// The operators' endpoints are on their own handler (routes.NewAdmin, in
// serve).
func newHTTPHandler(cfg Config, fg *gitea.Forge, leases *lease.Service, met *metrics, log *slog.Logger, onShutdown func(func()), repoCreated func(string)) (http.Handler, error) {
	bundle, err := assets.Load()
	if err != nil {
		return nil, fmt.Errorf("badge assets: %w", err)
	}
	key, err := loadOrCreateSessionKey(cfg.SessionKey)
	if err != nil {
		return nil, err
	}
	app, err := loadOAuth(cfg, log)
	if err != nil {
		return nil, err
	}
	var signIn routes.SignIn
	if app != nil {
		signIn = fg.OAuthClient(*app)
	}
	var webhook *routes.Webhook
	secret, err := loadWebhookSecret(cfg.DataDir)
	switch {
	case err != nil:
		return nil, err
	case secret == "":
		log.Info("webhook disabled: no secret; run collab-sidecar install to register Gitea's webhook (closes are then noticed only by the reconcile)",
			"file", filepath.Join(cfg.DataDir, webhookSecretFile))
	default:
		webhook = &routes.Webhook{Secret: []byte(secret), Parse: gitea.ParseDelivery, Observe: met.delivery, RepoCreated: repoCreated}
		log.Info("webhook enabled", "path", routes.WebhookPath)
	}
	return routes.New(routes.Options{
		Leases: leases, GiteaURL: cfg.GiteaURL, PublicURL: cfg.PublicURL,
		SignIn: signIn, SessionKey: key, Assets: bundle, Logger: log,
		RequestTimeout: operationTimeout(cfg), MaxTTL: cfg.MaxTTL,
		ForgeBudgets:       forge.NewAddrBudgets(float64(cfg.ForgeRatePerAddr), 5*cfg.ForgeRatePerAddr, nil),
		Webhook:            webhook,
		Streams:            routes.StreamOptions{PerViewer: cfg.StreamsPerViewer, PerAddress: cfg.StreamsPerAddress},
		RegisterOnShutdown: onShutdown,
	})
}

// loadOAuth reads the OAuth2 application that install registered. Without
// one (or with one registered for another Gitea or public URL) sign-in is
// disabled, and the log says once how to enable it.
func loadOAuth(cfg Config, log *slog.Logger) (*gitea.OAuthApp, error) {
	path := filepath.Join(cfg.DataDir, oauthAppFile)
	app, err := gitea.LoadOAuthApp(path)
	if err != nil {
		return nil, err
	}
	redirect := routes.RedirectURI(cfg.PublicURL)
	switch {
	case app == nil:
		log.Info("sign-in disabled: no OAuth2 application registered; run collab-sidecar install to enable it", "file", path)
		return nil, nil
	case strings.TrimRight(app.GiteaURL, "/") != cfg.GiteaURL || app.RedirectURI != redirect:
		log.Warn("sign-in disabled: the OAuth2 application was registered for another Gitea or public URL; run collab-sidecar install again",
			"file", path, "registered_gitea", app.GiteaURL, "registered_redirect", app.RedirectURI, "want_redirect", redirect)
		return nil, nil
	}
	log.Info("sign-in enabled", "client_id", app.ClientID)
	return app, nil
}

// orDisabled maps a configured 0 ("do not cache") to the forge's "disabled".
func orDisabled(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// newForge is the Gitea client of every subcommand, from the settings;
// mod adjusts its options (serve counts its requests).
func newForge(cfg Config, mod ...func(*gitea.Options)) (*gitea.Forge, error) {
	o := gitea.Options{URL: cfg.GiteaURL, Token: cfg.GiteaToken, Timeout: cfg.ForgeTimeout,
		KeyCacheTTL: orDisabled(cfg.KeyCacheTTL), PermCacheTTL: orDisabled(cfg.PermCacheTTL)}
	for _, m := range mod {
		m(&o)
	}
	return gitea.New(o)
}

// resolveHolders finishes the upgrade of a schema-1 ledger (holders by
// login) through Gitea, retrying while Gitea cannot answer, until done or
// ctx ends. Until a login is resolved, its leases stay live but nobody can
// renew or release them.
func resolveHolders(ctx context.Context, log *slog.Logger, leases *lease.Service, store lease.HolderResolver) {
	for wait := time.Second; ; wait = min(2*wait, time.Minute) {
		n, err := leases.ResolveHolders(ctx, store)
		if n > 0 {
			log.Info("resolved the holders of leases written before account IDs", "leases", n)
		}
		if err == nil {
			return
		}
		log.Warn("cannot resolve lease holders to Gitea accounts yet; retrying", "in", wait.String(), "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// reconcile looks for closes in Gitea that no webhook delivered, every
// interval (give or take a tenth, so replicas and restarts do not sweep in
// step), until ctx ends. Each sweep looks back to the previous one (with a
// margin for clocks and slow deliveries); the first looks back as far as
// the oldest live lease.
func reconcile(ctx context.Context, log *slog.Logger, leases *lease.Service, interval time.Duration, done func(int, error), after func(context.Context)) {
	var since time.Time // zero: as far back as the oldest live lease
	for {
		wait := interval - interval/10 + rand.N(interval/5+1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		start := time.Now()
		sctx, cancel := context.WithTimeout(ctx, interval)
		ended, err := leases.Reconcile(sctx, since)
		after(sctx)
		cancel()
		if errors.Is(err, lease.ErrReconciling) {
			// Another replica sweeps now; the next sweep here looks
			// back as far again.
			log.Debug("another replica is reconciling; skipping this sweep")
			continue
		}
		done(ended, err)
		switch {
		case err != nil:
			log.Warn("reconcile with Gitea failed; retrying at the next sweep", "ended", ended, "err", err)
			continue // the next sweep looks back as far again
		case ended > 0:
			log.Info("reconcile ended leases whose issues Gitea had closed without a webhook", "ended", ended)
		}
		since = start.Add(-time.Minute)
	}
}
