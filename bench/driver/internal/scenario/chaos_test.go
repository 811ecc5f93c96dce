package scenario_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"aside/bench/driver/internal/fakeapi"
	"aside/bench/driver/internal/scenario"
)

func TestChaosCreateTags(t *testing.T) {
	api := fakeapi.New()
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	client := newClient(t, srv.URL, 2*time.Second)
	h := newHarness(t, client, scenario.NewChaos(client, "chaos.r1.kill", 1, 0, false, []string{"h@x"}, []int64{1}), 2*time.Second)
	h.w.ID = 4
	h.w.Iter = 7
	if !h.iterate() {
		t.Fatal("create failed")
	}
	s := h.sink.all()[0]
	username, _ := tagOf(s, "username")
	if username != "chaos.r1.kill.4.7" {
		t.Errorf("username tag %q", username)
	}
	if api.KeyOf(username) != username {
		t.Errorf("Idempotency-Key was not the username %q", username)
	}
	for key, want := range map[string]string{"kind": "create", "status": "201", "ok": "1", "email": "h@x", "id": "1"} {
		if got, _ := tagOf(s, key); got != want {
			t.Errorf("tag %s = %q, want %q", key, got, want)
		}
	}
	if got := counter(h.env.Rec, "create_2xx"); got != 1 {
		t.Errorf("create_2xx = %d", got)
	}
}

func TestChaosErrorCodes(t *testing.T) {
	body := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.Header().Set("X-Cache-Error", "redis_down")
		w.WriteHeader(503)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	client := newClient(t, srv.URL, 2*time.Second)
	for _, c := range []struct{ body, code string }{
		{"<html>Bad Gateway</html>", "not_json"},
		{`{"detail":"x"}`, "not_json"},
		{`{"error":{"code":""}}`, "not_json"},
		{`{"error":{"code":"unavailable","message":"x"}}`, "unavailable"},
	} {
		body = c.body
		h := newHarness(t, client, scenario.NewChaos(client, "p", 0, 1, false, []string{"h@x"}, []int64{5}), 2*time.Second)
		if h.iterate() {
			t.Fatal("a 503 passed")
		}
		s := h.sink.all()[0]
		for key, want := range map[string]string{"kind": "user", "status": "503", "code": c.code, "key": "5", "retry_after": "1", "cache_error": "redis_down"} {
			if got, _ := tagOf(s, key); got != want {
				t.Errorf("body %q: tag %s = %q, want %q", c.body, key, got, want)
			}
		}
		if _, has := tagOf(s, "ok"); has {
			t.Error("ok tag on an unexpected status")
		}
		if got := counter(h.env.Rec, "user_5xx"); got != 1 {
			t.Errorf("user_5xx = %d", got)
		}
	}
}

func TestChaosTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	const timeout = 200 * time.Millisecond
	client := newClient(t, srv.URL, timeout)
	h := newHarness(t, client, scenario.NewChaos(client, "p", 0, 0, false, []string{"h@x"}, []int64{5}), timeout)
	if h.iterate() {
		t.Fatal("a timeout passed")
	}
	s := h.sink.all()[0]
	if s.Status != 0 {
		t.Errorf("status %d, want 0", s.Status)
	}
	if got, _ := tagOf(s, "error"); got != "timeout" {
		t.Errorf("error tag %q, want timeout", got)
	}
	if got, _ := tagOf(s, "status"); got != "0" {
		t.Errorf("status tag %q", got)
	}
	if s.Ms < 150 || s.Ms > 2000 {
		t.Errorf("waited %.0f ms for a %v timeout", s.Ms, timeout)
	}
	if got := counter(h.env.Rec, "count_error"); got != 1 {
		t.Errorf("count_error = %d", got)
	}
	if tot := h.env.Rec.Totals(); tot.Status[4] != 1 || tot.Latency != nil {
		t.Errorf("totals %+v", tot)
	}
}
