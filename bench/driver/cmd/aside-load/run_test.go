package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"

	"aside/bench/driver/internal/fakeapi"
)

// dataDir writes the seeder's files: 5 hot emails, 5 cold, ids 1..3, two tracks.
func dataDir(t *testing.T) string {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("hot_emails.json", `["h0@x.example","h1@x.example","h2@x.example","h3@x.example","h4@x.example"]`)
	write("cold_emails.json", `{"emails":["c0@x.example","c1@x.example","c2@x.example","c3@x.example","c4@x.example"]}`)
	write("user_ids.json", `{"ids":[1,2,3]}`)
	write("tracks.json", `{"seed":1,"count":2,"tracks":[{"id":1,"points":60,"bytes":1300},{"id":2,"points":9000,"bytes":200000}]}`)
	return dir
}

type influxSink struct {
	mu      sync.Mutex
	bodies  [][]byte
	queries []string
	srv     *httptest.Server
}

func newInfluxSink(t *testing.T) *influxSink {
	s := &influxSink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.bodies = append(s.bodies, b)
		s.queries = append(s.queries, r.URL.Path+"?"+r.URL.RawQuery)
		s.mu.Unlock()
		w.WriteHeader(204)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

type point struct {
	tags   map[string]string
	fields map[string]any
}

// points are the sink's points of measurement load_second; steps those of load_step.
func (s *influxSink) points(t *testing.T) []point { return s.measured(t, "load_second") }

func (s *influxSink) steps(t *testing.T) []point { return s.measured(t, "load_step") }

func (s *influxSink) measured(t *testing.T, measurement string) []point {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []point
	for _, b := range s.bodies {
		dec := lineprotocol.NewDecoderWithBytes(b)
		for dec.Next() {
			p := point{tags: map[string]string{}, fields: map[string]any{}}
			m, _ := dec.Measurement()
			if string(m) != "load_second" && string(m) != "load_step" {
				t.Fatalf("measurement %q", m)
			}
			for {
				k, v, err := dec.NextTag()
				if err != nil || k == nil {
					break
				}
				p.tags[string(k)] = string(v)
			}
			for {
				k, v, err := dec.NextField()
				if err != nil || k == nil {
					break
				}
				p.fields[string(k)] = v.Interface()
			}
			if _, err := dec.Time(lineprotocol.Millisecond, time.Time{}); err != nil {
				t.Fatal(err)
			}
			if string(m) == measurement {
				out = append(out, p)
			}
		}
	}
	return out
}

type result struct {
	summary map[string]any
	stdout  string
	stderr  string
	samples []map[string]any
}

// step runs the driver with the environment kv (plus SUMMARY_PATH and
// SAMPLES_PATH in a temp dir) and reads what it wrote.
func step(t *testing.T, ctx context.Context, kv map[string]string) (result, error) {
	t.Helper()
	dir := t.TempDir()
	env := map[string]string{
		"RUN_ID": "r1", "ARM": "cache", "PHASE": "warm", "TIMEOUT_S": "2",
		"SUMMARY_PATH": filepath.Join(dir, "summary.json"), "SAMPLES_PATH": filepath.Join(dir, "samples.jsonl"),
	}
	for k, v := range kv {
		env[k] = v
	}
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"aside-load"}, func(k string) string { return env[k] }, &stdout, &stderr)
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if b, rerr := os.ReadFile(env["SUMMARY_PATH"]); rerr == nil {
		if jerr := json.Unmarshal(b, &r.summary); jerr != nil {
			t.Fatalf("summary is not JSON: %v", jerr)
		}
	}
	if f, ferr := os.Open(env["SAMPLES_PATH"]); ferr == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var one map[string]any
			if jerr := json.Unmarshal(sc.Bytes(), &one); jerr != nil {
				t.Fatalf("samples line %q: %v", sc.Text(), jerr)
			}
			r.samples = append(r.samples, one)
		}
	}
	return r, err
}

func obj(v any, path ...string) map[string]any {
	for _, p := range path {
		m, _ := v.(map[string]any)
		v = m[p]
	}
	m, _ := v.(map[string]any)
	return m
}

func num(v any, path ...string) float64 {
	last := path[len(path)-1]
	f, _ := obj(v, path[:len(path)-1]...)[last].(float64)
	return f
}

func TestBadConfigExitsTwo(t *testing.T) {
	_, err := step(t, context.Background(), map[string]string{
		"BASE_URL": "http://127.0.0.1:1", "SCENARIO": "healthz", "RATE": "x", "DURATION": "1s",
	})
	if err == nil || exitCode(err) != 2 || err.Error() != `RATE must be a whole number >= 0, got "x"` {
		t.Fatalf("error %v (exit %d)", err, exitCode(err))
	}
	err = run(context.Background(), []string{"aside-load", "--rate"}, func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil || exitCode(err) != 2 {
		t.Errorf("an unknown argument: %v", err)
	}
	_, err = step(t, context.Background(), map[string]string{
		"BASE_URL": "http://127.0.0.1:1", "SCENARIO": "read", "CACHE": "l2", "RATE": "1", "DURATION": "1s", "DATA_DIR": t.TempDir(),
	})
	if err == nil || exitCode(err) != 2 || !strings.HasPrefix(err.Error(), "DATA_DIR ") {
		t.Errorf("missing data files: %v", err)
	}
}

func TestSummarySamplesAndPoints(t *testing.T) {
	api := fakeapi.New()
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	influx := newInfluxSink(t)
	r, err := step(t, context.Background(), map[string]string{
		"BASE_URL": srv.URL, "SCENARIO": "read", "CACHE": "l2", "DATA_DIR": dataDir(t),
		"RATE": "200", "DURATION": "1200ms", "INFLUX_URL": influx.srv.URL + "/aside", "LIVE": "1",
	})
	if err != nil {
		t.Fatal(err)
	}
	s := r.summary
	if s["schema_version"] != float64(1) || s["driver"] != "aside-load" || s["interrupted"] != false {
		t.Errorf("summary head %v", s)
	}
	if p := obj(s, "influx"); p["written"] != float64(len(influx.points(t))+1) || p["spooled"] != float64(0) || p["lost"] != float64(0) {
		t.Errorf("influx %v", p)
	}
	for _, key := range []string{"started_at", "ended_at"} {
		if _, ok := s[key]; !ok {
			t.Errorf("no %s", key)
		}
	}
	if num(s, "ended_at") <= num(s, "started_at") || num(s, "cpu", "user_s")+num(s, "cpu", "system_s") <= 0 {
		t.Errorf("times or cpu %v %v", s["started_at"], s["cpu"])
	}
	cfg := obj(s, "config")
	for key, want := range map[string]any{
		"scenario": "read", "arm": "cache", "phase": "warm", "rate": float64(200), "duration_s": 1.2,
		"repeat": float64(1), "run_id": "r1", "seed": float64(1), "late_ms": float64(100), "timeout_s": float64(2),
	} {
		if cfg[key] != want {
			t.Errorf("config %s = %v, want %v", key, cfg[key], want)
		}
	}
	read := obj(s, "scenarios", "read")
	for key, want := range map[string]float64{"rate": 200, "pool": 200, "due": 240, "started": 240, "dropped": 0, "iterations": 240, "failed": 0, "requests": 240} {
		if read[key] != want {
			t.Errorf("read %s = %v, want %v", key, read[key], want)
		}
	}
	for _, key := range []string{"inflight_peak", "late", "status", "latency", "latency_all", "latency_from_due", "by_name", "counters"} {
		if _, ok := read[key]; !ok {
			t.Errorf("no %s in the scenario", key)
		}
	}
	if st := obj(read, "status"); len(st) != 5 || st["2xx"] != float64(240) || st["error"] != float64(0) {
		t.Errorf("status %v", st)
	}
	lat := obj(read, "latency")
	for _, key := range []string{"count", "p50", "p95", "p99", "max", "mean"} {
		if _, ok := lat[key]; !ok {
			t.Errorf("no %s in latency", key)
		}
	}
	if num(read, "latency_from_due", "p95") < num(read, "latency", "p95") {
		t.Error("from due below from sent")
	}
	if c := obj(read, "by_name", "count"); c["requests"] != float64(240) || num(c, "latency", "count") != 240 {
		t.Errorf("by_name %v", obj(read, "by_name"))
	}

	if len(r.samples) != 240 {
		t.Errorf("%d samples, want 240", len(r.samples))
	}
	for _, one := range r.samples[:3] {
		if one["scenario"] != "read" || one["name"] != "count" || one["status"] != float64(200) || one["ok"] != true {
			t.Errorf("sample %v", one)
		}
	}

	// At its end, one point of the step's counts and histograms per scenario.
	if steps := influx.steps(t); len(steps) != 1 || steps[0].fields["due"] != int64(240) || steps[0].fields["hdr"] == "" {
		t.Errorf("step points %v", steps)
	}
	points := influx.points(t)
	var total float64
	for _, p := range points {
		for _, k := range []string{"run_id", "scenario", "name", "arm", "phase", "rate", "repeat"} {
			if p.tags[k] == "" {
				t.Fatalf("point without tag %s: %v", k, p.tags)
			}
		}
		if _, sharded := p.tags["shard"]; sharded {
			t.Error("a shard tag with SHARDS=1")
		}
		if p.tags["name"] == "all" {
			total += float64(p.fields["count"].(int64))
			if _, ok := p.fields["target"]; !ok {
				t.Errorf("all point without target: %v", p.fields)
			}
			if _, ok := p.fields["drops"]; !ok {
				t.Errorf("all point without drops: %v", p.fields)
			}
		}
	}
	if total != 240 || !strings.HasPrefix(influx.queries[0], "/write?db=aside&precision=ms") {
		t.Errorf("points counted %v requests, queries %v", total, influx.queries)
	}
	if !strings.Contains(r.stderr, "read cache warm @ 200/s  t=1s  sent ") {
		t.Errorf("live lines %q", r.stderr)
	}
	if !strings.HasPrefix(r.stdout, "read: 240 due, 240 started") {
		t.Errorf("stdout %q", r.stdout)
	}
}

func TestInterruptWritesTheSummary(t *testing.T) {
	api := fakeapi.New()
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		deadline := time.Now().Add(5 * time.Second)
		for api.Requests.Load() < 5 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond) // polling pace
		}
		cancel()
	}()
	began := time.Now()
	r, err := step(t, ctx, map[string]string{"BASE_URL": srv.URL, "SCENARIO": "healthz", "RATE": "100", "DURATION": "1m"})
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(began) > 5*time.Second {
		t.Errorf("an interrupted step took %v", time.Since(began))
	}
	if r.summary["interrupted"] != true {
		t.Errorf("interrupted = %v", r.summary["interrupted"])
	}
	h := obj(r.summary, "scenarios", "healthz")
	if h["due"].(float64) >= 6000 || h["due"] != h["started"] || h["iterations"] != h["started"] {
		t.Errorf("healthz %v", h)
	}
}

func TestShardsSplitAndTag(t *testing.T) {
	api := fakeapi.New()
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	influx := newInfluxSink(t)
	r, err := step(t, context.Background(), map[string]string{
		"BASE_URL": srv.URL, "SCENARIO": "healthz", "RATE": "301", "DURATION": "500ms",
		"SHARDS": "3", "JOB_COMPLETION_INDEX": "2", "INFLUX_URL": influx.srv.URL + "/aside",
	})
	if err != nil {
		t.Fatal(err)
	}
	h := obj(r.summary, "scenarios", "healthz")
	if h["rate"] != float64(100) || h["due"] != float64(50) || h["pool"] != float64(100) {
		t.Errorf("shard 2 of 3 at 301/s: %v", h)
	}
	if c := obj(r.summary, "config"); c["rate"] != float64(301) || c["shards"] != float64(3) || c["shard"] != float64(2) {
		t.Errorf("config %v", c)
	}
	for _, p := range append(influx.points(t), influx.steps(t)...) {
		if p.tags["shard"] != "2" || p.tags["rate"] != "301" {
			t.Fatalf("point tags %v", p.tags)
		}
	}
	if steps := influx.steps(t); len(steps) != 1 || steps[0].fields["shards"] != int64(3) {
		t.Errorf("the step point does not say it is one of 3 shards: %v", steps)
	}
}

func TestReferenceEngine(t *testing.T) {
	api := fakeapi.New()
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	r, err := step(t, context.Background(), map[string]string{
		"BASE_URL": srv.URL, "SCENARIO": "healthz", "RATE": "200", "DURATION": "500ms", "ENGINE": "reference",
	})
	if err != nil {
		t.Fatal(err)
	}
	h := obj(r.summary, "scenarios", "healthz")
	if h["due"] != float64(100) || h["started"] != float64(100) || h["pool"] != float64(0) || num(h, "latency", "count") != 100 {
		t.Errorf("reference healthz %v", h)
	}
	if obj(r.summary, "config")["engine"] != "reference" || len(r.samples) != 100 {
		t.Errorf("engine %v, %d samples", obj(r.summary, "config")["engine"], len(r.samples))
	}
}

func TestMixedWithTheStaleChecker(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprintf("stale=%v", stale), func(t *testing.T) {
			api := fakeapi.New()
			api.Stale = stale
			srv := httptest.NewServer(api.Handler())
			defer srv.Close()
			r, err := step(t, context.Background(), map[string]string{
				"BASE_URL": srv.URL, "SCENARIO": "mixed", "CACHE": "l2", "DATA_DIR": dataDir(t), "RATE": "100",
				"DURATION": "500ms", "WRITE_SHARE": "0.5", "STALE_PER_MIN": "600",
			})
			if err != nil {
				t.Fatal(err)
			}
			m := obj(r.summary, "scenarios", "mixed")
			names := obj(m, "by_name")
			if obj(names, "create")["requests"].(float64) == 0 || obj(names, "delete")["requests"] != obj(names, "create")["requests"] {
				t.Errorf("mixed by name %v", names)
			}
			counters := obj(r.summary, "scenarios", "stale", "counters")
			if counters["stale_checked"].(float64) < 18*4 {
				t.Errorf("stale counters %v (5 iterations of 18 reads expected)", counters)
			}
			if got := counters["stale_reads"].(float64); (got > 0) != stale {
				t.Errorf("stale_reads = %v against a gateway with stale=%v", got, stale)
			}
			if !stale && (m["failed"] != float64(0) || counters["stale_check_errors"] != float64(0)) {
				t.Errorf("failures against a coherent gateway: %v %v", m["failed"], counters)
			}
			if api.Users() != 0 {
				t.Errorf("%d users left behind", api.Users())
			}
			if !stale && obj(r.summary, "scenarios", "stale")["rate"] != float64(10) {
				t.Errorf("stale rate %v, want 10/s", obj(r.summary, "scenarios", "stale")["rate"])
			}
		})
	}
}

func TestChaosSamples(t *testing.T) {
	api := fakeapi.New()
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	r, err := step(t, context.Background(), map[string]string{
		"BASE_URL": srv.URL, "SCENARIO": "chaos", "DATA_DIR": dataDir(t), "RATE": "200", "DURATION": "500ms",
		"USER_PREFIX": "chaos.r1.case", "NO_REUSE": "1",
	})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, s := range r.samples {
		tags := obj(s, "tags")
		kind, _ := tags["kind"].(string)
		kinds[kind]++
		if s["new_conn"] != true {
			t.Fatalf("NO_REUSE=1 and a reused connection: %v", s)
		}
		if kind == "create" {
			u, _ := tags["username"].(string)
			if !strings.HasPrefix(u, "chaos.r1.case.") || api.KeyOf(u) != u {
				t.Fatalf("create %v: Idempotency-Key %q", tags, api.KeyOf(u))
			}
		}
		if kind == "user" && tags["status"] == "404" && tags["code"] != "not_found" {
			t.Fatalf("404 code %v", tags)
		}
	}
	if kinds["create"] == 0 || kinds["user"] == 0 || kinds["count"] == 0 || len(r.samples) != 100 {
		t.Errorf("kinds %v of %d samples", kinds, len(r.samples))
	}
	counters := obj(r.summary, "scenarios", "chaos", "counters")
	if len(counters) != 15 || counters["create_2xx"].(float64) != float64(kinds["create"]) {
		t.Errorf("counters %v", counters)
	}
}

func TestTracksAndInterference(t *testing.T) {
	var computes sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/api/v1/tracks/"):
			w.Header().Set("X-Cache", "HIT")
			io.WriteString(w, `{"id":1,"path":[[13.4,52.5]]}`)
		case r.URL.Path == "/api/v1/compute":
			computes.Store(r.RemoteAddr, true)
			io.WriteString(w, `{"kind":"checksum","engine":"go","checksum":462500000}`)
		case r.URL.Path == "/api/v1/users/count":
			w.Header().Set("X-Cache", "MISS")
			fmt.Fprintf(w, `{"email":%q,"count":1}`, r.URL.Query().Get("email"))
		}
	}))
	defer srv.Close()
	r, err := step(t, context.Background(), map[string]string{
		"BASE_URL": srv.URL, "SCENARIO": "tracks", "DATA_DIR": dataDir(t), "RATE": "100", "DURATION": "300ms",
		"ARM_QUERY": "cache=l2", "SIZE_BOUNDS": "16384,65536,262144",
	})
	if err != nil {
		t.Fatal(err)
	}
	tr := obj(r.summary, "scenarios", "tracks")
	names := obj(tr, "by_name")
	if tr["failed"] != float64(0) || len(names) != 4 || obj(names, "track 0")["requests"].(float64)+obj(names, "track 2")["requests"].(float64) != 30 {
		t.Errorf("tracks %v", tr)
	}

	base := map[string]string{
		"BASE_URL": srv.URL, "SCENARIO": "interference", "DATA_DIR": dataDir(t), "READ_RATE": "100", "DURATION": "300ms",
		"COMPUTE_BODY":   `{"kind":"checksum","engine":"go","complexity":10}`,
		"COMPUTE_EXPECT": `{"kind":"checksum","engine":"go","checksum":462500000}`,
	}
	base["RATE"] = "20"
	r, err = step(t, context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	reads, compute := obj(r.summary, "scenarios", "interference"), obj(r.summary, "scenarios", "interference_compute")
	if reads["requests"] != float64(30) || reads["failed"] != float64(0) || compute["requests"] != float64(6) || compute["failed"] != float64(0) {
		t.Errorf("interference %v\ncompute %v", reads, compute)
	}
	base["RATE"] = "0"
	r, err = step(t, context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	if _, has := obj(r.summary, "scenarios")["interference_compute"]; has {
		t.Error("a compute scenario at RATE 0")
	}
}

// CONNS opens the connections before the schedule (the client holds at most
// POOL): the load then opens none of its own, each request's new_conn false.
func TestConnsAreOpenBeforeTheFirstRequest(t *testing.T) {
	var opened atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Answers that take a while, as under load: the opening requests overlap
		// however busy the machine is.
		time.Sleep(20 * time.Millisecond)
		io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	for _, conns := range []string{"0", "20"} {
		before := opened.Load()
		r, err := step(t, context.Background(), map[string]string{
			"BASE_URL": srv.URL, "SCENARIO": "healthz", "RATE": "100", "DURATION": "300ms", "POOL": "20", "CONNS": conns,
		})
		if err != nil {
			t.Fatal(err)
		}
		fresh := 0
		for _, s := range r.samples {
			if s["new_conn"] == true {
				fresh++
			}
		}
		if conns == "20" && (fresh != 0 || opened.Load()-before < 20) {
			t.Errorf("CONNS=20: %d requests opened a connection, %d opened in all", fresh, opened.Load()-before)
		}
		if conns == "0" && fresh == 0 {
			t.Errorf("CONNS=0: no request opened a connection")
		}
	}
}

// startsAt runs a healthz step against srv with CONNS=5 and START_AT `after`
// from now, and checks that its first request falls due within 0.2 s of it.
func startsAt(t *testing.T, srv *httptest.Server, rate string, after time.Duration) {
	t.Helper()
	at := time.Now().Add(after).Truncate(time.Millisecond)
	r, err := step(t, context.Background(), map[string]string{
		"BASE_URL": srv.URL, "SCENARIO": "healthz", "RATE": rate, "DURATION": "200ms", "POOL": "5", "CONNS": "5",
		"START_AT": strconv.FormatInt(at.UnixMilli(), 10),
	})
	if err != nil {
		t.Fatal(err)
	}
	first := math.Inf(1)
	for _, s := range r.samples {
		if due, ok := s["due"].(float64); ok && due < first {
			first = due
		}
	}
	if math.IsInf(first, 1) {
		t.Fatal("no request fell due")
	}
	if held := first - float64(at.UnixMilli())/1000; held < 0 || held > 0.2 {
		t.Errorf("first request due %.3f s after START_AT, want within [0, 0.2]", held)
	}
}

// START_AT holds the first request until then, after the connections open.
func TestStartAtHoldsTheFirstRequest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Slow enough that the opening requests overlap (see TestConnsAreOpenBeforeTheFirstRequest).
		time.Sleep(20 * time.Millisecond)
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	startsAt(t, srv, "100", time.Second)
}

// A START_AT already past is refused in one line naming it, before any
// request: a shard that starts after the others' common start would send its
// share late. Nothing is sent and no summary written.
func TestStartAtAlreadyPastIsRefused(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	past := time.Now().Add(-1500 * time.Millisecond)
	r, err := step(t, context.Background(), map[string]string{
		"BASE_URL": srv.URL, "SCENARIO": "healthz", "RATE": "50", "DURATION": "200ms", "CONNS": "2",
		"SHARDS": "3", "SHARD": "2", "START_AT": strconv.FormatInt(past.UnixMilli(), 10),
	})
	if err == nil {
		t.Fatalf("a START_AT 1.5 s past was accepted (summary %v)", r.summary["started_at"])
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "START_AT ") || !strings.Contains(msg, "shard 2 of 3") ||
		!strings.Contains(msg, "refusing to start late") || strings.Contains(msg, "\n") {
		t.Errorf("refusal %q: want one line naming START_AT and the shard", msg)
	}
	if exitCode(err) != 2 {
		t.Errorf("exit code %d, want 2", exitCode(err))
	}
	if n := requests.Load(); n != 0 || r.summary != nil {
		t.Errorf("%d requests sent, summary %v: want none", n, r.summary)
	}
}

// A START_AT ahead bounds the opening of CONNS: against a server too slow to
// open them by then, the first request still falls due at START_AT.
func TestStartAtBoundsTheOpening(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			time.Sleep(3 * time.Second)
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	startsAt(t, srv, "10", 500*time.Millisecond)
}
