// Package fakeapi is the tests' stand-in for the gateway: a tiny in-memory
// user table behind the routes the scenarios call. With Stale set, count
// reads are served from a cache that writes never invalidate, so a test can
// watch the stale-read checker catch it.
package fakeapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// API is the fake gateway.
type API struct {
	// Stale: counts are remembered on first read and never invalidated.
	Stale bool
	// KeepAliveReads counts stale-checker style reads (?cache=) that came
	// without Connection: close.
	KeepAliveReads atomic.Int64
	// Requests counts every request.
	Requests atomic.Int64

	mu     sync.Mutex
	next   int64
	users  map[int64]user
	cached map[string]int64
	keys   map[string]string // Idempotency-Key -> username
}

type user struct {
	ID       int64  `json:"id"`
	Username string `json:"username"`
	Email    string `json:"email"`
}

// New is an empty table.
func New() *API {
	return &API{users: map[int64]user{}, cached: map[string]int64{}, keys: map[string]string{}}
}

// Handler serves the routes.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	mux.HandleFunc("GET /api/v1/users/count", a.count)
	mux.HandleFunc("GET /api/v1/users/{id}", a.get)
	mux.HandleFunc("POST /api/v1/users", a.create)
	mux.HandleFunc("PATCH /api/v1/users/{id}", a.patch)
	mux.HandleFunc("DELETE /api/v1/users/{id}", a.delete)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.Requests.Add(1)
		if r.Method == http.MethodGet && r.URL.Query().Has("cache") && strings.HasPrefix(r.URL.Path, "/api/v1/users/") && !r.Close {
			a.KeepAliveReads.Add(1)
		}
		mux.ServeHTTP(w, r)
	})
}

// Users is the number of users in the table.
func (a *API) Users() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.users)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// writeError answers the API's error body: {"error": {"code": code}}.
func writeError(w http.ResponseWriter, status int, code string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code}})
}

// writeUser answers u, or 404 when there is none (!ok).
func writeUser(w http.ResponseWriter, u user, ok bool) {
	if !ok {
		writeError(w, 404, "not_found")
		return
	}
	writeJSON(w, 200, u)
}

func (a *API) countOf(email string) int64 {
	var n int64
	for _, u := range a.users {
		if u.Email == email {
			n++
		}
	}
	return n
}

func (a *API) count(w http.ResponseWriter, r *http.Request) {
	email := r.URL.Query().Get("email")
	a.mu.Lock()
	n, hit := a.cached[email]
	if !hit || !a.Stale {
		n = a.countOf(email)
		a.cached[email] = n
	}
	a.mu.Unlock()
	if r.URL.Query().Get("cache") == "off" {
		w.Header().Set("X-Cache", "BYPASS")
	} else if hit {
		w.Header().Set("X-Cache", "HIT")
		w.Header().Set("X-Cache-Tier", r.URL.Query().Get("cache"))
	} else {
		w.Header().Set("X-Cache", "MISS")
	}
	writeJSON(w, 200, map[string]any{"email": email, "count": n})
}

func (a *API) id(r *http.Request) int64 {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	return id
}

func (a *API) get(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	u, ok := a.users[a.id(r)]
	a.mu.Unlock()
	writeUser(w, u, ok)
}

func (a *API) create(w http.ResponseWriter, r *http.Request) {
	var u user
	if err := json.NewDecoder(r.Body).Decode(&u); err != nil || u.Username == "" || u.Email == "" {
		writeError(w, 422, "invalid")
		return
	}
	a.mu.Lock()
	a.next++
	u.ID = a.next
	a.users[u.ID] = u
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		a.keys[key] = u.Username
	}
	a.mu.Unlock()
	writeJSON(w, 201, u)
}

// KeyOf is the username created with Idempotency-Key key ("" when none was).
func (a *API) KeyOf(key string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.keys[key]
}

func (a *API) patch(w http.ResponseWriter, r *http.Request) {
	var change struct {
		Email string `json:"email"`
	}
	if err := json.NewDecoder(r.Body).Decode(&change); err != nil || change.Email == "" {
		writeError(w, 422, "invalid")
		return
	}
	a.mu.Lock()
	u, ok := a.users[a.id(r)]
	if ok {
		u.Email = change.Email
		a.users[u.ID] = u
	}
	a.mu.Unlock()
	writeUser(w, u, ok)
}

func (a *API) delete(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	_, ok := a.users[a.id(r)]
	delete(a.users, a.id(r))
	a.mu.Unlock()
	if !ok {
		writeError(w, 404, "not_found")
		return
	}
	w.WriteHeader(204)
}
