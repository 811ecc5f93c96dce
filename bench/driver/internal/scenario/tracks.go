package scenario

import (
	"strconv"
	"strings"
)

// TracksScenario reads big cached values: GET /api/v1/tracks/<id>?ARM_QUERY
// for a random seeded track, named "track N" by its size class.
type TracksScenario struct {
	names    []string
	uncached bool
	urls     [][]byte
	class    []int
}

// SizeClass is the index of the first bound above bytes, len(bounds) when none is.
func SizeClass(bytes int64, bounds []int64) int {
	for i, b := range bounds {
		if bytes < b {
			return i
		}
	}
	return len(bounds)
}

// NewTracks is the tracks scenario over tracks; armQuery is the query
// string of every request, bounds the size classes' limits (bytes).
func NewTracks(c *Client, tracks []Track, armQuery string, bounds []int64) *TracksScenario {
	s := &TracksScenario{uncached: strings.Contains(armQuery, "cache=off")}
	for i := 0; i <= len(bounds); i++ {
		s.names = append(s.names, "track "+strconv.Itoa(i))
	}
	for _, t := range tracks {
		s.urls = append(s.urls, c.URL("/api/v1/tracks/"+strconv.FormatInt(t.ID, 10)+"?"+armQuery))
		s.class = append(s.class, SizeClass(t.Bytes, bounds))
	}
	return s
}

// Name implements Scenario.
func (s *TracksScenario) Name() string { return "tracks" }

// Names implements Scenario.
func (s *TracksScenario) Names() []string { return s.names }

// Iterate implements Scenario.
func (s *TracksScenario) Iterate(w *Worker) bool {
	i := w.Rand.Intn(len(s.urls))
	w.Get(s.urls[i])
	x := w.Do()
	answered := x.Status == 200
	ok := answered && w.Resp.Header.ContentLength() > 0 && s.cacheFits(w)
	w.Record(s.class[i], &x, answered, ok)
	return ok
}

func (s *TracksScenario) cacheFits(w *Worker) bool {
	xcache := string(w.Resp.Header.Peek("X-Cache"))
	if s.uncached {
		return xcache == "BYPASS"
	}
	return xcache == "HIT" || xcache == "MISS" || xcache == "BYPASS"
}
