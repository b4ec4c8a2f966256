package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// proxy is a reverse proxy in front of Gitea that counts and times the
// requests it forwards, one listener per source (the sidecar, the agents),
// so each source's requests are told apart without trusting anything they
// send.
type proxy struct {
	urls    map[string]string // source → the proxy's base URL for it
	servers []*http.Server
	wg      sync.WaitGroup

	mu      sync.Mutex
	traffic traffic
}

// traffic is what a proxy forwarded.
type traffic struct {
	Routes map[string]*CallStat // by "<source> <method> <route>"
	// Deps counts the questions about an issue's dependencies, by source
	// and issue number.
	Deps map[string]map[int64]int
	// Merges are the agents' merge requests (POST …/pulls/{n}/merge) by
	// Gitea's answer: 200 merged, 409 main moved while Gitea built the
	// merge, 405 not yet (being tested, or a status missing).
	Merges map[int]*CallStat
}

func newTraffic() traffic {
	return traffic{Routes: map[string]*CallStat{}, Deps: map[string]map[int64]int{}, Merges: map[int]*CallStat{}}
}

// CallStat counts and times calls of one kind.
type CallStat struct {
	N        int           `json:"n"`
	Total    time.Duration `json:"total"`
	Max      time.Duration `json:"max"`
	Canceled int           `json:"canceled,omitempty"` // given up by the caller before Gitea answered
}

func (c *CallStat) add(d time.Duration) {
	c.N++
	c.Total += d
	c.Max = max(c.Max, d)
}

func (c *CallStat) merge(o *CallStat) {
	c.N += o.N
	c.Total += o.Total
	c.Max = max(c.Max, o.Max)
	c.Canceled += o.Canceled
}

// startProxy forwards to target on one loopback listener per source.
func startProxy(target string, sources ...string) (*proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	p := &proxy{urls: map[string]string{}, traffic: newTraffic()}
	rp := httputil.NewSingleHostReverseProxy(u)
	// Keep connections to Gitea open for every concurrent client (the
	// default keeps 2 per host), and never use an environment's proxy.
	rp.Transport = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	// Counted (as canceled, when the caller gave up), not logged.
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) { w.WriteHeader(http.StatusBadGateway) }
	for _, src := range sources {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			p.close()
			return nil, err
		}
		p.urls[src] = "http://" + ln.Addr().String()
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				start := time.Now()
				sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
				rp.ServeHTTP(sw, r)
				// Canceled while it was served: the caller gave up.
				p.record(src, r.Method, r.URL.Path, sw.code, time.Since(start), r.Context().Err() != nil)
			}),
			ReadHeaderTimeout: 10 * time.Second,
		}
		p.servers = append(p.servers, srv)
		p.wg.Go(func() { _ = srv.Serve(ln) }) // ErrServerClosed after close
	}
	return p, nil
}

// statusWriter remembers the status of the answer it writes.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets the reverse proxy flush git's streamed answers.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (p *proxy) record(src, method, path string, code int, d time.Duration, canceled bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rt := route(path)
	key := src + " " + method + " " + rt
	s := p.traffic.Routes[key]
	if s == nil {
		s = &CallStat{}
		p.traffic.Routes[key] = s
	}
	if method == http.MethodPost && rt == mergeRoute {
		m := p.traffic.Merges[code]
		if m == nil {
			m = &CallStat{}
			p.traffic.Merges[code] = m
		}
		m.add(d)
	}
	if m := depsPath.FindStringSubmatch(path); m != nil && method == http.MethodGet {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		if p.traffic.Deps[src] == nil {
			p.traffic.Deps[src] = map[int64]int{}
		}
		p.traffic.Deps[src][n]++
	}
	s.add(d)
	if canceled {
		s.Canceled++
	}
}

// take returns what was forwarded since the last take, and starts over.
func (p *proxy) take() traffic {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.traffic
	p.traffic = newTraffic()
	return t
}

// bySource is the number of requests of each source.
func (t traffic) bySource() map[string]int64 {
	out := map[string]int64{}
	for key, s := range t.Routes {
		src, _, _ := strings.Cut(key, " ")
		out[src] += int64(s.N)
	}
	return out
}

var (
	repoPath   = regexp.MustCompile(`^/api/v1/repos/[^/]+/[^/]+`)
	numberPart = regexp.MustCompile(`/[0-9]+(/|$)`)
	shaPart    = regexp.MustCompile(`/[0-9a-f]{40}(/|$)`)
	agentPart  = regexp.MustCompile(`/fleet[0-9]+(/|$)`)
	depsPath   = regexp.MustCompile(`^/api/v1/repos/[^/]+/[^/]+/issues/([0-9]+)/dependencies$`)
)

// mergeRoute is the route of a merge request.
const mergeRoute = "/repos/{o}/{r}/pulls/{n}/merge"

// route is a request path with its variable parts named:
// /repos/{o}/{r}/issues/{n}/dependencies, /repos/{o}/{r}/commits/{sha}/status.
func route(path string) string {
	path = repoPath.ReplaceAllString(path, "/repos/{o}/{r}")
	path = strings.TrimPrefix(path, "/api/v1")
	path = shaPart.ReplaceAllString(path, "/{sha}$1")
	path = numberPart.ReplaceAllString(path, "/{n}$1")
	return agentPart.ReplaceAllString(path, "/{agent}$1")
}

func (p *proxy) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range p.servers {
		_ = s.Shutdown(ctx)
	}
	p.wg.Wait()
}
