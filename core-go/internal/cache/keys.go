// Package cache holds the core's side of the cache contract
// (contracts/cache.json, contracts/README.md).
//
// The core never reads the cache: the gateway fills it on a miss. The core's
// job is to make stale entries disappear after a write has committed:
//
//	write   stale keys
//	create  count:<new email>, user:<new id>  (clears a negative entry)
//	update  user:<id>; plus count:<old email> and count:<new email> when the email changed
//	delete  count:<old email>, user:<id>
//
// For each stale key the core deletes the key AND its lease (<key>:lease) in
// one DEL, after the transaction committed and before answering 2xx. Deleting
// the lease is what closes the stale-set race: a reader that read the old row
// before the commit finds its lease gone and its compare-and-set store does
// nothing (internal/cachetest has the reader's side, for the tests).
//
// The DEL is retried (InvalidationTries within the invalidator's deadline).
// If Redis stays unreachable the write still stands: the handler answers 2xx
// with X-Cache-Invalidation: failed, and the outbox (package outbox) sends the
// DEL again until Redis takes it. Every write records its Change in the
// cache_invalidations table in the same statement, so no committed write can
// lose its invalidation, not even to a core killed before its DEL.
//
// In the same MULTI as the DEL, the core publishes the keys on
// InvalidationChannel, so every gateway worker can drop its own in-process
// copy (its L1 tier) of them; see Publication.
//
// Key format: aside:v1:{count:<email>} and aside:v1:{user:<id>}. The email
// is used exactly as given (case kept, UTF-8); the version segment changes
// when a value format changes. The braces are a Redis Cluster hash tag: only
// the first {...} of a name is hashed, and a lease is its key plus a suffix,
// so a key and its lease always share a slot (cache.json hash_tag).
package cache

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// Prefix of every key; "v1" is the value-format version.
	Prefix = "aside:v1"
	// LeaseSuffix turns a key into the name of its lease.
	LeaseSuffix = ":lease"
	// DefaultTTLSeconds is how long the gateway keeps an entry (cache.json ttl_seconds_default).
	DefaultTTLSeconds = 60
	// LeaseTTLMillis is how long a reader holds the right to fill a key (cache.json lease.ttl_ms).
	LeaseTTLMillis = 5000
	// InvalidationChannel is where each invalidation's keys are published
	// (cache.json tiers.invalidation_channel).
	InvalidationChannel = Prefix + ":invalidations"
)

// CountKey is the key of the number of users with exactly this email.
func CountKey(email string) string { return Prefix + ":{count:" + email + "}" }

// UserKey is the key of one user's JSON (or the negative entry "null").
func UserKey(id int64) string { return Prefix + ":{user:" + strconv.FormatInt(id, 10) + "}" }

// LeaseKey is the key of the lease guarding key.
func LeaseKey(key string) string { return key + LeaseSuffix }

// UserRef is what invalidation needs to know about a row: its id and email.
type UserRef struct {
	ID    int64
	Email string
}

// StaleAfterCreate lists the keys a create makes stale.
func StaleAfterCreate(created UserRef) []string {
	return []string{CountKey(created.Email), UserKey(created.ID)}
}

// StaleAfterUpdate lists the keys an update makes stale: the user, and both
// counts when the email changed (exact comparison, like the count itself).
func StaleAfterUpdate(before, after UserRef) []string {
	keys := []string{UserKey(after.ID)}
	if before.Email != after.Email {
		keys = append(keys, CountKey(before.Email), CountKey(after.Email))
	}
	return keys
}

// StaleAfterDelete lists the keys a delete makes stale.
func StaleAfterDelete(deleted UserRef) []string {
	return []string{CountKey(deleted.Email), UserKey(deleted.ID)}
}

// Change is what one committed write did to one row, as the invalidation
// outbox records it: the email before (nil for a create) and after (nil for a
// delete).
type Change struct {
	UserID      int64
	EmailBefore *string
	EmailAfter  *string
}

// StaleKeys lists the keys the change makes stale: those of StaleAfterCreate,
// StaleAfterUpdate or StaleAfterDelete, by which side is missing.
func (c Change) StaleKeys() []string {
	switch {
	case c.EmailBefore == nil && c.EmailAfter == nil:
		return []string{UserKey(c.UserID)}
	case c.EmailBefore == nil:
		return StaleAfterCreate(UserRef{ID: c.UserID, Email: *c.EmailAfter})
	case c.EmailAfter == nil:
		return StaleAfterDelete(UserRef{ID: c.UserID, Email: *c.EmailBefore})
	}
	return StaleAfterUpdate(UserRef{ID: c.UserID, Email: *c.EmailBefore}, UserRef{ID: c.UserID, Email: *c.EmailAfter})
}

// WithLeases returns each key followed by its lease: the argument list of the
// one DEL an invalidation sends.
func WithLeases(keys []string) []string {
	out := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		out = append(out, k, LeaseKey(k))
	}
	return out
}

// Publication is the message published on InvalidationChannel: the stale
// keys and when they were published (unix ms, and unix µs), from which a
// subscriber measures its lag. The µs field exists because the ms one, being
// truncated, alone adds up to 1 ms to a lag that is meant to stay near 5 ms.
type Publication struct {
	Keys        []string `json:"keys"`
	PublishedMs int64    `json:"published_ms"`
	PublishedUs int64    `json:"published_us"`
}

// DelAndPublish deletes the keys with their leases and publishes them on
// InvalidationChannel in one MULTI/EXEC: a subscriber is never told about a
// DEL that did not happen, and a DEL is never left unannounced by a failure
// between the two (the whole transaction is retried instead).
//
// On a Redis Cluster a transaction, like a DEL, may only name keys of one
// slot, and the stale keys of a write span several: each key goes with its
// lease (one slot, by the hash tag) in a DEL of its own, pipelined, and the
// keys are published only once every DEL succeeded. The two promises hold:
// no message before its DELs, and a failure anywhere retries them all.
func DelAndPublish(ctx context.Context, rdb redis.Cmdable, keys []string) error {
	now := time.Now()
	msg, err := json.Marshal(Publication{Keys: keys, PublishedMs: now.UnixMilli(), PublishedUs: now.UnixMicro()})
	if err != nil {
		return err
	}
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		_, err := rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, k := range keys {
				pipe.Del(ctx, k, LeaseKey(k))
			}
			return nil
		})
		if err == nil {
			// PUBLISH reaches every node's subscribers, whichever node takes it.
			err = rdb.Publish(ctx, InvalidationChannel, msg).Err()
		}
		if err != nil {
			// A primary that failed over leaves the client sending to it
			// (retries are off, and a dead node answers no MOVED): the next
			// try, the invalidator's or the relay's, goes by a fresh map.
			cluster.ReloadState(ctx)
		}
		return err
	}
	_, err = rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Del(ctx, WithLeases(keys)...)
		pipe.Publish(ctx, InvalidationChannel, msg)
		return nil
	})
	return err
}

// Results of one invalidation, as counted in aside_core_cache_invalidations_total.
const (
	ResultOK    = "ok"
	ResultError = "error"
)

// InvalidationTries is how many DELs one invalidation may send, all within
// the invalidator's deadline.
const InvalidationTries = 3

// Invalidator deletes stale keys and their leases after a committed write.
type Invalidator struct {
	rdb      redis.Cmdable
	deadline time.Duration
	// observe is told each invalidation's result and how many retries it
	// took (metrics); never nil.
	observe func(result string, retries int)
}

// NewInvalidator returns an invalidator whose tries all fit within deadline.
// observe may be nil.
func NewInvalidator(rdb redis.Cmdable, deadline time.Duration, observe func(result string, retries int)) *Invalidator {
	if observe == nil {
		observe = func(string, int) {}
	}
	return &Invalidator{rdb: rdb, deadline: deadline, observe: observe}
}

// Invalidate deletes every key and its lease in one DEL and publishes the
// keys (DelAndPublish), retrying briefly.
// The caller passes a context that a client disconnect does not cancel: the
// write has committed, so its stale keys must go whatever the client does.
// A non-nil error means the keys may still be there (until their TTL).
func (inv *Invalidator) Invalidate(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, inv.deadline)
	defer cancel()
	backoff := inv.deadline / 10
	var err error
	sent := 0
	for sent < InvalidationTries {
		if sent > 0 {
			if !sleepCtx(ctx, backoff) {
				break
			}
			backoff *= 2
		}
		sent++
		if err = DelAndPublish(ctx, inv.rdb, keys); err == nil {
			inv.observe(ResultOK, sent-1)
			return nil
		}
	}
	inv.observe(ResultError, sent-1)
	return errors.Join(errors.New("cache invalidation failed"), err)
}

// sleepCtx waits d, or less if ctx ends first; it reports whether ctx is
// still alive (so a try is still worth sending).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
