package cache_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aside-lab/aside/core-go/internal/cache"
)

// subscribe listens on the invalidation channel until the test ends; the
// subscription is confirmed before it returns, so nothing published after is missed.
func subscribe(t *testing.T, rdb *redis.Client) <-chan *redis.Message {
	t.Helper()
	ctx := context.Background()
	sub := rdb.Subscribe(ctx, cache.InvalidationChannel)
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	return sub.Channel()
}

// nextPublication waits for a message on ch and decodes it.
func nextPublication(t *testing.T, ch <-chan *redis.Message) cache.Publication {
	t.Helper()
	select {
	case msg := <-ch:
		var p cache.Publication
		if err := json.Unmarshal([]byte(msg.Payload), &p); err != nil {
			t.Fatalf("message %q: %v", msg.Payload, err)
		}
		return p
	case <-time.After(2 * time.Second):
		t.Fatal("no invalidation published within 2s")
	}
	return cache.Publication{}
}

func TestInvalidatePublishesItsKeysAfterTheDel(t *testing.T) {
	env.Reset(t)
	rdb := newClient(t, env.RedisURL)
	ch := subscribe(t, newClient(t, env.RedisURL))
	stale := []string{cache.CountKey("pub@example.com"), cache.UserKey(21)}
	setAll(t, cache.WithLeases(stale)...)

	before := time.Now().UnixMilli()
	if err := cache.NewInvalidator(rdb, 300*time.Millisecond, nil).Invalidate(context.Background(), stale); err != nil {
		t.Fatal(err)
	}
	p := nextPublication(t, ch)
	if !slices.Equal(p.Keys, stale) {
		t.Fatalf("published keys %q, want %q", p.Keys, stale)
	}
	if p.PublishedMs < before || p.PublishedMs > time.Now().UnixMilli() {
		t.Fatalf("published_ms %d outside the call (%d..now)", p.PublishedMs, before)
	}
	// MULTI/EXEC: by the time a subscriber hears of the keys they are gone.
	if left := existing(t, cache.WithLeases(stale)...); len(left) != 0 {
		t.Fatalf("published but still there: %q", left)
	}
}

func TestFailedInvalidatePublishesNothing(t *testing.T) {
	ch := subscribe(t, newClient(t, env.RedisURL))
	dead := newClient(t, "redis://127.0.0.1:1/2")
	if err := cache.NewInvalidator(dead, 100*time.Millisecond, nil).Invalidate(context.Background(), []string{cache.UserKey(22)}); err == nil {
		t.Fatal("Invalidate against a closed port succeeded")
	}
	select {
	case msg := <-ch:
		t.Fatalf("published %q for a DEL that failed", msg.Payload)
	case <-time.After(200 * time.Millisecond):
	}
}
