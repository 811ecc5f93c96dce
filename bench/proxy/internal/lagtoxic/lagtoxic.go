// Package lagtoxic is a toxiproxy latency toxic in microseconds that corrects
// its own timer's lateness.
//
// toxiproxy's own latency toxic takes whole milliseconds, and its timer wakes
// late by a few tenths of a millisecond on a busy machine, so a hop set to 1 ms
// measured 1.4 ms. This one takes microseconds and keeps a running mean of
// how late its wake-ups are, asking each next sleep for that much less: the
// delay a chunk sees converges on the one asked.
package lagtoxic

import (
	"math/rand/v2"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/Shopify/toxiproxy/v2/toxics"
)

// Name is the toxic's type in toxiproxy's API.
const Name = "latency_us"

// lateWeight is the weight of the newest wake-up in the running mean of
// lateness (a mean over about the last 16).
const lateWeight = 16

// maxLate caps one wake-up's lateness in the mean: past it the thread was
// starved of a core, which says nothing of the next wake-up, and a mean raised
// by it would cut the next delays short.
const maxLate = 250 * time.Microsecond

// Latency delays every chunk by LatencyUs microseconds, plus a uniform draw
// in [-JitterUs, +JitterUs).
type Latency struct {
	LatencyUs int64 `json:"latency_us"`
	JitterUs  int64 `json:"jitter_us"`

	// The running mean of how late the timer woke, in nanoseconds: shared by
	// every connection the toxic is on, since they share the process's timers.
	lateNs atomic.Int64
}

// GetBufferSize is the chunks a connection may hold while they wait.
func (t *Latency) GetBufferSize() int { return 1024 }

// Delay is the delay one chunk is owed.
func (t *Latency) Delay() time.Duration {
	delay := t.LatencyUs
	if t.JitterUs > 0 {
		// #nosec G404 -- a delay's draw, not a secret
		delay += rand.Int64N(2*t.JitterUs) - t.JitterUs
	}
	return time.Duration(max(delay, 0)) * time.Microsecond
}

// Lateness is the running mean of the timer's lateness.
func (t *Latency) Lateness() time.Duration { return time.Duration(t.lateNs.Load()) }

// Observe adds one wake-up, late by `late` (negative when early), to the mean,
// capped at maxLate.
func (t *Latency) Observe(late time.Duration) {
	late = min(late, maxLate)
	for {
		old := t.lateNs.Load()
		next := old + (int64(late)-old)/lateWeight
		if t.lateNs.CompareAndSwap(old, max(next, 0)) {
			return
		}
	}
}

// Sleep is what to ask for so that a chunk leaves at `due`: the time left,
// less the mean lateness, but never less than half of it. A chunk whose
// correction would swallow the time left counts as on time, so the mean decays.
func (t *Latency) Sleep(due, now time.Time) time.Duration {
	left := due.Sub(now)
	if left <= 0 {
		return 0
	}
	late := t.Lateness()
	if late >= left {
		t.Observe(0)
	}
	return max(left-late, left/2)
}

// Pipe passes each chunk on once its delay is over. The wait is a nanosleep
// on the goroutine's own thread, not a Go timer: an idle Go runtime waits for
// its timers in epoll_wait, whose timeout is whole milliseconds, so a timer of
// 0.5 ms sleeps a millisecond and one of 1.7 ms two. An interrupted toxic
// passes the chunk it holds once its wait ends, so nothing is dropped.
func (t *Latency) Pipe(stub *toxics.ToxicStub) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			due := c.Timestamp.Add(t.Delay())
			if sleep := t.Sleep(due, time.Now()); sleep > 0 {
				wake := time.Now().Add(sleep)
				nanosleep(sleep)
				t.Observe(time.Since(wake))
			}
			c.Timestamp = due
			stub.Output <- c
		}
	}
}

// nanosleep blocks the calling thread for d, to the kernel's timer slack.
func nanosleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}

// Register adds the toxic to toxiproxy's types.
func Register() { toxics.Register(Name, new(Latency)) }
