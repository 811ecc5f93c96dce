package schedule

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"aside/bench/driver/internal/record"
	"aside/bench/driver/internal/scenario"
)

// RunReference is ENGINE=reference, the yardstick of the driver's own cost:
// GET url (healthz) the way a naive Go load tool does it, with one
// time.Sleep per request, a goroutine per request and net/http's default
// transport. Nothing is dropped (there is no pool); the figures are
// recorded as Run records them.
func (l *Load) RunReference(ctx context.Context, url string) {
	clock, rec, sink := l.Env.Clock, l.Env.Rec, l.Env.Sink
	client := &http.Client{Timeout: l.Env.Timeout}
	total := l.Total()
	var wg sync.WaitGroup
	for index := uint64(1); index <= total && ctx.Err() == nil; index++ {
		due := l.Due(index)
		if d := due - clock.Now(); d > 0 {
			time.Sleep(time.Duration(d))
		}
		rec.Due()
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := clock.Now()
			rec.Start(sent-due > int64(LateAfter))
			status := 0
			resp, err := client.Get(url)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil {
					status = resp.StatusCode
				}
			}
			ended := clock.Now()
			ok := status == 200
			rec.Request(0, status, ok, sent, ended, due)
			if sink != nil {
				s := record.Sample{
					Scenario: rec.Scenario, Name: rec.Names()[0], Sent: clock.Epoch(sent), Due: clock.Epoch(due),
					Ms: float64(ended-sent) / 1e6, Status: status, OK: ok,
				}
				if err != nil {
					s.Tags = []record.Tag{{Key: "error", Value: scenario.ErrorCode(err)}}
				}
				sink.Request(&s)
			}
			rec.Finish(ok)
		}()
	}
	wg.Wait()
	client.CloseIdleConnections()
}
