// Package output writes what the driver says: the JSON summary, the
// per-request samples, the per-second InfluxDB points and the live line.
package output

import (
	"encoding/json"
	"fmt"
	"io"
	"syscall"

	"aside/bench/driver/internal/atomicfile"
	"aside/bench/driver/internal/config"
	"aside/bench/driver/internal/record"
)

// SchemaVersion is the summary's; a reader checks it.
const SchemaVersion = 1

// Summary is the JSON summary (README.md, "The summary").
type Summary struct {
	SchemaVersion int           `json:"schema_version"`
	Driver        string        `json:"driver"`
	Config        SummaryConfig `json:"config"`
	StartedAt     float64       `json:"started_at"`
	EndedAt       float64       `json:"ended_at"`
	Interrupted   bool          `json:"interrupted"`
	CPU           CPU           `json:"cpu"`
	// Influx is what became of the InfluxDB points (absent without INFLUX_URL).
	Influx    *Points                    `json:"influx,omitempty"`
	Scenarios map[string]ScenarioSummary `json:"scenarios"`
	// Trace is the trace a read scenario replayed (TRACE), KeyTrace the
	// keys it recorded (KEY_TRACE_PATH); absent when not asked for.
	Trace    *TraceSummary    `json:"trace,omitempty"`
	KeyTrace *KeyTraceSummary `json:"key_trace,omitempty"`
}

// TraceSummary is a replayed trace: its lines and distinct keys, whether
// its timestamps set the schedule (and at what speed), and how many times
// the schedule goes through it (wrapped: more than once).
type TraceSummary struct {
	Path    string  `json:"path"`
	Lines   int     `json:"lines"`
	Keys    int     `json:"keys"`
	Timed   bool    `json:"timed"`
	Speed   float64 `json:"speed"`
	Passes  uint64  `json:"passes"`
	Wrapped bool    `json:"wrapped"`
}

// KeyTraceSummary is a recorded key trace: the lines written and the
// requests that did not fit (keytrace.MaxLines).
type KeyTraceSummary struct {
	Path  string `json:"path"`
	Lines int64  `json:"lines"`
	Lost  int64  `json:"lost"`
}

// SummaryConfig is the step as configured (rate: the whole load's RATE).
type SummaryConfig struct {
	Scenario  string  `json:"scenario"`
	Arm       string  `json:"arm"`
	Phase     string  `json:"phase"`
	Rate      int     `json:"rate"`
	DurationS float64 `json:"duration_s"`
	Repeat    int     `json:"repeat"`
	RunID     string  `json:"run_id"`
	Seed      uint64  `json:"seed"`
	LateMs    int     `json:"late_ms"`
	TimeoutS  float64 `json:"timeout_s"`
	Engine    string  `json:"engine"`
	Shards    int     `json:"shards"`
	Shard     int     `json:"shard"`
	// The keys' popularity of a read scenario (empty for the others).
	Dist  string  `json:"dist,omitempty"`
	Alpha float64 `json:"alpha,omitempty"`
	Keys  int     `json:"keys,omitempty"`
}

// CPU is the driver's own CPU time.
type CPU struct {
	UserS   float64 `json:"user_s"`
	SystemS float64 `json:"system_s"`
}

// ScenarioSummary is one scenario's figures.
type ScenarioSummary struct {
	Rate           float64                `json:"rate"`
	Pool           int                    `json:"pool"`
	InflightPeak   int64                  `json:"inflight_peak"`
	Due            int64                  `json:"due"`
	Started        int64                  `json:"started"`
	Dropped        int64                  `json:"dropped"`
	Late           int64                  `json:"late"`
	Iterations     int64                  `json:"iterations"`
	Failed         int64                  `json:"failed"`
	Requests       int64                  `json:"requests"`
	BytesReceived  int64                  `json:"bytes_received"`
	Status         map[string]int64       `json:"status"`
	Latency        *record.Latency        `json:"latency"`
	LatencyAll     *record.Latency        `json:"latency_all"`
	LatencyFromDue *record.Latency        `json:"latency_from_due"`
	ByName         map[string]NameSummary `json:"by_name"`
	Counters       map[string]int64       `json:"counters"`
}

// NameSummary is one request name's figures.
type NameSummary struct {
	Requests int64            `json:"requests"`
	Status   map[string]int64 `json:"status"`
	Latency  *record.Latency  `json:"latency"`
}

func statusMap(s [record.NClasses]int64) map[string]int64 {
	m := make(map[string]int64, record.NClasses)
	for i, name := range record.ClassNames {
		m[name] = s[i]
	}
	return m
}

// NewSummary assembles the summary of a step.
func NewSummary(cfg config.Config, startedAt, endedAt float64, interrupted bool, influx *Points, totals []record.Totals) Summary {
	s := Summary{
		SchemaVersion: SchemaVersion, Driver: "aside-load",
		Config: SummaryConfig{
			Scenario: cfg.Scenario, Arm: cfg.Arm, Phase: cfg.Phase, Rate: cfg.Rate,
			DurationS: cfg.Duration.Seconds(), Repeat: cfg.Repeat, RunID: cfg.RunID, Seed: cfg.Seed,
			LateMs: cfg.LateMs, TimeoutS: cfg.Timeout.Seconds(), Engine: cfg.Engine, Shards: cfg.Shards, Shard: cfg.Shard,
			Dist: cfg.Dist, Keys: cfg.Keys,
		},
		StartedAt: startedAt, EndedAt: endedAt, Interrupted: interrupted, CPU: OwnCPU(),
		Influx: influx, Scenarios: map[string]ScenarioSummary{},
	}
	if cfg.Dist == config.Zipf {
		s.Config.Alpha = cfg.Alpha
	}
	if cfg.Trace != "" {
		s.Config.Dist = "trace"
	}
	for _, t := range totals {
		one := ScenarioSummary{
			Rate: t.Rate, Pool: t.Pool, InflightPeak: t.InflightPeak, Due: t.Due, Started: t.Started,
			Dropped: t.Dropped, Late: t.Late, Iterations: t.Iterations, Failed: t.Failed, Requests: t.Requests,
			BytesReceived: t.BodyBytes,
			Status:        statusMap(t.Status), Latency: t.Latency, LatencyAll: t.LatencyAll, LatencyFromDue: t.FromDue,
			ByName: map[string]NameSummary{}, Counters: map[string]int64{},
		}
		for _, n := range t.ByName {
			one.ByName[n.Name] = NameSummary{Requests: n.Requests, Status: statusMap(n.Status), Latency: n.Latency}
		}
		for _, c := range t.Counters {
			one.Counters[c.Name] = c.Value
		}
		s.Scenarios[t.Scenario] = one
	}
	return s
}

// OwnCPU is this process's user and system CPU time so far.
func OwnCPU() CPU {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return CPU{}
	}
	secs := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return CPU{UserS: secs(ru.Utime), SystemS: secs(ru.Stime)}
}

// WriteSummary writes s to path whole or not at all (a temp file renamed),
// so a reader never sees half a summary.
func WriteSummary(path string, s Summary) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	err = atomicfile.Write(path, func(w io.Writer) error {
		_, err := w.Write(append(data, '\n'))
		return err
	})
	if err != nil {
		return fmt.Errorf("cannot write the summary %s: %w", path, err)
	}
	return nil
}
