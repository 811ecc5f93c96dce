package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/aside-lab/aside/core-go/internal/store"
)

// serveOne runs fn behind handle and returns the answer and the log.
func serveOne(fn handlerFunc) (*httptest.ResponseRecorder, string) {
	var logs bytes.Buffer
	r := gin.New()
	r.GET("/x", handle(slog.New(slog.NewTextHandler(&logs, nil)), fn))
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	return rec, logs.String()
}

func TestHandleMapsEachErrorToOneAnswer(t *testing.T) {
	unavailableErr := &store.UnavailableError{Err: errors.New("dial tcp: refused")}
	cases := []struct {
		name       string
		err        error
		status     int
		body       string
		retryAfter string
		logged     bool
	}{
		{"api error", badRequest(codeInvalidID, "bad id"), 400,
			`{"error":{"code":"invalid_id","message":"bad id"}}`, "", false},
		{"wrapped api error", fmt.Errorf("parse: %w", badRequest(codeInvalidEmail, "bad email")), 400,
			`{"error":{"code":"invalid_email","message":"bad email"}}`, "", false},
		{"api error with Retry-After", unavailable(codeUnavailable, "busy"), 503,
			`{"error":{"code":"unavailable","message":"busy"}}`, "1", false},
		{"not found", fmt.Errorf("delete: %w", store.ErrNotFound), 404,
			`{"error":{"code":"not_found","message":"no user with this id"}}`, "", false},
		{"conflict", store.ErrConflict, 409,
			`{"error":{"code":"conflict","message":"username already exists"}}`, "", false},
		{"key reused", store.ErrKeyReused, 422,
			`{"error":{"code":"idempotency_key_reused","message":"this Idempotency-Key was already used with a different request body"}}`, "", false},
		{"database unavailable", unavailableErr, 503,
			`{"error":{"code":"database_unavailable","message":"the database is unavailable; retry later"}}`, "1", false},
		{"outcome unknown", &store.UnavailableError{Err: errors.New("timeout"), MaybeApplied: true}, 503,
			`{"error":{"code":"database_unavailable","message":"the database is unavailable; retry later"}}`, "1", false},
		{"anything else", errors.New("pq: secret detail"), 500,
			`{"error":{"code":"internal","message":"internal error"}}`, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec, logs := serveOne(func(*gin.Context) error { return tc.err })
			if rec.Code != tc.status || rec.Body.String() != tc.body {
				t.Fatalf("answer %d %s, want %d %s", rec.Code, rec.Body, tc.status, tc.body)
			}
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("Content-Type %q", ct)
			}
			if got := rec.Header().Get("Retry-After"); got != tc.retryAfter {
				t.Fatalf("Retry-After %q, want %q", got, tc.retryAfter)
			}
			if logged := strings.Contains(logs, "request failed"); logged != tc.logged {
				t.Fatalf("logged %v, want %v: %s", logged, tc.logged, logs)
			}
			if tc.logged && !strings.Contains(logs, "secret detail") {
				t.Fatalf("the log lacks the error: %s", logs)
			}
		})
	}
}

func TestHandleLeavesASuccessAlone(t *testing.T) {
	rec, logs := serveOne(func(c *gin.Context) error {
		c.JSON(http.StatusOK, gin.H{"ok": true})
		return nil
	})
	if rec.Code != http.StatusOK || rec.Body.String() != `{"ok":true}` || logs != "" {
		t.Fatalf("answer %d %s, log %q", rec.Code, rec.Body, logs)
	}
}
