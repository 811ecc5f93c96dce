package output

import (
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"aside/bench/driver/internal/record"
)

// LiveLine is a scenario's second on the terminal:
// `read cache warm @ 500/s  t=12s  sent 500/s  p95 1.52 ms  drops 0  errors 0  in flight 3`.
func LiveLine(sec record.Second, arm, phase string, t time.Duration, window time.Duration) string {
	all := sec.Names[0]
	p95 := "-"
	if all.HasLatency {
		p95 = strconv.FormatFloat(all.P95, 'f', 2, 64)
	}
	sent := float64(sec.Started) / max(window.Seconds(), 1e-3)
	return fmt.Sprintf("%s %s %s @ %s/s  t=%.0fs  sent %.0f/s  p95 %s ms  drops %d  errors %d  in flight %d",
		sec.Scenario, arm, phase, strconv.FormatFloat(sec.Rate, 'f', -1, 64), t.Seconds(), sent, p95,
		sec.Drops, all.Errors, sec.Inflight)
}

// Periodic takes every recorder's second once a second: the points go to
// InfluxDB, the live lines to the terminal, and the samples file is flushed.
type Periodic struct {
	Recorders []*record.Recorder
	Clock     *record.Clock
	Influx    *Influx   // nil: no points
	Samples   *Samples  // nil: no samples file
	Live      io.Writer // nil: no live line
	Arm       string
	Phase     string

	last int64
	stop chan struct{}
	wg   sync.WaitGroup
}

// Start begins the seconds (from the Clock's start).
func (p *Periodic) Start() {
	p.stop = make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
				p.flush()
			}
		}
	}()
}

// Stop ends the seconds with the last, partial one.
func (p *Periodic) Stop() {
	close(p.stop)
	p.wg.Wait()
	p.flush()
}

func (p *Periodic) flush() {
	now := p.Clock.Now()
	seconds := make([]record.Second, 0, len(p.Recorders))
	for _, r := range p.Recorders {
		seconds = append(seconds, r.TakeSecond())
	}
	if p.Influx != nil {
		p.Influx.Write(p.Clock.Wall(p.last), seconds)
	}
	if p.Live != nil {
		for _, s := range seconds {
			fmt.Fprintln(p.Live, LiveLine(s, p.Arm, p.Phase, time.Duration(now), time.Duration(now-p.last)))
		}
	}
	if p.Samples != nil {
		p.Samples.Flush()
	}
	p.last = now
}
