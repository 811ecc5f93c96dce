// Package config is the one place where aside-core reads its environment.
// Every variable has a default (see README.md); a malformed value is rejected
// with a one-line error that names the variable.
//
// Its reader has the load driver's shape (bench/driver/internal/config) by
// design, not by copy: the two binaries are separate Go modules whose images
// are built each from its own folder, so neither can import the other, and
// each reader keeps its own rules (here a lab default for every variable,
// there variables a step must give).
package config

import (
	"fmt"
	"net"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// Profile says whether lab-only switches may be on.
type Profile string

const (
	ProfileLab        Profile = "lab"
	ProfileProduction Profile = "production"
)

// Defaults of the native dev stack (infra/env.sh).
const (
	DefaultDatabaseURL = "postgresql://aside@127.0.0.1:25432/aside"
	DefaultRedisURL    = "redis://127.0.0.1:26379/0"
	DefaultListenAddr  = "127.0.0.1:28080"
	// DefaultProductionMetricsAddr keeps /metrics off the public listener
	// in production: loopback only, for a local Prometheus or agent.
	DefaultProductionMetricsAddr = "127.0.0.1:28089"
	// DefaultIdempotencyTTL is what a client may count on for a retry
	// (contracts/idempotency.json); the purge runs every
	// DefaultIdempotencyPurgeInterval.
	DefaultIdempotencyTTL           = 24 * time.Hour
	DefaultIdempotencyPurgeInterval = time.Minute
)

// The values of REDIS_MODE.
const (
	RedisStandalone = "standalone"
	RedisCluster    = "cluster"
	RedisSentinel   = "sentinel"
)

// Config is everything aside-core reads from its environment.
type Config struct {
	Profile    Profile
	ListenAddr string
	// MetricsAddr, when set, serves /metrics on a listener of its own and
	// the public one answers /metrics 404. Empty: /metrics is public (lab).
	MetricsAddr string

	DatabaseURL         string
	DBPoolMax           int32
	DBConnectTimeout    time.Duration
	DBTimeout           time.Duration
	DBHealthCheckPeriod time.Duration

	RedisURL string
	// RedisMode says what RedisURL names (REDIS_MODE): standalone, a
	// cluster's seed node, or a Sentinel; RedisSentinelMaster is the
	// master's name for the last.
	RedisMode           string
	RedisSentinelMaster string
	RedisTimeout        time.Duration
	RedisPoolSize       int

	// InvalidationDeadline bounds all tries of one cache invalidation.
	InvalidationDeadline time.Duration

	ComputeMaxConcurrency int
	ComputeQueueWait      time.Duration
	// SimplifyMaxConcurrency bounds track simplifications (Douglas-Peucker)
	// apart from /compute's slots, so neither queues the other; a request
	// waits at most SimplifyQueueWait for one, then is answered 503.
	SimplifyMaxConcurrency int
	SimplifyQueueWait      time.Duration

	ShutdownTimeout time.Duration

	// IdempotencyTTL is how long an Idempotency-Key is remembered: an older
	// key counts as absent and the purge deletes it.
	IdempotencyTTL time.Duration
	// IdempotencyPurgeInterval is the time between two purge cycles.
	IdempotencyPurgeInterval time.Duration

	// CoreToken, when set, is the credential every write and compute
	// request must carry (Authorization: Bearer). Required in production.
	// A secret: no error message shows it.
	CoreToken string

	// TestHooks (lab only) lets a write carry X-Test-Delay-Ms, which holds
	// its answer after the write is done: how the tests make the gateway
	// time out on a write that was applied.
	TestHooks bool
}

// Error is a configuration error: one line naming the variable.
type Error struct {
	Name   string
	Reason string
}

func (e *Error) Error() string { return e.Name + ": " + e.Reason }

// Load reads and validates the configuration. getenv is os.Getenv in
// production; tests pass a map lookup. An empty value counts as unset.
func Load(getenv func(string) string) (Config, error) {
	r := reader{getenv: getenv}
	cfg := Config{}

	// Unset means production, as in the gateway: forgetting the variable
	// must not open the lab's unauthenticated writes.
	switch p := r.str("ASIDE_PROFILE", string(ProfileProduction)); Profile(p) {
	case ProfileLab, ProfileProduction:
		cfg.Profile = Profile(p)
	default:
		r.fail("ASIDE_PROFILE", fmt.Sprintf("must be lab or production, got %q", p))
	}

	cfg.ListenAddr = r.str("CORE_LISTEN_ADDR", DefaultListenAddr)
	if _, port, err := net.SplitHostPort(cfg.ListenAddr); err != nil || !validPort(port) {
		r.fail("CORE_LISTEN_ADDR", fmt.Sprintf("must be host:port, e.g. %s, got %q", DefaultListenAddr, cfg.ListenAddr))
	}

	metricsDefault := ""
	if cfg.Profile == ProfileProduction {
		metricsDefault = DefaultProductionMetricsAddr
	}
	cfg.MetricsAddr = r.str("CORE_METRICS_ADDR", metricsDefault)
	if cfg.MetricsAddr != "" {
		if _, port, err := net.SplitHostPort(cfg.MetricsAddr); err != nil || !validPort(port) {
			r.fail("CORE_METRICS_ADDR", fmt.Sprintf("must be host:port, e.g. %s, got %q", DefaultProductionMetricsAddr, cfg.MetricsAddr))
		} else if cfg.MetricsAddr == cfg.ListenAddr && port != "0" {
			r.fail("CORE_METRICS_ADDR", "must differ from CORE_LISTEN_ADDR")
		}
	}

	// In production a silent fallback to the lab's URLs would hide a
	// misconfiguration, so the two URLs must be given there.
	cfg.DatabaseURL = r.required("DATABASE_URL", DefaultDatabaseURL, cfg.Profile)
	if _, err := pgxpool.ParseConfig(cfg.DatabaseURL); err != nil || !looksLikePostgresURL(cfg.DatabaseURL) {
		r.fail("DATABASE_URL", "must be a PostgreSQL URL like "+DefaultDatabaseURL)
	}
	cfg.RedisURL = r.required("REDIS_URL", DefaultRedisURL, cfg.Profile)
	redisOpts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		r.fail("REDIS_URL", "must be a Redis URL like "+DefaultRedisURL+": "+oneLine(err.Error()))
	}
	cfg.RedisMode = r.str("REDIS_MODE", RedisStandalone)
	switch cfg.RedisMode {
	case RedisStandalone:
	case RedisCluster:
		if redisOpts != nil && redisOpts.DB != 0 {
			r.fail("REDIS_URL", "must name database 0 when REDIS_MODE=cluster (a cluster has no other)")
		}
	case RedisSentinel:
	default:
		r.fail("REDIS_MODE", fmt.Sprintf("must be standalone, cluster or sentinel, got %q", cfg.RedisMode))
	}
	cfg.RedisSentinelMaster = r.str("REDIS_SENTINEL_MASTER", "")
	if cfg.RedisMode == RedisSentinel && cfg.RedisSentinelMaster == "" {
		r.fail("REDIS_SENTINEL_MASTER", "is required when REDIS_MODE=sentinel (the master's name)")
	}

	cfg.DBPoolMax = int32(r.intRange("CORE_DB_POOL_MAX", 16, 1, 1000))
	cfg.DBConnectTimeout = r.millis("CORE_DB_CONNECT_TIMEOUT_MS", 1000, 10, 60_000)
	cfg.DBTimeout = r.millis("CORE_DB_TIMEOUT_MS", 2000, 10, 600_000)
	cfg.DBHealthCheckPeriod = r.duration("CORE_DB_HEALTH_CHECK_PERIOD", 15*time.Second, time.Second, time.Hour)
	cfg.RedisTimeout = r.millis("CORE_REDIS_TIMEOUT_MS", 200, 1, 60_000)
	cfg.RedisPoolSize = r.intRange("CORE_REDIS_POOL_SIZE", 16, 1, 10_000)
	cfg.InvalidationDeadline = r.millis("CORE_INVALIDATION_DEADLINE_MS", 300, 1, 60_000)
	cfg.ComputeMaxConcurrency = r.intRange("CORE_COMPUTE_MAX_CONCURRENCY", runtime.GOMAXPROCS(0), 1, 10_000)
	cfg.ComputeQueueWait = r.millis("CORE_COMPUTE_QUEUE_WAIT_MS", 1000, 0, 60_000)
	cfg.SimplifyMaxConcurrency = r.intRange("CORE_SIMPLIFY_MAX_CONCURRENCY", 1, 1, 10_000)
	cfg.SimplifyQueueWait = r.millis("CORE_SIMPLIFY_QUEUE_WAIT_MS", 100, 0, 60_000)
	cfg.ShutdownTimeout = r.duration("CORE_SHUTDOWN_TIMEOUT", 10*time.Second, 0, time.Hour)
	cfg.IdempotencyTTL = r.duration("CORE_IDEMPOTENCY_TTL", DefaultIdempotencyTTL, time.Second, 30*24*time.Hour)
	cfg.IdempotencyPurgeInterval = r.duration("CORE_IDEMPOTENCY_PURGE_INTERVAL", DefaultIdempotencyPurgeInterval,
		time.Second, 24*time.Hour)
	cfg.CoreToken = r.token("CORE_TOKEN", cfg.Profile)
	cfg.TestHooks = r.flag("ASIDE_TEST_HOOKS")
	if cfg.TestHooks && cfg.Profile != ProfileLab {
		r.fail("ASIDE_TEST_HOOKS", "1 is refused unless ASIDE_PROFILE=lab")
	}

	if r.err != nil {
		return Config{}, r.err
	}
	return cfg, nil
}

// reader keeps the first error so Load reads like a list of variables.
type reader struct {
	getenv func(string) string
	err    error
}

func (r *reader) fail(name, reason string) {
	if r.err == nil {
		r.err = &Error{Name: name, Reason: reason}
	}
}

func (r *reader) str(name, def string) string {
	if v := strings.TrimSpace(r.getenv(name)); v != "" {
		return v
	}
	return def
}

func (r *reader) required(name, labDefault string, profile Profile) string {
	v := strings.TrimSpace(r.getenv(name))
	if v != "" {
		return v
	}
	if profile == ProfileProduction {
		r.fail(name, "must be set when ASIDE_PROFILE=production")
	}
	return labDefault
}

// token reads a bearer token: required in production, checked whenever set.
// Visible ASCII only, so it travels unchanged in a header.
func (r *reader) token(name string, profile Profile) string {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		if profile == ProfileProduction {
			r.fail(name, "must be set when ASIDE_PROFILE=production")
		}
		return ""
	}
	if !validToken(v) {
		r.fail(name, "must be 16 to 512 visible ASCII characters (no spaces); value not shown")
		return ""
	}
	return v
}

func validToken(s string) bool {
	if len(s) < 16 || len(s) > 512 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func (r *reader) intRange(name string, def, lo, hi int) int {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		r.fail(name, fmt.Sprintf("must be an integer from %d to %d, got %q", lo, hi, v))
		return def
	}
	return n
}

// flag reads 0 or 1 (unset: 0).
func (r *reader) flag(name string) bool {
	switch v := strings.TrimSpace(r.getenv(name)); v {
	case "", "0":
		return false
	case "1":
		return true
	default:
		r.fail(name, fmt.Sprintf("must be 0 or 1, got %q", v))
		return false
	}
}

func (r *reader) millis(name string, def, lo, hi int) time.Duration {
	return time.Duration(r.intRange(name, def, lo, hi)) * time.Millisecond
}

// duration accepts a Go duration ("10s", "1m30s") or a plain number of seconds.
func (r *reader) duration(name string, def, lo, hi time.Duration) time.Duration {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		secs, nerr := strconv.ParseFloat(v, 64)
		if nerr != nil {
			r.fail(name, fmt.Sprintf("must be a duration like 10s or a number of seconds, got %q", v))
			return def
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d < lo || d > hi {
		r.fail(name, fmt.Sprintf("must be from %s to %s, got %q", lo, hi, v))
		return def
	}
	return d
}

func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && n <= 65535
}

// looksLikePostgresURL rejects what pgx would also take as a keyword/value
// string ("host=... dbname=..."): the lab and compose files always use URLs,
// and a typo like "localhost:5432" should not silently mean something else.
func looksLikePostgresURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql")
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
