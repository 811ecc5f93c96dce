package schedule_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"aside/bench/driver/internal/record"
	"aside/bench/driver/internal/scenario"
	"aside/bench/driver/internal/schedule"
)

type countingSink struct{ drops atomic.Int64 }

func (s *countingSink) Request(*record.Sample)           {}
func (s *countingSink) Dropped(string, float64, float64) { s.drops.Add(1) }

// healthzLoad is the healthz scenario against url at rate for d with pool workers.
func healthzLoad(t *testing.T, url string, rate, pool int, d time.Duration) *schedule.Load {
	t.Helper()
	client, err := scenario.NewClient(url, pool, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.CloseIdle)
	scn := scenario.NewHealthz(client)
	rec := record.NewRecorder(scn.Name(), float64(rate), pool, scn.Names(), 2*time.Second)
	env := &scenario.Env{Client: client, Rec: rec, Sink: &countingSink{}, Clock: record.NewClock(time.Now()), Timeout: 2 * time.Second, Seed: 1}
	return &schedule.Load{
		Scenario: scn, Env: env, Freq: rate, Per: time.Second, Pool: pool,
		Late: 100 * time.Millisecond, Duration: d, Shards: 1, Drain: 4 * time.Second,
	}
}

func fastServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1) }))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestRateTimesDuration(t *testing.T) {
	for _, hold := range []bool{false, true} {
		t.Run(map[bool]string{false: "timer", true: "hold"}[hold], func(t *testing.T) {
			srv, served := fastServer(t)
			l := healthzLoad(t, srv.URL, 1000, 100, time.Second)
			l.HoldP = hold
			began := time.Now()
			l.Run(context.Background())
			took := time.Since(began)
			tot := l.Env.Rec.Totals()
			if tot.Due != 1000 {
				t.Errorf("due %d, want 1000", tot.Due)
			}
			if got := served.Load(); got < 990 || got > 1000 {
				t.Errorf("the server saw %d requests, want 1000 within 1 %%", got)
			}
			if tot.Started+tot.Dropped != tot.Due || tot.Iterations != tot.Started || tot.Requests != tot.Started {
				t.Errorf("counts do not add up: %+v", tot)
			}
			if took < 990*time.Millisecond || took > 3*time.Second {
				t.Errorf("a 1 s schedule took %v", took)
			}
			if tot.Failed != 0 {
				t.Errorf("%d failed", tot.Failed)
			}
		})
	}
}

func TestFullPoolDrops(t *testing.T) {
	release := make(chan struct{})
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		<-release
	}))
	t.Cleanup(srv.Close)
	l := healthzLoad(t, srv.URL, 200, 2, 250*time.Millisecond)
	done := make(chan struct{})
	go func() {
		l.Run(context.Background())
		close(done)
	}()
	// Release the two blocked requests once every iteration has fallen due.
	deadline := time.Now().Add(5 * time.Second)
	for l.Env.Rec.Totals().Due < 50 {
		if time.Now().After(deadline) {
			t.Fatal("the schedule did not reach its end")
		}
		time.Sleep(5 * time.Millisecond) // polling pace
	}
	close(release)
	<-done
	tot := l.Env.Rec.Totals()
	if tot.Due != 50 || tot.Started != 2 || tot.Dropped != 48 || tot.Dropped+tot.Started != tot.Due {
		t.Errorf("due %d started %d dropped %d, want 50 2 48", tot.Due, tot.Started, tot.Dropped)
	}
	if served.Load() != 2 {
		t.Errorf("the server saw %d requests", served.Load())
	}
	if tot.InflightPeak != 2 {
		t.Errorf("inflight peak %d, want 2", tot.InflightPeak)
	}
	if d := l.Env.Sink.(*countingSink).drops.Load(); d != 48 {
		t.Errorf("%d drop samples", d)
	}
}

// A schedule that starts 50 ms in the past: the driver fell behind. What is
// later than LATE_MS is dropped, what is later than 1 ms counts as late.
func TestLateAndTooLate(t *testing.T) {
	srv, _ := fastServer(t)
	l := healthzLoad(t, srv.URL, 1000, 50, 100*time.Millisecond)
	l.Late = 20 * time.Millisecond
	l.Env.Clock = record.NewClock(time.Now())
	l.Start = -int64(50 * time.Millisecond)
	l.Run(context.Background())
	tot := l.Env.Rec.Totals()
	if tot.Due != 100 || tot.Started+tot.Dropped != 100 {
		t.Fatalf("due %d started %d dropped %d", tot.Due, tot.Started, tot.Dropped)
	}
	// Iterations 1..50 were due 49..0 ms before the start: about 30 more than 20 ms late.
	if tot.Dropped < 25 || tot.Dropped > 40 {
		t.Errorf("dropped %d, want about 30", tot.Dropped)
	}
	if tot.Late < 10 {
		t.Errorf("late %d, want about 19", tot.Late)
	}
}

func TestLatencyFromDue(t *testing.T) {
	srv, _ := fastServer(t)
	l := healthzLoad(t, srv.URL, 500, 20, 300*time.Millisecond)
	l.Run(context.Background())
	tot := l.Env.Rec.Totals()
	lat, due := tot.Latency, tot.FromDue
	if lat == nil || due == nil || lat.Count != due.Count || lat.Count != 150 {
		t.Fatalf("latency %+v, from due %+v", lat, due)
	}
	if due.P50 < lat.P50 || due.P95 < lat.P95 || due.P99 < lat.P99 || due.Max < lat.Max || due.Mean < lat.Mean {
		t.Errorf("from due %+v below from sent %+v", due, lat)
	}
}

func TestCancelStopsTheSchedule(t *testing.T) {
	srv, served := fastServer(t)
	l := healthzLoad(t, srv.URL, 200, 10, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		l.Run(ctx)
		close(done)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for served.Load() < 5 {
		if time.Now().After(deadline) {
			t.Fatal("no request reached the server")
		}
		time.Sleep(5 * time.Millisecond) // polling pace
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the schedule went on after its context ended")
	}
	if tot := l.Env.Rec.Totals(); tot.Due >= 200*60 || tot.Iterations != tot.Started {
		t.Errorf("after cancel: %+v", tot)
	}
}

func TestWorkerIDsAcrossShards(t *testing.T) {
	seen := map[int]bool{}
	for shard := range 3 {
		for n := 1; n <= 5; n++ {
			id := schedule.WorkerID(n, shard, 3)
			if seen[id] {
				t.Fatalf("worker id %d twice", id)
			}
			seen[id] = true
		}
	}
	if schedule.WorkerID(4, 0, 1) != 4 {
		t.Error("one shard: worker n is n")
	}
}

func TestReference(t *testing.T) {
	srv, served := fastServer(t)
	l := healthzLoad(t, srv.URL, 200, 0, 250*time.Millisecond)
	l.RunReference(context.Background(), srv.URL+"/healthz")
	tot := l.Env.Rec.Totals()
	if tot.Due != 50 || tot.Started != 50 || served.Load() != 50 || tot.Latency == nil || tot.Latency.Count != 50 {
		t.Errorf("reference: %+v, served %d", tot, served.Load())
	}
}
