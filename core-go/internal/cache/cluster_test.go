package cache_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aside-lab/aside/core-go/internal/cache"
	"github.com/aside-lab/aside/core-go/internal/cachetest"
)

// The same operations against the test stack's Redis Cluster
// (ASIDE_REDIS_CLUSTER_URL, started by infra/test.sh); skipped without one.

// clusterClient is the core's own client in cluster mode, over an emptied cluster.
func clusterClient(t *testing.T) *redis.ClusterClient {
	t.Helper()
	if env.ClusterURL == "" {
		t.Skip("ASIDE_REDIS_CLUSTER_URL is not set (infra/test.sh starts a cluster)")
	}
	rdb, err := cache.NewClient(env.ClusterURL, cache.ClientOptions{Mode: cache.ModeCluster, Timeout: time.Second, PoolSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	cluster, ok := rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("cluster mode made a %T", rdb)
	}
	ctx := context.Background()
	if err := cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		return node.FlushDB(ctx).Err()
	}); err != nil {
		t.Fatalf("flush the cluster: %v", err)
	}
	return cluster
}

func slot(t *testing.T, rdb *redis.ClusterClient, key string) int64 {
	t.Helper()
	s, err := rdb.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// spreadKeys returns count keys that land in at least two slots.
func spreadKeys(count int) []string {
	keys := make([]string, 0, count)
	for i := range count {
		if i%2 == 0 {
			keys = append(keys, cache.CountKey(fmt.Sprintf("spread%d@example.com", i)))
		} else {
			keys = append(keys, cache.UserKey(int64(1000+i)))
		}
	}
	return keys
}

func TestClusterKeyAndLeaseShareASlot(t *testing.T) {
	rdb := clusterClient(t)
	keys := []string{cache.UserKey(9007199254740993), cache.CountKey("}{@example.com")}
	for _, k := range loadContract(t).Keys {
		keys = append(keys, k.Key)
	}
	for _, key := range keys {
		if got, want := slot(t, rdb, cache.LeaseKey(key)), slot(t, rdb, key); got != want {
			t.Errorf("%q is in slot %d, its lease in %d", key, want, got)
		}
	}
}

func TestClusterLeaseScriptStoresUnderTheHashTag(t *testing.T) {
	rdb := clusterClient(t)
	ctx := context.Background()
	key := cache.CountKey("lease@example.com")
	token, took, err := cachetest.TakeLease(ctx, rdb, key, 5*time.Second)
	if err != nil || !took {
		t.Fatalf("lease: %v %v", took, err)
	}
	stored, err := cachetest.FillIfLeaseHeld(ctx, rdb, key, token, "3", time.Minute)
	if err != nil || !stored {
		t.Fatalf("store under the lease: %v %v", stored, err)
	}
	if v, _ := rdb.Get(ctx, key).Result(); v != "3" {
		t.Fatalf("value %q", v)
	}
}

// Without the hash tag a key and its lease hash to different slots, and the
// cluster refuses the lease script outright: the tag is what makes it run.
func TestClusterLeaseScriptFailsCrossSlotWithoutTheHashTag(t *testing.T) {
	rdb := clusterClient(t)
	ctx := context.Background()
	var untagged string
	for i := range 100 {
		k := fmt.Sprintf("%s:count:untagged%d@example.com", cache.Prefix, i)
		if slot(t, rdb, k) != slot(t, rdb, cache.LeaseKey(k)) {
			untagged = k
			break
		}
	}
	if untagged == "" {
		t.Fatal("no untagged key found whose lease lands in another slot")
	}
	_, err := cachetest.FillIfLeaseHeld(ctx, rdb, untagged, "token", "3", time.Minute)
	if err == nil || !strings.HasPrefix(err.Error(), "CROSSSLOT") {
		t.Fatalf("want CROSSSLOT, got %v", err)
	}
}

func TestClusterInvalidateDeletesAcrossSlotsThenPublishes(t *testing.T) {
	rdb := clusterClient(t)
	ctx := context.Background()
	stale := spreadKeys(6)
	slots := map[int64]bool{}
	for _, k := range stale {
		slots[slot(t, rdb, k)] = true
	}
	if len(slots) < 2 {
		t.Fatalf("the keys share one slot; the test needs several")
	}
	kept := cache.CountKey("kept@example.com")
	for _, k := range append(cache.WithLeases(stale), kept) {
		if err := rdb.Set(ctx, k, "old", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ch := subscribe(t, rdb)
	if err := cache.NewInvalidator(rdb, time.Second, nil).Invalidate(ctx, stale); err != nil {
		t.Fatal(err)
	}
	for _, k := range cache.WithLeases(stale) {
		if n, _ := rdb.Exists(ctx, k).Result(); n != 0 {
			t.Errorf("%q survived the invalidation", k)
		}
	}
	if n, _ := rdb.Exists(ctx, kept).Result(); n != 1 {
		t.Errorf("%q was deleted", kept)
	}
	if p := nextPublication(t, ch); !slices.Equal(p.Keys, stale) {
		t.Fatalf("published %q, want %q", p.Keys, stale)
	}
}

func TestClusterFlushAllEmptiesEveryPrimary(t *testing.T) {
	rdb := clusterClient(t)
	ctx := context.Background()
	keys := cache.WithLeases(spreadKeys(40))
	for _, k := range keys {
		if err := rdb.Set(ctx, k, "old", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.Set(ctx, "aside:test:kept", "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	var holding atomic.Int32 // ForEachMaster runs its function on every primary at once
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		n, err := node.DBSize(ctx).Result()
		if n > 0 {
			holding.Add(1)
		}
		return err
	}); err != nil || holding.Load() < 2 {
		t.Fatalf("the keys sit on %d primaries (%v); the test needs several", holding.Load(), err)
	}
	ch := subscribe(t, rdb)
	deleted, err := cache.FlushAll(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if deleted != int64(len(keys)) {
		t.Fatalf("deleted %d keys, want %d", deleted, len(keys))
	}
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		left, err := node.Keys(ctx, cache.FlushPattern).Result()
		if err == nil && len(left) > 0 {
			return fmt.Errorf("%s still holds %q", node.Options().Addr, left)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(ctx, "aside:test:kept").Result(); n != 1 {
		t.Fatal("a key outside the prefix was deleted")
	}
	select {
	case msg := <-ch:
		if !strings.Contains(msg.Payload, `"flush":true`) {
			t.Fatalf("published %q", msg.Payload)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no flush published")
	}
}

func TestNewClientByMode(t *testing.T) {
	opts := cache.ClientOptions{Timeout: time.Second, PoolSize: 2}
	for mode, want := range map[cache.Mode]string{
		cache.ModeStandalone: "*redis.Client", cache.ModeCluster: "*redis.ClusterClient", cache.ModeSentinel: "*redis.Client",
	} {
		o := opts
		o.Mode, o.SentinelMaster = mode, "aside"
		rdb, err := cache.NewClient("redis://:pw@127.0.0.1:1/0", o) // lazy: nothing is dialled
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if got := fmt.Sprintf("%T", rdb); got != want {
			t.Errorf("%s made a %s, want %s", mode, got, want)
		}
		_ = rdb.Close()
	}
	for _, c := range []struct {
		url  string
		o    cache.ClientOptions
		name string
	}{
		{"redis://127.0.0.1:1/2", cache.ClientOptions{Mode: cache.ModeCluster}, "REDIS_URL"},
		{"redis://127.0.0.1:1/0", cache.ClientOptions{Mode: cache.ModeSentinel}, "REDIS_SENTINEL_MASTER"},
		{"redis://127.0.0.1:1/0", cache.ClientOptions{Mode: "ring"}, "REDIS_MODE"},
	} {
		if _, err := cache.NewClient(c.url, c.o); err == nil || !strings.HasPrefix(err.Error(), c.name+": ") {
			t.Errorf("%+v: error %v, want one naming %s", c.o, err, c.name)
		}
	}
}
