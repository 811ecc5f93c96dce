package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aside-lab/aside/core-go/internal/cache"
	"github.com/aside-lab/aside/core-go/internal/compute"
	"github.com/aside-lab/aside/core-go/internal/config"
	"github.com/aside-lab/aside/core-go/internal/httpapi"
	"github.com/aside-lab/aside/core-go/internal/metrics"
	"github.com/aside-lab/aside/core-go/internal/outbox"
	"github.com/aside-lab/aside/core-go/internal/store"
)

const usage = `usage:
  aside-core                    serve the API (configuration from the environment; see README.md)
  aside-core healthcheck URL    exit 0 if URL answers 200 within 2 s (container health checks)
`

// HTTP server limits. WriteTimeout leaves room for the largest compute on a
// busy machine; CORE_SHUTDOWN_TIMEOUT bounds the drain on exit.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 15 * time.Second
	writeTimeout      = 60 * time.Second
	idleTimeout       = 120 * time.Second
)

// Expired idempotency keys are deleted every CORE_IDEMPOTENCY_PURGE_INTERVAL,
// in rounds of at most 1000 (a small statement that never holds many locks),
// 50 ms apart, until a round finds less than a full batch: the purge keeps up
// with any create rate the database itself can sustain.
func keyPurge(cfg config.Config) store.PurgeOptions {
	return store.PurgeOptions{Interval: cfg.IdempotencyPurgeInterval, Batch: 1000, Pause: 50 * time.Millisecond}
}

// run is the whole program, callable from tests: args as os.Args, getenv
// as os.Getenv, logs to stdout. It returns when ctx ends and the server has
// drained, or on a configuration or listen error.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) > 1 {
		switch args[1] {
		case "healthcheck":
			if len(args) != 3 {
				return errors.New("usage: aside-core healthcheck URL")
			}
			return healthcheck(ctx, args[2])
		case "-h", "-help", "--help", "help":
			_, err := io.WriteString(stdout, usage)
			return err
		default:
			return fmt.Errorf("unknown argument %q (try --help)", args[1])
		}
	}
	cfg, err := config.Load(getenv)
	if err != nil {
		return err
	}
	return serve(ctx, cfg, slog.New(slog.NewTextHandler(stdout, nil)))
}

func serve(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	pool, err := store.NewPool(ctx, cfg.DatabaseURL, store.PoolOptions{
		MaxConns: cfg.DBPoolMax, ConnectTimeout: cfg.DBConnectTimeout, HealthCheckPeriod: cfg.DBHealthCheckPeriod,
		StatementTimeout: cfg.DBTimeout,
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	cache.LogTo(log)
	redisOpts := cache.ClientOptions{
		Mode: cache.Mode(cfg.RedisMode), SentinelMaster: cfg.RedisSentinelMaster,
		Timeout: cfg.RedisTimeout, PoolSize: cfg.RedisPoolSize,
	}
	rdb, err := cache.NewClient(cfg.RedisURL, redisOpts)
	if err != nil {
		return err
	}
	defer rdb.Close()

	users := store.New(pool, cfg.DBTimeout, store.WithIdempotencyTTL(cfg.IdempotencyTTL))
	limiter := compute.NewLimiter(cfg.ComputeMaxConcurrency, cfg.ComputeQueueWait)
	m := metrics.New(string(cfg.Profile), pool.Stat, limiter.InUse)
	relay := outbox.New(users, func(readTimeout time.Duration) redis.UniversalClient {
		o := redisOpts
		o.ReadTimeout, o.PoolSize = readTimeout, 1
		client, _ := cache.NewClient(cfg.RedisURL, o)
		return client // the URL and mode checked above
	}, outbox.DefaultOptions(cfg.InvalidationDeadline), m.Outbox)
	router := httpapi.NewRouter(httpapi.Deps{
		Users:           users,
		Tracks:          users,
		Invalidator:     cache.NewInvalidator(rdb, cfg.InvalidationDeadline, m.ObserveInvalidation),
		Outbox:          relay,
		Limiter:         limiter,
		SimplifyLimiter: compute.NewLimiter(cfg.SimplifyMaxConcurrency, cfg.SimplifyQueueWait),
		Metrics:         m,
		Ready: []httpapi.Check{
			{Name: "postgres", Ping: users.Ping},
			{Name: "redis", Ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }},
		},
		Log:             log,
		SeparateMetrics: cfg.MetricsAddr != "",
		CoreToken:       cfg.CoreToken,
		TestHooks:       cfg.TestHooks,
	})

	metricsSrv, err := serveMetrics(cfg.MetricsAddr, m, log)
	if err != nil {
		return err
	}
	if metricsSrv != nil {
		defer metricsSrv.Close()
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("CORE_LISTEN_ADDR: cannot listen on %s: %w", cfg.ListenAddr, err)
	}
	// Expired idempotency keys are ignored anyway; purging keeps the table small.
	purgeCtx, stopPurge := context.WithCancel(ctx)
	defer stopPurge()
	go users.PurgeExpiredKeysEvery(purgeCtx, keyPurge(cfg), func(err error) {
		log.Warn("purging expired idempotency keys failed", "err", err)
	})
	// The relay outlives the drain (it stops when serve returns): writes
	// answered while draining still hand it their rows.
	relayCtx, stopRelay := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRelay()
	go relay.Run(relayCtx)
	srv := &http.Server{
		Handler:           router,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("aside-core listening", "addr", ln.Addr().String(), "profile", cfg.Profile,
		"db_pool_max", cfg.DBPoolMax, "compute_max_concurrency", cfg.ComputeMaxConcurrency,
		"core_token", cfg.CoreToken != "", "test_hooks", cfg.TestHooks,
		"idempotency_ttl", cfg.IdempotencyTTL.String(), "idempotency_purge_interval", cfg.IdempotencyPurgeInterval.String(),
		"write_worst_case", writeWorstCase(cfg).String())

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("server stopped: %w", err)
	case <-ctx.Done():
	}

	// Shutdown closes the listener at once (new connections are refused)
	// and waits for in-flight requests, up to CORE_SHUTDOWN_TIMEOUT.
	log.Info("shutting down: draining in-flight requests", "timeout", cfg.ShutdownTimeout.String())
	drainCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(drainCtx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("in-flight requests did not finish within CORE_SHUTDOWN_TIMEOUT (%s)", cfg.ShutdownTimeout)
	}
	log.Info("stopped")
	return nil
}

// writeWorstCase is the longest the core takes over a write once it has the
// request: the gateway's CORE_TIMEOUT_MS must be longer (contracts/timeouts.json).
func writeWorstCase(cfg config.Config) time.Duration {
	return store.WriteBound(cfg.DBTimeout) + cfg.InvalidationDeadline
}

// serveMetrics starts the separate /metrics listener when addr is set
// (production: metrics stay off the public port).
func serveMetrics(addr string, m *metrics.Metrics, log *slog.Logger) (*http.Server, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("CORE_METRICS_ADDR: cannot listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           httpapi.MetricsMux(m),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("aside-core metrics listening", "addr", ln.Addr().String())
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener stopped", "err", err)
		}
	}()
	return srv, nil
}

// healthcheck is for images without curl: GET url, succeed on 200.
func healthcheck(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %d", url, resp.StatusCode)
	}
	return nil
}
