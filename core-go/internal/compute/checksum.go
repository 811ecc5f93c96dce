// Package compute is the CPU-bound work behind POST /api/v1/compute
// (contracts/compute.json) and the bound on how much of it runs at once.
package compute

import (
	"context"
	"errors"
	"time"
)

// Contract constants (contracts/compute.json).
const (
	IterationsPerComplexity = 100_000
	MinComplexity           = 1
	MaxComplexity           = 1000
)

// chunk is how many iterations run between two looks at the context: about a
// millisecond of work, so an abandoned request stops burning CPU quickly.
const chunk = 1 << 20

// Checksum returns the sum over 0 <= i < n*100000 of ((i*i) mod 1000) + 1.
// The loop is written out on purpose: it is the benchmark's honest CPU work,
// and no Go compiler turns it into the closed form. It stops early with
// ctx's error when ctx ends.
func Checksum(ctx context.Context, n int) (int64, error) {
	if n < MinComplexity || n > MaxComplexity {
		return 0, errors.New("complexity out of range")
	}
	limit := int64(n) * IterationsPerComplexity
	var sum int64
	for start := int64(0); start < limit; start += chunk {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		end := min(start+chunk, limit)
		for i := start; i < end; i++ {
			sum += (i*i)%1000 + 1
		}
	}
	return sum, nil
}

// ErrBusy means every compute slot stayed taken for the whole queue wait.
var ErrBusy = errors.New("compute is at its concurrency limit")

// Limiter bounds how many checksums run at once: on a 2-core box more
// parallel CPU work only makes every request slower.
type Limiter struct {
	slots chan struct{}
	wait  time.Duration
}

// NewLimiter allows max concurrent holders; a caller waits at most wait for a slot.
func NewLimiter(max int, wait time.Duration) *Limiter {
	return &Limiter{slots: make(chan struct{}, max), wait: wait}
}

// Acquire takes a slot or fails with ErrBusy after the queue wait (or with
// ctx's error). On success the caller must call the returned release.
func (l *Limiter) Acquire(ctx context.Context) (release func(), err error) {
	select {
	case l.slots <- struct{}{}:
		return l.release, nil
	default:
	}
	if l.wait <= 0 {
		return nil, ErrBusy
	}
	t := time.NewTimer(l.wait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		return l.release, nil
	case <-t.C:
		return nil, ErrBusy
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *Limiter) release() { <-l.slots }

// InUse is the number of slots taken now (a gauge).
func (l *Limiter) InUse() int { return len(l.slots) }
