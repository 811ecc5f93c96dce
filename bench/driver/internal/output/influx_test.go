package output_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"aside/bench/driver/internal/output"
	"aside/bench/driver/internal/record"
)

// fakeInflux takes writes as InfluxDB does, or, while hang or refuse is set,
// holds the request without an answer or answers 503.
type fakeInflux struct {
	srv            *httptest.Server
	hang, refuse   atomic.Bool
	mu             sync.Mutex
	lines          map[string]bool // every point it took, as its line
	release        chan struct{}
	tries, answers atomic.Int64
}

func newFakeInflux(t *testing.T) *fakeInflux {
	f := &fakeInflux{lines: map[string]bool{}, release: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.tries.Add(1)
		body, _ := io.ReadAll(r.Body)
		if f.hang.Load() {
			select {
			case <-f.release:
			case <-r.Context().Done():
			}
			return
		}
		if f.refuse.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		f.take(body)
		f.answers.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(f.srv.Close)
	t.Cleanup(func() { close(f.release) })
	return f
}

func (f *fakeInflux) take(body []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		f.lines[line] = true
	}
}

func (f *fakeInflux) taken() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]bool, len(f.lines))
	for k := range f.lines {
		out[k] = true
	}
	return out
}

// stepLoad writes a batch of 3 points every 50 ms for `batches` batches, each
// second of its own, then ends the step (one load_step point); the lines sent,
// what became of them and how long the end took.
func stepLoad(t *testing.T, x *output.Influx, batches int, during func(i int)) (map[string]bool, output.Points, time.Duration) {
	t.Helper()
	sent := map[string]bool{}
	at := time.UnixMilli(1764080000000)
	for i := range batches {
		during(i)
		when := at.Add(time.Duration(i) * time.Second)
		body, _, _ := output.Encode(when, seconds(), stepTags)
		for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
			sent[line] = true
		}
		x.Write(when, seconds())
		time.Sleep(50 * time.Millisecond) // the batches' pace, as the driver's second
	}
	rec := record.NewRecorder("read", 100, 10, []string{"count"}, time.Second)
	end := at.Add(time.Duration(batches) * time.Second)
	body, _, _ := output.EncodeSteps(end, end, []*record.Recorder{rec}, stepTags, 1)
	sent[strings.TrimSpace(string(body))] = true
	began := time.Now()
	p := x.Finish(end, end, []*record.Recorder{rec})
	return sent, p, time.Since(began)
}

func spooled(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		out[string(line)] = true
	}
	return out
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// An InfluxDB that accepts and never answers: the step ends within
// CloseBudget (and a second) of its load, and every point is in the spool.
func TestInfluxThatHangsCostsNoPointAndNoMoreThanTheBudget(t *testing.T) {
	f := newFakeInflux(t)
	f.hang.Store(true)
	spool := filepath.Join(t.TempDir(), "influx-spool", "step.lp")
	x := output.NewInflux(f.srv.URL+"/write?db=aside&precision=ms", stepTags, 1, spool)
	sent, p, took := stepLoad(t, x, 20, func(int) {})
	if took > output.CloseBudget+time.Second {
		t.Errorf("the step's end took %v with InfluxDB hanging, want at most %v", took, output.CloseBudget+time.Second)
	}
	if p.Written != 0 || p.Lost != 0 || p.Spooled != int64(len(sent)) || p.Spool != spool {
		t.Errorf("points %+v, want all %d spooled to %s", p, len(sent), spool)
	}
	if got := spooled(t, spool); strings.Join(keys(got), "\n") != strings.Join(keys(sent), "\n") {
		t.Errorf("the spool holds %d lines, %d were sent", len(got), len(sent))
	}
}

// An InfluxDB that refuses (503) in the middle of a step: the batches it
// refused are spooled, the others written, none lost; written and spooled
// together are every point, exactly once over, and the spool resent reaches it.
func TestInfluxThatRefusesAWhileSpoolsWhatItRefused(t *testing.T) {
	f := newFakeInflux(t)
	spool := filepath.Join(t.TempDir(), "step.lp")
	x := output.NewInflux(f.srv.URL+"/write?db=aside&precision=ms", stepTags, 1, spool)
	sent, p, took := stepLoad(t, x, 40, func(i int) { f.refuse.Store(i >= 5 && i < 25) })
	if took > output.CloseBudget+time.Second {
		t.Errorf("the step's end took %v", took)
	}
	taken, kept := f.taken(), spooled(t, spool)
	if p.Lost != 0 || p.Spooled == 0 || p.Written != int64(len(taken)) || p.Spooled != int64(len(kept)) {
		t.Errorf("points %+v; InfluxDB took %d, the spool holds %d", p, len(taken), len(kept))
	}
	for line := range sent {
		if taken[line] == kept[line] {
			t.Fatalf("a point written %v and spooled %v: %s", taken[line], kept[line], line)
		}
	}
	b, _ := os.ReadFile(spool)
	resp, err := http.Post(f.srv.URL+"/write?db=aside&precision=ms", "text/plain", bytes.NewReader(b))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("resend: %v %v", resp, err)
	}
	resp.Body.Close()
	if got := f.taken(); len(got) != len(sent) {
		t.Errorf("after the resend InfluxDB holds %d points of %d", len(got), len(sent))
	}
}
