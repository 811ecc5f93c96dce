package scenario_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"aside/bench/driver/internal/fakeapi"
	"aside/bench/driver/internal/scenario"
)

func staleHarness(t *testing.T, api *fakeapi.API) *harness {
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	client := newClient(t, srv.URL, 2*time.Second)
	return newHarness(t, client, scenario.NewStale(client, "run1", "cache", "warm", 100, "l2", 2), 2*time.Second)
}

// The coherence test: a gateway that answers right has no stale read; one
// whose counts survive the writes is caught.
func TestStaleCheckerCoherence(t *testing.T) {
	t.Run("coherent", func(t *testing.T) {
		api := fakeapi.New()
		h := staleHarness(t, api)
		for range 2 {
			if !h.iterate() {
				t.Fatal("an iteration against a coherent gateway failed")
			}
		}
		rec := h.env.Rec
		// Per iteration, 2 reads of: a, b; a, user; a, b, user; b, user.
		if got := counter(rec, "stale_checked"); got != 2*18 {
			t.Errorf("stale_checked = %d, want 36", got)
		}
		if got := counter(rec, "stale_reads"); got != 0 {
			t.Errorf("stale_reads = %d against a coherent gateway", got)
		}
		if got := counter(rec, "stale_check_errors"); got != 0 {
			t.Errorf("stale_check_errors = %d", got)
		}
		if api.Users() != 0 {
			t.Errorf("%d users left behind", api.Users())
		}
		if n := api.KeepAliveReads.Load(); n != 0 {
			t.Errorf("%d checker reads without Connection: close", n)
		}
	})
	t.Run("stale", func(t *testing.T) {
		api := fakeapi.New()
		api.Stale = true
		h := staleHarness(t, api)
		if h.iterate() {
			t.Fatal("an iteration against a stale gateway passed")
		}
		if got := counter(h.env.Rec, "stale_reads"); got == 0 {
			t.Error("no stale read counted against a gateway serving old counts")
		}
	})
}

func TestStaleNames(t *testing.T) {
	api := fakeapi.New()
	h := staleHarness(t, api)
	h.w.ID = 3
	h.w.Iter = 4
	s := h.scn.(*scenario.Stale)
	a, b := s.Emails(h.w)
	if a != "s3g0.cache.warm.100.a@run1.stale.example" || b != "s3g0.cache.warm.100.b@run1.stale.example" {
		t.Errorf("emails %q %q", a, b)
	}
	if u := s.Username(h.w); u != "load.run1.s3.4" {
		t.Errorf("username %q", u)
	}
}

// A write not acknowledged counts as an error and moves the worker to fresh emails.
func TestStaleUnacknowledgedWrite(t *testing.T) {
	srv := httptest.NewServer(nil) // 404 for everything
	t.Cleanup(srv.Close)
	client := newClient(t, srv.URL, 2*time.Second)
	h := newHarness(t, client, scenario.NewStale(client, "run1", "cache", "warm", 100, "l2", 1), 2*time.Second)
	if h.iterate() {
		t.Fatal("passed without a gateway")
	}
	if got := counter(h.env.Rec, "stale_check_errors"); got != 3 { // two unusable reads, one write
		t.Errorf("stale_check_errors = %d, want 3", got)
	}
	if h.w.Generation != 1 {
		t.Errorf("generation %d after a failed write, want 1", h.w.Generation)
	}
}

func TestMixedWrites(t *testing.T) {
	api := fakeapi.New()
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	client := newClient(t, srv.URL, 2*time.Second)
	m := scenario.NewMixed(client, "run9", "l2", 0.9, 1, []string{"h@x"}, []string{"c@x"})
	h := newHarness(t, client, m, 2*time.Second)
	h.w.ID = 2
	for range 3 {
		if !h.iterate() {
			t.Fatal("a write iteration failed")
		}
	}
	tot := h.env.Rec.Totals()
	names := map[string]int64{}
	for _, n := range tot.ByName {
		names[n.Name] = n.Requests
	}
	if names["create"] != 3 || names["delete"] != 3 || names["count"] != 0 {
		t.Errorf("requests by name %v at WRITE_SHARE 1", names)
	}
	if api.Users() != 0 {
		t.Errorf("%d users left", api.Users())
	}
	if u := m.Username(h.w); u != "load.run9.2.3" {
		t.Errorf("username %q", u)
	}
}
