package routes

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// The operators' endpoints: /readyz and /metrics, with /healthz, and the
// gate's (gate.go). They are
// not for the public listener: the metrics count the live leases of every
// repository, private ones included, and how often Gitea fails, and every
// /readyz asks Gitea. The sidecar serves them on an address of their own
// (--admin-listen, loopback by default); the public handler (New) answers
// them 404 and keeps only /healthz, which touches nothing.

// ReadyCacheTTL is how long /readyz reuses Gitea's last answer: probes
// as frequent as anyone likes cost Gitea at most one request per
// interval.
const ReadyCacheTTL = 2 * time.Second

// AdminOptions are the dependencies of the operators' handler.
type AdminOptions struct {
	// Database reports whether the ledger answers (required).
	Database func(ctx context.Context) error
	// Ready reports whether Gitea answers; nil means only the ledger is
	// checked. Its answer is reused for ReadyCacheTTL.
	Ready func(ctx context.Context) error
	// Metrics serves GET /metrics (Prometheus text format); nil: 404.
	Metrics http.Handler
	Logger  *slog.Logger
	// Clock tells when Gitea's last answer is too old. Nil means time.Now.
	Clock func() time.Time
	// RequestTimeout bounds each probe. Zero means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Gate answers the gate's hook at contract.GatePath and
	// contract.GatePingPath (gate.go); nil: the gate is off, and they
	// answer 404.
	Gate func(ctx context.Context, q contract.GateQuestion) (contract.GateAnswer, error)
	// GateSecret is what the hook must send; required with Gate.
	GateSecret []byte
}

// NewAdmin returns the operators' HTTP handler: GET /healthz, /readyz and
// /metrics, and 404 for everything else.
func NewAdmin(o AdminOptions) (http.Handler, error) {
	if o.Database == nil {
		return nil, errors.New("routes: the admin handler needs Database")
	}
	h := &handler{database: o.Database, log: o.Logger, now: o.Clock, timeout: o.RequestTimeout}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.timeout == 0 {
		h.timeout = DefaultRequestTimeout
	}
	if o.Ready != nil {
		h.ready = (&cachedCheck{check: o.Ready, now: h.now, ttl: ReadyCacheTTL, timeout: h.timeout}).run
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.HandleMethodNotAllowed = false
	if err := r.SetTrustedProxies(nil); err != nil {
		return nil, err
	}
	r.Use(h.recover, h.accessLog, h.deadline)
	r.NoRoute(notFound)
	r.GET("/healthz", h.healthz)
	r.GET("/readyz", h.readyz)
	if o.Metrics != nil {
		r.GET("/metrics", gin.WrapH(o.Metrics))
	}
	if o.Gate != nil {
		if len(o.GateSecret) < 16 {
			return nil, errors.New("routes: the gate needs a secret of at least 16 bytes")
		}
		g := &gate{answer: o.Gate, secret: o.GateSecret}
		r.POST(contract.GatePath, g.push)
		r.GET(contract.GatePingPath, g.ping)
	}
	return r, nil
}

// cachedCheck runs check at most once per ttl, however many callers ask
// at once: they share the running check's answer, and later callers
// reuse it until it is ttl old.
type cachedCheck struct {
	check   func(context.Context) error
	now     func() time.Time
	ttl     time.Duration
	timeout time.Duration

	mu      sync.Mutex
	at      time.Time     // when the last answer came
	err     error         // the last answer
	done    bool          // there is a last answer
	running chan struct{} // closed when the running check answers; nil: none runs
}

func (c *cachedCheck) run(ctx context.Context) error {
	c.mu.Lock()
	for {
		if c.done && c.now().Sub(c.at) < c.ttl {
			err := c.err
			c.mu.Unlock()
			return err
		}
		if c.running == nil {
			break
		}
		wait := c.running
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
		c.mu.Lock()
	}
	running := make(chan struct{})
	c.running = running
	c.mu.Unlock()

	// The check outlives the caller that started it (the others wait for
	// it, and it is remembered), so a caller hanging up does not become
	// everyone's "unreachable"; it has its own deadline.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	err := c.check(cctx)
	cancel()

	c.mu.Lock()
	c.at, c.err, c.done, c.running = c.now(), err, true, nil
	c.mu.Unlock()
	close(running)
	return err
}
