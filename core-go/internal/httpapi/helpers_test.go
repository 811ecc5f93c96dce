package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/aside-lab/aside/core-go/internal/cache"
	"github.com/aside-lab/aside/core-go/internal/compute"
	"github.com/aside-lab/aside/core-go/internal/metrics"
	"github.com/aside-lab/aside/core-go/internal/outbox"
	"github.com/aside-lab/aside/core-go/internal/store"
	"github.com/aside-lab/aside/core-go/internal/testenv"
	"github.com/aside-lab/aside/core-go/internal/userjson"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// lockedBuffer collects log output written from many goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type serverOpts struct {
	databaseURL string
	redisURL    string
	dbTimeout   time.Duration
	computeMax  int
	computeWait time.Duration
	// noStatementTimeout leaves the server without a statement_timeout, so
	// only the client's deadline ends a stuck statement.
	noStatementTimeout bool
	// separateMetrics serves /metrics elsewhere, as in production.
	separateMetrics bool
	// coreToken is CORE_TOKEN: when set, /api/v1 needs it as a bearer token.
	coreToken string
	// testHooks is ASIDE_TEST_HOOKS=1: X-Test-Delay-Ms holds answers.
	testHooks bool
}

// testServer is the real router over real PostgreSQL and Redis.
type testServer struct {
	router  *gin.Engine
	metrics *metrics.Metrics
	limiter *compute.Limiter
	// simplify is the simplification's own limiter (one slot, no wait).
	simplify *compute.Limiter
	rdb      redis.UniversalClient
	logs     *lockedBuffer
}

func newServer(t *testing.T, o serverOpts) *testServer {
	t.Helper()
	if o.databaseURL == "" {
		o.databaseURL = env.DatabaseURL
	}
	if o.redisURL == "" {
		o.redisURL = env.RedisURL
	}
	if o.dbTimeout == 0 {
		o.dbTimeout = 2 * time.Second
	}
	if o.computeMax == 0 {
		o.computeMax = 2
	}
	statementTimeout := o.dbTimeout
	if o.noStatementTimeout {
		statementTimeout = 0
	}
	pool, err := store.NewPool(context.Background(), o.databaseURL, store.PoolOptions{
		MaxConns: 8, ConnectTimeout: time.Second, HealthCheckPeriod: time.Minute, StatementTimeout: statementTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	rdb, err := cache.NewClient(o.redisURL, cache.ClientOptions{Timeout: 200 * time.Millisecond, PoolSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	users := store.New(pool, o.dbTimeout)
	limiter := compute.NewLimiter(o.computeMax, o.computeWait)
	simplify := compute.NewLimiter(1, time.Millisecond)
	m := metrics.New("lab", pool.Stat, limiter.InUse)
	logs := &lockedBuffer{}
	relay := outbox.New(users, func(readTimeout time.Duration) redis.UniversalClient {
		client, _ := cache.NewClient(o.redisURL,
			cache.ClientOptions{Timeout: 200 * time.Millisecond, ReadTimeout: readTimeout, PoolSize: 1})
		return client
	}, outbox.DefaultOptions(300*time.Millisecond), m.Outbox)
	relayCtx, stopRelay := context.WithCancel(context.Background())
	t.Cleanup(stopRelay)
	go relay.Run(relayCtx)
	router := NewRouter(Deps{
		Users:           users,
		Tracks:          users,
		Invalidator:     cache.NewInvalidator(rdb, 300*time.Millisecond, m.ObserveInvalidation),
		Outbox:          relay,
		Limiter:         limiter,
		SimplifyLimiter: simplify,
		Metrics:         m,
		Ready: []Check{
			{Name: "postgres", Ping: users.Ping},
			{Name: "redis", Ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }},
		},
		Log:             slog.New(slog.NewTextHandler(logs, nil)),
		SeparateMetrics: o.separateMetrics,
		CoreToken:       o.coreToken,
		TestHooks:       o.testHooks,
	})
	return &testServer{router: router, metrics: m, limiter: limiter, simplify: simplify, rdb: rdb, logs: logs}
}

// do sends a request; a non-empty body is sent as application/json.
func (s *testServer) do(method, path, body string) *httptest.ResponseRecorder {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, r)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return s.send(req)
}

func (s *testServer) send(req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	s.router.ServeHTTP(rec, req)
	return rec
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wantError checks status, the error shape of errors.json and the code.
func wantError(t *testing.T, rec *httptest.ResponseRecorder, status int, code string) {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type %q", ct)
	}
	var body map[string]map[string]string
	dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
	if err := dec.Decode(&body); err != nil {
		t.Fatalf("error body %q: %v", rec.Body, err)
	}
	if len(body) != 1 || len(body["error"]) != 2 || body["error"]["code"] != code || body["error"]["message"] == "" {
		t.Fatalf("error body %s, want code %q", rec.Body, code)
	}
}

func decodeUser(t *testing.T, rec *httptest.ResponseRecorder) userjson.User {
	t.Helper()
	var u userjson.User
	dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&u); err != nil {
		t.Fatalf("user body %q: %v", rec.Body, err)
	}
	return u
}

// createUser makes a user through the API and returns it.
func (s *testServer) mustCreate(t *testing.T, username, email string) userjson.User {
	t.Helper()
	rec := s.do(http.MethodPost, "/api/v1/users", mustJSON(t, map[string]string{"username": username, "email": email}))
	if rec.Code != http.StatusCreated {
		t.Fatalf("create %s: %d %s", username, rec.Code, rec.Body)
	}
	return decodeUser(t, rec)
}

type row struct {
	Username, Email string
}

// rows is the users table as id -> row.
func rows(t *testing.T) map[int64]row {
	t.Helper()
	r, err := env.Pool.Query(context.Background(), "SELECT id, username, email FROM users")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out := map[int64]row{}
	for r.Next() {
		var id int64
		var x row
		if err := r.Scan(&id, &x.Username, &x.Email); err != nil {
			t.Fatal(err)
		}
		out[id] = x
	}
	return out
}

func equalRows(a, b map[int64]row) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func jsonRequest(method, path, body, contentType string) *http.Request {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return req
}
