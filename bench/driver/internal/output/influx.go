package output

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync/atomic"
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"

	"aside/bench/driver/internal/record"
)

// Measurement is the points' measurement.
const Measurement = "load_second"

// InfluxTimeout bounds one attempt at a batch.
const InfluxTimeout = 2 * time.Second

// BatchBudget bounds every attempt at one batch together; past it the batch is spooled.
const BatchBudget = 5 * time.Second

// CloseBudget bounds the step's end: the load_step points and the batches
// still queued are written within it, or spooled.
const CloseBudget = 5 * time.Second

// retryWaits are the pauses between attempts at a batch (three attempts).
var retryWaits = []time.Duration{250 * time.Millisecond, 500 * time.Millisecond}

// influxQueue batches may wait for the writer; one that finds it full is spooled.
const influxQueue = 8

type batch struct {
	body   []byte
	points int64
}

// Points is what became of a step's points: written to InfluxDB, spooled
// to a file of line protocol (Spool) to be sent later, or lost (neither).
type Points struct {
	Written int64  `json:"written"`
	Spooled int64  `json:"spooled"`
	Lost    int64  `json:"lost"`
	Spool   string `json:"spool"`
}

// Influx writes the per-second points, one batch a second, from a goroutine
// of its own: a slow or absent InfluxDB costs neither load nor points. A
// batch is tried within BatchBudget, then appended to the spool file.
type Influx struct {
	url    string
	tags   []record.Tag // the step's, on every point
	shards int          // the step's driver processes, a field of load_step
	client *http.Client
	queue  chan batch
	done   chan struct{}
	spool  *Spool
	// ctx ends CloseBudget after Finish begins: what is not written by then is spooled.
	ctx  context.Context
	stop context.CancelFunc

	written, spooled, lost atomic.Int64
}

// NewInflux writes to writeURL (…/write?db=…&precision=ms); tags go on every
// point; spoolPath (empty: none, such points are lost) keeps what cannot be written.
func NewInflux(writeURL string, tags []record.Tag, shards int, spoolPath string) *Influx {
	x := &Influx{
		url: writeURL, tags: tags, shards: shards, client: &http.Client{Timeout: InfluxTimeout},
		queue: make(chan batch, influxQueue), done: make(chan struct{}), spool: NewSpool(spoolPath),
	}
	x.ctx, x.stop = context.WithCancel(context.Background())
	go x.send()
	return x
}

// Encode is the line protocol of seconds, stamped at (ms precision).
func Encode(at time.Time, seconds []record.Second, stepTags []record.Tag) ([]byte, int64, error) {
	var enc lineprotocol.Encoder
	enc.SetPrecision(lineprotocol.Millisecond)
	var points int64
	tags := make([]record.Tag, 0, len(stepTags)+2)
	for _, sec := range seconds {
		for _, n := range sec.Names {
			tags = append(tags[:0], stepTags...)
			tags = append(tags, record.Tag{Key: "scenario", Value: sec.Scenario}, record.Tag{Key: "name", Value: n.Name})
			sort.Slice(tags, func(i, j int) bool { return tags[i].Key < tags[j].Key })
			enc.StartLine(Measurement)
			for _, t := range tags {
				enc.AddTag(t.Key, t.Value)
			}
			enc.AddField("count", lineprotocol.IntValue(n.Count))
			enc.AddField("errors", lineprotocol.IntValue(n.Errors))
			all := n.Name == record.AllName
			if all {
				enc.AddField("drops", lineprotocol.IntValue(sec.Drops))
			}
			if n.HasLatency {
				enc.AddField("p50", lineprotocol.MustNewValue(n.P50))
				enc.AddField("p95", lineprotocol.MustNewValue(n.P95))
				enc.AddField("p99", lineprotocol.MustNewValue(n.P99))
			}
			if all {
				enc.AddField("target", lineprotocol.MustNewValue(sec.Rate))
			}
			enc.EndLine(at)
			points++
		}
	}
	if err := enc.Err(); err != nil {
		return nil, 0, err
	}
	return enc.Bytes(), points, nil
}

// StepMeasurement holds one point per scenario at the step's end: its
// counts and its latency histograms, so the shards of one step merge exactly.
const StepMeasurement = "load_step"

// EncodeSteps is the line protocol of each scenario's totals and histograms;
// started (the schedule's start) is its field started_ms, so a merge of the
// shards can tell how far apart they began.
func EncodeSteps(at, started time.Time, recs []*record.Recorder, stepTags []record.Tag, shards int) ([]byte, int64, error) {
	var enc lineprotocol.Encoder
	enc.SetPrecision(lineprotocol.Millisecond)
	tags := make([]record.Tag, 0, len(stepTags)+1)
	for _, rec := range recs {
		t := rec.Totals()
		latency, fromDue, err := rec.Encoded()
		if err != nil {
			return nil, 0, err
		}
		tags = append(tags[:0], stepTags...)
		tags = append(tags, record.Tag{Key: "scenario", Value: t.Scenario})
		sort.Slice(tags, func(i, j int) bool { return tags[i].Key < tags[j].Key })
		enc.StartLine(StepMeasurement)
		for _, tag := range tags {
			enc.AddTag(tag.Key, tag.Value)
		}
		for _, f := range []struct {
			name  string
			value int64
		}{{"due", t.Due}, {"started", t.Started}, {"dropped", t.Dropped}, {"late", t.Late},
			{"iterations", t.Iterations}, {"failed", t.Failed}, {"requests", t.Requests}} {
			enc.AddField(f.name, lineprotocol.IntValue(f.value))
		}
		enc.AddField("shards", lineprotocol.IntValue(int64(shards)))
		enc.AddField("started_ms", lineprotocol.IntValue(started.UnixMilli()))
		enc.AddField("target", lineprotocol.MustNewValue(t.Rate))
		enc.AddField("hdr", lineprotocol.MustNewValue(latency))
		enc.AddField("hdr_from_due", lineprotocol.MustNewValue(fromDue))
		enc.EndLine(at)
	}
	if err := enc.Err(); err != nil {
		return nil, 0, err
	}
	return enc.Bytes(), int64(len(recs)), nil
}

// Write queues the points of seconds.
func (x *Influx) Write(at time.Time, seconds []record.Second) {
	body, points, err := Encode(at, seconds, x.tags)
	if err != nil {
		x.lost.Add(int64(len(seconds)))
		return
	}
	select {
	case x.queue <- batch{body: body, points: points}:
	default:
		x.keep(batch{body: body, points: points})
	}
}

func (x *Influx) send() {
	defer close(x.done)
	for b := range x.queue {
		x.deliver(b)
	}
}

// deliver writes b to InfluxDB, or spools it.
func (x *Influx) deliver(b batch) {
	if err := x.postRetried(b.body); err != nil {
		x.keep(b)
		return
	}
	x.written.Add(b.points)
}

// keep spools a batch that could not be written; without a spool, it is lost.
func (x *Influx) keep(b batch) {
	if err := x.spool.Append(b.body); err != nil {
		x.lost.Add(b.points)
		return
	}
	x.spooled.Add(b.points)
}

// postRetried tries body within BatchBudget (and before the end's deadline).
func (x *Influx) postRetried(body []byte) error {
	ctx, cancel := context.WithTimeout(x.ctx, BatchBudget)
	defer cancel()
	for attempt := 0; ; attempt++ {
		err := x.post(ctx, body)
		if err == nil || attempt == len(retryWaits) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(retryWaits[attempt]):
		}
	}
}

func (x *Influx) post(ctx context.Context, body []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, x.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	resp, err := x.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("influx answered %d", resp.StatusCode)
	}
	return nil
}

// Finish ends the step's points: each scenario's load_step point (EncodeSteps,
// stamped at, begun at started) is written at once, beside the batches still
// queued, all within CloseBudget; what is not written by then is spooled.
func (x *Influx) Finish(at, started time.Time, recs []*record.Recorder) Points {
	deadline := time.AfterFunc(CloseBudget, x.stop)
	defer deadline.Stop()
	close(x.queue)
	body, points, err := EncodeSteps(at, started, recs, x.tags, x.shards)
	if err != nil {
		x.lost.Add(int64(len(recs)))
	} else if points > 0 {
		x.deliver(batch{body: body, points: points})
	}
	<-x.done
	x.stop()
	x.client.CloseIdleConnections()
	if err := x.spool.Close(); err != nil {
		// Appended but perhaps not kept: count them lost.
		x.lost.Add(x.spooled.Swap(0))
	}
	return x.Points()
}

// Points is what became of the points so far.
func (x *Influx) Points() Points {
	p := Points{Written: x.written.Load(), Spooled: x.spooled.Load(), Lost: x.lost.Load()}
	if p.Spooled > 0 {
		p.Spool = x.spool.Path()
	}
	return p
}
