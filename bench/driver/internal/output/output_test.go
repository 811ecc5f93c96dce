package output_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/influxdata/line-protocol/v2/lineprotocol"

	"aside/bench/driver/internal/output"
	"aside/bench/driver/internal/record"
)

func TestSamplesLinesParse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "samples.jsonl")
	s, err := output.OpenSamples(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Request(&record.Sample{
		Scenario: "chaos", Name: "create", Sent: 1764080000.1234, Due: 1764080000.123, Ms: 0.91, Status: 201, OK: true,
		NewConn: true, Tags: []record.Tag{{Key: "kind", Value: "create"}, {Key: "username", Value: `odd "name"`}},
	})
	s.Request(&record.Sample{Scenario: "read", Name: "count", Status: 0, Tags: []record.Tag{{Key: "error", Value: "timeout"}}})
	s.Dropped("read", 1764080001.5, 1764080001.25)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(path)
	defer f.Close()
	var lines []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var one map[string]any
		if err := json.Unmarshal(sc.Bytes(), &one); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, one)
	}
	if len(lines) != 3 {
		t.Fatalf("%d lines", len(lines))
	}
	first := lines[0]
	for _, key := range []string{"t", "due", "ms", "scenario", "name", "status", "ok", "new_conn", "tags"} {
		if _, ok := first[key]; !ok {
			t.Errorf("no %q in %v", key, first)
		}
	}
	if first["t"].(float64) != 1764080000.1234 || first["status"].(float64) != 201 || first["new_conn"] != true {
		t.Errorf("first line %v", first)
	}
	if tags := first["tags"].(map[string]any); tags["username"] != `odd "name"` {
		t.Errorf("tags %v", tags)
	}
	if lines[1]["tags"].(map[string]any)["error"] != "timeout" {
		t.Errorf("second line %v", lines[1])
	}
	if lines[2]["dropped"] != true || lines[2]["scenario"] != "read" || lines[2]["due"].(float64) != 1764080001.25 {
		t.Errorf("drop line %v", lines[2])
	}
}

func seconds() []record.Second {
	return []record.Second{{
		Scenario: "read", Rate: 500, Drops: 2,
		Names: []record.NameSecond{
			{Name: "all", Count: 10, Errors: 1, P50: 0.8, P95: 1.5, P99: 2.9, HasLatency: true},
			{Name: "count", Count: 10, Errors: 1, P50: 0.8, P95: 1.5, P99: 2.9, HasLatency: true},
		},
	}, {
		Scenario: "stale", Rate: 0.2,
		Names: []record.NameSecond{{Name: "all"}},
	}}
}

var stepTags = []record.Tag{
	{Key: "run_id", Value: "r 1"}, {Key: "arm", Value: "cache"}, {Key: "phase", Value: "warm"},
	{Key: "rate", Value: "500"}, {Key: "repeat", Value: "1"}, {Key: "shard", Value: "1"},
}

type point struct {
	tags   map[string]string
	fields map[string]any
	at     time.Time
}

func decode(t *testing.T, body []byte) []point {
	t.Helper()
	dec := lineprotocol.NewDecoderWithBytes(body)
	var out []point
	for dec.Next() {
		m, err := dec.Measurement()
		if err != nil || (string(m) != output.Measurement && string(m) != output.StepMeasurement) {
			t.Fatalf("measurement %q: %v", m, err)
		}
		p := point{tags: map[string]string{}, fields: map[string]any{}}
		for {
			k, v, err := dec.NextTag()
			if err != nil {
				t.Fatal(err)
			}
			if k == nil {
				break
			}
			p.tags[string(k)] = string(v)
		}
		for {
			k, v, err := dec.NextField()
			if err != nil {
				t.Fatal(err)
			}
			if k == nil {
				break
			}
			p.fields[string(k)] = v.Interface()
		}
		at, err := dec.Time(lineprotocol.Millisecond, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		p.at = at
		out = append(out, p)
	}
	return out
}

func TestEncode(t *testing.T) {
	at := time.UnixMilli(1764080000123)
	body, n, err := output.Encode(at, seconds(), stepTags)
	if err != nil || n != 3 {
		t.Fatalf("%d points: %v", n, err)
	}
	points := decode(t, body)
	all := points[0]
	for k, want := range map[string]string{"run_id": "r 1", "scenario": "read", "name": "all", "arm": "cache", "phase": "warm", "rate": "500", "repeat": "1", "shard": "1"} {
		if all.tags[k] != want {
			t.Errorf("tag %s = %q, want %q", k, all.tags[k], want)
		}
	}
	if all.fields["count"] != int64(10) || all.fields["errors"] != int64(1) || all.fields["drops"] != int64(2) ||
		all.fields["p95"] != 1.5 || all.fields["target"] != float64(500) || !all.at.Equal(at) {
		t.Errorf("all point %+v", all)
	}
	if _, has := points[1].fields["drops"]; has || points[1].tags["name"] != "count" {
		t.Errorf("a name's point %+v", points[1])
	}
	if _, has := points[2].fields["p50"]; has || points[2].fields["target"] != 0.2 {
		t.Errorf("an empty second %+v", points[2])
	}
}

func TestInfluxWrites(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	var queries []string
	status := 204
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, b)
		queries = append(queries, r.URL.Path+"?"+r.URL.RawQuery)
		code := status
		mu.Unlock()
		w.WriteHeader(code)
	}))
	defer srv.Close()
	x := output.NewInflux(srv.URL+"/write?db=aside&precision=ms", stepTags, 1, "")
	x.Write(time.Now(), seconds())
	p := x.Finish(time.Now(), time.Now(), nil)
	if p != (output.Points{Written: 3}) || len(bodies) != 1 || !strings.HasPrefix(queries[0], "/write?db=aside&precision=ms") {
		t.Fatalf("points %+v, bodies %d, queries %v", p, len(bodies), queries)
	}
	if got := len(decode(t, bodies[0])); got != 3 {
		t.Errorf("%d points arrived", got)
	}

	mu.Lock()
	status = 500
	mu.Unlock()
	x = output.NewInflux(srv.URL+"/write?db=aside&precision=ms", stepTags, 1, "")
	x.Write(time.Now(), seconds())
	if p := x.Finish(time.Now(), time.Now(), nil); p != (output.Points{Lost: 3}) || len(bodies) != 4 {
		t.Errorf("a refused batch without a spool: %+v after %d posts, want 3 lost after 3 attempts", p, len(bodies)-1)
	}
}

func TestLiveLine(t *testing.T) {
	sec := seconds()[0]
	sec.Started = 500
	sec.Inflight = 3
	got := output.LiveLine(sec, "cache", "warm", 12*time.Second, time.Second)
	want := "read cache warm @ 500/s  t=12s  sent 500/s  p95 1.50 ms  drops 2  errors 1  in flight 3"
	if got != want {
		t.Errorf("live line\n%q, want\n%q", got, want)
	}
}

func TestWriteSummary(t *testing.T) {
	path := filepath.Join(t.TempDir(), "summary.json")
	if err := output.WriteSummary(path, output.Summary{SchemaVersion: 1}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !bytes.Contains(b, []byte(`"schema_version": 1`)) {
		t.Errorf("summary %s", b)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temp files left: %v", entries)
	}
}

func TestEncodeStepsCarriesHistogramsThatMerge(t *testing.T) {
	var recs []*record.Recorder
	for shard := range 2 {
		rec := record.NewRecorder("read", 250, 10, []string{"count"}, 10*time.Second)
		for i := range 100 {
			rec.Due()
			rec.Start(false)
			ms := int64(shard*100+i+1) * int64(time.Millisecond) / 10 // 0.1 .. 20 ms
			rec.Request(0, 200, true, 0, ms, 0)
			rec.Finish(true)
		}
		recs = append(recs, rec)
	}
	var merged *hdrhistogram.Histogram
	for _, rec := range recs {
		body, n, err := output.EncodeSteps(time.UnixMilli(1764080000000), time.UnixMilli(1764079970000), []*record.Recorder{rec}, stepTags, 2)
		if err != nil || n != 1 {
			t.Fatalf("%d points: %v", n, err)
		}
		point := decode(t, body)[0]
		if point.tags["scenario"] != "read" || point.fields["due"] != int64(100) || point.fields["target"] != float64(250) || point.fields["shards"] != int64(2) ||
			point.fields["started_ms"] != int64(1764079970000) {
			t.Errorf("step point %+v", point)
		}
		h, err := hdrhistogram.Decode([]byte(point.fields["hdr"].(string)))
		if err != nil {
			t.Fatal(err)
		}
		if merged == nil {
			merged = h
		} else {
			merged.Merge(h)
		}
	}
	// 200 answers from 0.1 to 20 ms in two shards: the merged median is 10 ms.
	if merged.TotalCount() != 200 || merged.ValueAtQuantile(50) < 9900 || merged.ValueAtQuantile(50) > 10100 {
		t.Errorf("merged %d answers, p50 %d µs", merged.TotalCount(), merged.ValueAtQuantile(50))
	}
}
