package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"aside/bench/driver/internal/config"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// step is a valid healthz environment plus kv (an empty value unsets).
func step(kv map[string]string) func(string) string {
	m := map[string]string{
		"BASE_URL": "http://127.0.0.1:28000/", "SCENARIO": "healthz", "RUN_ID": "r1",
		"RATE": "500", "DURATION": "30s",
	}
	for k, v := range kv {
		m[k] = v
	}
	return env(m)
}

func TestDefaults(t *testing.T) {
	c, err := config.Load(step(nil))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"base", c.BaseURL, "http://127.0.0.1:28000"},
		{"arm", c.Arm, "none"},
		{"phase", c.Phase, "none"},
		{"repeat", c.Repeat, 1},
		{"duration", c.Duration, 30 * time.Second},
		{"pool share", c.PoolShare(c.Pool, c.Rate), 500},
		{"small pool", c.PoolShare(0, 3), 10},
		{"late", c.LateMs, 100},
		{"timeout", c.Timeout, 10 * time.Second},
		{"seed", c.Seed, uint64(1)},
		{"engine", c.Engine, "fast"},
		{"shards", c.Shards, 1},
		{"shard", c.Shard, 0},
		{"gc", c.GCPercent, 400},
		{"live", c.Live, false},
		{"no influx", c.InfluxWriteURL, ""},
		{"no start", c.StartAt.IsZero(), true},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	if c, _ := config.Load(step(map[string]string{"START_AT": "1795000000123"})); !c.StartAt.Equal(time.UnixMilli(1795000000123)) {
		t.Errorf("START_AT: %v", c.StartAt)
	}
	if c, _ := config.Load(step(map[string]string{"GOGC": "100"})); c.GCPercent != 0 {
		t.Errorf("GOGC set: GCPercent %d, want 0 (left alone)", c.GCPercent)
	}
}

func TestErrorsNameTheVariable(t *testing.T) {
	cases := []struct {
		kv   map[string]string
		name string
		text string
	}{
		{map[string]string{"RATE": "x"}, "RATE", `RATE must be a whole number >= 0, got "x"`},
		{map[string]string{"RATE": "-1"}, "RATE", ""},
		{map[string]string{"RATE": ""}, "RATE", "RATE is required"},
		{map[string]string{"BASE_URL": ""}, "BASE_URL", "BASE_URL is required"},
		{map[string]string{"BASE_URL": "127.0.0.1:28000"}, "BASE_URL", ""},
		{map[string]string{"BASE_URL": "http://h:1/api"}, "BASE_URL", ""},
		{map[string]string{"SCENARIO": "soak"}, "SCENARIO", ""},
		{map[string]string{"RUN_ID": ""}, "RUN_ID", ""},
		{map[string]string{"DURATION": "30"}, "DURATION", ""},
		{map[string]string{"DURATION": "-1s"}, "DURATION", ""},
		{map[string]string{"POOL": "0"}, "POOL", ""},
		{map[string]string{"LATE_MS": "soon"}, "LATE_MS", ""},
		{map[string]string{"START_AT": "2026-11-26T10:00:00Z"}, "START_AT", `START_AT must be a Unix time in whole milliseconds, got "2026-11-26T10:00:00Z"`},
		{map[string]string{"START_AT": "-5"}, "START_AT", ""},
		{map[string]string{"TIMEOUT_S": "0"}, "TIMEOUT_S", ""},
		{map[string]string{"SEED": "1.5"}, "SEED", ""},
		{map[string]string{"REPEAT": "0"}, "REPEAT", ""},
		{map[string]string{"LIVE": "yes"}, "LIVE", ""},
		{map[string]string{"INFLUX_URL": "http://h:8086"}, "INFLUX_URL", ""},
		{map[string]string{"INFLUX_URL": "h:8086/db"}, "INFLUX_URL", ""},
		{map[string]string{"ENGINE": "turbo"}, "ENGINE", ""},
		{map[string]string{"ENGINE": "reference", "SCENARIO": "read", "CACHE": "l2", "DATA_DIR": "/d"}, "ENGINE", ""},
		{map[string]string{"SHARDS": "0"}, "SHARDS", ""},
		{map[string]string{"SHARDS": "2", "SHARD": "2"}, "SHARD", ""},
		{map[string]string{"SHARDS": "2", "JOB_COMPLETION_INDEX": "x"}, "JOB_COMPLETION_INDEX", ""},
		{map[string]string{"SCENARIO": "read", "DATA_DIR": "/d"}, "CACHE", ""},
		{map[string]string{"SCENARIO": "read", "DATA_DIR": "/d", "CACHE": "redis"}, "CACHE", ""},
		{map[string]string{"SCENARIO": "read", "CACHE": "l2"}, "DATA_DIR", ""},
		{map[string]string{"SCENARIO": "read", "CACHE": "l2", "DATA_DIR": "/d", "HOT_SHARE": "1.1"}, "HOT_SHARE", ""},
		{map[string]string{"SCENARIO": "read", "CACHE": "l2", "DATA_DIR": "/d", "DIST": "zipfian"}, "DIST", ""},
		{map[string]string{"SCENARIO": "read", "CACHE": "l2", "DATA_DIR": "/d", "DIST": "zipf", "ALPHA": "0"}, "ALPHA", ""},
		{map[string]string{"SCENARIO": "read", "CACHE": "l2", "DATA_DIR": "/d", "KEYS": "-1"}, "KEYS", ""},
		{map[string]string{"SCENARIO": "mixed", "CACHE": "l2", "DATA_DIR": "/d", "DIST": "zipf"}, "DIST", ""},
		{map[string]string{"SCENARIO": "read", "CACHE": "l2", "DATA_DIR": "/d", "COLD_SAMPLE": "-5"}, "COLD_SAMPLE", ""},
		{map[string]string{"SCENARIO": "read", "CACHE": "l2", "DATA_DIR": "/d", "TRACE": "/t", "DIST": "zipf"}, "TRACE",
			"TRACE and DIST=zipf are exclusive: a trace asks for its own keys in its own order"},
		{map[string]string{"SCENARIO": "read", "CACHE": "l2", "DATA_DIR": "/d", "TRACE": "/t", "TRACE_SPEED": "0"}, "TRACE_SPEED", ""},
		{map[string]string{"SCENARIO": "mixed", "CACHE": "l2", "DATA_DIR": "/d", "TRACE": "/t"}, "TRACE", ""},
		{map[string]string{"SCENARIO": "mixed", "CACHE": "l2", "DATA_DIR": "/d", "KEY_TRACE_PATH": "/k"}, "KEY_TRACE_PATH", ""},
		{map[string]string{"SCENARIO": "mixed", "CACHE": "l2", "DATA_DIR": "/d", "WRITE_SHARE": "x"}, "WRITE_SHARE", ""},
		{map[string]string{"SCENARIO": "mixed", "CACHE": "l2", "DATA_DIR": "/d", "STALE_READS_AFTER": "0"}, "STALE_READS_AFTER", ""},
		{map[string]string{"SCENARIO": "compute"}, "COMPUTE_BODY", ""},
		{map[string]string{"SCENARIO": "compute", "COMPUTE_BODY": "{", "COMPUTE_EXPECT": "{}"}, "COMPUTE_BODY", ""},
		{map[string]string{"SCENARIO": "compute", "COMPUTE_BODY": "{}", "COMPUTE_EXPECT": "[1]"}, "COMPUTE_EXPECT", ""},
		{map[string]string{"SCENARIO": "compute", "COMPUTE_BODY": "{}", "COMPUTE_EXPECT": `{"kind":"bcrypt"}`}, "COMPUTE_HASH_PATTERN", ""},
		{map[string]string{"SCENARIO": "compute", "COMPUTE_BODY": "{}", "COMPUTE_EXPECT": "{}", "COMPUTE_HASH_PATTERN": "("}, "COMPUTE_HASH_PATTERN", ""},
		{map[string]string{"SCENARIO": "interference", "DATA_DIR": "/d"}, "READ_RATE", ""},
		{map[string]string{"SCENARIO": "interference", "DATA_DIR": "/d", "READ_RATE": "500"}, "COMPUTE_BODY", ""},
		{map[string]string{"SCENARIO": "tracks", "DATA_DIR": "/d", "ARM_QUERY": "cache=l2"}, "SIZE_BOUNDS", ""},
		{map[string]string{"SCENARIO": "tracks", "DATA_DIR": "/d", "ARM_QUERY": "cache=l2", "SIZE_BOUNDS": "10,5"}, "SIZE_BOUNDS", ""},
		{map[string]string{"SCENARIO": "chaos", "DATA_DIR": "/d"}, "USER_PREFIX", ""},
		{map[string]string{"SCENARIO": "chaos", "DATA_DIR": "/d", "USER_PREFIX": "p", "NO_REUSE": "2"}, "NO_REUSE", ""},
	}
	for _, c := range cases {
		_, err := config.Load(step(c.kv))
		var cerr *config.Error
		if !errors.As(err, &cerr) {
			t.Errorf("%v: error %v, want a config.Error", c.kv, err)
			continue
		}
		if cerr.Name != c.name || !strings.HasPrefix(err.Error(), c.name+" ") {
			t.Errorf("%v: %q names %s, want %s", c.kv, err, cerr.Name, c.name)
		}
		if c.text != "" && err.Error() != c.text {
			t.Errorf("%v: %q, want %q", c.kv, err, c.text)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: error of several lines", c.kv)
		}
	}
}

func TestTraceVariables(t *testing.T) {
	c, err := config.Load(step(map[string]string{
		"SCENARIO": "interference", "DATA_DIR": "/d", "READ_RATE": "50", "RATE": "0",
		"TRACE": "/t.gz", "TRACE_SPEED": "2.5", "KEY_TRACE_PATH": "/k.gz", "DIST": "hotset",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Trace != "/t.gz" || c.TraceSpeed != 2.5 || c.KeyTracePath != "/k.gz" {
		t.Errorf("trace %q speed %g key trace %q", c.Trace, c.TraceSpeed, c.KeyTracePath)
	}
	c, err = config.Load(step(map[string]string{"SCENARIO": "read", "CACHE": "l2", "DATA_DIR": "/d"}))
	if err != nil || c.Trace != "" || c.TraceSpeed != 1 || c.KeyTracePath != "" {
		t.Errorf("defaults: %v %+v", err, c)
	}
}

func TestScenarioVariables(t *testing.T) {
	c, err := config.Load(step(map[string]string{
		"SCENARIO": "mixed", "CACHE": "hybrid", "DATA_DIR": "/d", "WRITE_SHARE": "0.2", "STALE_PER_MIN": "12",
		"INFLUX_URL": "http://127.0.0.1:28086/aside", "LIVE": "1",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Cache != "hybrid" || c.HotShare != 0.9 || c.ColdSample != 200 || c.WriteShare != 0.2 || c.StalePerMin != 12 || c.StaleReadsAfter != 2 {
		t.Errorf("mixed: %+v", c)
	}
	if c.InfluxWriteURL != "http://127.0.0.1:28086/write?db=aside&precision=ms" || !c.Live {
		t.Errorf("influx %q live %v", c.InfluxWriteURL, c.Live)
	}
	c, err = config.Load(step(map[string]string{
		"SCENARIO": "interference", "DATA_DIR": "/d", "READ_RATE": "500", "RATE": "0",
	}))
	if err != nil {
		t.Fatalf("interference at RATE 0 needs no compute variables: %v", err)
	}
	if c.ReadCache != "l2" {
		t.Errorf("READ_CACHE default %q", c.ReadCache)
	}
	c, err = config.Load(step(map[string]string{
		"SCENARIO": "tracks", "DATA_DIR": "/d", "ARM_QUERY": "cache=off", "SIZE_BOUNDS": "16384,65536",
	}))
	if err != nil || len(c.SizeBounds) != 2 || c.SizeBounds[1] != 65536 {
		t.Errorf("tracks: %v %+v", err, c.SizeBounds)
	}
	c, err = config.Load(step(map[string]string{"SCENARIO": "chaos", "DATA_DIR": "/d", "USER_PREFIX": "chaos.r1"}))
	if err != nil || c.WriteShare != 0.2 || c.UserShare != 0.5 || c.IDSample != 50 || c.NoReuse {
		t.Errorf("chaos: %v %+v", err, c)
	}
	c, err = config.Load(step(map[string]string{
		"SCENARIO": "compute", "COMPUTE_BODY": `{"kind":"bcrypt"}`, "COMPUTE_EXPECT": `{"kind":"bcrypt","cost":10}`,
		"COMPUTE_HASH_PATTERN": `^\$2[aby]\$[0-9]{2}\$[./A-Za-z0-9]{53}$`,
	}))
	if err != nil || c.ComputeExpect["cost"] != float64(10) || !c.ComputeHash.MatchString("$2b$10$"+strings.Repeat("a", 53)) {
		t.Errorf("compute: %v %+v", err, c)
	}
}

func TestShardsSplitTheRate(t *testing.T) {
	shares := []int{}
	pools := []int{}
	total := 0
	for shard := range 3 {
		c, err := config.Load(step(map[string]string{"RATE": "100", "SHARDS": "3", "JOB_COMPLETION_INDEX": itoa(shard)}))
		if err != nil {
			t.Fatal(err)
		}
		if c.Shard != shard {
			t.Fatalf("shard %d from JOB_COMPLETION_INDEX, want %d", c.Shard, shard)
		}
		shares = append(shares, c.Share(c.Rate))
		pools = append(pools, c.PoolShare(0, c.Rate))
		total += c.Share(c.Rate)
	}
	if shares[0] != 34 || shares[1] != 33 || shares[2] != 33 || total != 100 {
		t.Errorf("shares %v of 100", shares)
	}
	if pools[0] != 34 || pools[2] != 33 {
		t.Errorf("default pools %v", pools)
	}
	c, _ := config.Load(step(map[string]string{"RATE": "100", "SHARDS": "3", "SHARD": "2", "JOB_COMPLETION_INDEX": "0", "POOL": "100"}))
	if c.Shard != 2 || c.PoolShare(c.Pool, c.Rate) != 34 {
		t.Errorf("SHARD over JOB_COMPLETION_INDEX: shard %d, pool %d", c.Shard, c.PoolShare(c.Pool, c.Rate))
	}
}

func itoa(n int) string { return string(rune('0' + n)) }

func TestInfluxSpoolBesideTheSummary(t *testing.T) {
	for _, c := range []struct{ summary, spool, want string }{
		{"", "", ""},
		{"/runs/r1/summary-001.json", "", "/runs/r1/influx-spool"},
		{"/runs/r1/summary-001.json", "/elsewhere", "/elsewhere"},
	} {
		got, err := config.Load(step(map[string]string{"SUMMARY_PATH": c.summary, "INFLUX_SPOOL": c.spool}))
		if err != nil || got.InfluxSpool != c.want {
			t.Errorf("SUMMARY_PATH=%q INFLUX_SPOOL=%q: spool %q, want %q (%v)", c.summary, c.spool, got.InfluxSpool, c.want, err)
		}
	}
}
