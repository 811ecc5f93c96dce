package cache_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aside-lab/aside/core-go/internal/cache"
	"github.com/aside-lab/aside/core-go/internal/cachetest"
	"github.com/aside-lab/aside/core-go/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

type observed struct {
	results []string
	retries int
}

func (o *observed) observe(result string, retries int) {
	o.results = append(o.results, result)
	o.retries += retries
}

func setAll(t *testing.T, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if err := env.Redis.Set(context.Background(), k, "x", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func existing(t *testing.T, keys ...string) []string {
	t.Helper()
	var out []string
	for _, k := range keys {
		n, err := env.Redis.Exists(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			out = append(out, k)
		}
	}
	return out
}

func newClient(t *testing.T, url string) redis.UniversalClient {
	t.Helper()
	rdb, err := cache.NewClient(url, cache.ClientOptions{Timeout: 200 * time.Millisecond, PoolSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func TestInvalidateDeletesKeysAndLeasesOnly(t *testing.T) {
	env.Reset(t)
	stale := []string{cache.CountKey("old@example.com"), cache.UserKey(11)}
	others := []string{cache.CountKey("other@example.com"), cache.LeaseKey(cache.CountKey("other@example.com")), cache.UserKey(12)}
	setAll(t, cache.WithLeases(stale)...)
	setAll(t, others...)

	var o observed
	inv := cache.NewInvalidator(newClient(t, env.RedisURL), 300*time.Millisecond, o.observe)
	if err := inv.Invalidate(context.Background(), stale); err != nil {
		t.Fatalf("Invalidate: %v", err)
	}
	if left := existing(t, cache.WithLeases(stale)...); len(left) != 0 {
		t.Fatalf("still there: %q", left)
	}
	if kept := existing(t, others...); len(kept) != len(others) {
		t.Fatalf("unrelated keys removed: kept only %q", kept)
	}
	if strings.Join(o.results, ",") != cache.ResultOK || o.retries != 0 {
		t.Fatalf("observed %v retries %d", o.results, o.retries)
	}
}

func TestInvalidateFailsWithinDeadlineWhenRedisIsDown(t *testing.T) {
	var o observed
	deadline := 300 * time.Millisecond
	inv := cache.NewInvalidator(newClient(t, "redis://"+testenv.ClosedAddr(t)+"/2"), deadline, o.observe)
	start := time.Now()
	err := inv.Invalidate(context.Background(), []string{cache.UserKey(1)})
	elapsed := time.Since(start)
	if err == nil {
		t.Fatal("Invalidate against a closed port succeeded")
	}
	if elapsed > deadline+200*time.Millisecond {
		t.Fatalf("took %s, deadline %s", elapsed, deadline)
	}
	if strings.Join(o.results, ",") != cache.ResultError || o.retries != cache.InvalidationTries-1 {
		t.Fatalf("observed %v with %d retries, want one error after %d retries", o.results, o.retries, cache.InvalidationTries-1)
	}
}

func TestLeaseProtocol(t *testing.T) {
	env.Reset(t)
	ctx := context.Background()
	rdb := newClient(t, env.RedisURL)
	key := cache.CountKey("lease@example.com")

	token, ok, err := cachetest.TakeLease(ctx, rdb, key, 5*time.Second)
	if err != nil || !ok || token == "" {
		t.Fatalf("first TakeLease: %q %v %v", token, ok, err)
	}
	if _, ok2, err := cachetest.TakeLease(ctx, rdb, key, 5*time.Second); err != nil || ok2 {
		t.Fatalf("second TakeLease while held: ok=%v err=%v", ok2, err)
	}
	if stored, err := cachetest.FillIfLeaseHeld(ctx, rdb, key, "not-my-token", "1", time.Minute); err != nil || stored {
		t.Fatalf("fill with a wrong token: stored=%v err=%v", stored, err)
	}
	if stored, err := cachetest.FillIfLeaseHeld(ctx, rdb, key, token, "7", time.Minute); err != nil || !stored {
		t.Fatalf("fill with the lease: stored=%v err=%v", stored, err)
	}
	if v, _ := rdb.Get(ctx, key).Result(); v != "7" {
		t.Fatalf("value %q, want 7", v)
	}
	if ttl := rdb.TTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("ttl %s", ttl)
	}
	if existing(t, cache.LeaseKey(key)) != nil {
		t.Fatal("lease left behind after the fill")
	}
}

// The race the lease closes: a reader read the old value, a writer
// committed and invalidated, then the reader tries to store.
func TestInvalidationBeatsAStaleFill(t *testing.T) {
	env.Reset(t)
	ctx := context.Background()
	rdb := newClient(t, env.RedisURL)
	key := cache.CountKey("race@example.com")

	token, ok, err := cachetest.TakeLease(ctx, rdb, key, 5*time.Second)
	if err != nil || !ok {
		t.Fatalf("TakeLease: %v %v", ok, err)
	}
	inv := cache.NewInvalidator(rdb, 300*time.Millisecond, nil)
	if err := inv.Invalidate(ctx, []string{key}); err != nil {
		t.Fatal(err)
	}
	stored, err := cachetest.FillIfLeaseHeld(ctx, rdb, key, token, "stale", time.Minute)
	if err != nil || stored {
		t.Fatalf("stale fill after invalidation: stored=%v err=%v", stored, err)
	}
	if _, err := rdb.Get(ctx, key).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("key present after a refused fill: %v", err)
	}
}
