// Package metrics defines aside-core's Prometheus metrics on a registry of
// its own (so tests can build several servers in one process).
package metrics

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the core's collectors.
type Metrics struct {
	Registry *prometheus.Registry

	HTTPRequests         *prometheus.CounterVec
	HTTPDuration         *prometheus.HistogramVec
	CacheInvalidations   *prometheus.CounterVec
	InvalidationRetries  prometheus.Counter
	ComputeRejected      prometheus.Counter
	SimplifyRejected     prometheus.Counter
	ComputeDuration      *prometheus.HistogramVec
	ComputeSlotsInUse    prometheus.GaugeFunc
	UncertainWritesTotal prometheus.Counter
	SimplifyDuration     prometheus.Histogram
	SimplifyPoints       *prometheus.HistogramVec
	Outbox               OutboxMetrics
}

// OutboxMetrics count the invalidation relay's work (outbox.Observer).
type OutboxMetrics struct {
	settled  prometheus.Counter
	delay    prometheus.Histogram
	failures prometheus.Counter
	waiting  prometheus.Gauge
}

// Settled counts rows whose keys the relay deleted, with their age since commit.
func (o OutboxMetrics) Settled(ages []time.Duration) {
	o.settled.Add(float64(len(ages)))
	for _, age := range ages {
		o.delay.Observe(age.Seconds())
	}
}

// Failed counts a relay round that could not reach Redis or PostgreSQL.
func (o OutboxMetrics) Failed() { o.failures.Inc() }

// Waiting sets the rows the relay's retry window holds.
func (o OutboxMetrics) Waiting(rows int) { o.waiting.Set(float64(rows)) }

// Latency buckets from 0.5 ms (see docs/decisions/034-the-cores-latency-buckets-start-at-0-5-ms.md).
var httpBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// New registers every collector. poolStat reads the PostgreSQL pool's
// statistics at scrape time; slotsInUse reads the compute limiter.
func New(profile string, poolStat func() *pgxpool.Stat, slotsInUse func() int) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		HTTPRequests: counterVec("aside_core_http_requests_total",
			"HTTP requests answered, by route template, method and status.", "route", "method", "status"),
		HTTPDuration: histogramVec("aside_core_http_request_duration_seconds",
			"Time to answer an HTTP request, by route template and method.", httpBuckets, "route", "method"),
		CacheInvalidations: counterVec("aside_core_cache_invalidations_total",
			"Cache invalidations after committed writes, by result (ok, error).", "result"),
		InvalidationRetries: counter("aside_core_cache_invalidation_retries_total",
			"Extra DEL attempts sent because an invalidation's first try failed."),
		ComputeRejected: counter("aside_core_compute_rejected_total",
			"Compute requests answered 503 because every compute slot stayed busy."),
		SimplifyRejected: counter("aside_core_simplify_rejected_total",
			"Track simplifications answered 503 because every simplification slot stayed busy."),
		ComputeDuration: histogramVec("aside_core_compute_duration_seconds",
			"Time spent computing, by kind (checksum, pbkdf2, bcrypt).", prometheus.ExponentialBuckets(0.001, 2, 14), "kind"),
		ComputeSlotsInUse: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "aside_core_compute_slots_in_use",
			Help: "Compute requests running now.",
		}, func() float64 { return float64(slotsInUse()) }),
		UncertainWritesTotal: counter("aside_core_uncertain_writes_total",
			"Writes whose outcome is unknown (connection lost after sending); their keys are dropped anyway."),
		SimplifyDuration: histogram("aside_core_simplify_duration_seconds",
			"Time to decode, simplify (Douglas-Peucker) and encode one track.", prometheus.ExponentialBuckets(0.0001, 2, 14)),
		SimplifyPoints: histogramVec("aside_core_simplify_points",
			"Points of a simplified track, before and after the simplification.", prometheus.ExponentialBuckets(2, 4, 9), "stage"),
	}
	m.Outbox = OutboxMetrics{
		settled: counter("aside_core_cache_outbox_settled_total",
			"Owed invalidations the outbox relay settled (a write's failed DEL, or a row past the grace period)."),
		delay: histogram("aside_core_cache_outbox_delay_seconds",
			"Time from a write's commit to the outbox relay's DEL of its keys.", prometheus.ExponentialBuckets(0.01, 2, 14)),
		failures: counter("aside_core_cache_outbox_failures_total",
			"Outbox relay rounds that failed (Redis or PostgreSQL unreachable); retried."),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aside_core_cache_outbox_waiting",
			Help: "Owed invalidations in the outbox relay's retry window after its last round (counted up to a million).",
		}),
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "aside_core_info",
		Help:        "Always 1; the profile the core runs with.",
		ConstLabels: prometheus.Labels{"profile": profile},
	})
	info.Set(1)
	// The result label is pre-set so both series exist from the start.
	m.CacheInvalidations.WithLabelValues("ok")
	m.CacheInvalidations.WithLabelValues("error")
	reg.MustRegister(
		m.HTTPRequests, m.HTTPDuration, m.CacheInvalidations, m.InvalidationRetries,
		m.ComputeRejected, m.ComputeDuration, m.ComputeSlotsInUse, m.UncertainWritesTotal, info,
		m.SimplifyDuration, m.SimplifyPoints, m.SimplifyRejected,
		m.Outbox.settled, m.Outbox.delay, m.Outbox.failures, m.Outbox.waiting,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newPoolCollector(poolStat),
	)
	return m
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

func histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}

// ObserveInvalidation is the cache.Invalidator's hook.
func (m *Metrics) ObserveInvalidation(result string, retries int) {
	m.CacheInvalidations.WithLabelValues(result).Inc()
	m.InvalidationRetries.Add(float64(retries))
}

// poolCollector reads pgxpool.Stat at scrape time.
type poolCollector struct {
	stat                                       func() *pgxpool.Stat
	total, acquired, idle, maxConns, construct *prometheus.Desc
	acquires, emptyAcquires, canceledAcquires  *prometheus.Desc
	acquireSeconds, emptyWaitSeconds, newConns *prometheus.Desc
}

func newPoolCollector(stat func() *pgxpool.Stat) *poolCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("aside_core_db_pool_"+name, help, nil, nil)
	}
	return &poolCollector{
		stat:             stat,
		total:            d("total_conns", "Connections in the pool (idle, acquired and being built)."),
		acquired:         d("acquired_conns", "Connections in use by a request."),
		idle:             d("idle_conns", "Idle connections."),
		maxConns:         d("max_conns", "The pool's size limit (CORE_DB_POOL_MAX)."),
		construct:        d("constructing_conns", "Connections being opened."),
		acquires:         d("acquires_total", "Successful connection acquires."),
		emptyAcquires:    d("empty_acquires_total", "Acquires that had to wait or open a connection."),
		canceledAcquires: d("canceled_acquires_total", "Acquires given up (deadline or cancel)."),
		acquireSeconds:   d("acquire_duration_seconds_total", "Total time spent acquiring connections."),
		emptyWaitSeconds: d("empty_acquire_wait_seconds_total", "Total time acquires waited for a free connection."),
		newConns:         d("new_conns_total", "Connections opened."),
	}
}

func (p *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{p.total, p.acquired, p.idle, p.maxConns, p.construct,
		p.acquires, p.emptyAcquires, p.canceledAcquires, p.acquireSeconds, p.emptyWaitSeconds, p.newConns} {
		ch <- d
	}
}

func (p *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := p.stat()
	if s == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(p.total, float64(s.TotalConns()))
	gauge(p.acquired, float64(s.AcquiredConns()))
	gauge(p.idle, float64(s.IdleConns()))
	gauge(p.maxConns, float64(s.MaxConns()))
	gauge(p.construct, float64(s.ConstructingConns()))
	counter(p.acquires, float64(s.AcquireCount()))
	counter(p.emptyAcquires, float64(s.EmptyAcquireCount()))
	counter(p.canceledAcquires, float64(s.CanceledAcquireCount()))
	counter(p.acquireSeconds, s.AcquireDuration().Seconds())
	counter(p.emptyWaitSeconds, s.EmptyAcquireWaitTime().Seconds())
	counter(p.newConns, float64(s.NewConnsCount()))
}
