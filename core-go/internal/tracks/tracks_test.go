package tracks_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/paulmach/orb"

	"github.com/aside-lab/aside/core-go/internal/testenv"
	"github.com/aside-lab/aside/core-go/internal/tracks"
)

type tracksContract struct {
	Tolerance struct {
		Min       string   `json:"min"`
		Max       string   `json:"max"`
		MaxLength int      `json:"max_length"`
		Ladder    []string `json:"ladder"`
		Valid     []struct {
			Raw       string `json:"raw"`
			Canonical string `json:"canonical"`
		} `json:"valid"`
		Invalid []string `json:"invalid"`
	} `json:"tolerance"`
	SimplifiedJSON struct {
		Row struct {
			ID        int64  `json:"id"`
			Name      string `json:"name"`
			DistanceM int64  `json:"distance_m"`
			Path      string `json:"path"`
		} `json:"row"`
		Tolerance string          `json:"tolerance"`
		JSON      json.RawMessage `json:"json"`
	} `json:"simplified_json"`
	Simplify []struct {
		Name       string         `json:"name"`
		Tolerance  string         `json:"tolerance"`
		Path       orb.LineString `json:"path"`
		Simplified orb.LineString `json:"simplified"`
	} `json:"simplify"`
}

func load(t *testing.T) tracksContract {
	var c tracksContract
	testenv.LoadContract(t, "tracks.json", &c)
	return c
}

func TestToleranceBoundsMatchTheContract(t *testing.T) {
	c := load(t)
	_, lo, err1 := tracks.ParseTolerance(c.Tolerance.Min)
	_, hi, err2 := tracks.ParseTolerance(c.Tolerance.Max)
	if err1 != nil || err2 != nil || lo != tracks.ToleranceMin || hi != tracks.ToleranceMax ||
		c.Tolerance.MaxLength != tracks.ToleranceMaxLength {
		t.Fatalf("bounds %v %v (%v %v), max length %d", lo, hi, err1, err2, c.Tolerance.MaxLength)
	}
}

func TestLadderMatchesTheContract(t *testing.T) {
	c := load(t)
	if !slices.Equal(c.Tolerance.Ladder, tracks.Ladder) {
		t.Fatalf("ladder %v, contract %v", tracks.Ladder, c.Tolerance.Ladder)
	}
	for _, level := range c.Tolerance.Ladder {
		if got, _, err := tracks.ParseTolerance(level); err != nil || got != level {
			t.Errorf("ParseTolerance(%q) = %q, %v; a level is its own answer", level, got, err)
		}
	}
}

// Every tolerance of a sweep of the range lands on a level not above it, and
// every level is reached: the key space of one track is the ladder.
func TestEveryToleranceLandsOnALevelNotAboveIt(t *testing.T) {
	seen := map[string]bool{}
	for step := 1; step <= 10000; step++ {
		raw := strconv.FormatFloat(float64(step)*0.000001, 'f', 6, 64)
		level, value, err := tracks.ParseTolerance(raw)
		raw64, _ := strconv.ParseFloat(raw, 64)
		if err != nil || !slices.Contains(tracks.Ladder, level) || value > raw64 {
			t.Fatalf("ParseTolerance(%q) = %q, %v, %v", raw, level, value, err)
		}
		seen[level] = true
	}
	if len(seen) != len(tracks.Ladder) {
		t.Fatalf("levels reached %v", seen)
	}
}

func TestToleranceVectors(t *testing.T) {
	c := load(t)
	if len(c.Tolerance.Valid) == 0 || len(c.Tolerance.Invalid) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range c.Tolerance.Valid {
		canonical, _, err := tracks.ParseTolerance(v.Raw)
		if err != nil || canonical != v.Canonical {
			t.Errorf("ParseTolerance(%q) = %q, %v; want %q", v.Raw, canonical, err, v.Canonical)
		}
	}
	for _, raw := range c.Tolerance.Invalid {
		if canonical, _, err := tracks.ParseTolerance(raw); err == nil {
			t.Errorf("ParseTolerance(%q) accepted as %q", raw, canonical)
		}
	}
}

func TestSimplifyVectors(t *testing.T) {
	c := load(t)
	if len(c.Simplify) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range c.Simplify {
		_, tol, err := tracks.ParseTolerance(v.Tolerance)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		got := tracks.Simplify(v.Path.Clone(), tol)
		if !reflect.DeepEqual(got, v.Simplified) {
			t.Errorf("%s: %v, want %v", v.Name, got, v.Simplified)
		}
	}
}

func TestSimplifiedAnswer(t *testing.T) {
	c := load(t)
	v := c.SimplifiedJSON
	canonical, tol, err := tracks.ParseTolerance(v.Tolerance)
	if err != nil {
		t.Fatal(err)
	}
	row := tracks.Track{ID: v.Row.ID, Name: v.Row.Name, DistanceM: v.Row.DistanceM, Path: []byte(v.Row.Path)}
	body, before, after, err := tracks.Simplified(row, canonical, tol)
	if err != nil || before != 3 || after != 2 {
		t.Fatalf("%s: %d -> %d points, %v", body, before, after, err)
	}
	var got, want any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(v.JSON, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("answer %s, want %s", body, v.JSON)
	}
	// Field order as the contract shows it: tolerance before the path.
	const prefix = `{"id":7,"name":"Morning run, Mitte","distance_m":412,"tolerance":0.0001,"path":[[`
	if string(body[:len(prefix)]) != prefix {
		t.Fatalf("answer %s does not start with %s", body, prefix)
	}
}

func TestABadStoredPathIsAnError(t *testing.T) {
	for _, raw := range []string{``, `[]`, `{}`, `[[1]]`, `[["a","b"]]`, `null`, `[[1,2,3]]`, `[[1,2],null]`} {
		if _, err := tracks.ParsePath([]byte(raw)); err == nil {
			t.Errorf("ParsePath(%q) accepted", raw)
		}
	}
}
