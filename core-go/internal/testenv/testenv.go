// Package testenv gives the core's integration tests their own database
// (aside_test_core, on DATABASE_URL's server) and their own Redis DB index
// (2, on REDIS_URL's server), as infra/test.sh expects of every suite. It is
// imported by tests only.
//
// Test packages run as parallel processes, and all of them share that one
// database and Redis DB, so Setup also takes a PostgreSQL advisory lock that
// each package holds until it is done: the packages take turns.
package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// Names this suite owns on the shared servers.
const (
	DatabaseName = "aside_test_core"
	RedisDB      = 2
	// lockKey serialises the core's test packages (any fixed number).
	lockKey = 0x61736964 // "asid"
)

// Defaults of infra/env.sh, used when the variables are unset.
const (
	defaultDatabaseURL = "postgresql://aside@127.0.0.1:25432/aside"
	defaultRedisURL    = "redis://127.0.0.1:26379/0"
)

// Env is a test package's handle on its database and Redis DB.
type Env struct {
	// DatabaseURL points at aside_test_core; RedisURL at DB index 2.
	DatabaseURL string
	RedisURL    string
	Pool        *pgxpool.Pool
	Redis       *redis.Client
	// ClusterURL is a node of the test stack's Redis Cluster
	// (ASIDE_REDIS_CLUSTER_URL), empty without one: the cluster tests skip.
	ClusterURL string
	lock       *pgx.Conn
}

// Setup creates the database if needed, applies contracts/schema.sql, and
// holds the suite lock until Close. Call it from TestMain.
func Setup(ctx context.Context) (*Env, error) {
	baseURL := getenv("DATABASE_URL", defaultDatabaseURL)
	adminURL, err := withDatabase(baseURL, "postgres")
	if err != nil {
		return nil, err
	}
	testURL, err := withDatabase(baseURL, DatabaseName)
	if err != nil {
		return nil, err
	}
	redisURL, err := withRedisDB(getenv("REDIS_URL", defaultRedisURL), RedisDB)
	if err != nil {
		return nil, err
	}

	connectCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	admin, err := pgx.Connect(connectCtx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("testenv: cannot reach PostgreSQL at DATABASE_URL (%s): %w", redact(baseURL), err)
	}
	// Waits while another of the core's test packages runs.
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		admin.Close(ctx)
		return nil, fmt.Errorf("testenv: advisory lock: %w", err)
	}
	env := &Env{DatabaseURL: testURL, RedisURL: redisURL, ClusterURL: os.Getenv("ASIDE_REDIS_CLUSTER_URL"), lock: admin}
	if err := env.init(ctx); err != nil {
		env.Close()
		return nil, err
	}
	return env, nil
}

func (e *Env) init(ctx context.Context) error {
	var exists bool
	if err := e.lock.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)",
		DatabaseName).Scan(&exists); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	if !exists {
		if _, err := e.lock.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{DatabaseName}.Sanitize()); err != nil {
			return fmt.Errorf("testenv: create database: %w", err)
		}
	}
	schema, err := os.ReadFile(ContractPath("schema.sql"))
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	if e.Pool, err = pgxpool.New(ctx, e.DatabaseURL); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	if _, err := e.Pool.Exec(ctx, string(schema)); err != nil {
		return fmt.Errorf("testenv: apply schema: %w", err)
	}
	opts, err := redis.ParseURL(e.RedisURL)
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	e.Redis = redis.NewClient(opts)
	if err := e.Redis.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("testenv: cannot reach Redis at REDIS_URL: %w", err)
	}
	return nil
}

// Close releases the lock and the connections.
func (e *Env) Close() {
	if e.Pool != nil {
		e.Pool.Close()
	}
	if e.Redis != nil {
		_ = e.Redis.Close()
	}
	if e.lock != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = e.lock.Exec(ctx, "SELECT pg_advisory_unlock($1)", lockKey)
		_ = e.lock.Close(ctx)
	}
}

// Reset empties the tables (user ids restart at 1) and the Redis DB.
func (e *Env) Reset(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.Pool.Exec(ctx, "TRUNCATE users, idempotency_keys, cache_invalidations RESTART IDENTITY"); err != nil {
		t.Fatalf("truncate: %v", err)
	}
	if err := e.Redis.FlushDB(ctx).Err(); err != nil {
		t.Fatalf("flushdb: %v", err)
	}
}

// UserCount is the number of rows in users.
func (e *Env) UserCount(t testing.TB) int {
	t.Helper()
	var n int
	if err := e.Pool.QueryRow(context.Background(), "SELECT count(*) FROM users").Scan(&n); err != nil {
		t.Fatalf("count users: %v", err)
	}
	return n
}

// Main runs a package's tests with an Env in *envp; it exits with the
// tests' status. Use: func TestMain(m *testing.M) { testenv.Main(m, &env) }.
func Main(m *testing.M, envp **Env) {
	env, err := Setup(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*envp = env
	code := m.Run()
	env.Close()
	os.Exit(code)
}

// ClosedAddr returns a loopback address where nothing listens (a port
// just released), for "dependency down" tests.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// ContractPath locates a file of contracts/ by walking up from the working
// directory (go test runs in the package's folder).
func ContractPath(name string) string {
	dir, err := os.Getwd()
	if err != nil {
		return filepath.Join("contracts", name)
	}
	for {
		p := filepath.Join(dir, "contracts", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return filepath.Join("contracts", name)
		}
		dir = parent
	}
}

// LoadContract decodes a contracts/ JSON file into v.
func LoadContract(t testing.TB, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(ContractPath(name))
	if err != nil {
		t.Fatalf("read contract: %v", err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("parse contract %s: %v", name, err)
	}
}

// ValidationVectors is contracts/validation.json: the inputs both services
// must accept or refuse alike.
type ValidationVectors struct {
	EmailValid      []string `json:"email_valid"`
	EmailInvalid    []string `json:"email_invalid"`
	UsernameValid   []string `json:"username_valid"`
	UsernameInvalid []string `json:"username_invalid"`
	IDValid         []string `json:"id_valid"`
	IDInvalid       []string `json:"id_invalid"`
}

// LoadValidation reads contracts/validation.json and fails the test if any of
// its lists is empty (a test over an empty list would prove nothing).
func LoadValidation(t testing.TB) ValidationVectors {
	t.Helper()
	var v ValidationVectors
	LoadContract(t, "validation.json", &v)
	if len(v.EmailValid) == 0 || len(v.EmailInvalid) == 0 || len(v.UsernameValid) == 0 ||
		len(v.UsernameInvalid) == 0 || len(v.IDValid) == 0 || len(v.IDInvalid) == 0 {
		t.Fatal("validation.json has empty vector lists")
	}
	return v
}

func getenv(name, def string) string {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return v
	}
	return def
}

func withDatabase(databaseURL, name string) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", errors.New("testenv: DATABASE_URL must be a postgresql:// URL")
	}
	u.Path = "/" + name
	return u.String(), nil
}

func withRedisDB(redisURL string, db int) (string, error) {
	u, err := url.Parse(redisURL)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		return "", errors.New("testenv: REDIS_URL must be a redis:// URL")
	}
	u.Path = "/" + strconv.Itoa(db)
	q := u.Query()
	q.Del("db")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Via is redisURL with its host:port replaced by addr (a proxy's), keeping the
// password and the DB index: the stack's Redis wants its password.
func Via(redisURL, addr string) string {
	u, err := url.Parse(redisURL)
	if err != nil {
		return redisURL
	}
	u.Host = addr
	return u.String()
}

func redact(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(unparsable)"
}
