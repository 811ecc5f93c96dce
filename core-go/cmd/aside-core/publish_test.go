package main

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aside-lab/aside/core-go/internal/cache"
	"github.com/aside-lab/aside/core-go/internal/testenv"
)

func subscribeInvalidations(t *testing.T, redisURL string) <-chan *redis.Message {
	t.Helper()
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	sub := rdb.Subscribe(context.Background(), cache.InvalidationChannel)
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(context.Background()); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	return sub.Channel()
}

// awaitKeys waits until a publication carrying exactly want arrives.
func awaitKeys(t *testing.T, ch <-chan *redis.Message, want []string, within time.Duration) cache.Publication {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case msg := <-ch:
			var p cache.Publication
			if err := json.Unmarshal([]byte(msg.Payload), &p); err != nil {
				t.Fatalf("message %q: %v", msg.Payload, err)
			}
			if slices.Equal(slices.Sorted(slices.Values(p.Keys)), slices.Sorted(slices.Values(want))) {
				return p
			}
		case <-deadline:
			t.Fatalf("no publication of %q within %s", want, within)
		}
	}
}

// A write through the core publishes its stale keys before it answers.
func TestWritePublishesItsStaleKeys(t *testing.T) {
	env.Reset(t)
	ch := subscribeInvalidations(t, env.RedisURL)
	core := startCore(t)
	const email = "publish@example.com"
	status, header := postUser(t, core, "publisher", email)
	if status != http.StatusCreated {
		t.Fatalf("create: %d", status)
	}
	id, err := strconv.ParseInt(header.Get("Location")[len("/api/v1/users/"):], 10, 64)
	if err != nil {
		t.Fatalf("Location %q: %v", header.Get("Location"), err)
	}
	// Published before the 2xx, so it is already on its way: a short bound.
	p := awaitKeys(t, ch, cache.StaleAfterCreate(cache.UserRef{ID: id, Email: email}), time.Second)
	if age := time.Now().UnixMilli() - p.PublishedMs; age < 0 || age > 5000 {
		t.Fatalf("published_ms %d is %d ms from now", p.PublishedMs, age)
	}
}

// A DEL the relay sends for a failed invalidation is published too.
func TestRelayPublishesWhatItSettles(t *testing.T) {
	env.Reset(t)
	opts, err := redis.ParseURL(env.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.StartProxy(t, opts.Addr)
	core := startCore(t, "REDIS_URL="+testenv.Via(env.RedisURL, proxy.Addr))
	ch := subscribeInvalidations(t, env.RedisURL)

	const email = "relay-publish@example.com"
	proxy.Cut()
	status, header := postUser(t, core, "relayed", email)
	if status != http.StatusCreated || header.Get("X-Cache-Invalidation") != "failed" {
		t.Fatalf("create with Redis cut off: %d, X-Cache-Invalidation %q", status, header.Get("X-Cache-Invalidation"))
	}
	id, err := strconv.ParseInt(header.Get("Location")[len("/api/v1/users/"):], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Resume()
	awaitKeys(t, ch, cache.StaleAfterCreate(cache.UserRef{ID: id, Email: email}), 5*time.Second)
}
