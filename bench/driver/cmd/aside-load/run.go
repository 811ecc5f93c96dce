package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"aside/bench/driver/internal/config"
	"aside/bench/driver/internal/keytrace"
	"aside/bench/driver/internal/output"
	"aside/bench/driver/internal/popularity"
	"aside/bench/driver/internal/record"
	"aside/bench/driver/internal/scenario"
	"aside/bench/driver/internal/schedule"
)

const usage = `usage: aside-load
  Sends one step of load; every setting comes from the environment
  (BASE_URL, SCENARIO, RUN_ID, RATE, DURATION, ...): see bench/driver/README.md.
`

// usageError is a bad command line (exit 2, as a bad variable).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// exitCode is 2 for a bad variable or argument (or TRACE's file), else 1.
func exitCode(err error) int {
	var cfgErr *config.Error
	var useErr *usageError
	var traceErr *keytrace.Error
	if errors.As(err, &cfgErr) || errors.As(err, &useErr) || errors.As(err, &traceErr) {
		return 2
	}
	return 1
}

// drainSlack is how long past the request timeout iterations may go on
// sending after the schedule ends.
const drainSlack = 2 * time.Second

// staleBurst is the stale checker's pool: at most this many iterations at once.
const staleBurst = 10

// run is the whole program, callable from tests: args as os.Args, getenv
// as os.Getenv. It returns when the step is over and its summary written,
// or at once on a configuration error.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 1 {
		switch args[1] {
		case "-h", "-help", "--help", "help":
			_, err := io.WriteString(stdout, usage)
			return err
		default:
			return &usageError{fmt.Sprintf("unknown argument %q (try --help)", args[1])}
		}
	}
	cfg, err := config.Load(getenv)
	if err != nil {
		return err
	}
	if cfg.GCPercent > 0 {
		debug.SetGCPercent(cfg.GCPercent)
	}

	clock := record.NewClock(time.Now())
	var samples *output.Samples
	var sink record.Sink // stays a nil interface without a samples file
	if cfg.SamplesPath != "" {
		if samples, err = output.OpenSamples(cfg.SamplesPath); err != nil {
			return err
		}
		sink = samples
	}
	loads, client, traced, err := plan(cfg, clock, sink)
	if err == nil {
		err = lateStart(cfg, time.Now())
	}
	if err != nil {
		if samples != nil {
			samples.Close()
		}
		return err
	}

	// The schedule starts once the step is planned: reading a large key space
	// (emails.txt, a trace) and building its URLs takes a while, and the first
	// iterations would otherwise fall due before a worker could send them.
	clock.Restart(time.Now())
	// A START_AT ahead bounds the opening too, so the schedule starts then
	// whatever the server's pace: a caller that starts steps back to back
	// knows when each one begins, and shards started apart begin together.
	startAt := cfg.StartAt
	if !startAt.After(time.Now()) {
		startAt = time.Time{}
	}
	if cfg.Conns > 0 {
		// Before the schedule's clock starts: the first request falls due after this.
		deadline := time.Now().Add(cfg.Timeout)
		if !startAt.IsZero() {
			deadline = startAt
		}
		client.Open(cfg.Conns, "/healthz", deadline)
		clock.Restart(time.Now())
	}
	if wait := time.Until(startAt); wait > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		clock.Restart(time.Now())
	}

	periodic := &output.Periodic{Clock: clock, Samples: samples, Arm: cfg.Arm, Phase: cfg.Phase}
	for _, l := range loads {
		periodic.Recorders = append(periodic.Recorders, l.Env.Rec)
	}
	var influx *output.Influx
	if cfg.InfluxWriteURL != "" {
		influx = output.NewInflux(cfg.InfluxWriteURL, stepTags(cfg), cfg.Shards, spoolPath(cfg))
		periodic.Influx = influx
	}
	if cfg.Live {
		periodic.Live = stderr
	}
	periodic.Start()

	var wg sync.WaitGroup
	for _, l := range loads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if cfg.Engine == config.EngineReference {
				l.RunReference(ctx, cfg.BaseURL+"/healthz")
			} else {
				l.Run(ctx)
			}
		}()
	}
	wg.Wait()
	interrupted := ctx.Err() != nil
	client.CloseIdle()

	periodic.Stop()
	var points *output.Points
	if influx != nil {
		recs := make([]*record.Recorder, 0, len(loads))
		for _, l := range loads {
			recs = append(recs, l.Env.Rec)
		}
		p := influx.Finish(clock.Wall(clock.Now()), clock.Wall(0), recs)
		points = &p
	}
	var samplesErr error
	if samples != nil {
		samplesErr = samples.Close()
	}

	keyTraceErr := traced.write()

	var totals []record.Totals
	for _, l := range loads {
		totals = append(totals, l.Env.Rec.Totals())
	}
	summary := output.NewSummary(cfg, clock.Epoch(0), clock.Epoch(clock.Now()), interrupted, points, totals)
	summary.Trace, summary.KeyTrace = traced.replayed, traced.recorded
	for _, t := range totals {
		fmt.Fprintln(stdout, resultLine(t))
	}
	if points != nil {
		fmt.Fprintln(stdout, pointsLine(*points))
	}
	if k := summary.KeyTrace; k != nil {
		fmt.Fprintf(stdout, "key trace: %d lines to %s, %d lost\n", k.Lines, k.Path, k.Lost)
	}
	if cfg.SummaryPath != "" {
		if err := output.WriteSummary(cfg.SummaryPath, summary); err != nil {
			return err
		}
	}
	if keyTraceErr != nil {
		return keyTraceErr
	}
	return samplesErr
}

// lateStart refuses a START_AT that passed before the step was planned: a
// shard that began after the others would offer its share late, and the
// merged step would ramp instead of being the rate asked for. One line,
// naming the variable (exit 2, as a bad variable).
func lateStart(cfg config.Config, now time.Time) error {
	if cfg.StartAt.IsZero() || !now.After(cfg.StartAt) {
		return nil
	}
	return &config.Error{Name: "START_AT", Reason: fmt.Sprintf(
		"%d (%s) passed %.3f s before shard %d of %d was ready to send: refusing to start late, "+
			"after the other shards (give every shard a start further ahead)",
		cfg.StartAt.UnixMilli(), cfg.StartAt.UTC().Format(time.RFC3339Nano),
		now.Sub(cfg.StartAt).Seconds(), cfg.Shard, cfg.Shards)}
}

// traces are a step's key traces: the one its reads replay (TRACE) and
// the one they record (KEY_TRACE_PATH), as the summary states them.
type traces struct {
	replayed *output.TraceSummary
	recorded *output.KeyTraceSummary
	rec      *keytrace.Recorder
	reads    *scenario.Read
	start    int64 // the schedule's start, a Clock offset
}

// write writes the recorded key trace, if any, once every worker is done.
func (t *traces) write() error {
	if t.rec == nil {
		return nil
	}
	lines, err := t.rec.Write(t.recorded.Path, t.reads.Key, t.start)
	t.recorded.Lines, t.recorded.Lost = lines, t.rec.Lost()
	return err
}

// stepTags are the tags of every point (lexical order is the encoder's business).
func stepTags(cfg config.Config) []record.Tag {
	tags := []record.Tag{
		{Key: "run_id", Value: cfg.RunID}, {Key: "arm", Value: cfg.Arm}, {Key: "phase", Value: cfg.Phase},
		{Key: "rate", Value: strconv.Itoa(cfg.Rate)}, {Key: "repeat", Value: strconv.Itoa(cfg.Repeat)},
	}
	if cfg.Shards > 1 {
		tags = append(tags, record.Tag{Key: "shard", Value: strconv.Itoa(cfg.Shard)})
	}
	return tags
}

// spoolPath is the step's spool file in INFLUX_SPOOL (empty: none):
// load-<scenario>-<arm>-<phase>-<rate>-r<repeat>-s<shard>of<shards>.lp.
func spoolPath(cfg config.Config) string {
	if cfg.InfluxSpool == "" {
		return ""
	}
	name := fmt.Sprintf("load-%s-%s-%s-%d-r%d-s%dof%d.lp", cfg.Scenario, cfg.Arm, cfg.Phase, cfg.Rate, cfg.Repeat, cfg.Shard, cfg.Shards)
	return filepath.Join(cfg.InfluxSpool, strings.Map(func(r rune) rune {
		if r == '/' || r == os.PathSeparator || r < ' ' {
			return '_'
		}
		return r
	}, name))
}

// pointsLine says what became of the step's InfluxDB points (stdout, the bench's log).
func pointsLine(p output.Points) string {
	line := fmt.Sprintf("influx: %d points written, %d spooled, %d lost", p.Written, p.Spooled, p.Lost)
	if p.Spooled > 0 {
		line += "; the spooled wait in " + p.Spool + " (aside-bench report --run sends it)"
	}
	return line
}

// resultLine is a scenario's outcome in a line (stdout, the bench's log).
func resultLine(t record.Totals) string {
	p95 := "-"
	if t.Latency != nil {
		p95 = strconv.FormatFloat(t.Latency.P95, 'f', 2, 64) + " ms"
	}
	return fmt.Sprintf("%s: %d due, %d started, %d dropped, %d late, %d failed, %d requests, p95 %s",
		t.Scenario, t.Due, t.Started, t.Dropped, t.Late, t.Failed, t.Requests, p95)
}

// part is one scenario of the step before its environment exists.
type part struct {
	scn  scenario.Scenario
	freq int
	per  time.Duration
	pool int
	// reads is scn when it reads by key (it may record its keys); replay
	// the trace it replays (nil: none).
	reads  *scenario.Read
	replay *replayed
}

// replayed is a trace and how this shard replays it.
type replayed struct {
	trace *keytrace.Trace
	order *keytrace.Replay
}

// plan builds the step's scenarios, each with its schedule, pool and
// recorder, all over one client, and its key traces.
func plan(cfg config.Config, clock *record.Clock, sink record.Sink) ([]*schedule.Load, *scenario.Client, *traces, error) {
	parts, client, err := parts(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	var loads []*schedule.Load
	traced := &traces{}
	for i, p := range parts {
		l := &schedule.Load{
			Scenario: p.scn, Freq: p.freq, Per: p.per, Pool: p.pool,
			Late: time.Duration(cfg.LateMs) * time.Millisecond, Duration: cfg.Duration,
			Shard: cfg.Shard, Shards: cfg.Shards, Drain: cfg.Timeout + drainSlack,
			// The step's main load (the first) may keep a P through its ticks.
			HoldP: i == 0 && runtime.GOMAXPROCS(0) >= 2,
		}
		rate := float64(p.freq) / p.per.Seconds()
		if p.replay != nil && p.replay.trace.Timed() {
			l.Times = p.replay.order
			rate = float64(l.Total()) / cfg.Duration.Seconds()
		}
		pool := p.pool
		if cfg.Engine == config.EngineReference {
			pool = 0 // a goroutine per request
		}
		rec := record.NewRecorder(p.scn.Name(), rate, pool, p.scn.Names(), cfg.Timeout)
		if c, ok := p.scn.(scenario.Counting); ok {
			c.Register(rec)
		}
		l.Env = &scenario.Env{
			Client: client, Rec: rec, Sink: sink, Clock: clock, Timeout: cfg.Timeout,
			Seed: cfg.Seed, Skip: cfg.Skip, Stream: scenario.StreamOf(p.scn.Name(), cfg.Shard),
		}
		loads = append(loads, l)
		if p.replay != nil {
			t := p.replay.trace
			passes := p.replay.order.Passes(l.Total())
			traced.replayed = &output.TraceSummary{
				Path: cfg.Trace, Lines: len(t.Lines), Keys: len(t.Keys), Timed: t.Timed(),
				Speed: cfg.TraceSpeed, Passes: passes, Wrapped: passes > 1,
			}
		}
		if p.reads != nil && cfg.KeyTracePath != "" {
			traced.rec, traced.reads, traced.start = keytrace.NewRecorder(l.Total()), p.reads, l.Start
			traced.recorded = &output.KeyTraceSummary{Path: cfg.KeyTracePath}
			p.reads.RecordKeys(traced.rec)
		}
	}
	return loads, client, traced, nil
}

// parts are the scenarios a config asks for, at this shard's rates.
func parts(cfg config.Config) ([]part, *scenario.Client, error) {
	mainPool := cfg.PoolShare(cfg.Pool, cfg.Rate)
	conns := mainPool
	switch cfg.Scenario {
	case config.Interference:
		conns += cfg.PoolShare(cfg.ReadPool, cfg.ReadRate)
	case config.Mixed:
		conns += staleBurst
	}
	client, err := scenario.NewClient(cfg.BaseURL, conns, cfg.Timeout)
	if err != nil {
		return nil, nil, err
	}
	perSecond := func(s scenario.Scenario, rate, pool int) part {
		return part{scn: s, freq: cfg.Share(rate), per: time.Second, pool: cfg.PoolShare(pool, rate)}
	}
	readMix := func() (hot, cold []string, err error) {
		if hot, err = scenario.LoadEmails(cfg.DataDir, scenario.HotEmailsFile, 0); err != nil {
			return nil, nil, err
		}
		cold, err = scenario.LoadEmails(cfg.DataDir, scenario.ColdEmailsFile, cfg.ColdSample)
		return hot, cold, err
	}

	// A read scenario: a trace replayed, the hot set's mix, or the key space by its popularity.
	newRead := func(name, mode string, bare bool, rate, pool int) (part, error) {
		read := func(s *scenario.Read, r *replayed) part {
			p := perSecond(s, rate, pool)
			p.reads, p.replay = s, r
			return p
		}
		if cfg.Trace != "" {
			t, err := keytrace.Read(cfg.Trace)
			if err != nil {
				return part{}, err
			}
			order := t.Replay(cfg.Shard, cfg.Shards, cfg.Skip, cfg.TraceSpeed)
			return read(scenario.NewReplay(name, client, mode, t.Keys, order, bare), &replayed{trace: t, order: order}), nil
		}
		if cfg.Dist == config.Hotset {
			hot, cold, err := readMix()
			if err != nil {
				return part{}, err
			}
			return read(scenario.NewRead(name, client, mode, cfg.HotShare, hot, cold, bare), nil), nil
		}
		keys, err := scenario.LoadKeySpace(cfg.DataDir, cfg.Keys)
		if err != nil {
			return part{}, err
		}
		rank, err := ranker(cfg.Dist, len(keys), cfg.Alpha)
		if err != nil {
			return part{}, err
		}
		return read(scenario.NewRanked(name, client, mode, popularity.Shuffled(keys, cfg.Seed), rank, bare), nil), nil
	}

	switch cfg.Scenario {
	case config.Healthz:
		return []part{perSecond(scenario.NewHealthz(client), cfg.Rate, cfg.Pool)}, client, nil
	case config.Read, config.Bare:
		p, err := newRead(cfg.Scenario, cfg.Cache, cfg.Scenario == config.Bare, cfg.Rate, cfg.Pool)
		if err != nil {
			return nil, nil, err
		}
		return []part{p}, client, nil
	case config.Compute:
		s := scenario.NewCompute("compute", client, cfg.ComputeBody, cfg.ComputeExpect, cfg.ComputeHash)
		return []part{perSecond(s, cfg.Rate, cfg.Pool)}, client, nil
	case config.Interference:
		reads, err := newRead("interference", cfg.ReadCache, false, cfg.ReadRate, cfg.ReadPool)
		if err != nil {
			return nil, nil, err
		}
		out := []part{reads}
		if cfg.Rate > 0 {
			s := scenario.NewCompute("interference_compute", client, cfg.ComputeBody, cfg.ComputeExpect, cfg.ComputeHash)
			out = append(out, perSecond(s, cfg.Rate, cfg.Pool))
		}
		return out, client, nil
	case config.Mixed:
		hot, cold, err := readMix()
		if err != nil {
			return nil, nil, err
		}
		m := scenario.NewMixed(client, cfg.RunID, cfg.Cache, cfg.HotShare, cfg.WriteShare, hot, cold)
		out := []part{perSecond(m, cfg.Rate, cfg.Pool)}
		if cfg.StalePerMin > 0 {
			s := scenario.NewStale(client, cfg.RunID, cfg.Arm, cfg.Phase+".r"+strconv.Itoa(cfg.Repeat), cfg.Rate, cfg.Cache, cfg.StaleReadsAfter)
			out = append(out, part{scn: s, freq: cfg.Share(cfg.StalePerMin), per: time.Minute, pool: staleBurst})
		}
		return out, client, nil
	case config.Tracks:
		tracks, err := scenario.LoadTracks(cfg.DataDir)
		if err != nil {
			return nil, nil, err
		}
		s := scenario.NewTracks(client, tracks, cfg.ArmQuery, cfg.SizeBounds)
		return []part{perSecond(s, cfg.Rate, cfg.Pool)}, client, nil
	case config.Chaos:
		hot, err := scenario.LoadEmails(cfg.DataDir, scenario.HotEmailsFile, 0)
		if err != nil {
			return nil, nil, err
		}
		ids, err := scenario.LoadIDs(cfg.DataDir, cfg.IDSample)
		if err != nil {
			return nil, nil, err
		}
		s := scenario.NewChaos(client, cfg.UserPrefix, cfg.WriteShare, cfg.UserShare, cfg.NoReuse, hot, ids)
		return []part{perSecond(s, cfg.Rate, cfg.Pool)}, client, nil
	}
	return nil, nil, fmt.Errorf("scenario %q has no plan", cfg.Scenario)
}

// ranker is DIST's popularity over n keys.
func ranker(dist string, n int, alpha float64) (popularity.Ranker, error) {
	if dist == config.Zipf {
		z, err := popularity.NewZipf(n, alpha)
		if err != nil {
			return nil, &config.Error{Name: "ALPHA", Reason: err.Error()}
		}
		return z, nil
	}
	u, err := popularity.NewUniform(n)
	if err != nil {
		return nil, &config.Error{Name: "KEYS", Reason: err.Error()}
	}
	return u, nil
}
