package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/aside-lab/aside/core-go/internal/testenv"
)

type trackVectors struct {
	Tolerance struct {
		Valid []struct {
			Raw       string `json:"raw"`
			Canonical string `json:"canonical"`
		} `json:"valid"`
		Invalid []string `json:"invalid"`
	} `json:"tolerance"`
	Simplify []struct {
		Name       string          `json:"name"`
		Tolerance  string          `json:"tolerance"`
		Path       json.RawMessage `json:"path"`
		Simplified [][2]float64    `json:"simplified"`
	} `json:"simplify"`
}

// insertTrack stores a track as the seeder would and returns its id.
func insertTrack(t *testing.T, name string, distance int, path string) int64 {
	t.Helper()
	var id int64
	err := env.Pool.QueryRow(context.Background(),
		"INSERT INTO tracks (name, distance_m, path) VALUES ($1, $2, $3::json) RETURNING id", name, distance, path).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func simplifiedURL(id int64, tolerance string) string {
	return fmt.Sprintf("/internal/v1/tracks/%d/simplified?tolerance=%s", id, url.QueryEscape(tolerance))
}

func TestSimplifyVectorsThroughTheAPI(t *testing.T) {
	var c trackVectors
	testenv.LoadContract(t, "tracks.json", &c)
	s := newServer(t, serverOpts{})
	for _, v := range c.Simplify {
		id := insertTrack(t, "vector: "+v.Name, 1234, string(v.Path))
		rec := s.do(http.MethodGet, simplifiedURL(id, v.Tolerance), "")
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", v.Name, rec.Code, rec.Body)
		}
		var got struct {
			ID        int64        `json:"id"`
			Name      string       `json:"name"`
			DistanceM int          `json:"distance_m"`
			Tolerance json.Number  `json:"tolerance"`
			Path      [][2]float64 `json:"path"`
		}
		dec := json.NewDecoder(rec.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		if got.ID != id || got.Name != "vector: "+v.Name || got.DistanceM != 1234 ||
			string(got.Tolerance) != v.Tolerance || !reflect.DeepEqual(got.Path, v.Simplified) {
			t.Errorf("%s: %+v, want path %v", v.Name, got, v.Simplified)
		}
	}
	if n := testutil.CollectAndCount(s.metrics.SimplifyDuration); n != 1 {
		t.Fatalf("simplify duration histogram: %d series", n)
	}
}

func TestSimplifyAnswersTheCanonicalTolerance(t *testing.T) {
	var c trackVectors
	testenv.LoadContract(t, "tracks.json", &c)
	s := newServer(t, serverOpts{})
	id := insertTrack(t, "canonical", 1, "[[13.4,52.5],[13.41,52.51]]")
	for _, v := range c.Tolerance.Valid {
		rec := s.do(http.MethodGet, simplifiedURL(id, v.Raw), "")
		var got struct {
			Tolerance json.Number `json:"tolerance"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK || string(got.Tolerance) != v.Canonical {
			t.Errorf("tolerance %q: %d %s, want %s", v.Raw, rec.Code, rec.Body, v.Canonical)
		}
	}
}

func TestSimplifyRefusesBadInput(t *testing.T) {
	var c trackVectors
	testenv.LoadContract(t, "tracks.json", &c)
	s := newServer(t, serverOpts{})
	id := insertTrack(t, "bad input", 1, "[[13.4,52.5],[13.41,52.51]]")
	for _, raw := range c.Tolerance.Invalid {
		wantError(t, s.do(http.MethodGet, simplifiedURL(id, raw), ""), http.StatusBadRequest, codeInvalidTolerance)
	}
	for _, path := range []string{
		fmt.Sprintf("/internal/v1/tracks/%d/simplified", id),
		fmt.Sprintf("/internal/v1/tracks/%d/simplified?tolerance=0.001&tolerance=0.002", id),
	} {
		wantError(t, s.do(http.MethodGet, path, ""), http.StatusBadRequest, codeInvalidTolerance)
	}
	for _, bad := range []string{"0", "-1", "abc", "9223372036854775808"} {
		wantError(t, s.do(http.MethodGet, "/internal/v1/tracks/"+bad+"/simplified?tolerance=0.001", ""),
			http.StatusBadRequest, codeInvalidID)
	}
	wantError(t, s.do(http.MethodGet, simplifiedURL(9_000_000_000_000, "0.001"), ""), http.StatusNotFound, codeNotFound)
	wantError(t, s.do(http.MethodPost, simplifiedURL(id, "0.001"), ""), http.StatusMethodNotAllowed, codeMethodNotAllowed)
}

// A path that is not what the seeder writes is a bug of the data: 500, logged.
func TestSimplifyOfABrokenStoredPathIs500(t *testing.T) {
	s := newServer(t, serverOpts{})
	id := insertTrack(t, "broken", 1, `[[13.4]]`)
	wantError(t, s.do(http.MethodGet, simplifiedURL(id, "0.001"), ""), http.StatusInternalServerError, codeInternal)
}

func TestSimplifyNeedsTheCoreToken(t *testing.T) {
	s := newServer(t, serverOpts{coreToken: testCoreToken})
	id := insertTrack(t, "token", 1, "[[13.4,52.5],[13.41,52.51]]")
	wantError(t, s.do(http.MethodGet, simplifiedURL(id, "0.001"), ""), http.StatusUnauthorized, codeUnauthorized)
	if rec := s.send(authed(http.MethodGet, simplifiedURL(id, "0.001"), "", testCoreToken)); rec.Code != http.StatusOK {
		t.Fatalf("with the token: %d %s", rec.Code, rec.Body)
	}
}

// Simplification has slots of its own: with every one taken it answers a
// fast 503 with Retry-After while /compute still runs; with every compute
// slot taken it still simplifies.
func TestSimplifyShedsLoadAtItsOwnConcurrencyLimit(t *testing.T) {
	s := newServer(t, serverOpts{computeMax: 1, computeWait: 1})
	id := insertTrack(t, "busy", 1, "[[13.4,52.5],[13.41,52.51]]")
	release, err := s.simplify.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rec := s.do(http.MethodGet, simplifiedURL(id, "0.001"), "")
	wantError(t, rec, http.StatusServiceUnavailable, codeUnavailable)
	if rec.Header().Get("Retry-After") == "" || time.Since(start) > time.Second {
		t.Fatalf("Retry-After %q after %v", rec.Header().Get("Retry-After"), time.Since(start))
	}
	if rec := s.do(http.MethodPost, "/api/v1/compute", `{"complexity":1}`); rec.Code != http.StatusOK {
		t.Fatalf("compute while simplification is full: %d %s", rec.Code, rec.Body)
	}
	if got := testutil.ToFloat64(s.metrics.SimplifyRejected); got != 1 {
		t.Fatalf("simplify rejected %v, want 1", got)
	}
	release()
	releaseCompute, err := s.limiter.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer releaseCompute()
	if rec := s.do(http.MethodGet, simplifiedURL(id, "0.001"), ""); rec.Code != http.StatusOK {
		t.Fatalf("simplify while compute is full: %d %s", rec.Code, rec.Body)
	}
}
