// Package schedule sends a scenario's iterations at a constant rate (an
// open model): vegeta's ConstantPacer says when each falls due, one
// goroutine wakes at most once a millisecond and hands every iteration due
// by then to a fixed pool of workers; one that finds no idle worker, or that
// a worker could pick up only more than LATE_MS after its due time, is
// dropped.
package schedule

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"aside/bench/driver/internal/scenario"
)

// Tick is the scheduler's finest sleep: it wakes at most once per Tick and
// dispatches every iteration due by then in one go.
const Tick = time.Millisecond

// LateAfter is how far past its due time a started iteration counts as
// late: two Ticks, as dispatching once a Tick alone makes an iteration up
// to a Tick (and the sleep's overshoot) late.
const LateAfter = 2 * Tick

// MaxHold is the longest sleep a HoldP scheduler keeps its P through: a
// stop-the-world pause waits for it, so longer waits (rates below 250/s,
// where the process idles anyway) take an ordinary timer.
const MaxHold = 4 * time.Millisecond

// Load is one scenario's schedule and pool.
type Load struct {
	Scenario scenario.Scenario
	Env      *scenario.Env
	// Freq iterations per Per (a second; a minute for the stale checker).
	Freq int
	Per  time.Duration
	// Pool workers, each with at most one iteration in flight.
	Pool int
	// Late (LATE_MS): an iteration not started within this of its due time is dropped.
	Late     time.Duration
	Duration time.Duration
	// Shard and Shards number the workers uniquely across shards.
	Shard, Shards int
	// Start is the schedule's start as a Clock offset (0: the driver's
	// start; a test may put it in the past).
	Start int64
	// Drain bounds how long iterations of several requests go on sending
	// after the schedule ends.
	Drain time.Duration
	// Times, when set, replaces the constant rate (Freq per Per): a replayed
	// timed trace says when each iteration falls due.
	Times Timetable
	// HoldP lets the scheduler sleep its short waits (up to MaxHold)
	// without giving its P back (holdSleep). Give it to one load of a
	// process at most, and only with GOMAXPROCS >= 2: the workers need
	// another P while it sleeps.
	HoldP bool
}

// Timetable says when each iteration falls due instead of a constant rate.
type Timetable interface {
	// At is when iteration index (from 1) falls due, ns after the
	// schedule's start; it never decreases with index.
	At(index uint64) int64
	// Count is how many iterations fall due within d.
	Count(d time.Duration) uint64
}

type job struct {
	index uint64
	due   int64
}

// interval is the time between two due times (vegeta's: Per / Freq, in whole nanoseconds).
func (l *Load) interval() int64 {
	if l.Freq <= 0 || l.Per <= 0 {
		return 0
	}
	return max(int64(l.Per)/int64(l.Freq), 1)
}

// Total is the number of iterations the schedule holds: those due within Duration.
func (l *Load) Total() uint64 {
	if l.Times != nil {
		return l.Times.Count(l.Duration)
	}
	iv := l.interval()
	if iv == 0 {
		return 0
	}
	return uint64(int64(l.Duration) / iv)
}

// Due is when iteration index (from 1) falls due, as a Clock offset.
func (l *Load) Due(index uint64) int64 {
	if l.Times != nil {
		return l.Start + l.Times.At(index)
	}
	return l.Start + int64(index)*l.interval()
}

// wait is how long until iteration hits+1 falls due at now (<= 0: it is
// due); stop when the schedule holds no more.
func (l *Load) wait(pacer vegeta.ConstantPacer, now int64, hits uint64) (time.Duration, bool) {
	if l.Times != nil {
		return time.Duration(l.Due(hits+1) - now), false
	}
	return pacer.Pace(time.Duration(now-l.Start), hits)
}

// Run sends the schedule until its end or ctx's, then waits for the
// iterations in flight.
func (l *Load) Run(ctx context.Context) {
	total := l.Total()
	clock, rec := l.Env.Clock, l.Env.Rec
	pool := max(l.Pool, 1)
	jobs := make(chan job, pool)
	var idle atomic.Int64
	idle.Store(int64(pool))
	var wg sync.WaitGroup
	for n := 1; n <= pool; n++ {
		wg.Add(1)
		go l.work(n, jobs, &idle, &wg)
	}

	pacer := vegeta.ConstantPacer{Freq: l.Freq, Per: l.Per}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var hits uint64
	for hits < total && ctx.Err() == nil {
		now := clock.Now()
		for hits < total {
			wait, stop := l.wait(pacer, now, hits)
			if stop {
				total = hits
				break
			}
			if wait > 0 {
				break
			}
			hits++
			due := l.Due(hits)
			rec.Due()
			// Only the scheduler takes idle workers, so a positive count
			// cannot fall to zero before the send: the send never blocks.
			if idle.Load() > 0 {
				idle.Add(-1)
				jobs <- job{index: hits, due: due}
			} else {
				l.drop(due, now)
			}
		}
		if hits >= total {
			break
		}
		// Sleep until the next due time, but at least until a Tick after
		// this wake: requests due meanwhile go out together.
		if l.HoldP {
			// The workers just handed a job run on this P before it sleeps.
			runtime.Gosched()
		}
		after := clock.Now()
		sleep := time.Duration(max(l.Due(hits+1)-after, now+int64(Tick)-after))
		switch {
		case sleep <= 0:
		case l.HoldP && sleep <= MaxHold:
			holdSleep(sleep)
		default:
			timer.Reset(sleep)
			select {
			case <-ctx.Done():
			case <-timer.C:
			}
		}
	}
	timer.Stop()
	l.Env.StopAt(clock.Now() + int64(l.Drain))
	close(jobs)
	wg.Wait()
}

func (l *Load) drop(due, now int64) {
	l.Env.Rec.Drop()
	if s := l.Env.Sink; s != nil {
		s.Dropped(l.Env.Rec.Scenario, l.Env.Clock.Epoch(now), l.Env.Clock.Epoch(due))
	}
}

// WorkerID is the number of worker n (from 1) of a shard: unique across shards.
func WorkerID(n, shard, shards int) int { return (n-1)*max(shards, 1) + shard + 1 }

func (l *Load) work(n int, jobs <-chan job, idle *atomic.Int64, wg *sync.WaitGroup) {
	defer wg.Done()
	clock, rec := l.Env.Clock, l.Env.Rec
	var w *scenario.Worker // made on the first job: most of a big pool may stay idle
	for j := range jobs {
		now := clock.Now()
		lateness := now - j.due
		if lateness > int64(l.Late) {
			l.drop(j.due, now)
			idle.Add(1)
			continue
		}
		if w == nil {
			w = scenario.NewWorker(l.Env, WorkerID(n, l.Shard, l.Shards))
		}
		rec.Start(lateness > int64(LateAfter))
		w.Begin(j.index, j.due)
		ok := l.Scenario.Iterate(w)
		rec.Finish(ok)
		w.Iter++
		idle.Add(1)
	}
	if w != nil {
		w.Release()
	}
}
