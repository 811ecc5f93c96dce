package httpapi

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/aside-lab/aside/core-go/internal/cache"
)

// seed sets each key and its lease.
func seedKeys(t *testing.T, keys ...string) {
	t.Helper()
	for _, k := range cache.WithLeases(keys) {
		if err := env.Redis.Set(context.Background(), k, "cached", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// presentKeys returns which of keys exist in Redis.
func presentKeys(t *testing.T, keys []string) []string {
	t.Helper()
	var out []string
	for _, k := range keys {
		if env.Redis.Exists(context.Background(), k).Val() == 1 {
			out = append(out, k)
		}
	}
	return out
}

// After each write exactly the contract's stale keys and their leases are
// gone; every other key (and lease) is still there.
func TestWritesInvalidateExactlyTheContractKeys(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	s.mustCreate(t, "ada", "old@example.com") // id 1
	s.mustCreate(t, "bob", "bob@example.com") // id 2

	universe := []string{
		cache.CountKey("old@example.com"), cache.CountKey("new@example.com"), cache.CountKey("bob@example.com"),
		cache.CountKey("OLD@example.com"), cache.CountKey("third@example.com"),
		cache.UserKey(1), cache.UserKey(2), cache.UserKey(3), cache.UserKey(11),
	}
	steps := []struct {
		name, method, path, body string
		status                   int
		stale                    []string
	}{
		{"create", http.MethodPost, "/api/v1/users", `{"username":"carol","email":"third@example.com"}`, http.StatusCreated,
			[]string{cache.CountKey("third@example.com"), cache.UserKey(3)}},
		{"update, email changes", http.MethodPatch, "/api/v1/users/1", `{"email":"new@example.com"}`, http.StatusOK,
			[]string{cache.UserKey(1), cache.CountKey("old@example.com"), cache.CountKey("new@example.com")}},
		{"update, username only", http.MethodPatch, "/api/v1/users/2", `{"username":"robert"}`, http.StatusOK,
			[]string{cache.UserKey(2)}},
		{"update, same email given", http.MethodPatch, "/api/v1/users/2", `{"email":"bob@example.com"}`, http.StatusOK,
			[]string{cache.UserKey(2)}},
		{"delete", http.MethodDelete, "/api/v1/users/1", "", http.StatusNoContent,
			[]string{cache.CountKey("new@example.com"), cache.UserKey(1)}},
	}
	all := cache.WithLeases(universe)
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			seedKeys(t, universe...)
			rec := s.do(st.method, st.path, st.body)
			if rec.Code != st.status {
				t.Fatalf("status %d %s", rec.Code, rec.Body)
			}
			gone := cache.WithLeases(st.stale)
			var wantLeft []string
			for _, k := range all {
				if !slices.Contains(gone, k) {
					wantLeft = append(wantLeft, k)
				}
			}
			if left := presentKeys(t, gone); len(left) != 0 {
				t.Errorf("stale keys survived: %q", left)
			}
			if left := presentKeys(t, wantLeft); !slices.Equal(left, wantLeft) {
				t.Errorf("unrelated keys removed: kept %q of %q", left, wantLeft)
			}
		})
	}
}

// Failed writes touch no key.
func TestRejectedWritesInvalidateNothing(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	s.mustCreate(t, "ada", "ada@example.com")
	keys := []string{cache.CountKey("ada@example.com"), cache.CountKey("x@example.com"), cache.UserKey(1), cache.UserKey(2)}
	seedKeys(t, keys...)
	wantError(t, s.do(http.MethodPost, "/api/v1/users", `{"username":"ada","email":"x@example.com"}`), http.StatusConflict, codeConflict)
	wantError(t, s.do(http.MethodPatch, "/api/v1/users/2", `{"email":"x@example.com"}`), http.StatusNotFound, codeNotFound)
	wantError(t, s.do(http.MethodDelete, "/api/v1/users/2", ""), http.StatusNotFound, codeNotFound)
	wantError(t, s.do(http.MethodPatch, "/api/v1/users/1", `{"email":"bad"}`), http.StatusBadRequest, codeInvalidEmail)
	if left := presentKeys(t, cache.WithLeases(keys)); len(left) != 2*len(keys) {
		t.Fatalf("a failed write removed keys: %q left", left)
	}
}
