package keytrace

import (
	"math"
	"sort"
	"time"
)

// Replay is a trace as one shard of the step asks for it. Iteration i (from
// 1) of shard s of n asks line (i-1+skip) x n + s (from 0), so the shards
// share the trace's lines between them and a step after a warm-up of skip
// iterations (SKIP) goes on where the warm-up stopped; past the last line
// the trace starts again (a wrap). A timed trace's line falls due at its
// timestamp divided by the speed, plus one period (its last timestamp) per
// wrap, less the skipped lines' time.
type Replay struct {
	trace         *Trace
	shard, shards uint64
	skip          uint64
	speed         float64
}

// Replay is the trace as shard of shards asks for it after skip iterations,
// at speed (timed traces only).
func (t *Trace) Replay(shard, shards int, skip uint64, speed float64) *Replay {
	return &Replay{trace: t, shard: uint64(shard), shards: uint64(max(shards, 1)), skip: skip, speed: speed}
}

// line is iteration index's place in the trace counted across wraps.
func (r *Replay) line(index uint64) uint64 { return (index-1+r.skip)*r.shards + r.shard }

// Key is the key of iteration index (from 1): an index of the trace's Keys.
func (r *Replay) Key(index uint64) int {
	lines := r.trace.Lines
	return int(lines[r.line(index)%uint64(len(lines))])
}

// At is when iteration index (from 1) of a timed trace falls due, in
// nanoseconds after the schedule's start.
func (r *Replay) At(index uint64) int64 {
	s := r.seconds(index)
	if r.skip > 0 {
		s -= r.seconds(0) // line "0" of the replay: the warm-up's last
	}
	return int64(math.Round(s / r.speed * 1e9))
}

// seconds is iteration index's timestamp counted across wraps, before the
// skip is taken off; index 0 with a skip is the last skipped line.
func (r *Replay) seconds(index uint64) float64 {
	at := r.trace.At
	n := uint64(len(at))
	l := r.line(index)
	return float64(l/n)*at[n-1] + at[l%n]
}

// Count is how many iterations of a timed trace fall due within d (at or
// before it).
func (r *Replay) Count(d time.Duration) uint64 {
	at := r.trace.At
	span := at[len(at)-1] / r.speed // one pass, s
	passes := uint64(d.Seconds()/span) + 2
	hi := passes*uint64(len(at))/r.shards + 2
	// The first index due after d; At never decreases.
	first := sort.Search(int(min(hi, math.MaxInt)), func(i int) bool {
		return i > 0 && r.At(uint64(i)) > int64(d)
	})
	return uint64(max(first-1, 0))
}

// Passes is how many passes through the trace iterations 1 to total touch:
// 1 when they stay within one, more when they wrap.
func (r *Replay) Passes(total uint64) uint64 {
	if total == 0 {
		return 0
	}
	n := uint64(len(r.trace.Lines))
	return r.line(total)/n - r.line(1)/n + 1
}
