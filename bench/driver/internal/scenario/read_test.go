package scenario_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"aside/bench/driver/internal/popularity"
	"aside/bench/driver/internal/scenario"
)

const email = "hot.user+1@example.com"

// answer is what the fake count endpoint says.
type answer struct {
	status       int
	body, xcache string
	tier         string
}

func countServer(t *testing.T, a *answer, seen *string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*seen = r.URL.RawQuery
		if a.xcache != "" {
			w.Header().Set("X-Cache", a.xcache)
		}
		if a.tier != "" {
			w.Header().Set("X-Cache-Tier", a.tier)
		}
		w.WriteHeader(a.status)
		fmt.Fprint(w, a.body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestReadCheck(t *testing.T) {
	right := fmt.Sprintf(`{"email":%q,"count":3}`, email)
	cases := []struct {
		name string
		mode string
		a    answer
		ok   bool
	}{
		{"hit in its tier", "l2", answer{200, right, "HIT", "l2"}, true},
		{"miss", "l2", answer{200, right, "MISS", ""}, true},
		{"stale past its expiry", "l2", answer{200, right, "STALE", "l2"}, true},
		{"off must not be stale", "off", answer{200, right, "STALE", ""}, false},
		{"bypass on off", "off", answer{200, right, "BYPASS", ""}, true},
		{"hybrid hit in l1", "hybrid", answer{200, right, "HIT", "l1"}, true},
		{"tracking hit in l1", "tracking", answer{200, right, "HIT", "l1"}, true},
		{"tracking hit in l2", "tracking", answer{200, right, "HIT", "l2"}, true},
		{"count zero", "l1", answer{200, fmt.Sprintf(`{"email":%q,"count":0}`, email), "MISS", ""}, true},
		{"wrong email", "l2", answer{200, `{"email":"other@example.com","count":3}`, "MISS", ""}, false},
		{"negative count", "l2", answer{200, fmt.Sprintf(`{"email":%q,"count":-1}`, email), "MISS", ""}, false},
		{"fractional count", "l2", answer{200, fmt.Sprintf(`{"email":%q,"count":1.5}`, email), "MISS", ""}, false},
		{"count as text", "l2", answer{200, fmt.Sprintf(`{"email":%q,"count":"3"}`, email), "MISS", ""}, false},
		{"no count", "l2", answer{200, fmt.Sprintf(`{"email":%q}`, email), "MISS", ""}, false},
		{"not json", "l2", answer{200, `<html>`, "MISS", ""}, false},
		{"hit in the wrong tier", "l2", answer{200, right, "HIT", "l1"}, false},
		{"hit without a tier", "l1", answer{200, right, "HIT", ""}, false},
		{"off must bypass", "off", answer{200, right, "MISS", ""}, false},
		{"coalesce must bypass", "coalesce", answer{200, right, "HIT", "l2"}, false},
		{"bypass on coalesce", "coalesce", answer{200, right, "BYPASS", ""}, true},
		{"nopool must bypass", "nopool", answer{200, right, "HIT", "l2"}, false},
		{"no X-Cache", "l2", answer{200, right, "", ""}, false},
		{"status 500", "l2", answer{500, right, "MISS", ""}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var query string
			srv := countServer(t, &c.a, &query)
			client := newClient(t, srv.URL, 2*time.Second)
			h := newHarness(t, client, scenario.NewRead("read", client, c.mode, 1, []string{email}, []string{"cold@example.com"}, false), 2*time.Second)
			if got := h.iterate(); got != c.ok {
				t.Fatalf("read check = %v, want %v", got, c.ok)
			}
			if want := "email=hot.user%2B1%40example.com&cache=" + c.mode; query != want {
				t.Errorf("query %q, want %q", query, want)
			}
			tot := h.env.Rec.Totals()
			if tot.Requests != 1 || tot.ByName[0].Name != "count" {
				t.Errorf("recorded %+v", tot)
			}
			s := h.sink.all()
			if len(s) != 1 || s[0].OK != c.ok || s[0].Status != c.a.status {
				t.Errorf("sample %+v", s)
			}
		})
	}
}

func TestBareChecksOnlyTheStatus(t *testing.T) {
	var query string
	a := answer{200, "whatever", "", ""}
	srv := countServer(t, &a, &query)
	client := newClient(t, srv.URL, 2*time.Second)
	h := newHarness(t, client, scenario.NewRead("bare", client, "l2", 1, []string{email}, []string{"c@x"}, true), 2*time.Second)
	if !h.iterate() {
		t.Fatal("bare failed on a 200")
	}
	a.status = 503
	if h.iterate() {
		t.Fatal("bare passed a 503")
	}
}

func TestHotShareAndSeed(t *testing.T) {
	var query string
	a := answer{200, "{}", "MISS", ""}
	srv := countServer(t, &a, &query)
	client := newClient(t, srv.URL, 2*time.Second)
	hot := []string{"h1@x", "h2@x"}
	cold := []string{"c1@x", "c2@x", "c3@x"}
	picks := func(seed uint64) []string {
		h := newHarness(t, client, scenario.NewRead("bare", client, "l2", 0.9, hot, cold, true), 2*time.Second)
		h.env.Seed = seed
		var got []string
		for range 400 {
			h.iterate()
			got = append(got, query)
		}
		return got
	}
	first, again, other := picks(7), picks(7), picks(8)
	coldCount, differ := 0, 0
	for i := range first {
		if first[i] != again[i] {
			t.Fatalf("seed 7 chose %q then %q at %d", first[i], again[i], i)
		}
		if first[i] != other[i] {
			differ++
		}
		if first[i][6] == 'c' {
			coldCount++
		}
	}
	if coldCount < 20 || coldCount > 60 {
		t.Errorf("%d cold reads of 400 at HOT_SHARE 0.9", coldCount)
	}
	if differ == 0 {
		t.Error("seeds 7 and 8 chose the same keys")
	}
}

// A read over a key space asks for the keys by their popularity: with Zipf
// the first ranked key most, the stream the same for the same seed and
// iteration numbers, whichever worker runs them.
func TestRankedReadsFollowThePopularity(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e := r.URL.Query().Get("email")
		asked = append(asked, e)
		w.Header().Set("X-Cache", "MISS")
		fmt.Fprintf(w, `{"email":%q,"count":1}`, e)
	}))
	t.Cleanup(srv.Close)
	client := newClient(t, srv.URL, 2*time.Second)
	keys := []string{"k0@x", "k1@x", "k2@x", "k3@x", "k4@x", "k5@x", "k6@x", "k7@x", "k8@x", "k9@x"}
	zipf, err := popularity.NewZipf(len(keys), 1.3)
	if err != nil {
		t.Fatal(err)
	}
	run := func(skip uint64, n int) []string {
		asked = nil
		h := newHarness(t, client, scenario.NewRanked("read", client, "l2", keys, zipf, false), 2*time.Second)
		h.env.Skip = skip
		for range n {
			if !h.iterate() {
				t.Fatal("a ranked read failed its check")
			}
		}
		return asked
	}
	first := run(0, 2000)
	counts := map[string]int{}
	for _, e := range first {
		counts[e]++
	}
	// Zipf 1.3 over 10 keys: the first rank has about 43 % of the requests, the last about 2 %.
	if share := float64(counts["k0@x"]) / 2000; share < 0.38 || share > 0.48 {
		t.Errorf("the first rank's share %.3f, want about 0.43", share)
	}
	if counts["k0@x"] <= counts["k9@x"]*10 {
		t.Errorf("counts %v: the first rank is not far ahead of the last", counts)
	}
	again := run(0, 2000)
	for i := range first {
		if first[i] != again[i] {
			t.Fatalf("request %d asked %s, then %s: not the same stream", i+1, first[i], again[i])
		}
	}
	// SKIP: a step after a warm-up of 500 iterations asks what follows them.
	after := run(500, 1500)
	for i := range after {
		if after[i] != first[500+i] {
			t.Fatalf("with SKIP 500, request %d asked %s, want %s", i+1, after[i], first[500+i])
		}
	}
}
