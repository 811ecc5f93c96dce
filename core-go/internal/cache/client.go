package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// Mode says what REDIS_URL names: one server, a seed node of a Redis
// Cluster, or a Sentinel that knows the master (REDIS_MODE).
type Mode string

const (
	ModeStandalone Mode = "standalone"
	ModeCluster    Mode = "cluster"
	ModeSentinel   Mode = "sentinel"
)

// ClientOptions are the Redis client settings from the configuration.
type ClientOptions struct {
	// Mode is standalone when empty.
	Mode Mode
	// SentinelMaster is the master's name (REDIS_SENTINEL_MASTER) in sentinel mode.
	SentinelMaster string
	// Timeout bounds dialing, each read and write, and waiting for a pooled connection.
	Timeout  time.Duration
	PoolSize int
	// ReadTimeout, when set, replaces Timeout for reads: a client that
	// waits for a long script (FlushAll).
	ReadTimeout time.Duration
}

// NewClient builds the core's Redis client for the mode: the one place a
// client is made. It connects lazily. Retries are off: the invalidator
// retries on its own, within its deadline. In cluster mode PoolSize and the
// timeouts apply to each node's pool; MOVED and ASK redirects are followed.
// In sentinel mode REDIS_URL names a Sentinel (asked without a password);
// the URL's credentials and database are the master's.
func NewClient(redisURL string, o ClientOptions) (redis.UniversalClient, error) {
	parsed, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, errors.New("REDIS_URL: not a valid Redis URL")
	}
	opts := universalOptions(parsed, o)
	switch o.Mode {
	case ModeCluster:
		if parsed.DB != 0 {
			return nil, errors.New("REDIS_URL: a Redis Cluster has only database 0")
		}
		return redis.NewClusterClient(opts.Cluster()), nil
	case ModeSentinel:
		if o.SentinelMaster == "" {
			return nil, errors.New("REDIS_SENTINEL_MASTER: required when REDIS_MODE=sentinel")
		}
		opts.MasterName = o.SentinelMaster
		return redis.NewFailoverClient(opts.Failover()), nil
	case ModeStandalone, "":
		return redis.NewClient(opts.Simple()), nil
	default:
		return nil, fmt.Errorf("REDIS_MODE: must be standalone, cluster or sentinel, got %q", o.Mode)
	}
}

// universalOptions are the settings every mode shares: the URL's address,
// credentials and database, and the core's bounds, each set here once.
func universalOptions(url *redis.Options, o ClientOptions) *redis.UniversalOptions {
	read := o.Timeout
	if o.ReadTimeout > 0 {
		read = o.ReadTimeout
	}
	return &redis.UniversalOptions{
		Addrs: []string{url.Addr}, ClientName: url.ClientName, Protocol: url.Protocol,
		Username: url.Username, Password: url.Password, DB: url.DB, TLSConfig: url.TLSConfig,
		DialTimeout: o.Timeout, ReadTimeout: read, WriteTimeout: o.Timeout, PoolTimeout: o.Timeout,
		PoolSize:   o.PoolSize,
		MaxRetries: -1,
		// One dial per command: go-redis would otherwise redial five times with
		// backoff, which alone outlasts the invalidation deadline.
		DialerRetries:         1,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
	}
}

// slogPrinter sends go-redis's own log lines (dial failures and the like)
// to the core's structured log instead of a bare stderr.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Printf(_ context.Context, format string, v ...any) {
	p.log.Warn(fmt.Sprintf(format, v...), "component", "go-redis")
}

// LogTo routes go-redis's log output to log. go-redis keeps one global
// logger, so call it once, at startup.
func LogTo(log *slog.Logger) { redis.SetLogger(slogPrinter{log: log}) }
