package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aside-lab/aside/core-go/internal/cache"
	"github.com/aside-lab/aside/core-go/internal/cachetest"
	"github.com/aside-lab/aside/core-go/internal/testenv"
)

// settleBound is how soon after Redis answers the core again a stale entry
// left by a failed invalidation must be gone: the relay's retry pace (100 ms)
// plus a dial and a DEL, with room for a busy 2-core machine.
const settleBound = time.Second

// The failed-invalidation window, played deterministically: a reader misses
// and takes the lease, reads the count, the core's path to Redis is cut, a
// write commits and its DEL fails, the reader stores its old read (its lease
// survived), and the count is stale. Once the path is back, the outbox must
// remove the stale entry and its lease within settleBound, not at the TTL.
func TestFailedInvalidationIsSettledSoonAfterRedisAnswers(t *testing.T) {
	env.Reset(t)
	ctx := context.Background()
	opts, err := redis.ParseURL(env.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.StartProxy(t, opts.Addr)
	core := startCore(t, "REDIS_URL="+testenv.Via(env.RedisURL, proxy.Addr))

	const email = "outbox@example.com"
	if status, _ := postUser(t, core, "first", email); status != http.StatusCreated {
		t.Fatalf("first create: %d", status)
	}
	key := cache.CountKey(email)
	token, took, err := cachetest.TakeLease(ctx, env.Redis, key, cache.LeaseTTLMillis*time.Millisecond)
	if err != nil || !took {
		t.Fatalf("reader could not take the lease: %v", err)
	}
	oldCount := countByEmail(t, email)

	proxy.Cut()
	status, header := postUser(t, core, "second", email)
	if status != http.StatusCreated || header.Get("X-Cache-Invalidation") != "failed" {
		t.Fatalf("create with Redis cut off: %d, X-Cache-Invalidation %q", status, header.Get("X-Cache-Invalidation"))
	}
	stored, err := cachetest.FillIfLeaseHeld(ctx, env.Redis, key, token, oldCount, time.Minute)
	if err != nil || !stored {
		t.Fatalf("the reader's store should land (its lease survived the failed DEL): %v %v", stored, err)
	}
	if got := countByEmail(t, email); got == oldCount {
		t.Fatalf("PostgreSQL still counts %s", got)
	}
	// The relay keeps trying while the path is cut, and the entry stays stale.
	failures := func() float64 {
		v, err := metricValue(core.url("/metrics"), "aside_core_cache_outbox_failures_total")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	pollUntil(t, 5*time.Second, "two failed relay rounds", func() bool { return failures() >= 2 })
	if v, _ := env.Redis.Get(ctx, key).Result(); v != oldCount {
		t.Fatalf("while cut off the entry is %q, want the stale %q", v, oldCount)
	}

	proxy.Resume()
	resumed := time.Now()
	pollUntil(t, settleBound, "the stale count and its lease gone", func() bool {
		n, err := env.Redis.Exists(ctx, key, cache.LeaseKey(key)).Result()
		return err == nil && n == 0
	})
	t.Logf("stale entry gone %s after the core's path to Redis came back", time.Since(resumed).Round(time.Millisecond))
	pollUntil(t, 5*time.Second, "the outbox empty", func() bool {
		var owed int
		err := env.Pool.QueryRow(ctx, "SELECT count(*) FROM cache_invalidations").Scan(&owed)
		return err == nil && owed == 0
	})
}

// A core killed between its commit and its DEL leaves the row behind; the
// next core's relay settles it once it is older than the grace period.
func TestOwedRowOfADeadCoreIsSettledByTheNext(t *testing.T) {
	env.Reset(t)
	ctx := context.Background()
	const email = "orphan@example.com"
	key := cache.CountKey(email)
	if err := env.Redis.Set(ctx, key, "0", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, `
		WITH created AS (INSERT INTO users (username, email) VALUES ('orphan', $1) RETURNING id, email)
		INSERT INTO cache_invalidations (user_id, email_after) SELECT id, email FROM created`, email); err != nil {
		t.Fatal(err)
	}
	startCore(t)
	pollUntil(t, 10*time.Second, "the orphaned row's key gone", func() bool {
		n, err := env.Redis.Exists(ctx, key).Result()
		return err == nil && n == 0
	})
	// The relay DELs inside its transaction, so the key goes before the row's
	// delete commits.
	pollUntil(t, 5*time.Second, "the outbox empty", func() bool {
		var owed int
		err := env.Pool.QueryRow(ctx, "SELECT count(*) FROM cache_invalidations").Scan(&owed)
		return err == nil && owed == 0
	})
}

func postUser(t *testing.T, core *runningCore, username, email string) (int, http.Header) {
	t.Helper()
	body := `{"username":"` + username + `","email":"` + email + `"}`
	resp, err := http.Post(core.url("/api/v1/users"), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, resp.Header
}

func countByEmail(t *testing.T, email string) string {
	t.Helper()
	var n string
	if err := env.Pool.QueryRow(context.Background(), "SELECT count(*)::text FROM users WHERE email = $1", email).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A seeder that died between its swap and its flush left the flush owed;
// a running core's relay runs it: every cached value and lease gone, the
// L1 tiers told, the row deleted.
func TestFlushOwedByADeadSeederIsRunByTheRelay(t *testing.T) {
	env.Reset(t)
	ctx := context.Background()
	core := startCore(t)
	messages := subscribeInvalidations(t, env.RedisURL)
	cached := cache.WithLeases([]string{cache.CountKey("old@example.com"), cache.UserKey(7)})
	for _, k := range append([]string{"aside:test:other"}, cached...) {
		if err := env.Redis.Set(ctx, k, "old", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Pool.Exec(ctx, "INSERT INTO cache_invalidations (kind) VALUES ('flush')"); err != nil {
		t.Fatal(err)
	}
	// Grace (1.6 s by default) plus a relay round, with room for a busy machine.
	pollUntil(t, 10*time.Second, "the old values flushed", func() bool {
		n, err := env.Redis.Exists(ctx, cached...).Result()
		return err == nil && n == 0
	})
	if n, _ := env.Redis.Exists(ctx, "aside:test:other").Result(); n != 1 {
		t.Fatal("a key outside the cache prefix was flushed")
	}
	deadline := time.After(5 * time.Second)
	for flushed := false; !flushed; {
		select {
		case msg := <-messages:
			var m cache.FlushMessage
			flushed = json.Unmarshal([]byte(msg.Payload), &m) == nil && m.Flush
		case <-deadline:
			t.Fatal("no flush message published")
		}
	}
	pollUntil(t, 5*time.Second, "the owed flush settled", func() bool {
		var owed int
		err := env.Pool.QueryRow(ctx, "SELECT count(*) FROM cache_invalidations").Scan(&owed)
		return err == nil && owed == 0
	})
	if v, err := metricValue(core.url("/metrics"), "aside_core_cache_outbox_settled_total"); err != nil || v != 1 {
		t.Fatalf("settled counter %v (%v), want 1", v, err)
	}
}
