package cache_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aside-lab/aside/core-go/internal/cache"
	"github.com/aside-lab/aside/core-go/internal/testenv"
)

// subscribe listens on the invalidation channel until the test ends; the
// subscription is confirmed before it returns, so nothing published after is missed.
func subscribe(t *testing.T, rdb redis.UniversalClient) <-chan *redis.Message {
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
	if p.PublishedUs/1000 != p.PublishedMs {
		t.Fatalf("published_us %d is not published_ms %d in µs", p.PublishedUs, p.PublishedMs)
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

// The flush a seed owes: every value and lease of the prefix gone, nothing
// else touched, and the L1 tiers told in the contract's message.
func TestFlushAllDeletesThePrefixAndTellsTheL1Tiers(t *testing.T) {
	env.Reset(t)
	ch := subscribe(t, newClient(t, env.RedisURL))
	cached := cache.WithLeases([]string{cache.CountKey("a@example.com"), cache.UserKey(1), cache.UserKey(2)})
	setAll(t, cached...)
	setAll(t, "aside:test:other", "aside:v2:count:x")

	deleted, err := cache.FlushAll(context.Background(), newClient(t, env.RedisURL))
	if err != nil || deleted != int64(len(cached)) {
		t.Fatalf("FlushAll = %d, %v; want %d deleted", deleted, err, len(cached))
	}
	if left := existing(t, cached...); len(left) > 0 {
		t.Fatalf("left behind: %q", left)
	}
	if left := existing(t, "aside:test:other", "aside:v2:count:x"); len(left) != 2 {
		t.Fatalf("keys outside the prefix deleted: only %q left", left)
	}
	select {
	case msg := <-ch:
		var got, want map[string]any
		if err := json.Unmarshal([]byte(msg.Payload), &got); err != nil {
			t.Fatal(err)
		}
		var contract struct {
			Tiers struct {
				FlushMessage map[string]any `json:"flush_message"`
			} `json:"tiers"`
		}
		testenv.LoadContract(t, "cache.json", &contract)
		want = contract.Tiers.FlushMessage
		if got["flush"] != true || len(got) != len(want) || got["published_ms"] == nil {
			t.Fatalf("flush message %v, want the shape of %v", got, want)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no flush message within 2s")
	}
}
