package output

import (
	"bytes"
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

// InfluxTimeout bounds one batch's write.
const InfluxTimeout = 2 * time.Second

// influxQueue batches may wait for the writer; more are counted as errors.
const influxQueue = 4

type batch struct {
	body   []byte
	points int64
}

// Influx writes the per-second points, one batch a second, from a goroutine
// of its own: a slow or absent InfluxDB costs points (counted), never load.
type Influx struct {
	url    string
	tags   []record.Tag // the step's, on every point
	client *http.Client
	queue  chan batch
	done   chan struct{}
	errors atomic.Int64
}

// NewInflux writes to writeURL (…/write?db=…&precision=ms); tags go on every point.
func NewInflux(writeURL string, tags []record.Tag) *Influx {
	x := &Influx{
		url: writeURL, tags: tags, client: &http.Client{Timeout: InfluxTimeout},
		queue: make(chan batch, influxQueue), done: make(chan struct{}),
	}
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

// EncodeSteps is the line protocol of each scenario's totals and histograms.
func EncodeSteps(at time.Time, recs []*record.Recorder, stepTags []record.Tag) ([]byte, int64, error) {
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

// WriteSteps queues each scenario's step point (EncodeSteps).
func (x *Influx) WriteSteps(at time.Time, recs []*record.Recorder) {
	body, points, err := EncodeSteps(at, recs, x.tags)
	x.enqueue(body, points, err, int64(len(recs)))
}

// Write queues the points of seconds.
func (x *Influx) Write(at time.Time, seconds []record.Second) {
	body, points, err := Encode(at, seconds, x.tags)
	x.enqueue(body, points, err, int64(len(seconds)))
}

// enqueue queues an encoded batch; a batch that did not encode (counted as
// `failed` points) or finds the queue full counts as errors.
func (x *Influx) enqueue(body []byte, points int64, err error, failed int64) {
	if err != nil {
		x.errors.Add(failed)
		return
	}
	select {
	case x.queue <- batch{body: body, points: points}:
	default:
		x.errors.Add(points)
	}
}

func (x *Influx) send() {
	defer close(x.done)
	for b := range x.queue {
		if err := x.post(b.body); err != nil {
			x.errors.Add(b.points)
		}
	}
}

func (x *Influx) post(body []byte) error {
	req, err := http.NewRequest(http.MethodPost, x.url, bytes.NewReader(body))
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

// Close writes what is queued (each batch within InfluxTimeout) and stops.
func (x *Influx) Close() {
	close(x.queue)
	<-x.done
	x.client.CloseIdleConnections()
}

// Errors is the number of points that could not be written.
func (x *Influx) Errors() int64 { return x.errors.Load() }
