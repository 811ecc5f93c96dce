// Package scenario holds what one iteration of each scenario does: the
// requests it builds, the checks of their answers, and how each request is
// recorded. The schedule calls Iterate with a worker of its pool.
package scenario

import (
	"hash/fnv"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"aside/bench/driver/internal/record"
)

// Scenario is one load of a step.
type Scenario interface {
	// Name is the scenario's name in the summary and on the points.
	Name() string
	// Names are its request names; Worker.Record takes an index of them.
	Names() []string
	// Iterate runs one iteration; true when every check passed.
	Iterate(w *Worker) bool
}

// Counting is a scenario with counters of its own, registered before the load starts.
type Counting interface {
	Register(rec *record.Recorder)
}

// Env is what the workers of one scenario share.
type Env struct {
	Client  *Client
	Rec     *record.Recorder
	Sink    record.Sink // nil: no samples
	Clock   *record.Clock
	Timeout time.Duration
	// Seed and Stream make each iteration's random choices: the same seed,
	// the same choices for the same iteration of the same scenario and shard.
	Seed   uint64
	Stream uint64
	// Skip moves every iteration's draws this many places along the stream:
	// a step measured after a warm-up of Skip iterations asks for what
	// follows the warm-up's keys instead of the same keys again.
	Skip uint64
	// stopAt (a Clock offset, 0: none) is when an iteration of several
	// requests stops sending: the drain after the schedule's end is bounded.
	stopAt atomic.Int64
}

// StreamOf is the random stream of a scenario in a shard.
func StreamOf(scenario string, shard int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(scenario))
	return h.Sum64() ^ uint64(shard)*0x9e3779b97f4a7c15
}

// StopAt makes iterations send nothing after the Clock offset t.
func (e *Env) StopAt(t int64) { e.stopAt.Store(t) }

// Worker is one worker's state: its request and response (reused), its
// JSON parser, its random stream and the iteration it runs.
type Worker struct {
	// ID is the worker's number: 1.. in a process; with SHARDS > 1, worker
	// i of shard s is (i-1)*SHARDS + s + 1, so names stay unique across shards.
	ID int
	// Iter counts the iterations the worker started before this one.
	Iter int64
	// Index is the iteration's place in the schedule (from 1), Due its due time.
	Index uint64
	Due   int64
	Rand  Rand
	Req   *fasthttp.Request
	Resp  *fasthttp.Response
	JSON  fastjson.Parser
	// Tags are the current request's sample tags (only read when sampling).
	Tags []record.Tag
	// Generation is the stale checker's: bumped when a write was not
	// acknowledged, so the next iteration takes fresh emails.
	Generation int
	// Buf is scratch space for building a request.
	Buf []byte

	env    *Env
	sample record.Sample
}

// NewWorker is worker id of env.
func NewWorker(env *Env, id int) *Worker {
	return &Worker{ID: id, env: env, Req: fasthttp.AcquireRequest(), Resp: fasthttp.AcquireResponse()}
}

// Release gives the request and response back.
func (w *Worker) Release() {
	fasthttp.ReleaseRequest(w.Req)
	fasthttp.ReleaseResponse(w.Resp)
	w.Req, w.Resp = nil, nil
}

// Env is the worker's scenario environment.
func (w *Worker) Env() *Env { return w.env }

// Begin readies the worker for the iteration at index, due at due.
func (w *Worker) Begin(index uint64, due int64) {
	w.Index, w.Due = index, due
	w.Rand.Seed(w.env.Seed, w.env.Stream, index+w.env.Skip)
}

// Stopped is true once the drain's deadline has passed: an iteration of
// several requests sends no more.
func (w *Worker) Stopped() bool {
	t := w.env.stopAt.Load()
	return t != 0 && w.env.Clock.Now() >= t
}

// Sampling is true when requests go to the samples file (tags are wanted).
func (w *Worker) Sampling() bool { return w.env.Sink != nil }

// Exchange is one request's outcome.
type Exchange struct {
	Sent, Ended int64 // Clock offsets
	Status      int   // 0: no answer (Err says why)
	Err         error
	NewConn     bool
}

// Get readies a GET of url.
func (w *Worker) Get(url []byte) {
	w.Req.Reset()
	w.Req.SetRequestURIBytes(url)
}

// Send readies a request with a JSON body (none when body is nil).
func (w *Worker) Send(method string, url []byte, body []byte) {
	w.Req.Reset()
	w.Req.Header.SetMethod(method)
	w.Req.SetRequestURIBytes(url)
	if body != nil {
		w.Req.Header.SetContentType("application/json")
		w.Req.SetBodyRaw(body)
	}
}

// Do sends the readied request once; the answer is in w.Resp.
func (w *Worker) Do() Exchange {
	x := Exchange{Sent: w.env.Clock.Now()}
	x.NewConn, x.Err = w.env.Client.do(w.Req, w.Resp, w.env.Timeout)
	x.Ended = w.env.Clock.Now()
	if x.Err == nil {
		x.Status = w.Resp.StatusCode()
	}
	return x
}

// Record records the request of name (an index of Names): answered when
// its status is the expected one, ok when every check of it passed. When
// sampling, w.Tags go with it (an error tag is added for no answer).
func (w *Worker) Record(name int, x *Exchange, answered, ok bool) {
	e := w.env
	e.Rec.Request(name, x.Status, answered, x.Sent, x.Ended, w.Due)
	if x.Err == nil {
		e.Rec.Received(len(w.Resp.Body()))
	}
	if e.Sink == nil {
		w.Tags = w.Tags[:0]
		return
	}
	if x.Err != nil && !hasTag(w.Tags, "error") {
		w.Tags = append(w.Tags, record.Tag{Key: "error", Value: ErrorCode(x.Err)})
	}
	s := &w.sample
	*s = record.Sample{
		Scenario: e.Rec.Scenario, Name: e.Rec.Names()[name],
		Sent: e.Clock.Epoch(x.Sent), Due: e.Clock.Epoch(w.Due), Ms: float64(x.Ended-x.Sent) / 1e6,
		Status: x.Status, OK: ok, NewConn: x.NewConn, Tags: w.Tags,
	}
	e.Sink.Request(s)
	w.Tags = w.Tags[:0]
}

// Tag adds a sample tag to the current request.
func (w *Worker) Tag(key, value string) {
	w.Tags = append(w.Tags, record.Tag{Key: key, Value: value})
}

func hasTag(tags []record.Tag, key string) bool {
	for _, t := range tags {
		if t.Key == key {
			return true
		}
	}
	return false
}

// Rand is a splitmix64 stream: cheap, and seeded per iteration.
type Rand struct{ s uint64 }

// Seed starts the stream of iteration index of stream under seed.
func (r *Rand) Seed(seed, stream, index uint64) {
	r.s = seed*0xbf58476d1ce4e5b9 ^ stream
	r.s = r.Uint64() ^ index*0x94d049bb133111eb
}

// Uint64 is the next number.
func (r *Rand) Uint64() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Float64 is uniform in [0, 1).
func (r *Rand) Float64() float64 { return float64(r.Uint64()>>11) / (1 << 53) }

// Intn is uniform in [0, n).
func (r *Rand) Intn(n int) int { return int(r.Uint64() % uint64(n)) }

// itoa is strconv.Itoa for ids and counters (names read better than strconv calls).
func itoa(n int64) string { return strconv.FormatInt(n, 10) }
