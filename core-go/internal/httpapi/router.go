// Package httpapi is aside-core's HTTP interface: gin handlers built from
// their dependencies, JSON errors (contracts/errors.json), request metrics.
package httpapi

import (
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/aside-lab/aside/core-go/internal/compute"
	"github.com/aside-lab/aside/core-go/internal/metrics"
)

// Deps are everything the router's handlers use.
type Deps struct {
	Users       UserWriter
	Tracks      TrackReader
	Invalidator Invalidator
	Outbox      Outbox
	Limiter     *compute.Limiter
	// SimplifyLimiter bounds track simplifications apart from Limiter's
	// /compute: anonymous track misses never queue token-gated compute.
	SimplifyLimiter *compute.Limiter
	Metrics         *metrics.Metrics
	Ready           []Check
	Log             *slog.Logger
	// SeparateMetrics: /metrics is served on a listener of its own
	// (MetricsHandler), so this router answers it 404 like any unknown path.
	SeparateMetrics bool
	// CoreToken, when not empty, is the bearer token every /api/v1 request
	// (writes and compute) must carry; health and metrics stay open.
	CoreToken string
	// TestHooks (lab only) honours X-Test-Delay-Ms on /api/v1 (testhooks.go).
	TestHooks bool
}

func init() {
	// Release mode: no debug banner, no per-route log lines.
	gin.SetMode(gin.ReleaseMode)
}

// NewRouter wires every route.
func NewRouter(d Deps) *gin.Engine {
	r := gin.New()
	r.HandleMethodNotAllowed = true
	// A redirect would turn a typo into a different request; answer 404 instead.
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.Use(observeRequests(d.Metrics.HTTPRequests, d.Metrics.HTTPDuration), recoverJSON(d.Log))
	r.NoRoute(handle(d.Log, notFound))
	r.NoMethod(handle(d.Log, methodNotAllowed))

	r.GET("/healthz", handle(d.Log, healthz))
	r.GET("/readyz", handle(d.Log, readyz(d.Ready)))
	if !d.SeparateMetrics {
		r.GET("/metrics", gin.WrapH(MetricsHandler(d.Metrics)))
	}

	writes := writeDeps{users: d.Users, invalidator: d.Invalidator, outbox: d.Outbox, log: d.Log,
		uncertain: d.Metrics.UncertainWritesTotal.Inc}
	api := r.Group("/api/v1", requireToken(d.CoreToken))
	if d.TestHooks {
		api.Use(holdAnswers())
	}
	api.POST("/users", handle(d.Log, createUser(writes)))
	api.PATCH("/users/:id", handle(d.Log, updateUser(writes)))
	api.DELETE("/users/:id", handle(d.Log, deleteUser(writes)))
	// An empty id is an invalid id (validation.json), not an unknown route.
	api.PATCH("/users/", handle(d.Log, updateUser(writes)))
	api.DELETE("/users/", handle(d.Log, deleteUser(writes)))
	api.POST("/compute", handle(d.Log, computeWork(computeDeps{limiter: d.Limiter,
		rejected: d.Metrics.ComputeRejected, duration: d.Metrics.ComputeDuration})))
	// Called by the gateway only (on a miss of ?simplify=), behind the same token.
	internal := r.Group("/internal/v1", requireToken(d.CoreToken))
	internal.GET("/tracks/:id/simplified", handle(d.Log, simplifyTrack(trackDeps{tracks: d.Tracks,
		limiter: d.SimplifyLimiter, rejected: d.Metrics.SimplifyRejected, duration: d.Metrics.SimplifyDuration,
		points: d.Metrics.SimplifyPoints})))
	return r
}

// MetricsHandler serves the Prometheus exposition of m at /metrics and
// nothing else (for the separate metrics listener).
func MetricsHandler(m *metrics.Metrics) http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// MetricsMux is the separate metrics listener's handler: /metrics, else 404.
func MetricsMux(m *metrics.Metrics) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", MetricsHandler(m))
	return mux
}
