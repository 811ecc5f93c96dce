package scenario

import (
	"net/url"

	"github.com/valyala/fastjson"

	"aside/bench/driver/internal/keytrace"
	"aside/bench/driver/internal/popularity"
)

// countKey is one email of the read mix and its count URL, built once.
type countKey struct {
	email string
	url   []byte
}

// countKeys is the read mix, every key in one table (all) so that a key is
// an index: a hot email (all[:hot]) with hotShare, else a cold one
// (all[hot:]); or, with a popularity, the key of the rank it draws; or,
// replaying a trace, the key of the iteration's line.
type countKeys struct {
	all      []countKey
	hotShare float64
	hot      int
	rank     popularity.Ranker
	replay   *keytrace.Replay
}

// CountPath is the count URL's path and query; mode "" leaves ?cache= out.
func CountPath(email, mode string) string {
	path := "/api/v1/users/count?email=" + url.QueryEscape(email)
	if mode != "" {
		path += "&cache=" + mode
	}
	return path
}

func countKeysOf(c *Client, mode string, emails ...[]string) []countKey {
	var out []countKey
	for _, list := range emails {
		for _, e := range list {
			out = append(out, countKey{email: e, url: c.URL(CountPath(e, mode))})
		}
	}
	return out
}

func newCountKeys(c *Client, mode string, hotShare float64, hot, cold []string) countKeys {
	return countKeys{all: countKeysOf(c, mode, hot, cold), hotShare: hotShare, hot: len(hot)}
}

// pick is the key of the worker's iteration, an index of all.
func (k *countKeys) pick(w *Worker) int {
	switch {
	case k.replay != nil:
		return k.replay.Key(w.Index)
	case k.rank != nil:
		return k.rank.Rank(w.Rand.Float64())
	case w.Rand.Float64() < k.hotShare:
		return w.Rand.Intn(k.hot)
	}
	return k.hot + w.Rand.Intn(len(k.all)-k.hot)
}

// hitTiers are the X-Cache-Tier values a hit of each cached mode may carry.
var hitTiers = map[string][]string{
	"l2": {"l2"}, "l1": {"l1"}, "hybrid": {"l1", "l2"}, "tracking": {"l1", "l2"},
}

// CacheHeadersFit is true when an answer's X-Cache (and X-Cache-Tier on a
// hit) fits the mode: the uncached modes (off, nopool, coalesce) must bypass;
// a cached mode may hit (in one of its tiers), miss, bypass (a cache
// failure still answers right) or answer a value past its expiry
// (STALE, CACHE_EXPIRY=swr).
func CacheHeadersFit(w *Worker, mode string) bool {
	xcache := w.Resp.Header.Peek("X-Cache")
	if mode == "off" || mode == "nopool" || mode == "coalesce" {
		return string(xcache) == "BYPASS"
	}
	if string(xcache) == "HIT" {
		tier := w.Resp.Header.Peek("X-Cache-Tier")
		for _, t := range hitTiers[mode] {
			if string(tier) == t {
				return true
			}
		}
		return false
	}
	return string(xcache) == "MISS" || string(xcache) == "BYPASS" || string(xcache) == "STALE"
}

// countOf parses a count answer: the count, -1 when the body is not
// {"email": email, "count": n} with a whole n >= 0.
func countOf(w *Worker, email string) int64 {
	v, err := w.JSON.ParseBytes(w.Resp.Body())
	if err != nil || string(v.GetStringBytes("email")) != email {
		return -1
	}
	return wholeOf(v.Get("count"))
}

// wholeOf is a JSON whole number >= 0, or -1.
func wholeOf(v *fastjson.Value) int64 {
	if v == nil || v.Type() != fastjson.TypeNumber {
		return -1
	}
	n, err := v.Int64()
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// CountFits is true when a count answer is right: 200, a body for this
// email with a whole count, and X-Cache headers that fit the mode.
func CountFits(w *Worker, status int, email, mode string) bool {
	return status == 200 && countOf(w, email) >= 0 && CacheHeadersFit(w, mode)
}

// Read is the read scenario (and bare's, and interference's reads): GET the
// count of an email of the mix with ?cache=mode.
type Read struct {
	name string
	mode string
	bare bool
	keys countKeys
	log  *keytrace.Recorder
}

// NewRead is a read scenario named name; bare checks the status only.
func NewRead(name string, c *Client, mode string, hotShare float64, hot, cold []string, bare bool) *Read {
	return &Read{name: name, mode: mode, bare: bare, keys: newCountKeys(c, mode, hotShare, hot, cold)}
}

// NewRanked is a read scenario over a key space: each request draws a rank
// from rank and asks for ranked[rank] (ranked[0] the most popular key).
func NewRanked(name string, c *Client, mode string, ranked []string, rank popularity.Ranker, bare bool) *Read {
	keys := countKeys{all: countKeysOf(c, mode, ranked), rank: rank}
	return &Read{name: name, mode: mode, bare: bare, keys: keys}
}

// NewReplay is a read scenario replaying a trace: iteration i asks for the
// key of its line (replay.Key), keys being the trace's distinct keys.
func NewReplay(name string, c *Client, mode string, keys []string, replay *keytrace.Replay, bare bool) *Read {
	return &Read{name: name, mode: mode, bare: bare, keys: countKeys{all: countKeysOf(c, mode, keys), replay: replay}}
}

// RecordKeys notes every request's key and due time in log.
func (s *Read) RecordKeys(log *keytrace.Recorder) { s.log = log }

// Key is the email of key index i (as noted in the recorder).
func (s *Read) Key(i int) string { return s.keys.all[i].email }

// Name implements Scenario.
func (s *Read) Name() string { return s.name }

// Names implements Scenario.
func (s *Read) Names() []string { return []string{"count"} }

// Iterate implements Scenario.
func (s *Read) Iterate(w *Worker) bool {
	i := s.keys.pick(w)
	if s.log != nil {
		s.log.Note(w.Index, i, w.Due)
	}
	return readCount(w, 0, &s.keys.all[i], s.mode, s.bare)
}

// readCount sends one count read as request name and checks it.
func readCount(w *Worker, name int, k *countKey, mode string, bare bool) bool {
	w.Get(k.url)
	x := w.Do()
	answered := x.Status == 200
	ok := answered && (bare || CountFits(w, x.Status, k.email, mode))
	w.Record(name, &x, answered, ok)
	return ok
}

// Healthz is GET /healthz, expecting 200.
type Healthz struct{ url []byte }

// NewHealthz is the healthz scenario.
func NewHealthz(c *Client) *Healthz { return &Healthz{url: c.URL("/healthz")} }

// Name implements Scenario.
func (s *Healthz) Name() string { return "healthz" }

// Names implements Scenario.
func (s *Healthz) Names() []string { return []string{"healthz"} }

// Iterate implements Scenario.
func (s *Healthz) Iterate(w *Worker) bool {
	w.Get(s.url)
	x := w.Do()
	ok := x.Status == 200
	w.Record(0, &x, ok, ok)
	return ok
}
