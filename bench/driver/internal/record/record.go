// Package record keeps what a step's requests did: per scenario the
// iteration counts, the status classes and the latencies (HdrHistogram,
// microseconds, three significant digits), in total, per request name and
// per second.
package record

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Status classes, in the summary's order.
const (
	Class2xx = iota
	Class3xx
	Class4xx
	Class5xx
	ClassError
	NClasses
)

// ClassNames are the summary's keys of the status classes.
var ClassNames = [NClasses]string{"2xx", "3xx", "4xx", "5xx", "error"}

// Class is the class of an HTTP status; 0 (no answer) is ClassError.
func Class(status int) int {
	switch {
	case status >= 200 && status < 300:
		return Class2xx
	case status >= 300 && status < 400:
		return Class3xx
	case status >= 400 && status < 500:
		return Class4xx
	case status >= 500 && status < 600:
		return Class5xx
	}
	return ClassError
}

// FromDueSpan is how many request timeouts the from-due histogram spans: an
// iteration of several requests may end that long after its due time.
const FromDueSpan = 64

// Clock gives monotonic instants as nanoseconds since the driver's start and
// turns them into wall-clock time.
type Clock struct {
	base   time.Time
	unixNs int64
}

// NewClock starts a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{base: t, unixNs: t.UnixNano()} }

// Restart moves the clock's start to t; only before anything reads it.
func (c *Clock) Restart(t time.Time) { c.base, c.unixNs = t, t.UnixNano() }

// Now is the time since the clock's start (monotonic).
func (c *Clock) Now() int64 { return int64(time.Since(c.base)) }

// Epoch is the instant at offset off in epoch seconds.
func (c *Clock) Epoch(off int64) float64 { return float64(c.unixNs+off) / 1e9 }

// Wall is the instant at offset off.
func (c *Clock) Wall(off int64) time.Time { return time.Unix(0, c.unixNs+off) }

// Counter is a scenario's own count (the summary's counters).
type Counter struct {
	Name string
	n    atomic.Int64
}

// Add adds d.
func (c *Counter) Add(d int64) { c.n.Add(d) }

// Value is the count so far.
func (c *Counter) Value() int64 { return c.n.Load() }

// Recorder holds one scenario's figures. Iteration counts are atomics;
// requests are recorded under one short mutex.
type Recorder struct {
	Scenario string
	Rate     float64 // iterations per second (the target)
	Pool     int
	names    []string

	due, started, dropped, late, iterations, failed atomic.Int64
	inflight, inflightPeak                          atomic.Int64
	bodyBytes                                       atomic.Int64
	winDrops                                        atomic.Int64
	counters                                        []*Counter

	mu       sync.Mutex
	requests int64
	status   [NClasses]int64
	latency  *hdrhistogram.Histogram // answered, from sent
	all      *hdrhistogram.Histogram // every request, from sent
	fromDue  *hdrhistogram.Histogram // answered, from the iteration's due time
	byName   []nameRec
	highest  int64

	// Owned by TakeSecond (one caller at a time).
	lastStarted int64
	allWin      *hdrhistogram.Histogram
}

type nameRec struct {
	requests  int64
	status    [NClasses]int64
	latency   *hdrhistogram.Histogram
	winCount  int64
	winErrors int64
	win       *hdrhistogram.Histogram
	spare     *hdrhistogram.Histogram // swapped with win once a second
}

// NewRecorder keeps the figures of one scenario whose requests are named
// names (Request's name is an index into it) and time out after timeout.
func NewRecorder(scenario string, rate float64, pool int, names []string, timeout time.Duration) *Recorder {
	highest := max(timeout.Microseconds(), 1000)
	r := &Recorder{
		Scenario: scenario, Rate: rate, Pool: pool, names: names, highest: highest,
		latency: newHist(highest), all: newHist(highest), fromDue: newHist(highest * FromDueSpan),
		allWin: newHist(highest),
	}
	r.byName = make([]nameRec, len(names))
	for i := range r.byName {
		r.byName[i] = nameRec{latency: newHist(highest), win: newHist(highest), spare: newHist(highest)}
	}
	return r
}

func newHist(highest int64) *hdrhistogram.Histogram { return hdrhistogram.New(1, highest, 3) }

// Names are the scenario's request names.
func (r *Recorder) Names() []string { return r.names }

// AddCounter registers a counter of the scenario's own; do it before the load starts.
func (r *Recorder) AddCounter(name string) *Counter {
	c := &Counter{Name: name}
	r.counters = append(r.counters, c)
	return c
}

// Due counts an iteration that fell due.
func (r *Recorder) Due() { r.due.Add(1) }

// Drop counts an iteration dropped (never sent).
func (r *Recorder) Drop() {
	r.dropped.Add(1)
	r.winDrops.Add(1)
}

// Start counts an iteration started; late: after its due time by more than 1 ms.
func (r *Recorder) Start(late bool) {
	r.started.Add(1)
	if late {
		r.late.Add(1)
	}
	n := r.inflight.Add(1)
	for {
		peak := r.inflightPeak.Load()
		if n <= peak || r.inflightPeak.CompareAndSwap(peak, n) {
			return
		}
	}
}

// Finish counts an iteration ended; ok: every check passed.
func (r *Recorder) Finish(ok bool) {
	r.iterations.Add(1)
	if !ok {
		r.failed.Add(1)
	}
	r.inflight.Add(-1)
}

// Inflight is the number of iterations running now.
func (r *Recorder) Inflight() int64 { return r.inflight.Load() }

// Encoded are the answered requests' latencies, from the instant sent and
// from the due time, as HdrHistogram's compressed V2 encoding (base64): the
// form every HdrHistogram library reads, so shards merge exactly.
func (r *Recorder) Encoded() (latency, fromDue string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, err := r.latency.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		return "", "", err
	}
	d, err := r.fromDue.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		return "", "", err
	}
	return string(a), string(d), nil
}

// Received counts n bytes of an answer's body.
func (r *Recorder) Received(n int) { r.bodyBytes.Add(int64(n)) }

// Request records one request of name (an index of Names): its status (0:
// no answer), whether it was answered (the status the scenario expects),
// and when it was sent, ended and fell due (Clock offsets).
func (r *Recorder) Request(name, status int, answered bool, sent, ended, due int64) {
	us := micros(ended - sent)
	fromDue := micros(ended - due)
	class := Class(status)
	r.mu.Lock()
	r.requests++
	r.status[class]++
	r.all.RecordValue(min(us, r.highest))
	n := &r.byName[name]
	n.requests++
	n.status[class]++
	n.winCount++
	if answered {
		r.latency.RecordValue(min(us, r.highest))
		r.fromDue.RecordValue(min(fromDue, r.highest*FromDueSpan))
		n.latency.RecordValue(min(us, r.highest))
		n.win.RecordValue(min(us, r.highest))
	} else {
		n.winErrors++
	}
	r.mu.Unlock()
}

// micros rounds nanoseconds to microseconds, at least 1 (the histograms' floor).
func micros(ns int64) int64 { return max((ns+500)/1000, 1) }

// Latency is a distribution in milliseconds.
type Latency struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
}

func ms(us int64) float64 { return float64(us) / 1000 }

// latencyOf is nil for an empty histogram.
func latencyOf(h *hdrhistogram.Histogram) *Latency {
	if h.TotalCount() == 0 {
		return nil
	}
	q := h.ValueAtPercentilesSlice([]float64{50, 95, 99})
	return &Latency{
		Count: h.TotalCount(), P50: ms(q[0]), P95: ms(q[1]), P99: ms(q[2]), Max: ms(h.Max()),
		Mean: float64(int64(h.Mean()+0.5)) / 1000,
	}
}

// NameTotals are one request name's figures.
type NameTotals struct {
	Name     string
	Requests int64
	Status   [NClasses]int64
	Latency  *Latency
}

// Totals are a scenario's figures over the whole step.
type Totals struct {
	Scenario                                                  string
	Rate                                                      float64
	Pool                                                      int
	InflightPeak                                              int64
	Due, Started, Dropped, Late, Iterations, Failed, Requests int64
	BodyBytes                                                 int64
	Status                                                    [NClasses]int64
	Latency, LatencyAll, FromDue                              *Latency
	ByName                                                    []NameTotals
	Counters                                                  []NamedCount
}

// NamedCount is one counter's value.
type NamedCount struct {
	Name  string
	Value int64
}

// Totals are the figures so far.
func (r *Recorder) Totals() Totals {
	t := Totals{
		Scenario: r.Scenario, Rate: r.Rate, Pool: r.Pool, InflightPeak: r.inflightPeak.Load(),
		Due: r.due.Load(), Started: r.started.Load(), Dropped: r.dropped.Load(), Late: r.late.Load(),
		Iterations: r.iterations.Load(), Failed: r.failed.Load(), BodyBytes: r.bodyBytes.Load(),
	}
	for _, c := range r.counters {
		t.Counters = append(t.Counters, NamedCount{c.Name, c.Value()})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Requests, t.Status = r.requests, r.status
	t.Latency, t.LatencyAll, t.FromDue = latencyOf(r.latency), latencyOf(r.all), latencyOf(r.fromDue)
	for i, n := range r.byName {
		t.ByName = append(t.ByName, NameTotals{Name: r.names[i], Requests: n.requests, Status: n.status, Latency: latencyOf(n.latency)})
	}
	return t
}

// NameSecond is one request name's figures of a second; Latency is nil
// when nothing was answered in it.
type NameSecond struct {
	Name          string
	Count, Errors int64
	P50, P95, P99 float64
	HasLatency    bool
}

// Second is a scenario's figures of one second: Names[0] is the whole
// scenario ("all"), then each name that had a request.
type Second struct {
	Scenario string
	Rate     float64
	Drops    int64
	Started  int64 // iterations started in the second
	Inflight int64
	Names    []NameSecond
}

// AllName is the name of a scenario's total in the per-second figures.
const AllName = "all"

// TakeSecond returns the figures since the last call and starts a new second.
func (r *Recorder) TakeSecond() Second {
	type taken struct {
		count, errors int64
		hist          *hdrhistogram.Histogram
	}
	got := make([]taken, len(r.byName))
	r.mu.Lock()
	for i := range r.byName {
		n := &r.byName[i]
		got[i] = taken{n.winCount, n.winErrors, n.win}
		n.winCount, n.winErrors = 0, 0
		n.win, n.spare = n.spare, n.win
	}
	r.mu.Unlock()

	started := r.started.Load()
	s := Second{
		Scenario: r.Scenario, Rate: r.Rate, Drops: r.winDrops.Swap(0),
		Started: started - r.lastStarted, Inflight: r.inflight.Load(),
	}
	r.lastStarted = started
	r.allWin.Reset()
	all := NameSecond{Name: AllName}
	s.Names = append(s.Names, all)
	for i, g := range got {
		all.Count += g.count
		all.Errors += g.errors
		if g.count > 0 {
			one := NameSecond{Name: r.names[i], Count: g.count, Errors: g.errors}
			quantiles(&one, g.hist)
			s.Names = append(s.Names, one)
			r.allWin.Merge(g.hist)
		}
		g.hist.Reset()
	}
	quantiles(&all, r.allWin)
	s.Names[0] = all
	return s
}

func quantiles(n *NameSecond, h *hdrhistogram.Histogram) {
	if h.TotalCount() == 0 {
		return
	}
	q := h.ValueAtPercentilesSlice([]float64{50, 95, 99})
	n.P50, n.P95, n.P99, n.HasLatency = ms(q[0]), ms(q[1]), ms(q[2]), true
}

// Tag is one of a sample's tags.
type Tag struct{ Key, Value string }

// Sample is one request, as the samples file has it.
type Sample struct {
	Scenario string
	Name     string
	Sent     float64 // epoch seconds
	Due      float64
	Ms       float64
	Status   int
	OK       bool
	NewConn  bool
	Tags     []Tag
}

// Sink takes every request and dropped iteration (SAMPLES_PATH).
type Sink interface {
	Request(s *Sample)
	Dropped(scenario string, t, due float64)
}
