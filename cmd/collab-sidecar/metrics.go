package main

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// metrics are the sidecar's Prometheus series, on a registry of its own
// (prometheus/client_golang: the reference implementation of the format,
// with the Go runtime and process collectors for free).
type metrics struct {
	reg         *prometheus.Registry
	ops         *prometheus.CounterVec
	opSeconds   *prometheus.HistogramVec
	giteaReqs   *prometheus.CounterVec
	giteaSecs   *prometheus.HistogramVec
	giteaErrors prometheus.Counter
	sshConns    prometheus.Gauge
	deliveries  *prometheus.CounterVec
	sweeps      *prometheus.CounterVec
	repairs     prometheus.Counter
	nexts       *prometheus.CounterVec
	nextTries   prometheus.Histogram
	nextReqs    prometheus.Histogram
	fencePosts  *prometheus.CounterVec
	fenceRules  *prometheus.CounterVec
	quarantines *prometheus.CounterVec
	gatePushes  *prometheus.CounterVec
	gateRefused *prometheus.CounterVec
	gateSecs    prometheus.Histogram
	gateRenewed prometheus.Counter
	gateInstall *prometheus.CounterVec
}

func newMetrics(store *models.Store) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "collab_lease_operations_total",
			Help: "collab-lease commands over SSH, by verb and outcome (acquired, held, renewed, not_holder, released, listed, repo_not_found, forge_unavailable, busy, usage, …).",
		}, []string{"verb", "outcome"}),
		opSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "collab_lease_operation_duration_seconds",
			Help:    "Time to answer a collab-lease command, forge calls and ledger transaction included, by verb.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"verb"}),
		giteaReqs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "collab_lease_gitea_requests_total",
			Help: "Requests to Gitea's API, by HTTP method and status code.",
		}, []string{"method", "code"}),
		giteaSecs: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "collab_lease_gitea_request_duration_seconds",
			Help:    "Latency of requests to Gitea's API.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"method"}),
		giteaErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "collab_lease_gitea_request_errors_total",
			Help: "Requests to Gitea that got no HTTP answer (refused, timed out, reset).",
		}),
		sshConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "collab_lease_ssh_connections",
			Help: "Open SSH connections.",
		}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "collab_lease_webhook_deliveries_total",
			Help: "Gitea webhook deliveries, by outcome (applied, duplicate, ignored, bad_signature, too_large, malformed, failed).",
		}, []string{"outcome"}),
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "collab_lease_reconcile_runs_total",
			Help: "Reconciles with Gitea (looking for closes no webhook delivered), by result (ok, failed).",
		}, []string{"result"}),
		repairs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "collab_lease_reconcile_repairs_total",
			Help: "Leases a reconcile ended because Gitea had closed, merged or deleted their issue without a delivered webhook.",
		}),
	}
	m.nexts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "collab_lease_next_total",
		Help: "next commands, by outcome (acquired, none, try_again, error).",
	}, []string{"outcome"})
	m.nextTries = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "collab_lease_next_candidates_tried",
		Help:    "Ledger transactions one next took (one more for each candidate whose dependencies had to be asked of Gitea).",
		Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64},
	})
	m.nextReqs = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "collab_lease_next_gitea_requests",
		Help:    "Requests to Gitea one next made (issue list pages and dependency questions; 0 when cached).",
		Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64},
	})
	m.fencePosts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "collab_lease_fence_statuses_total",
		Help: "Posts of the collab-lease/claim commit status on pull requests, by outcome (posted, failed: retried with backoff).",
	}, []string{"outcome"})
	m.fenceRules = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "collab_lease_fence_push_rules_total",
		Help: "Changes of the branch protection rules that fence pushes to claimed pull requests' branches, by outcome (made, updated, removed, failed: retried with backoff).",
	}, []string{"outcome"})
	m.quarantines = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "collab_lease_quarantine_forge_total",
		Help: "What the quarantine told Gitea, by outcome (quarantined: labelled and commented; unlabelled: a lifted quarantine's label taken off; gone: the issue no longer exists; failed: retried with backoff).",
	}, []string{"outcome"})
	m.gatePushes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "collab_lease_gate_pushes_total",
		Help: "Pushes the gate's hook asked about, by outcome (allowed, refused, invalid, unanswered: the ledger did not answer, and the hook did what gate-unreachable says).",
	}, []string{"outcome"})
	m.gateRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "collab_lease_gate_refused_refs_total",
		Help: "Refs the gate refused, by reason (stale, no_token, bad_token, other_account).",
	}, []string{"reason"})
	m.gateSecs = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "collab_lease_gate_answer_duration_seconds",
		Help:    "Time the sidecar took to answer the gate's hook.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .02, .05, .1, .25, .5, 1, 2},
	})
	m.gateRenewed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "collab_lease_gate_renewals_total",
		Help: "Claims renewed by a push carrying their current token (renew-on-push).",
	})
	m.gateInstall = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "collab_lease_gate_hook_installs_total",
		Help: "Repositories the gate's hook was put into (or put back into), by when (start, created, sweep), and sweeps that failed (failed).",
	}, []string{"when"})
	live := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "collab_lease_live_leases",
		Help: "Live leases across all repositories.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), metricsLedgerTimeout)
		defer cancel()
		n, err := store.CountLive(ctx)
		if err != nil {
			return -1
		}
		return float64(n)
	})
	offset := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "collab_lease_clock_offset_seconds",
		Help: "How far the PostgreSQL server's clock, by which the ledger decides, is ahead of this host's (negative: behind); 0 on SQLite.",
	}, func() float64 { return store.ClockOffset().Seconds() })
	listensLost := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "collab_lease_listen_connections_lost_total",
		Help: "Times the PostgreSQL connection that hears the other replicas' changes (LISTEN) was lost; each is logged and made again. 0 on SQLite.",
	}, func() float64 { return float64(store.ListensLost()) })
	m.reg.MustRegister(offset, listensLost, m.ops, m.opSeconds, m.giteaReqs, m.giteaSecs, m.giteaErrors, m.sshConns, live,
		m.deliveries, m.sweeps, m.repairs, m.nexts, m.nextTries, m.nextReqs, m.fencePosts, m.fenceRules, m.quarantines,
		m.gatePushes, m.gateRefused, m.gateSecs, m.gateRenewed, m.gateInstall,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observe is ssh.LeaseVerb.Observe.
func (m *metrics) observe(verb contract.Verb, outcome string, d time.Duration) {
	v := string(verb)
	if v == "" {
		v = "invalid"
	}
	m.ops.WithLabelValues(v, outcome).Inc()
	m.opSeconds.WithLabelValues(v).Observe(d.Seconds())
}

// watchWaiters exports the lease service's count of acquire --wait and
// next --wait callers.
func (m *metrics) watchWaiters(count func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "collab_lease_waiters",
		Help: "Callers of acquire --wait and next --wait now waiting for an issue to free up.",
	}, func() float64 { return float64(count()) }))
}

// watchSessions exports the agent sessions open on this replica and the
// heartbeats they wrote to the ledger.
func (m *metrics) watchSessions(counts func() (open, heartbeats int64)) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "collab_lease_sessions",
		Help: "Agent sessions (collab-lease session) open on this replica.",
	}, func() float64 { open, _ := counts(); return float64(open) }))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "collab_lease_session_heartbeats_total",
		Help: "Heartbeats the agent sessions of this replica wrote to the ledger (one write each, whatever the number of its claims).",
	}, func() float64 { _, beats := counts(); return float64(beats) }))
}

// watchStreams exports the count of open live event streams.
func (m *metrics) watchStreams(count func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "collab_lease_event_streams",
		Help: "Live lease event streams (badges kept current) now open.",
	}, func() float64 { return float64(count()) }))
}

// quarantined is lease.QuarantineOptions.Observe.
func (m *metrics) quarantined(outcome string) { m.quarantines.WithLabelValues(outcome).Inc() }

// fencePosted is fence.Options.Observe.
func (m *metrics) fencePosted(outcome string) { m.fencePosts.WithLabelValues(outcome).Inc() }

// fenceRuled is fence.Options.ObservePush.
func (m *metrics) fenceRuled(outcome string) { m.fenceRules.WithLabelValues(outcome).Inc() }

// next is plugin.WithNextObserver's observer.
func (m *metrics) next(st lease.NextStats) {
	m.nexts.WithLabelValues(st.Outcome).Inc()
	m.nextTries.Observe(float64(st.Attempts))
	m.nextReqs.Observe(float64(st.Requests))
}

// gateAnswered counts one answer to the gate's hook.
func (m *metrics) gateAnswered(outcome string, res lease.GateResult, d time.Duration) {
	m.gatePushes.WithLabelValues(outcome).Inc()
	for _, r := range res.Refused {
		m.gateRefused.WithLabelValues(r).Inc()
	}
	m.gateRenewed.Add(float64(res.Renewed))
	m.gateSecs.Observe(d.Seconds())
}

// delivery is routes.Webhook.Observe.
func (m *metrics) delivery(outcome string) { m.deliveries.WithLabelValues(outcome).Inc() }

// reconciled counts one reconcile and the leases it ended.
func (m *metrics) reconciled(ended int, err error) {
	result := "ok"
	if err != nil {
		result = "failed"
	}
	m.sweeps.WithLabelValues(result).Inc()
	m.repairs.Add(float64(ended))
}

// connDelta is ssh.Server.ConnDelta.
func (m *metrics) connDelta(d int) { m.sshConns.Add(float64(d)) }

// wrapGitea counts the forge's requests to Gitea.
func (m *metrics) wrapGitea(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := next.RoundTrip(req)
		m.giteaSecs.WithLabelValues(req.Method).Observe(time.Since(start).Seconds())
		if err != nil {
			m.giteaErrors.Inc()
			return nil, err
		}
		m.giteaReqs.WithLabelValues(req.Method, strconv.Itoa(resp.StatusCode)).Inc()
		return resp, nil
	})
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
