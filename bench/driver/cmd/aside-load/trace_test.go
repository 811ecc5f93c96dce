package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"aside/bench/driver/internal/keytrace"
)

// keyServer answers every count read (a MISS of count 1) and keeps the
// emails it was asked for.
type keyServer struct {
	mu   sync.Mutex
	seen []string
	srv  *httptest.Server
}

func newKeyServer(t *testing.T) *keyServer {
	k := &keyServer{}
	k.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		email := r.URL.Query().Get("email")
		k.mu.Lock()
		k.seen = append(k.seen, email)
		k.mu.Unlock()
		w.Header().Set("X-Cache", "MISS")
		fmt.Fprintf(w, `{"email":%q,"count":1}`, email)
	}))
	t.Cleanup(k.srv.Close)
	return k
}

// asked is every email the server was asked for, sorted (the workers'
// requests may reach it in any order).
func (k *keyServer) asked() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := append([]string(nil), k.seen...)
	sort.Strings(out)
	return out
}

// keySpace is a DATA_DIR with emails.txt of n keys beside the seeder's other files.
func keySpace(t *testing.T, n int) string {
	dir := dataDir(t)
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "k%03d@x.example\n", i)
	}
	if err := os.WriteFile(filepath.Join(dir, "emails.txt"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readTrace(t *testing.T, path string) ([]string, []float64) {
	t.Helper()
	tr, err := keytrace.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(tr.Lines))
	for i, k := range tr.Lines {
		out[i] = tr.Keys[k]
	}
	return out, tr.At
}

func sorted(keys []string) []string {
	out := append([]string(nil), keys...)
	sort.Strings(out)
	return out
}

// A zipf step's recording, replayed with nothing dropped, asks the same keys
// in the same order, due at the same instants; and the recording's lines are
// the requests sent.
func TestReplayOfARecordingRecordsTheSameTrace(t *testing.T) {
	dir, data := t.TempDir(), keySpace(t, 50)
	first := newKeyServer(t)
	recorded := filepath.Join(dir, "zipf.trace.gz")
	r, err := step(t, context.Background(), map[string]string{
		"BASE_URL": first.srv.URL, "SCENARIO": "read", "CACHE": "l2", "DATA_DIR": data,
		"RATE": "200", "DURATION": "1s", "DIST": "zipf", "ALPHA": "0.99", "SEED": "3",
		"KEY_TRACE_PATH": recorded, "POOL": "50", "LATE_MS": "2000",
	})
	if err != nil {
		t.Fatal(err)
	}
	read := obj(r.summary, "scenarios", "read")
	kt := obj(r.summary, "key_trace")
	if read["dropped"] != float64(0) || kt["lines"] != read["requests"] || kt["lost"] != float64(0) || kt["path"] != recorded {
		t.Fatalf("a recording of %v: key_trace %v", read, kt)
	}
	if !strings.Contains(r.stdout, "key trace: 200 lines to "+recorded+", 0 lost\n") {
		t.Errorf("stdout %q", r.stdout)
	}
	keys, at := readTrace(t, recorded)
	if len(keys) != 200 || !reflect.DeepEqual(sorted(keys), first.asked()) {
		t.Fatalf("recorded %d keys; the server was asked %d, the same: %v", len(keys), len(first.asked()),
			reflect.DeepEqual(sorted(keys), first.asked()))
	}
	if at[0] != 0.005 || at[199] != 1.0 {
		t.Errorf("due times %g .. %g, want 0.005 .. 1 (200/s)", at[0], at[199])
	}

	second := newKeyServer(t)
	again := filepath.Join(dir, "again.trace")
	r, err = step(t, context.Background(), map[string]string{
		"BASE_URL": second.srv.URL, "SCENARIO": "read", "CACHE": "l2", "DATA_DIR": data,
		"RATE": "1", "DURATION": "1s", "TRACE": recorded, "KEY_TRACE_PATH": again, "POOL": "50", "LATE_MS": "2000",
	})
	if err != nil {
		t.Fatal(err)
	}
	replayed, replayedAt := readTrace(t, again)
	if dropped := num(r.summary, "scenarios", "read", "dropped"); dropped != 0 {
		t.Fatalf("the replay dropped %g", dropped)
	}
	if !reflect.DeepEqual(replayed, keys) || !reflect.DeepEqual(replayedAt, at) {
		t.Errorf("the replay's recording differs: %d keys, first %v, want %v", len(replayed), replayed[:5], keys[:5])
	}
	if !reflect.DeepEqual(second.asked(), first.asked()) {
		t.Error("the replay asked the server for other keys")
	}
	tr := obj(r.summary, "trace")
	if tr["path"] != recorded || tr["lines"] != float64(200) || tr["timed"] != true || tr["passes"] != float64(1) ||
		tr["wrapped"] != false || obj(r.summary, "config")["dist"] != "trace" {
		t.Errorf("summary trace %v config %v", tr, obj(r.summary, "config"))
	}
}

// A timed trace sets the schedule: each line due at its timestamp over
// TRACE_SPEED, again one period (the last timestamp) later past its end.
func TestTimedTraceSetsTheDueTimes(t *testing.T) {
	srv := newKeyServer(t)
	trace := filepath.Join(t.TempDir(), "timed.trace")
	os.WriteFile(trace, []byte("# three keys\na@x\t0.1\nb@x\t0.2\n\nc@x\t0.4\n"), 0o644)
	r, err := step(t, context.Background(), map[string]string{
		"BASE_URL": srv.srv.URL, "SCENARIO": "bare", "CACHE": "l2", "DATA_DIR": dataDir(t),
		"RATE": "1000", "DURATION": "450ms", "TRACE": trace, "TRACE_SPEED": "2",
	})
	if err != nil {
		t.Fatal(err)
	}
	start := r.summary["started_at"].(float64)
	var dues []float64
	for _, s := range r.samples {
		dues = append(dues, s["due"].(float64)-start)
	}
	sort.Float64s(dues)
	want := []float64{0.05, 0.1, 0.2, 0.25, 0.3, 0.4, 0.45}
	if len(dues) != len(want) {
		t.Fatalf("%d requests due at %v, want %v", len(dues), dues, want)
	}
	for i := range want {
		if math.Abs(dues[i]-want[i]) > 1e-4 {
			t.Errorf("request %d due at %.6f s, want %g", i+1, dues[i], want[i])
		}
	}
	if got := srv.asked(); strings.Join(got, " ") != "a@x a@x a@x b@x b@x c@x c@x" {
		t.Errorf("asked %v", got)
	}
	tr := obj(r.summary, "trace")
	if tr["timed"] != true || tr["speed"] != float64(2) || tr["passes"] != float64(3) || tr["wrapped"] != true {
		t.Errorf("summary trace %v", tr)
	}
	if rate := num(r.summary, "scenarios", "bare", "rate"); math.Abs(rate-7/0.45) > 0.01 {
		t.Errorf("the scenario's rate %g, want %g (the trace's)", rate, 7/0.45)
	}
}

// Without timestamps (or with some lines lacking one) the keys go at RATE,
// in the trace's order, wrapping around; the interference reads replay it too.
func TestUntimedTraceGoesAtRateAndWraps(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "untimed.trace")
	os.WriteFile(trace, []byte("a@x\nb@x\t0.3\nc@x\n"), 0o644)
	for _, scn := range []string{"read", "interference"} {
		srv := newKeyServer(t)
		keys := filepath.Join(dir, scn+".trace")
		env := map[string]string{
			"BASE_URL": srv.srv.URL, "SCENARIO": scn, "CACHE": "l2", "DATA_DIR": dataDir(t),
			"RATE": "20", "DURATION": "500ms", "TRACE": trace, "KEY_TRACE_PATH": keys,
		}
		if scn == "interference" {
			env["RATE"], env["READ_RATE"] = "0", "20"
		}
		r, err := step(t, context.Background(), env)
		if err != nil {
			t.Fatal(err)
		}
		got, at := readTrace(t, keys)
		if strings.Join(got, " ") != "a@x b@x c@x a@x b@x c@x a@x b@x c@x a@x" || at[0] != 0.05 || at[9] != 0.5 {
			t.Errorf("%s: asked %v at %v", scn, got, at)
		}
		tr := obj(r.summary, "trace")
		if tr["timed"] != false || tr["passes"] != float64(4) || tr["wrapped"] != true || tr["keys"] != float64(3) {
			t.Errorf("%s: summary trace %v", scn, tr)
		}
	}
}

func TestBadTraceExitsTwo(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "bad.trace")
	os.WriteFile(trace, []byte("a@x\t0.1\nb@x\tlater\n"), 0o644)
	base := map[string]string{
		"BASE_URL": "http://127.0.0.1:1", "SCENARIO": "read", "CACHE": "l2", "DATA_DIR": dataDir(t),
		"RATE": "10", "DURATION": "1s", "TRACE": trace,
	}
	_, err := step(t, context.Background(), base)
	if err == nil || exitCode(err) != 2 || err.Error() != `TRACE: line 2: the timestamp must be seconds >= 0, got "later"` {
		t.Errorf("a bad line: %v (exit %d)", err, exitCode(err))
	}
	base["DIST"] = "uniform"
	_, err = step(t, context.Background(), base)
	if err == nil || exitCode(err) != 2 || !strings.HasPrefix(err.Error(), "TRACE and DIST=uniform are exclusive") {
		t.Errorf("TRACE with DIST: %v", err)
	}
	_, err = step(t, context.Background(), map[string]string{
		"BASE_URL": "http://127.0.0.1:1", "SCENARIO": "mixed", "CACHE": "l2", "DATA_DIR": dataDir(t),
		"RATE": "10", "DURATION": "1s", "TRACE": trace,
	})
	if err == nil || exitCode(err) != 2 || !strings.HasPrefix(err.Error(), "TRACE must be unset for the mixed scenario") {
		t.Errorf("TRACE with mixed: %v", err)
	}
}
