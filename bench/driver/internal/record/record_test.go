package record_test

import (
	"encoding/json"
	"testing"
	"time"

	"aside/bench/driver/internal/record"
)

func TestClass(t *testing.T) {
	for status, want := range map[int]string{0: "error", 200: "2xx", 204: "2xx", 301: "3xx", 404: "4xx", 429: "4xx", 503: "5xx"} {
		if got := record.ClassNames[record.Class(status)]; got != want {
			t.Errorf("class of %d = %s, want %s", status, got, want)
		}
	}
}

func TestRecorder(t *testing.T) {
	r := record.NewRecorder("mixed", 100, 10, []string{"count", "create"}, time.Second)
	ms := int64(time.Millisecond)
	r.Due()
	r.Due()
	r.Drop()
	r.Start(true)
	r.Request(0, 200, true, 10*ms, 12*ms, 9*ms)   // 2 ms, 3 ms from due
	r.Request(1, 0, false, 12*ms, 20*ms, 9*ms)    // no answer
	r.Request(0, 200, true, 20*ms, 5000*ms, 9*ms) // past the timeout: counted as the highest
	r.Finish(false)
	c := r.AddCounter("stale_reads")
	c.Add(2)

	tot := r.Totals()
	if tot.Due != 2 || tot.Dropped != 1 || tot.Started != 1 || tot.Late != 1 || tot.Iterations != 1 || tot.Failed != 1 || tot.Requests != 3 {
		t.Errorf("counts %+v", tot)
	}
	if tot.Status != [record.NClasses]int64{2, 0, 0, 0, 1} {
		t.Errorf("status %v", tot.Status)
	}
	if tot.Latency.Count != 2 || tot.LatencyAll.Count != 3 || tot.FromDue.Count != 2 {
		t.Errorf("latency counts %+v %+v %+v", tot.Latency, tot.LatencyAll, tot.FromDue)
	}
	if tot.Latency.P50 < 1.99 || tot.Latency.P50 > 2.01 || tot.Latency.Max < 999 || tot.Latency.Max > 1001 {
		t.Errorf("latency %+v", tot.Latency)
	}
	if tot.FromDue.Max < 4990 { // from due spans several timeouts
		t.Errorf("from due %+v", tot.FromDue)
	}
	if tot.ByName[1].Latency != nil || tot.ByName[1].Requests != 1 {
		t.Errorf("create %+v", tot.ByName[1])
	}
	if len(tot.Counters) != 1 || tot.Counters[0].Value != 2 {
		t.Errorf("counters %+v", tot.Counters)
	}

	sec := r.TakeSecond()
	if sec.Drops != 1 || sec.Started != 1 || len(sec.Names) != 3 {
		t.Fatalf("second %+v", sec)
	}
	all := sec.Names[0]
	if all.Name != "all" || all.Count != 3 || all.Errors != 1 || !all.HasLatency {
		t.Errorf("all %+v", all)
	}
	if sec.Names[2].Name != "create" || sec.Names[2].HasLatency || sec.Names[2].Errors != 1 {
		t.Errorf("create second %+v", sec.Names[2])
	}
	next := r.TakeSecond()
	if next.Drops != 0 || next.Started != 0 || len(next.Names) != 1 || next.Names[0].Count != 0 || next.Names[0].HasLatency {
		t.Errorf("an empty second %+v", next)
	}
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `quo"te`, `back\slash`, "tab\tnew\nline\r", "\x00\x1f", "ünïcödé ✓", "bad \xff byte"} {
		got := record.AppendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Errorf("%q -> %s: %v", s, got, err)
			continue
		}
		want, _ := json.Marshal(s)
		var wantBack string
		json.Unmarshal(want, &wantBack)
		if back != wantBack {
			t.Errorf("%q -> %q, want %q", s, back, wantBack)
		}
	}
}
