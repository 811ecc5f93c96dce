package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClientOptions are the Redis client settings from the configuration.
type ClientOptions struct {
	// Timeout bounds dialing, each read and write, and waiting for a pooled connection.
	Timeout  time.Duration
	PoolSize int
	// ReadTimeout, when set, replaces Timeout for reads: a client that
	// waits for a long script (FlushAll).
	ReadTimeout time.Duration
}

// NewClient builds a pooled Redis client; it connects lazily. Retries are
// off: the invalidator retries on its own, within its deadline.
func NewClient(redisURL string, o ClientOptions) (*redis.Client, error) {
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, errors.New("REDIS_URL: not a valid Redis URL")
	}
	opts.DialTimeout = o.Timeout
	opts.ReadTimeout = o.Timeout
	if o.ReadTimeout > 0 {
		opts.ReadTimeout = o.ReadTimeout
	}
	opts.WriteTimeout = o.Timeout
	opts.PoolTimeout = o.Timeout
	opts.PoolSize = o.PoolSize
	opts.MaxRetries = -1
	// One dial per command: go-redis would otherwise redial five times with
	// backoff, which alone outlasts the invalidation deadline.
	opts.DialerRetries = 1
	opts.ContextTimeoutEnabled = true
	opts.DisableIdentity = true
	return redis.NewClient(opts), nil
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
