package httpapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aside-lab/aside/core-go/internal/cache"
	"github.com/aside-lab/aside/core-go/internal/testenv"
)

func (s *testServer) createWithKey(key, body string) *httptest.ResponseRecorder {
	req := jsonRequest(http.MethodPost, "/api/v1/users", body, "application/json")
	req.Header.Set("Idempotency-Key", key)
	return s.send(req)
}

func storedKeys(t *testing.T) int {
	t.Helper()
	var n int
	if err := env.Pool.QueryRow(context.Background(), "SELECT count(*) FROM idempotency_keys").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestIdempotentCreateReplaysTheFirstAnswer(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	ctx := context.Background()
	first := s.createWithKey("order-1", `{"username":"ada","email":"ada@example.com"}`)
	if first.Code != http.StatusCreated || first.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %q %s", first.Code, first.Header().Get("Idempotent-Replayed"), first.Body)
	}
	// The cache key the first write made stale is filled again by a reader...
	countKey := cache.CountKey("ada@example.com")
	if err := s.rdb.Set(ctx, countKey, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// ...and a retry (keys in another order, other spacing) is the same request.
	again := s.createWithKey("order-1", `{ "email": "ada@example.com", "username": "ada" }`)
	if again.Code != http.StatusCreated || again.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %q %s", again.Code, again.Header().Get("Idempotent-Replayed"), again.Body)
	}
	if again.Body.String() != first.Body.String() || again.Header().Get("Location") != "/api/v1/users/1" ||
		first.Header().Get("Location") != "/api/v1/users/1" {
		t.Fatalf("replay %s (Location %q) differs from the first answer %s",
			again.Body, again.Header().Get("Location"), first.Body)
	}
	if ct := again.Header().Get("Content-Type"); ct != first.Header().Get("Content-Type") || !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type %q vs %q", ct, first.Header().Get("Content-Type"))
	}
	if n := env.UserCount(t); n != 1 {
		t.Fatalf("%d users after a replay, want 1", n)
	}
	// A replay writes nothing, but drops the first write's keys again: had the
	// first attempt died between its commit and its DEL, they would be stale.
	if n, err := s.rdb.Exists(ctx, countKey).Result(); err != nil || n != 0 {
		t.Fatalf("a replay left the count key the first write made stale: %d %v", n, err)
	}
	// Without a key the same body is a new request: the username is taken.
	wantError(t, s.do(http.MethodPost, "/api/v1/users", `{"username":"ada","email":"ada@example.com"}`),
		http.StatusConflict, codeConflict)
}

func TestIdempotencyKeyReusedWithAnotherBody(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	if rec := s.createWithKey("k", `{"username":"ada","email":"ada@example.com"}`); rec.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", rec.Code, rec.Body)
	}
	before := rows(t)
	for _, body := range []string{
		`{"username":"ada","email":"other@example.com"}`,
		`{"username":"bob","email":"ada@example.com"}`,
	} {
		wantError(t, s.createWithKey("k", body), http.StatusUnprocessableEntity, codeIdempotencyKeyReused)
	}
	if after := rows(t); !equalRows(before, after) {
		t.Fatal("a reused key changed the table")
	}
}

func TestBadIdempotencyKeysAreRefusedAndWriteNothing(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	body := `{"username":"ada","email":"ada@example.com"}`
	for name, key := range map[string]string{
		"empty":        "",
		"too long":     strings.Repeat("k", 256),
		"non-ASCII":    "clé",
		"control char": "a\x01b",
		"tab":          "a\tb",
		"DEL":          "a\x7fb",
	} {
		t.Run(name, func(t *testing.T) {
			wantError(t, s.createWithKey(key, body), http.StatusBadRequest, codeInvalidRequest)
		})
	}
	twice := jsonRequest(http.MethodPost, "/api/v1/users", body, "application/json")
	twice.Header.Add("Idempotency-Key", "a")
	twice.Header.Add("Idempotency-Key", "b")
	wantError(t, s.send(twice), http.StatusBadRequest, codeInvalidRequest)
	if env.UserCount(t) != 0 || storedKeys(t) != 0 {
		t.Fatalf("a refused key wrote %d users, %d keys", env.UserCount(t), storedKeys(t))
	}
	// The limits themselves are fine: 255 printable characters, inner spaces, any punctuation.
	for i, key := range []string{strings.Repeat("k", 255), "a b", "~!@#$%^&*()_+{}|:<>?", "1"} {
		rec := s.createWithKey(key, mustJSON(t, map[string]string{"username": "u" + string(rune('a'+i)), "email": "e@example.com"}))
		if rec.Code != http.StatusCreated {
			t.Fatalf("key %q: %d %s", key, rec.Code, rec.Body)
		}
	}
}

// A request refused for its body (or a conflict) stores nothing under its
// key, so the client can fix the body and retry with the same key.
func TestAFailedRequestLeavesItsKeyUnused(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	wantError(t, s.createWithKey("k", `{"username":"_bad","email":"ada@example.com"}`), http.StatusBadRequest, codeInvalidUsername)
	s.mustCreate(t, "taken", "t@example.com")
	wantError(t, s.createWithKey("k", `{"username":"taken","email":"ada@example.com"}`), http.StatusConflict, codeConflict)
	if storedKeys(t) != 0 {
		t.Fatal("a failed request stored its key")
	}
	if rec := s.createWithKey("k", `{"username":"ada","email":"ada@example.com"}`); rec.Code != http.StatusCreated ||
		rec.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry with a fixed body: %d %s", rec.Code, rec.Body)
	}
}

// Real concurrency over real connections: duplicates sent at once create
// one row; all get the same 201, all but one marked as replayed.
func TestConcurrentDuplicateRequestsOverHTTP(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	srv := httptest.NewServer(s.router)
	defer srv.Close()
	const n = 12
	type answer struct {
		status   int
		body     string
		replayed string
		err      error
	}
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/users",
				strings.NewReader(`{"username":"ada","email":"ada@example.com"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "burst")
			<-start
			resp, err := srv.Client().Do(req)
			if err != nil {
				answers[i] = answer{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			answers[i] = answer{resp.StatusCode, string(b), resp.Header.Get("Idempotent-Replayed"), err}
		}()
	}
	close(start)
	wg.Wait()
	fresh := 0
	for i, a := range answers {
		if a.err != nil || a.status != http.StatusCreated || a.body != answers[0].body {
			t.Fatalf("request %d: %d %s %v (first answer %s)", i, a.status, a.body, a.err, answers[0].body)
		}
		if a.replayed == "" {
			fresh++
		}
	}
	if fresh != 1 || env.UserCount(t) != 1 {
		t.Fatalf("%d fresh answers and %d users, want 1 and 1", fresh, env.UserCount(t))
	}
}

// Every code the core answers with is in contracts/errors.json with its status.
func TestErrorCodesAreInTheContract(t *testing.T) {
	var contract struct {
		Codes map[string]int `json:"codes"`
	}
	testenv.LoadContract(t, "errors.json", &contract)
	for code, status := range map[string]int{
		codeInvalidRequest: 400, codeInvalidEmail: 400, codeInvalidID: 400, codeInvalidUsername: 400,
		codeInvalidComplexity: 400, codeInvalidCost: 400, codeUnknownField: 400, codeInvalidJSON: 400, codeUnauthorized: 401, codeNotFound: 404,
		codeMethodNotAllowed: 405, codeConflict: 409, codePayloadTooLarge: 413, codeUnsupportedMediaType: 415,
		codeIdempotencyKeyReused: 422, codeInternal: 500, codeDatabaseUnavailable: 503, codeUnavailable: 503,
		codeSeeding: 503,
	} {
		if got, ok := contract.Codes[code]; !ok || got != status {
			t.Errorf("errors.json has %q as %d (present: %v), the core answers it with %d", code, got, ok, status)
		}
	}
}
