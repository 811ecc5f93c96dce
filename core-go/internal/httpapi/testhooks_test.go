package httpapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

type heldAnswer struct {
	status  int
	elapsed time.Duration
	err     error
}

// sendHeld sends a request over a real connection and reports its answer
// on the returned channel.
func sendHeld(t *testing.T, srv *httptest.Server, method, path, body, delay string) <-chan heldAnswer {
	t.Helper()
	done := make(chan heldAnswer, 1)
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set(testDelayHeader, delay)
	go func() {
		started := time.Now()
		resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
		if err != nil {
			done <- heldAnswer{err: err}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		done <- heldAnswer{status: resp.StatusCode, elapsed: time.Since(started)}
	}()
	return done
}

func userExists(t *testing.T, username string) bool {
	t.Helper()
	var n int
	err := env.Pool.QueryRow(context.Background(), "SELECT count(*) FROM users WHERE username = $1", username).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// With the lab's test hooks a write commits at once and its answer is held:
// the window in which a client can give up on a write that was applied.
func TestTestDelayHoldsTheAnswerAfterTheWrite(t *testing.T) {
	env.Reset(t)
	srv := httptest.NewServer(newServer(t, serverOpts{testHooks: true}).router)
	defer srv.Close()
	const delay = 1500 * time.Millisecond

	answer := sendHeld(t, srv, "POST", "/api/v1/users", `{"username":"held","email":"held@example.com"}`, "1500")
	deadline := time.Now().Add(delay - 300*time.Millisecond)
	for !userExists(t, "held") {
		if time.Now().After(deadline) {
			t.Fatal("the row was not committed while the answer was held")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case a := <-answer:
		t.Fatalf("answered before the delay: %+v", a)
	default:
	}
	if a := <-answer; a.err != nil || a.status != http.StatusCreated || a.elapsed < delay {
		t.Fatalf("create: %+v, want 201 after at least %v", a, delay)
	}

	// A bodiless answer (204) is held too.
	var id string
	if err := env.Pool.QueryRow(context.Background(), "SELECT id::text FROM users WHERE username = 'held'").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if a := <-sendHeld(t, srv, "DELETE", "/api/v1/users/"+id, "", "1500"); a.err != nil ||
		a.status != http.StatusNoContent || a.elapsed < delay {
		t.Fatalf("delete: %+v, want 204 after at least %v", a, delay)
	}
}

func TestTestDelayIsBoundedAndOffByDefault(t *testing.T) {
	env.Reset(t)
	hooked := newServer(t, serverOpts{testHooks: true})
	for _, bad := range []string{"0", "-5", "abc", "1.5", "10001"} {
		req := httptest.NewRequest("POST", "/api/v1/users", strings.NewReader(`{"username":"b","email":"b@example.com"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(testDelayHeader, bad)
		wantError(t, hooked.send(req), http.StatusBadRequest, codeInvalidRequest)
	}
	if n := env.UserCount(t); n != 0 {
		t.Fatalf("%d users written by refused requests", n)
	}

	plain := httptest.NewServer(newServer(t, serverOpts{}).router)
	defer plain.Close()
	a := <-sendHeld(t, plain, "POST", "/api/v1/users", `{"username":"plain","email":"p@example.com"}`, "5000")
	if a.err != nil || a.status != http.StatusCreated || a.elapsed > 2*time.Second {
		t.Fatalf("without test hooks: %+v, want a 201 without the 5 s hold", a)
	}
}
