// Package tracks is the CPU-bound half of GET /api/v1/tracks/<id>?simplify=T
// (contracts/tracks.json): the tolerance's rules, Douglas-Peucker with
// paulmach/orb, and the simplified track's JSON. The gateway serves whole
// tracks itself and asks the core only for simplifications.
package tracks

import (
	"bytes"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"strings"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/simplify"
)

// Tolerance bounds of contracts/tracks.json, in degrees.
const (
	ToleranceMin       = 0.000001
	ToleranceMax       = 0.01
	ToleranceMaxLength = 16
)

// Ladder is contracts/tracks.json "ladder": a tolerance is answered at the
// largest level not above it, so one track has at most len(Ladder)
// simplifications whatever a client asks. Ascending, canonical text.
var Ladder = []string{"0.000001", "0.000002", "0.000005", "0.00001", "0.00002", "0.00005",
	"0.0001", "0.0002", "0.0005", "0.001", "0.002", "0.005", "0.01"}

// ladderValues are Ladder's levels as numbers. A tolerance has at most 14
// digits after the point, so distinct decimals stay distinct as float64 and
// comparing with a level is exact.
var ladderValues = func() []float64 {
	values := make([]float64, len(Ladder))
	for i, level := range Ladder {
		v, err := strconv.ParseFloat(level, 64)
		if err != nil {
			panic(err)
		}
		values[i] = v
	}
	return values
}()

// Snap is the largest level of the ladder not above value, with its text.
func Snap(value float64) (string, float64) {
	i := sort.SearchFloat64s(ladderValues, value) // the first level >= value
	if i < len(ladderValues) && ladderValues[i] == value {
		return Ladder[i], value
	}
	if i == 0 {
		return Ladder[0], ladderValues[0]
	}
	return Ladder[i-1], ladderValues[i-1]
}

// ErrTolerance is a tolerance outside the contract's rules.
var ErrTolerance = errors.New("tolerance must be a plain decimal from 0.000001 to 0.01 (degrees)")

// ErrPath is a stored path that is not a non-empty JSON array of [lon, lat] pairs.
var ErrPath = errors.New("the stored path is not a JSON array of [longitude, latitude] pairs")

// ParseTolerance checks raw against the contract and returns the ladder
// level it is answered at: its canonical text (no leading zeros before the
// point, no trailing zeros after it) and its value.
func ParseTolerance(raw string) (string, float64, error) {
	if len(raw) == 0 || len(raw) > ToleranceMaxLength {
		return "", 0, ErrTolerance
	}
	whole, frac, hasPoint := strings.Cut(raw, ".")
	if !digits(whole) || (hasPoint && !digits(frac)) {
		return "", 0, ErrTolerance
	}
	value, err := strconv.ParseFloat(raw, 64)
	if err != nil || value < ToleranceMin || value > ToleranceMax {
		return "", 0, ErrTolerance
	}
	level, snapped := Snap(value)
	return level, snapped, nil
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ParsePath decodes a stored path ([[lon, lat], ...]).
func ParsePath(raw []byte) (orb.LineString, error) {
	// Pairs as slices, so a point of one or three numbers is refused rather
	// than padded or cut to two.
	var pairs [][]float64
	if err := json.Unmarshal(raw, &pairs); err != nil || len(pairs) == 0 {
		return nil, ErrPath
	}
	path := make(orb.LineString, len(pairs))
	for i, pair := range pairs {
		if len(pair) != 2 {
			return nil, ErrPath
		}
		path[i] = orb.Point{pair[0], pair[1]}
	}
	return path, nil
}

// Simplify runs Douglas-Peucker on path at tolerance (plane distance in
// degrees), keeping both ends. It reuses path's memory.
func Simplify(path orb.LineString, tolerance float64) orb.LineString {
	if len(path) < 3 {
		return path
	}
	return simplify.DouglasPeucker(tolerance).LineString(path)
}

// Track is a row of the tracks table as the core reads it.
type Track struct {
	ID        int64
	Name      string
	DistanceM int64
	Path      []byte // the stored JSON text
}

// simplified is the answer's field order (contracts/tracks.json simplified_json).
type simplified struct {
	ID        int64          `json:"id"`
	Name      string         `json:"name"`
	DistanceM int64          `json:"distance_m"`
	Tolerance json.Number    `json:"tolerance"`
	Path      orb.LineString `json:"path"`
}

// Simplified is the answer to ?simplify=<canonical>: the track with its path
// simplified at tolerance, and the number of points before and after.
func Simplified(t Track, canonical string, tolerance float64) (body []byte, before, after int, err error) {
	path, err := ParsePath(t.Path)
	if err != nil {
		return nil, 0, 0, err
	}
	before = len(path)
	path = Simplify(path, tolerance)
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false) // the gateway's JSON keeps <, > and & as they are
	err = enc.Encode(simplified{ID: t.ID, Name: t.Name, DistanceM: t.DistanceM,
		Tolerance: json.Number(canonical), Path: path})
	if err != nil {
		return nil, 0, 0, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), before, len(path), nil
}
