package config_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aside-lab/aside/core-go/internal/config"
	"github.com/aside-lab/aside/core-go/internal/store"
	"github.com/aside-lab/aside/core-go/internal/testenv"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// lab is an environment of the lab profile plus kv: the profile whose
// every variable has a default.
func lab(kv map[string]string) func(string) string {
	m := map[string]string{"ASIDE_PROFILE": "lab"}
	for k, v := range kv {
		m[k] = v
	}
	return env(m)
}

func TestLabDefaults(t *testing.T) {
	cfg, err := config.Load(lab(nil))
	if err != nil {
		t.Fatalf("Load with only ASIDE_PROFILE=lab set: %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"profile", cfg.Profile, config.ProfileLab},
		{"listen", cfg.ListenAddr, "127.0.0.1:28080"},
		{"database", cfg.DatabaseURL, "postgresql://aside@127.0.0.1:25432/aside"},
		{"redis", cfg.RedisURL, "redis://127.0.0.1:26379/0"},
		{"pool", cfg.DBPoolMax, int32(16)},
		{"redis timeout", cfg.RedisTimeout, 200 * time.Millisecond},
		{"shutdown", cfg.ShutdownTimeout, 10 * time.Second},
		{"compute", cfg.ComputeMaxConcurrency, runtime.GOMAXPROCS(0)},
		{"simplify", cfg.SimplifyMaxConcurrency, 1},
		{"simplify wait", cfg.SimplifyQueueWait, 100 * time.Millisecond},
		{"invalidation", cfg.InvalidationDeadline, 300 * time.Millisecond},
		{"metrics on the public listener", cfg.MetricsAddr, ""},
		{"no core token", cfg.CoreToken, ""},
		{"idempotency ttl", cfg.IdempotencyTTL, 24 * time.Hour},
		{"idempotency purge interval", cfg.IdempotencyPurgeInterval, time.Minute},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestOverrides(t *testing.T) {
	cfg, err := config.Load(env(map[string]string{
		"ASIDE_PROFILE":                 "production",
		"DATABASE_URL":                  "postgres://u:p@db:5432/x",
		"REDIS_URL":                     "redis://cache:6379/3",
		"CORE_LISTEN_ADDR":              "0.0.0.0:8080",
		"CORE_DB_POOL_MAX":              "40",
		"CORE_DB_TIMEOUT_MS":            "750",
		"CORE_REDIS_TIMEOUT_MS":         "50",
		"CORE_SHUTDOWN_TIMEOUT":         "3",
		"CORE_COMPUTE_MAX_CONCURRENCY":  "5",
		"CORE_COMPUTE_QUEUE_WAIT_MS":    "0",
		"CORE_SIMPLIFY_MAX_CONCURRENCY": "3",
		"CORE_SIMPLIFY_QUEUE_WAIT_MS":   "0",
		"CORE_TOKEN":                    "core-token-0123456789",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Profile != config.ProfileProduction || cfg.DBPoolMax != 40 || cfg.DBTimeout != 750*time.Millisecond ||
		cfg.RedisTimeout != 50*time.Millisecond || cfg.ShutdownTimeout != 3*time.Second ||
		cfg.ComputeMaxConcurrency != 5 || cfg.ComputeQueueWait != 0 || cfg.ListenAddr != "0.0.0.0:8080" ||
		cfg.CoreToken != "core-token-0123456789" || cfg.SimplifyMaxConcurrency != 3 || cfg.SimplifyQueueWait != 0 {
		t.Fatalf("overrides not applied: %+v", cfg)
	}
}

func TestShutdownTimeoutAcceptsGoDurations(t *testing.T) {
	cfg, err := config.Load(lab(map[string]string{"CORE_SHUTDOWN_TIMEOUT": "1m30s"}))
	if err != nil || cfg.ShutdownTimeout != 90*time.Second {
		t.Fatalf("got %v, %v", cfg.ShutdownTimeout, err)
	}
}

// Each wrong value gives one line naming its variable.
func TestErrorsNameTheVariable(t *testing.T) {
	bad := []struct{ name, value string }{
		{"ASIDE_PROFILE", "staging"},
		{"CORE_LISTEN_ADDR", "28080"},
		{"CORE_LISTEN_ADDR", "127.0.0.1:99999"},
		{"DATABASE_URL", "host=localhost dbname=aside"},
		{"DATABASE_URL", "mysql://aside@localhost/aside"},
		{"REDIS_URL", "http://localhost:6379"},
		{"CORE_DB_POOL_MAX", "abc"},
		{"CORE_DB_POOL_MAX", "0"},
		{"CORE_DB_TIMEOUT_MS", "-5"},
		{"CORE_DB_CONNECT_TIMEOUT_MS", "1.5"},
		{"CORE_REDIS_TIMEOUT_MS", "fast"},
		{"CORE_REDIS_POOL_SIZE", "0"},
		{"CORE_INVALIDATION_DEADLINE_MS", "x"},
		{"CORE_COMPUTE_MAX_CONCURRENCY", "0"},
		{"CORE_COMPUTE_QUEUE_WAIT_MS", "-1"},
		{"CORE_SIMPLIFY_MAX_CONCURRENCY", "0"},
		{"CORE_SIMPLIFY_QUEUE_WAIT_MS", "soon"},
		{"CORE_SHUTDOWN_TIMEOUT", "soon"},
		{"CORE_SHUTDOWN_TIMEOUT", "-1s"},
		{"CORE_DB_HEALTH_CHECK_PERIOD", "1ms"},
		{"CORE_METRICS_ADDR", "28089"},
		{"CORE_METRICS_ADDR", "127.0.0.1:28080"}, // the default CORE_LISTEN_ADDR
		{"CORE_TOKEN", "short"},
		{"CORE_TOKEN", "has a space in it, 0123456789"},
		{"CORE_TOKEN", strings.Repeat("x", 513)},
		{"ASIDE_TEST_HOOKS", "yes"},
		{"REDIS_MODE", "sharded"},
		{"CORE_IDEMPOTENCY_TTL", "a day"},
		{"CORE_IDEMPOTENCY_TTL", "0"},
		{"CORE_IDEMPOTENCY_TTL", "0s"},
		{"CORE_IDEMPOTENCY_TTL", "-1h"},
		{"CORE_IDEMPOTENCY_TTL", "1000h"},
		{"CORE_IDEMPOTENCY_PURGE_INTERVAL", "often"},
		{"CORE_IDEMPOTENCY_PURGE_INTERVAL", "0"},
		{"CORE_IDEMPOTENCY_PURGE_INTERVAL", "-10s"},
		{"CORE_IDEMPOTENCY_PURGE_INTERVAL", "500ms"},
	}
	for _, b := range bad {
		_, err := config.Load(lab(map[string]string{b.name: b.value}))
		if err == nil {
			t.Errorf("%s=%q accepted", b.name, b.value)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, b.name+": ") || strings.ContainsAny(msg, "\n\r") {
			t.Errorf("%s=%q: error %q does not start with the name or is not one line", b.name, b.value, msg)
		}
	}
}

func TestRedisModes(t *testing.T) {
	cfg, err := config.Load(lab(nil))
	if err != nil || cfg.RedisMode != config.RedisStandalone || cfg.RedisSentinelMaster != "" {
		t.Fatalf("default: %q %q %v", cfg.RedisMode, cfg.RedisSentinelMaster, err)
	}
	cfg, err = config.Load(lab(map[string]string{"REDIS_MODE": "cluster", "REDIS_URL": "redis://:pw@10.0.0.1:7000"}))
	if err != nil || cfg.RedisMode != config.RedisCluster {
		t.Fatalf("cluster: %q %v", cfg.RedisMode, err)
	}
	cfg, err = config.Load(lab(map[string]string{"REDIS_MODE": "sentinel", "REDIS_URL": "redis://10.0.0.1:26379/0",
		"REDIS_SENTINEL_MASTER": "aside"}))
	if err != nil || cfg.RedisMode != config.RedisSentinel || cfg.RedisSentinelMaster != "aside" {
		t.Fatalf("sentinel: %q %q %v", cfg.RedisMode, cfg.RedisSentinelMaster, err)
	}
	for _, c := range []struct {
		env  map[string]string
		name string
	}{
		{map[string]string{"REDIS_MODE": "sentinel"}, "REDIS_SENTINEL_MASTER"},
		{map[string]string{"REDIS_MODE": "cluster", "REDIS_URL": "redis://127.0.0.1:7000/3"}, "REDIS_URL"},
		{map[string]string{"REDIS_MODE": "Cluster"}, "REDIS_MODE"},
	} {
		_, err := config.Load(lab(c.env))
		if err == nil || !strings.HasPrefix(err.Error(), c.name+": ") || strings.ContainsAny(err.Error(), "\n\r") {
			t.Errorf("%v: error %v, want one line naming %s", c.env, err, c.name)
		}
	}
}

func TestProductionNeedsExplicitURLs(t *testing.T) {
	_, err := config.Load(env(map[string]string{"ASIDE_PROFILE": "production", "REDIS_URL": "redis://r:6379/0"}))
	if err == nil || !strings.HasPrefix(err.Error(), "DATABASE_URL: ") {
		t.Fatalf("err = %v, want a DATABASE_URL error", err)
	}
	_, err = config.Load(env(map[string]string{"ASIDE_PROFILE": "production", "DATABASE_URL": "postgresql://a@b/c"}))
	if err == nil || !strings.HasPrefix(err.Error(), "REDIS_URL: ") {
		t.Fatalf("err = %v, want a REDIS_URL error", err)
	}
}

func TestDatabaseURLErrorHidesPassword(t *testing.T) {
	_, err := config.Load(lab(map[string]string{"DATABASE_URL": "postgresql://aside:s3cret@host:notaport/aside"}))
	if err == nil {
		t.Fatal("bad URL accepted")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error leaks the password: %q", err)
	}
}

// Production keeps /metrics off the public listener unless told where.
func TestProductionServesMetricsOnLoopbackByDefault(t *testing.T) {
	base := map[string]string{"ASIDE_PROFILE": "production", "DATABASE_URL": "postgresql://a@b/c", "REDIS_URL": "redis://r:6379/0",
		"CORE_TOKEN": "core-token-0123456789"}
	cfg, err := config.Load(env(base))
	if err != nil || cfg.MetricsAddr != "127.0.0.1:28089" {
		t.Fatalf("metrics addr %q, err %v", cfg.MetricsAddr, err)
	}
	base["CORE_METRICS_ADDR"] = "10.0.0.5:9100"
	if cfg, err = config.Load(env(base)); err != nil || cfg.MetricsAddr != "10.0.0.5:9100" {
		t.Fatalf("metrics addr %q, err %v", cfg.MetricsAddr, err)
	}
	labCfg, err := config.Load(lab(map[string]string{"CORE_METRICS_ADDR": "127.0.0.1:0"}))
	if err != nil || labCfg.MetricsAddr != "127.0.0.1:0" {
		t.Fatalf("lab metrics addr %q, err %v", labCfg.MetricsAddr, err)
	}
}

// ASIDE_PROFILE unset is production, as in the gateway: the URLs and the
// core token must then be given, each missing one named in one line.
func TestProfileDefaultsToProduction(t *testing.T) {
	given := map[string]string{}
	for _, next := range []struct{ missing, value string }{
		{"DATABASE_URL", "postgresql://a@b/c"},
		{"REDIS_URL", "redis://r:6379/0"},
		{"CORE_TOKEN", "core-token-0123456789"},
	} {
		_, err := config.Load(env(given))
		if err == nil || err.Error() != next.missing+": must be set when ASIDE_PROFILE=production" {
			t.Fatalf("with %v set: err = %v, want %s named", given, err, next.missing)
		}
		given[next.missing] = next.value
	}
	cfg, err := config.Load(env(given))
	if err != nil || cfg.Profile != config.ProfileProduction || cfg.MetricsAddr != config.DefaultProductionMetricsAddr ||
		cfg.CoreToken != "core-token-0123456789" {
		t.Fatalf("profile %q metrics %q err %v, want production on %s", cfg.Profile, cfg.MetricsAddr, err,
			config.DefaultProductionMetricsAddr)
	}
}

// The token is a secret: a wrong one is refused without being shown.
func TestCoreTokenErrorHidesTheValue(t *testing.T) {
	_, err := config.Load(lab(map[string]string{"CORE_TOKEN": "s3cret s3cret s3cret"}))
	if err == nil || !strings.HasPrefix(err.Error(), "CORE_TOKEN: ") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("err = %v, want a CORE_TOKEN error without the value", err)
	}
}

// The core's worst case for a write, from its defaults, is what
// contracts/timeouts.json says, part by part, and the gateway's
// CORE_TIMEOUT_MS (checked by the gateway's tests) outlasts it.
func TestDefaultsMatchTheTimeoutsContract(t *testing.T) {
	var contract struct {
		Parts []struct {
			Part     string  `json:"part"`
			Variable *string `json:"variable"`
			MS       int64   `json:"ms"`
		} `json:"core_write_worst_case"`
	}
	testenv.LoadContract(t, "timeouts.json", &contract)
	if len(contract.Parts) != 4 {
		t.Fatalf("timeouts.json lists %d parts, want pool_acquire, statements, client_grace, invalidation",
			len(contract.Parts))
	}
	cfg, err := config.Load(lab(nil))
	if err != nil {
		t.Fatal(err)
	}
	byVariable := map[string]time.Duration{
		"CORE_DB_TIMEOUT_MS":            cfg.DBTimeout,
		"CORE_INVALIDATION_DEADLINE_MS": cfg.InvalidationDeadline,
	}
	var sum time.Duration
	for _, p := range contract.Parts {
		want := time.Duration(p.MS) * time.Millisecond
		sum += want
		got := store.ClientGrace
		if p.Variable != nil {
			var known bool
			if got, known = byVariable[*p.Variable]; !known {
				t.Errorf("part %s: %s is not a variable the core reads", p.Part, *p.Variable)
				continue
			}
		}
		if got != want {
			t.Errorf("part %s: the core's default is %v, timeouts.json says %v", p.Part, got, want)
		}
	}
	if got := store.WriteBound(cfg.DBTimeout) + cfg.InvalidationDeadline; got != sum {
		t.Errorf("the store's bound plus the invalidation deadline is %v, the contract's parts add up to %v", got, sum)
	}
}

func TestTestHooksAreLabOnly(t *testing.T) {
	cfg, err := config.Load(lab(map[string]string{"ASIDE_TEST_HOOKS": "1"}))
	if err != nil || !cfg.TestHooks {
		t.Fatalf("lab with ASIDE_TEST_HOOKS=1: hooks %v, err %v", cfg.TestHooks, err)
	}
	if cfg, _ := config.Load(lab(nil)); cfg.TestHooks {
		t.Fatal("test hooks on by default")
	}
	_, err = config.Load(env(map[string]string{
		"ASIDE_PROFILE": "production", "DATABASE_URL": "postgresql://a@b/c", "REDIS_URL": "redis://r:6379/0",
		"CORE_TOKEN": "core-token-0123456789", "ASIDE_TEST_HOOKS": "1",
	}))
	if err == nil || !strings.HasPrefix(err.Error(), "ASIDE_TEST_HOOKS: ") {
		t.Fatalf("production with ASIDE_TEST_HOOKS=1: err = %v, want it refused", err)
	}
}

func TestIdempotencyLifetimeAndPurgeInterval(t *testing.T) {
	cfg, err := config.Load(lab(map[string]string{
		"CORE_IDEMPOTENCY_TTL": "30s", "CORE_IDEMPOTENCY_PURGE_INTERVAL": "10s",
	}))
	if err != nil || cfg.IdempotencyTTL != 30*time.Second || cfg.IdempotencyPurgeInterval != 10*time.Second {
		t.Fatalf("got ttl %v interval %v, err %v", cfg.IdempotencyTTL, cfg.IdempotencyPurgeInterval, err)
	}
	cfg, err = config.Load(lab(map[string]string{"CORE_IDEMPOTENCY_TTL": "2h30m", "CORE_IDEMPOTENCY_PURGE_INTERVAL": "90"}))
	if err != nil || cfg.IdempotencyTTL != 150*time.Minute || cfg.IdempotencyPurgeInterval != 90*time.Second {
		t.Fatalf("got ttl %v interval %v, err %v", cfg.IdempotencyTTL, cfg.IdempotencyPurgeInterval, err)
	}
}

// The defaults are contracts/idempotency.json's, and the store's own default
// lifetime is the same: a store built without the option behaves as the core.
func TestIdempotencyDefaultsMatchTheContract(t *testing.T) {
	type setting struct {
		Variable       string `json:"variable"`
		DefaultSeconds int64  `json:"default_seconds"`
	}
	var contract struct {
		TTL           setting `json:"ttl"`
		PurgeInterval setting `json:"purge_interval"`
	}
	testenv.LoadContract(t, "idempotency.json", &contract)
	cfg, err := config.Load(lab(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s   setting
		got time.Duration
	}{
		{contract.TTL, cfg.IdempotencyTTL},
		{contract.TTL, store.DefaultIdempotencyTTL},
		{contract.PurgeInterval, cfg.IdempotencyPurgeInterval},
	} {
		if want := time.Duration(c.s.DefaultSeconds) * time.Second; c.got != want {
			t.Errorf("%s: the core's default is %v, idempotency.json says %v", c.s.Variable, c.got, want)
		}
	}
	if contract.TTL.Variable != "CORE_IDEMPOTENCY_TTL" || contract.PurgeInterval.Variable != "CORE_IDEMPOTENCY_PURGE_INTERVAL" {
		t.Errorf("idempotency.json names %q and %q", contract.TTL.Variable, contract.PurgeInterval.Variable)
	}
}
