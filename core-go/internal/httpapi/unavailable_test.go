package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/aside-lab/aside/core-go/internal/cache"
	"github.com/aside-lab/aside/core-go/internal/store"
	"github.com/aside-lab/aside/core-go/internal/testenv"
)

func TestWritesAnswer503QuicklyWhenPostgresIsDown(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{databaseURL: "postgresql://aside@" + testenv.ClosedAddr(t) + "/aside"})
	requests := []struct{ method, path, body string }{
		{http.MethodPost, "/api/v1/users", `{"username":"ada","email":"ada@example.com"}`},
		{http.MethodPatch, "/api/v1/users/1", `{"email":"x@example.com"}`},
		{http.MethodDelete, "/api/v1/users/1", ""},
	}
	for _, r := range requests {
		start := time.Now()
		rec := s.do(r.method, r.path, r.body)
		wantError(t, rec, http.StatusServiceUnavailable, codeDatabaseUnavailable)
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s %s took %s", r.method, r.path, d)
		}
		if rec.Header().Get("Retry-After") == "" {
			t.Errorf("%s %s: no Retry-After", r.method, r.path)
		}
		if strings.Contains(rec.Body.String(), "127.0.0.1") || strings.Contains(rec.Body.String(), "connect") {
			t.Errorf("503 body leaks internals: %s", rec.Body)
		}
	}
	wantError(t, s.do(http.MethodGet, "/readyz", ""), http.StatusServiceUnavailable, codeUnavailable)
	if body := s.do(http.MethodGet, "/readyz", "").Body.String(); !strings.Contains(body, "postgres") || strings.Contains(body, "redis") {
		t.Fatalf("readyz should name only postgres: %s", body)
	}
	// Validation still answers first: bad input is 400 even with the database down.
	wantError(t, s.do(http.MethodPost, "/api/v1/users", `{"username":"_bad","email":"ada@example.com"}`), http.StatusBadRequest, codeInvalidUsername)
}

// The write commits; a Redis the core cannot reach must not turn that into
// an error, but the answer says the invalidation failed and it is counted.
func TestWriteSucceedsButFlagsFailedInvalidationWhenRedisIsDown(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{redisURL: "redis://" + testenv.ClosedAddr(t) + "/2"})
	start := time.Now()
	rec := s.do(http.MethodPost, "/api/v1/users", `{"username":"ada","email":"ada@example.com"}`)
	elapsed := time.Since(start)
	if rec.Code != http.StatusCreated {
		t.Fatalf("status %d %s", rec.Code, rec.Body)
	}
	if rec.Header().Get("X-Cache-Invalidation") != "failed" {
		t.Fatal("no X-Cache-Invalidation: failed header")
	}
	if elapsed > time.Second {
		t.Fatalf("took %s; invalidation should give up within its deadline", elapsed)
	}
	if env.UserCount(t) != 1 {
		t.Fatal("the write did not commit")
	}
	if got := testutil.ToFloat64(s.metrics.CacheInvalidations.WithLabelValues(cache.ResultError)); got != 1 {
		t.Fatalf("invalidations{result=error} = %v, want 1", got)
	}
	if !strings.Contains(s.logs.String(), "cache invalidation failed") {
		t.Fatalf("failure not logged: %s", s.logs)
	}
	rec = s.do(http.MethodDelete, "/api/v1/users/1", "")
	if rec.Code != http.StatusNoContent || rec.Header().Get("X-Cache-Invalidation") != "failed" {
		t.Fatalf("delete: %d, header %q", rec.Code, rec.Header().Get("X-Cache-Invalidation"))
	}
	wantError(t, s.do(http.MethodGet, "/readyz", ""), http.StatusServiceUnavailable, codeUnavailable)
}

// lockRow holds a row lock in another transaction until the returned
// release is called.
func lockRow(t *testing.T, id int64) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1 FROM users WHERE id = $1 FOR UPDATE", id); err != nil {
		t.Fatal(err)
	}
	released := false
	release = func() {
		if !released {
			released = true
			if err := tx.Rollback(ctx); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(release)
	return release
}

func seedPlain(t *testing.T, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if err := env.Redis.Set(context.Background(), k, "x", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// A statement that cannot finish in time (here: the row is locked by
// another transaction) is aborted by the server's statement_timeout: a
// quick 503, and it certainly did not commit, not even once the lock goes.
func TestBlockedWriteTimesOutWith503AndWritesNothing(t *testing.T) {
	env.Reset(t)
	ctx := context.Background()
	s := newServer(t, serverOpts{dbTimeout: 300 * time.Millisecond})
	s.mustCreate(t, "ada", "ada@example.com")
	keys := []string{cache.UserKey(1), cache.CountKey("ada@example.com"), cache.CountKey("new@example.com")}
	seedPlain(t, keys...)

	release := lockRow(t, 1)
	start := time.Now()
	rec := s.do(http.MethodPatch, "/api/v1/users/1", `{"email":"new@example.com"}`)
	elapsed := time.Since(start)
	release()
	wantError(t, rec, http.StatusServiceUnavailable, codeDatabaseUnavailable)
	if elapsed > time.Second {
		t.Fatalf("took %s with a 300ms database timeout", elapsed)
	}
	// Give a statement that wrongly survived every chance to land.
	if _, err := env.Pool.Exec(ctx, "SELECT 1 FROM users WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	if got := rows(t)[1]; got.Email != "ada@example.com" {
		t.Fatalf("a timed-out update changed the row: %v", got)
	}
	if n := env.Redis.Exists(ctx, keys...).Val(); n != int64(len(keys)) {
		t.Fatalf("a write that certainly failed dropped %d keys", int64(len(keys))-n)
	}
	if got := testutil.ToFloat64(s.metrics.UncertainWritesTotal); got != 0 {
		t.Fatalf("uncertain writes = %v, want 0", got)
	}
}

// Without a server-side timeout only the client's deadline ends the wait;
// then the write may still commit after the answer, so the core answers
// 503 and drops the keys it knows the write would make stale.
func TestAbandonedWriteIsUncertainAndDropsKnownKeys(t *testing.T) {
	env.Reset(t)
	ctx := context.Background()
	s := newServer(t, serverOpts{dbTimeout: 200 * time.Millisecond, noStatementTimeout: true})
	s.mustCreate(t, "ada", "ada@example.com")
	known := []string{cache.UserKey(1), cache.CountKey("new@example.com")}
	seedPlain(t, known...)

	release := lockRow(t, 1)
	rec := s.do(http.MethodPatch, "/api/v1/users/1", `{"email":"new@example.com"}`)
	release()
	wantError(t, rec, http.StatusServiceUnavailable, codeDatabaseUnavailable)
	if n := env.Redis.Exists(ctx, known...).Val(); n != 0 {
		t.Fatalf("%d of the known keys survived an uncertain write", n)
	}
	if got := testutil.ToFloat64(s.metrics.UncertainWritesTotal); got != 1 {
		t.Fatalf("uncertain writes = %v, want 1", got)
	}
}

// While a seed holds the gate (contracts/seeding.json) every write answers
// 503 seeding with Retry-After and writes nothing; reads of the keys are
// untouched.
func TestWritesAnswer503SeedingWhileASeedRuns(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	ada := s.mustCreate(t, "ada", "ada@example.com")
	before := rows(t)
	ctx := context.Background()
	gate, err := env.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Release()
	if _, err := gate.Exec(ctx, "SELECT pg_advisory_lock($1)", store.WriteGateLock); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = gate.Exec(ctx, "SELECT pg_advisory_unlock($1)", store.WriteGateLock) }()
	id := strconv.FormatInt(ada.ID, 10)
	requests := []*http.Request{
		jsonRequest(http.MethodPost, "/api/v1/users", `{"username":"bob","email":"bob@example.com"}`, "application/json"),
		jsonRequest(http.MethodPatch, "/api/v1/users/"+id, `{"email":"x@example.com"}`, "application/json"),
		jsonRequest(http.MethodDelete, "/api/v1/users/"+id, "", ""),
	}
	keyed := jsonRequest(http.MethodPost, "/api/v1/users", `{"username":"cy","email":"cy@example.com"}`, "application/json")
	keyed.Header.Set("Idempotency-Key", "seed-1")
	requests = append(requests, keyed)
	for _, req := range requests {
		rec := s.send(req)
		wantError(t, rec, http.StatusServiceUnavailable, codeSeeding)
		if got := rec.Header().Get("Retry-After"); got != seedingRetryAfter {
			t.Errorf("%s %s: Retry-After %q, want %q", req.Method, req.URL.Path, got, seedingRetryAfter)
		}
	}
	if after := rows(t); !equalRows(before, after) {
		t.Fatalf("refused writes changed the table: %v -> %v", before, after)
	}
}
