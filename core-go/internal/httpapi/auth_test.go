package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

const testCoreToken = "test-core-token-0123456789abcdef"

func keyRows(t *testing.T) int {
	t.Helper()
	var n int
	if err := env.Pool.QueryRow(context.Background(), "SELECT count(*) FROM idempotency_keys").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// With CORE_TOKEN set, every write and compute without the right bearer
// token is 401 unauthorized, and nothing reaches the database.
func TestCoreTokenGuardsWritesAndCompute(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{coreToken: testCoreToken})
	existing := func() int64 {
		req := authed(http.MethodPost, "/api/v1/users", `{"username":"ada","email":"ada@example.com"}`, testCoreToken)
		rec := s.send(req)
		if rec.Code != http.StatusCreated {
			t.Fatalf("create with the token: %d %s", rec.Code, rec.Body)
		}
		return decodeUser(t, rec).ID
	}()
	users, keys := env.UserCount(t), keyRows(t)

	for _, auth := range []string{"", "Bearer", "Basic " + testCoreToken, "Bearer wrong-token-0123456789abcdef",
		"Bearer " + testCoreToken + "x", "Bearer " + testCoreToken[:len(testCoreToken)-1]} {
		for _, r := range []struct{ method, path, body string }{
			{http.MethodPost, "/api/v1/users", `{"username":"bob","email":"bob@example.com"}`},
			{http.MethodPatch, "/api/v1/users/" + strconv.FormatInt(existing, 10), `{"username":"eve"}`},
			{http.MethodDelete, "/api/v1/users/" + strconv.FormatInt(existing, 10), ""},
			{http.MethodPost, "/api/v1/compute", `{"complexity":1}`},
		} {
			req := authed(r.method, r.path, r.body, "")
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			req.Header.Set("Idempotency-Key", "k-"+auth)
			rec := s.send(req)
			wantError(t, rec, http.StatusUnauthorized, codeUnauthorized)
			if !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer ") {
				t.Fatalf("%s %s with %q: WWW-Authenticate %q", r.method, r.path, auth, rec.Header().Get("WWW-Authenticate"))
			}
			if strings.Contains(rec.Body.String(), testCoreToken) {
				t.Fatalf("the answer shows the token: %s", rec.Body)
			}
		}
	}
	if u, k := env.UserCount(t), keyRows(t); u != users || k != keys {
		t.Fatalf("refused requests wrote: users %d -> %d, keys %d -> %d", users, u, keys, k)
	}
	if got := rows(t)[existing]; got.Username != "ada" {
		t.Fatalf("refused PATCH changed the row: %+v", got)
	}

	// The scheme is case-insensitive, as in the gateway; the right token passes everywhere.
	req := authed(http.MethodPatch, "/api/v1/users/"+strconv.FormatInt(existing, 10), `{"username":"eve"}`, "")
	req.Header.Set("Authorization", "bearer "+testCoreToken)
	if rec := s.send(req); rec.Code != http.StatusOK {
		t.Fatalf("PATCH with the token: %d %s", rec.Code, rec.Body)
	}
	if rec := s.send(authed(http.MethodPost, "/api/v1/compute", `{"complexity":1}`, testCoreToken)); rec.Code != http.StatusOK {
		t.Fatalf("compute with the token: %d %s", rec.Code, rec.Body)
	}
	if rec := s.send(authed(http.MethodDelete, "/api/v1/users/"+strconv.FormatInt(existing, 10), "", testCoreToken)); rec.Code != http.StatusNoContent {
		t.Fatalf("DELETE with the token: %d %s", rec.Code, rec.Body)
	}
}

// Health checks stay open, and an unknown route or method is still 404/405
// rather than 401: the check guards the routes that act, nothing else.
func TestCoreTokenLeavesHealthAndRoutingAlone(t *testing.T) {
	s := newServer(t, serverOpts{coreToken: testCoreToken})
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if rec := s.do(http.MethodGet, path, ""); rec.Code != http.StatusOK {
			t.Fatalf("GET %s without a token: %d %s", path, rec.Code, rec.Body)
		}
	}
	wantError(t, s.do(http.MethodGet, "/api/v1/nope", ""), http.StatusNotFound, codeNotFound)
	wantError(t, s.do(http.MethodGet, "/api/v1/users", ""), http.StatusMethodNotAllowed, codeMethodNotAllowed)
}

func authed(method, path, body, token string) *http.Request {
	var req *http.Request
	if body != "" {
		req, _ = http.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
	} else {
		req, _ = http.NewRequest(method, path, nil)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req
}
