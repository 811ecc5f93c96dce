// Package outbox settles the cache invalidations that committed writes owe.
//
// Every write inserts a row into cache_invalidations in its own statement
// (store.Written.Outbox). After the commit the handler sends the DEL itself:
//
//   - it succeeded: the handler calls Forget and the relay deletes the row in
//     its next round (in batches, off the request path);
//   - it failed (Redis unreachable from the core): the handler calls Retry, the
//     write is acknowledged with X-Cache-Invalidation: failed, and the relay
//     sends the DEL again every RetryEvery until Redis takes it, then deletes
//     the row. A reader that stored the old value meanwhile, under a lease the
//     failed DEL could not remove, loses it then: the stale window ends within
//     RetryEvery of Redis answering, not at the entry's TTL.
//     The relay keeps no list of such ids: only the lowest one asked for. The
//     table already holds every change still owed, so the retry window is
//     every row from that id on, read in pages of Batch (a row of a write
//     whose own DEL succeeded meanwhile gets one more DEL, never one less).
//     Its memory and each round's reads stay the same however long Redis is
//     away; Waiting reports how many rows the window holds;
//   - the core died before either: the row outlives Grace and any core's relay
//     settles it.
//
// A seed owes a flush of the whole cache once its swap has committed (a row
// of kind 'flush'). The seeder runs it itself, holding the row's lock; a row
// it left behind (it died between its swap and its flush, or Redis failed
// it) is past Grace and unlocked, and the relay runs the same flush
// (cache.FlushAll), with its own client that waits up to FlushDeadline.
//
// The relay uses a Redis client of its own and builds a fresh one after any
// failed round: go-redis's pool, once PoolSize dials have failed, fails every
// command fast and probes Redis only once a second, which would add up to a
// second to the stale window after Redis comes back.
package outbox

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aside-lab/aside/core-go/internal/cache"
	"github.com/aside-lab/aside/core-go/internal/store"
)

// Store is what the relay needs from the database.
type Store interface {
	SettleOwed(ctx context.Context, from int64, grace time.Duration, limit int,
		del func([]store.Owed) error) ([]store.Owed, error)
	CountOwed(ctx context.Context, from int64, limit int) (int, error)
	ForgetOwed(ctx context.Context, ids []int64) error
	SettleFlushes(ctx context.Context, grace, flushDeadline time.Duration,
		flush func(context.Context) error) ([]time.Duration, error)
}

// Options bound the relay's work and set its pace.
type Options struct {
	// PollEvery is the pace of rounds while nothing failed.
	PollEvery time.Duration
	// RetryEvery is the pace of rounds while a DEL is owed after a failure.
	RetryEvery time.Duration
	// Grace is how old a row must be before the relay takes it without being
	// asked: longer than any write's own DEL.
	Grace time.Duration
	// Deadline bounds one round's DEL.
	Deadline time.Duration
	// Batch is the most rows one page of a round settles.
	Batch int
	// Queue bounds the ids waiting to be forgotten; an id that does not fit
	// is settled after Grace instead (one more DEL, never a lost one).
	Queue int
	// WaitingCap bounds the count of the retry window's rows (Waiting).
	WaitingCap int
	// FlushDeadline bounds the flush a seed left owed: the script deletes
	// about a million keys a second, and Redis answers only then.
	FlushDeadline time.Duration
}

// DefaultOptions are the relay's settings for a given invalidation deadline.
func DefaultOptions(deadline time.Duration) Options {
	return Options{
		PollEvery:     250 * time.Millisecond,
		RetryEvery:    100 * time.Millisecond,
		Grace:         2*deadline + time.Second,
		Deadline:      deadline,
		Batch:         500,
		Queue:         8192,
		WaitingCap:    1_000_000,
		FlushDeadline: time.Minute,
	}
}

// Observer is told about each round that settled rows or failed; never nil.
type Observer interface {
	// Settled: the relay's DEL removed these rows' keys; ages are how long
	// after their commit.
	Settled(ages []time.Duration)
	Failed()
	// Waiting: rows in the retry window after a round (0 once it is empty),
	// counted up to WaitingCap.
	Waiting(rows int)
}

// Relay settles owed invalidations; build it with New and run Run once.
type Relay struct {
	store    Store
	newRedis func(readTimeout time.Duration) redis.UniversalClient
	opts     Options
	observe  Observer
	forget   chan int64
	// retryFrom is the lowest id whose write's DEL failed and whose window
	// is not yet read through; 0 for none. wake starts a round early.
	retryFrom atomic.Int64
	wake      chan struct{}
}

// New returns a relay; newRedis builds the relay's own client (called again
// after every failed round), with readTimeout as its read timeout when not 0.
func New(st Store, newRedis func(readTimeout time.Duration) redis.UniversalClient, opts Options, observe Observer) *Relay {
	return &Relay{
		store: st, newRedis: newRedis, opts: opts, observe: observe,
		forget: make(chan int64, opts.Queue),
		wake:   make(chan struct{}, 1),
	}
}

// Forget says the write's own DEL succeeded: its row can go.
func (r *Relay) Forget(id int64) { offer(r.forget, id) }

// Retry says the write's own DEL failed: settle its row as soon as Redis answers.
// It never blocks and never drops: only the lowest such id is kept.
func (r *Relay) Retry(id int64) {
	if id <= 0 {
		return
	}
	for {
		from := r.retryFrom.Load()
		if (from != 0 && from <= id) || r.retryFrom.CompareAndSwap(from, id) {
			break
		}
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// offer queues id without blocking a request; a full queue leaves the row to
// the Grace sweep.
func offer(queue chan int64, id int64) {
	if id <= 0 {
		return
	}
	select {
	case queue <- id:
	default:
	}
}

// Run settles rows until ctx ends.
func (r *Relay) Run(ctx context.Context) {
	rdb := r.newRedis(0)
	defer func() { _ = rdb.Close() }()
	var forgetting []int64
	wait := time.NewTimer(r.opts.PollEvery)
	defer wait.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-wait.C:
		}
		forgetting = r.forgetQueued(ctx, drain(r.forget, forgetting))
		if err := r.settle(ctx, rdb); err != nil && ctx.Err() == nil {
			r.observe.Failed()
			_ = rdb.Close()
			rdb = r.newRedis(0)
		}
		r.countWaiting(ctx)
		if err := r.settleFlushes(ctx); err != nil && ctx.Err() == nil {
			r.observe.Failed()
		}
		pace := r.opts.PollEvery
		if r.retryFrom.Load() != 0 {
			pace = r.opts.RetryEvery
		}
		resetTimer(wait, pace)
	}
}

// countWaiting reports the retry window's rows (none to count once it is empty).
func (r *Relay) countWaiting(ctx context.Context) {
	from := r.retryFrom.Load()
	if from == 0 {
		r.observe.Waiting(0)
		return
	}
	if n, err := r.store.CountOwed(ctx, from, r.opts.WaitingCap); err == nil {
		r.observe.Waiting(n)
	}
}

// forgetQueued deletes the rows of successful writes; on failure it keeps
// them for the next round, up to Queue ids (the rest fall to the Grace sweep).
func (r *Relay) forgetQueued(ctx context.Context, ids []int64) []int64 {
	if len(ids) == 0 || r.store.ForgetOwed(ctx, ids) == nil {
		return ids[:0]
	}
	if len(ids) > r.opts.Queue {
		ids = ids[len(ids)-r.opts.Queue:]
	}
	return ids
}

// settle reads the retry window and the rows past Grace in pages of Batch
// until a page comes back short; the window is then read through and
// forgotten, unless a lower id was asked for meanwhile.
func (r *Relay) settle(ctx context.Context, rdb redis.UniversalClient) error {
	from := r.retryFrom.Load()
	for {
		owed, err := r.store.SettleOwed(ctx, from, r.opts.Grace, r.opts.Batch, func(owed []store.Owed) error {
			return r.del(ctx, rdb, owed)
		})
		if err != nil {
			return err
		}
		if len(owed) > 0 {
			ages := make([]time.Duration, len(owed))
			for i, o := range owed {
				ages[i] = o.Age
			}
			r.observe.Settled(ages)
		}
		// A full page means more rows may wait; otherwise every row of the
		// window is settled, or was already (a row is gone once any relay
		// took it; one locked by another core's relay is its, or Grace's).
		if len(owed) < r.opts.Batch {
			if from != 0 {
				r.retryFrom.CompareAndSwap(from, 0)
			}
			return nil
		}
	}
}

// settleFlushes runs the flushes seeds left owed, if any, with a client of
// its own whose reads wait for the whole script.
func (r *Relay) settleFlushes(ctx context.Context) error {
	ages, err := r.store.SettleFlushes(ctx, r.opts.Grace, r.opts.FlushDeadline, func(ctx context.Context) error {
		rdb := r.newRedis(r.opts.FlushDeadline)
		defer func() { _ = rdb.Close() }()
		ctx, cancel := context.WithTimeout(ctx, r.opts.FlushDeadline)
		defer cancel()
		if _, err := cache.FlushAll(ctx, rdb); err != nil {
			return errors.Join(errors.New("outbox: cache flush failed"), err)
		}
		return nil
	})
	if len(ages) > 0 {
		r.observe.Settled(ages)
	}
	return err
}

func (r *Relay) del(ctx context.Context, rdb redis.UniversalClient, owed []store.Owed) error {
	var keys []string
	for _, o := range owed {
		keys = append(keys, o.Change.StaleKeys()...)
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.Deadline)
	defer cancel()
	// Published with the DEL, like the write's own invalidation, so gateway
	// workers drop their in-process copies once the relay settles the row.
	if err := cache.DelAndPublish(ctx, rdb, keys); err != nil {
		return errors.Join(errors.New("outbox: DEL failed"), err)
	}
	return nil
}

// drain appends every id waiting in queue to ids.
func drain(queue chan int64, ids []int64) []int64 {
	for {
		select {
		case id := <-queue:
			ids = append(ids, id)
		default:
			return ids
		}
	}
}

func resetTimer(t *time.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	t.Reset(d)
}
