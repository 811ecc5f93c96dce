// Package config is the one place where aside-load reads its environment
// (README.md, "Configuration"). A malformed or missing value is a one-line
// error that names the variable.
//
// Its reader has the core's shape (core-go/internal/config) by design, not by
// copy: the two binaries are separate Go modules whose images are built each
// from its own folder, so neither can import the other, and each reader keeps
// its own rules (there a lab default for every variable, here variables a
// step must give).
package config

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// The scenarios (SCENARIO).
const (
	Read         = "read"
	Bare         = "bare"
	Healthz      = "healthz"
	Compute      = "compute"
	Interference = "interference"
	Mixed        = "mixed"
	Tracks       = "tracks"
	Chaos        = "chaos"
)

// Scenarios lists the values of SCENARIO.
var Scenarios = []string{Read, Bare, Healthz, Compute, Interference, Mixed, Tracks, Chaos}

// The values of ENGINE.
const (
	EngineFast      = "fast"
	EngineReference = "reference"
)

// The keys' popularity (DIST): the seeder's hot and cold samples mixed by
// HOT_SHARE; every key of the key space alike; or Zipf with exponent ALPHA.
const (
	Hotset  = "hotset"
	Uniform = "uniform"
	Zipf    = "zipf"
)

// Dists lists the values of DIST.
var Dists = []string{Hotset, Uniform, Zipf}

// CacheModes lists the values of CACHE and READ_CACHE (the gateway's ?cache=).
var CacheModes = []string{"off", "nopool", "coalesce", "l1", "l2", "hybrid", "tracking"}

// DefaultGCPercent is the collector's pace unless GOGC is set: the driver's
// heap is small, and fewer collections leave more CPU to the requests.
const DefaultGCPercent = 400

// Config is everything aside-load reads from its environment. Rates and
// pools are the whole load's (what the variables say); Share and PoolShare
// give this process's part when SHARDS > 1.
type Config struct {
	BaseURL  string // without a trailing slash
	Scenario string
	RunID    string
	Arm      string
	Phase    string
	Repeat   int

	Rate     int
	Duration time.Duration
	// Pool is POOL, 0 when unset (then it follows the rate).
	Pool int
	// Conns is CONNS: connections opened before the first request falls due.
	Conns int
	// StartAt is START_AT (Unix ms): the first request falls due then, or once
	// the CONNS are open if that is later; zero: as soon as the step is planned.
	StartAt time.Time
	LateMs  int
	Timeout time.Duration
	Seed    uint64
	Skip    uint64
	DataDir string

	SummaryPath string
	SamplesPath string
	// InfluxWriteURL is INFLUX_URL turned into its /write endpoint; empty: no points.
	InfluxWriteURL string
	// InfluxSpool is INFLUX_SPOOL: the folder where points InfluxDB did not
	// take are kept (default: influx-spool beside SUMMARY_PATH; empty: none).
	InfluxSpool string
	Live        bool

	Engine string
	Shards int
	Shard  int
	// GCPercent is what the collector is set to; 0 leaves it alone (GOGC is set).
	GCPercent int

	// read, bare, mixed
	Cache      string
	HotShare   float64
	ColdSample int
	// read, bare, interference: the keys' popularity (DIST), zipf's exponent
	// (ALPHA) and the key space's size (KEYS, 0: all of emails.txt)
	Dist  string
	Alpha float64
	Keys  int
	// read, bare, interference: a trace to replay instead of DIST (TRACE),
	// its timestamps' speed-up (TRACE_SPEED), and where to record the keys
	// sent (KEY_TRACE_PATH); empty: none
	Trace        string
	TraceSpeed   float64
	KeyTracePath string
	// compute, interference
	ComputeBody   []byte
	ComputeExpect map[string]any
	ComputeHash   *regexp.Regexp
	// interference
	ReadRate  int
	ReadCache string
	ReadPool  int
	// mixed, chaos
	WriteShare float64
	// mixed
	StalePerMin     int
	StaleReadsAfter int
	// tracks
	ArmQuery   string
	SizeBounds []int64
	// chaos
	UserPrefix string
	UserShare  float64
	IDSample   int
	NoReuse    bool
}

// Error is a configuration error: one line naming the variable.
type Error struct {
	Name   string
	Reason string
}

func (e *Error) Error() string { return e.Name + " " + e.Reason }

// Load reads and validates the configuration. getenv is os.Getenv in
// production; tests pass a map lookup. An empty value counts as unset.
func Load(getenv func(string) string) (Config, error) {
	r := reader{getenv: getenv}
	c := Config{}

	c.BaseURL = strings.TrimRight(r.required("BASE_URL"), "/")
	if c.BaseURL != "" {
		if u, err := url.Parse(c.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.Path != "" || u.RawQuery != "" || u.User != nil {
			r.fail("BASE_URL", fmt.Sprintf("must be http(s)://host:port, got %q", c.BaseURL))
		}
	}
	c.Scenario = r.required("SCENARIO")
	if c.Scenario != "" && !contains(Scenarios, c.Scenario) {
		r.fail("SCENARIO", fmt.Sprintf("must be one of %s, got %q", strings.Join(Scenarios, ", "), c.Scenario))
	}
	c.RunID = r.required("RUN_ID")
	c.Arm = r.str("ARM", "none")
	c.Phase = r.str("PHASE", "none")
	c.Repeat = r.whole("REPEAT", 1, 1)

	c.Rate = r.wholeRequired("RATE", 0)
	c.Duration = r.duration("DURATION")
	c.Pool = r.whole("POOL", 0, 1)
	c.Conns = r.whole("CONNS", 0, 0)
	c.StartAt = r.unixMs("START_AT")
	c.LateMs = r.whole("LATE_MS", 100, 1)
	c.Timeout = time.Duration(r.whole("TIMEOUT_S", 10, 1)) * time.Second
	c.Seed = uint64(r.whole("SEED", 1, 0))
	c.Skip = uint64(r.whole("SKIP", 0, 0))
	c.DataDir = r.str("DATA_DIR", "")

	c.SummaryPath = r.str("SUMMARY_PATH", "")
	c.SamplesPath = r.str("SAMPLES_PATH", "")
	if raw := r.str("INFLUX_URL", ""); raw != "" {
		c.InfluxWriteURL = r.influx(raw)
	}
	c.InfluxSpool = r.str("INFLUX_SPOOL", "")
	if c.InfluxSpool == "" && c.SummaryPath != "" {
		c.InfluxSpool = filepath.Join(filepath.Dir(c.SummaryPath), "influx-spool")
	}
	c.Live = r.flag("LIVE")

	c.Engine = r.str("ENGINE", EngineFast)
	if c.Engine != EngineFast && c.Engine != EngineReference {
		r.fail("ENGINE", fmt.Sprintf("must be %s or %s, got %q", EngineFast, EngineReference, c.Engine))
	} else if c.Engine == EngineReference && c.Scenario != "" && c.Scenario != Healthz {
		r.fail("ENGINE", fmt.Sprintf("reference sends only the healthz scenario, got SCENARIO=%s", c.Scenario))
	}
	c.Shards = r.whole("SHARDS", 1, 1)
	// An Indexed Job gives each pod its index in JOB_COMPLETION_INDEX.
	if getenv("SHARD") != "" {
		c.Shard = r.whole("SHARD", 0, 0)
	} else {
		c.Shard = r.whole("JOB_COMPLETION_INDEX", 0, 0)
	}
	if c.Shard >= c.Shards && r.err == nil {
		r.fail("SHARD", fmt.Sprintf("must be below SHARDS (%d), got %d", c.Shards, c.Shard))
	}
	if getenv("GOGC") == "" {
		c.GCPercent = DefaultGCPercent
	}

	switch c.Scenario {
	case Read, Bare, Mixed:
		c.Cache = r.oneOf("CACHE", "", CacheModes)
		c.readMix(&r)
		if c.Scenario == Mixed {
			c.WriteShare = r.share("WRITE_SHARE", 0.1)
			c.StalePerMin = r.whole("STALE_PER_MIN", 0, 0)
			c.StaleReadsAfter = r.whole("STALE_READS_AFTER", 2, 1)
		}
	case Compute:
		c.computeVars(&r)
	case Interference:
		c.ReadRate = r.wholeRequired("READ_RATE", 0)
		c.ReadCache = r.oneOf("READ_CACHE", "l2", CacheModes)
		c.ReadPool = r.whole("READ_POOL", 0, 1)
		c.readMix(&r)
		if c.Rate > 0 {
			c.computeVars(&r)
		}
	case Tracks:
		c.ArmQuery = r.required("ARM_QUERY")
		c.SizeBounds = r.bounds("SIZE_BOUNDS")
	case Chaos:
		c.UserPrefix = r.required("USER_PREFIX")
		c.WriteShare = r.share("WRITE_SHARE", 0.2)
		c.UserShare = r.share("USER_SHARE", 0.5)
		c.IDSample = r.whole("ID_SAMPLE", 50, 0)
		c.NoReuse = r.flag("NO_REUSE")
	}
	if needsData(c.Scenario) && c.DataDir == "" {
		r.fail("DATA_DIR", fmt.Sprintf("is required by the %s scenario", c.Scenario))
	}

	if r.err != nil {
		return Config{}, r.err
	}
	return c, nil
}

func needsData(scenario string) bool {
	switch scenario {
	case Read, Bare, Interference, Mixed, Tracks, Chaos:
		return true
	}
	return false
}

func (c *Config) readMix(r *reader) {
	c.HotShare = r.share("HOT_SHARE", 0.9)
	c.ColdSample = r.whole("COLD_SAMPLE", 200, 0)
	c.Dist = r.oneOf("DIST", Hotset, Dists)
	c.Alpha = r.positive("ALPHA", 0.99)
	c.Keys = r.whole("KEYS", 0, 0)
	if c.Scenario == Mixed && c.Dist != Hotset {
		r.fail("DIST", fmt.Sprintf("must be %s for the mixed scenario, got %q", Hotset, c.Dist))
	}
	c.Trace = r.str("TRACE", "")
	c.TraceSpeed = r.positive("TRACE_SPEED", 1)
	c.KeyTracePath = r.str("KEY_TRACE_PATH", "")
	switch {
	case c.Scenario == Mixed && c.Trace != "":
		r.fail("TRACE", "must be unset for the mixed scenario (its writes need the hot set)")
	case c.Scenario == Mixed && c.KeyTracePath != "":
		r.fail("KEY_TRACE_PATH", "must be unset for the mixed scenario (it records the read, bare and interference scenarios)")
	case c.Trace != "" && c.Dist != Hotset:
		r.fail("TRACE", fmt.Sprintf("and DIST=%s are exclusive: a trace asks for its own keys in its own order", c.Dist))
	}
}

func (c *Config) computeVars(r *reader) {
	body := r.required("COMPUTE_BODY")
	if body != "" && !json.Valid([]byte(body)) {
		r.fail("COMPUTE_BODY", "must be JSON")
	}
	c.ComputeBody = []byte(body)
	if raw := r.required("COMPUTE_EXPECT"); raw != "" {
		if err := json.Unmarshal([]byte(raw), &c.ComputeExpect); err != nil || c.ComputeExpect == nil {
			r.fail("COMPUTE_EXPECT", fmt.Sprintf("must be a JSON object, got %q", raw))
		}
	}
	pattern := r.str("COMPUTE_HASH_PATTERN", "")
	if pattern == "" {
		if c.ComputeExpect["kind"] == "bcrypt" {
			r.fail("COMPUTE_HASH_PATTERN", "is required when COMPUTE_EXPECT's kind is bcrypt")
		}
		return
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		r.fail("COMPUTE_HASH_PATTERN", fmt.Sprintf("must be a regular expression, got %q", pattern))
	}
	c.ComputeHash = re
}

// Share is this shard's part of a rate (or of any count split across
// shards): total / SHARDS, the first total % SHARDS shards one more.
func (c Config) Share(total int) int {
	share := total / c.Shards
	if c.Shard < total%c.Shards {
		share++
	}
	return share
}

// PoolShare is this shard's pool: the given pool (POOL, READ_POOL) split
// across shards, rounded up; unset, the shard's rate x 1 s and at least 10.
func (c Config) PoolShare(pool, rate int) int {
	if pool > 0 {
		return (pool + c.Shards - 1) / c.Shards
	}
	return max(c.Share(rate), 10)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
