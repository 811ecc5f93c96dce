package cache

import (
	"context"
	_ "embed"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// FlushPattern matches every value and lease of the cache (seeding.json
// cache_pattern).
const FlushPattern = Prefix + ":*"

// flushAllSrc is the seeder's flush, which the outbox relay runs for a seed
// that died between its swap and its flush. ARGV: pattern, channel, message.
// One file: contracts/flush_cache.lua links to it, and the seeder runs it too.
//
//go:embed flush_cache.lua
var flushAllSrc string

var flushAll = redis.NewScript(flushAllSrc)

// FlushMessage tells every gateway worker to empty its L1 tier
// (cache.json tiers.flush_message).
type FlushMessage struct {
	Flush       bool  `json:"flush"`
	PublishedMs int64 `json:"published_ms"`
}

// FlushAll deletes every cached value and lease and publishes a flush on
// InvalidationChannel, in one script; it returns how many keys it deleted.
// Redis serves nothing else while it runs (about a second per million
// keys), so give it a client whose read timeout allows that. On a Redis
// Cluster the script runs on every primary (each SCANs only its own keys),
// and each publishes the flush: an L1 tier emptied more than once loses
// nothing more.
func FlushAll(ctx context.Context, rdb redis.Scripter) (int64, error) {
	msg, err := json.Marshal(FlushMessage{Flush: true, PublishedMs: time.Now().UnixMilli()})
	if err != nil {
		return 0, err
	}
	cluster, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return flushAll.Run(ctx, rdb, nil, FlushPattern, InvalidationChannel, msg).Int64()
	}
	var deleted atomic.Int64
	err = cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		n, err := flushAll.Run(ctx, node, nil, FlushPattern, InvalidationChannel, msg).Int64()
		deleted.Add(n)
		return err
	})
	return deleted.Load(), err
}
