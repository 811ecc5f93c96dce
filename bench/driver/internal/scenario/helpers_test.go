package scenario_test

import (
	"sync"
	"testing"
	"time"

	"aside/bench/driver/internal/record"
	"aside/bench/driver/internal/scenario"
)

// memSink keeps every sample (tags copied: the worker reuses its slice).
type memSink struct {
	mu      sync.Mutex
	samples []record.Sample
	drops   int
}

func (m *memSink) Request(s *record.Sample) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := *s
	c.Tags = append([]record.Tag(nil), s.Tags...)
	m.samples = append(m.samples, c)
}

func (m *memSink) Dropped(string, float64, float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drops++
}

func (m *memSink) all() []record.Sample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]record.Sample(nil), m.samples...)
}

func tagOf(s record.Sample, key string) (string, bool) {
	for _, t := range s.Tags {
		if t.Key == key {
			return t.Value, true
		}
	}
	return "", false
}

func newClient(t testing.TB, url string, timeout time.Duration) *scenario.Client {
	t.Helper()
	c, err := scenario.NewClient(url, 8, timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdle)
	return c
}

// harness is one scenario's environment and a worker of it.
type harness struct {
	env  *scenario.Env
	w    *scenario.Worker
	scn  scenario.Scenario
	sink *memSink
}

func newHarness(t testing.TB, c *scenario.Client, scn scenario.Scenario, timeout time.Duration) *harness {
	t.Helper()
	rec := record.NewRecorder(scn.Name(), 1, 1, scn.Names(), timeout)
	if cs, ok := scn.(scenario.Counting); ok {
		cs.Register(rec)
	}
	sink := &memSink{}
	env := &scenario.Env{Client: c, Rec: rec, Sink: sink, Clock: record.NewClock(time.Now()), Timeout: timeout, Seed: 1}
	h := &harness{env: env, w: scenario.NewWorker(env, 1), scn: scn, sink: sink}
	t.Cleanup(h.w.Release)
	return h
}

// iterate runs the next iteration.
func (h *harness) iterate() bool {
	h.w.Begin(uint64(h.w.Iter+1), h.env.Clock.Now())
	ok := h.scn.Iterate(h.w)
	h.w.Iter++
	return ok
}

func counter(rec *record.Recorder, name string) int64 {
	for _, c := range rec.Totals().Counters {
		if c.Name == name {
			return c.Value
		}
	}
	return -1
}
