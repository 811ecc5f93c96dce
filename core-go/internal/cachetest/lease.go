// Package cachetest is the reader's side of the lease protocol
// (contracts/README.md, "Coherence"), for tests only: the gateway has the
// production side in Python; this one lets the core's tests play a reader
// against the real invalidation.
package cachetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aside-lab/aside/core-go/internal/cache"
	"github.com/aside-lab/aside/core-go/internal/testenv"
)

// fillIfLeaseHeld stores the value only while the caller's lease is still in
// place, then drops the lease, atomically. KEYS: key, lease. ARGV: token,
// value, ttl seconds. The script is the contract's file itself, the one the
// gateway runs, read once.
var fillIfLeaseHeld = sync.OnceValue(func() *redis.Script {
	src, err := os.ReadFile(testenv.ContractPath("store_if_lease_held.lua"))
	if err != nil {
		panic(fmt.Sprintf("cachetest: the lease holder's store script: %v", err))
	}
	return redis.NewScript(string(src))
})

// TakeLease tries to become the one reader allowed to fill key. It returns
// the lease token and whether the lease was taken.
func TakeLease(ctx context.Context, rdb redis.Cmdable, key string, ttl time.Duration) (string, bool, error) {
	token, err := newToken()
	if err != nil {
		return "", false, err
	}
	err = rdb.SetArgs(ctx, cache.LeaseKey(key), token, redis.SetArgs{Mode: "NX", TTL: ttl}).Err()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return token, true, nil
}

// FillIfLeaseHeld stores value under key for ttl if token still holds the
// lease; it reports whether it stored. A writer that deleted the lease
// meanwhile makes this a no-op, so a value read before a commit never lands.
func FillIfLeaseHeld(ctx context.Context, rdb redis.Scripter, key, token, value string, ttl time.Duration) (bool, error) {
	stored, err := fillIfLeaseHeld().Run(ctx, rdb, []string{key, cache.LeaseKey(key)},
		token, value, int64(ttl/time.Second)).Int()
	if err != nil {
		return false, err
	}
	return stored == 1, nil
}

func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
