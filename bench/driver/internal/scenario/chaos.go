package scenario

import (
	"github.com/valyala/fastjson"

	"aside/bench/driver/internal/record"
)

// Request names (and kinds) of chaos.
const (
	chaosCount = iota
	chaosUser
	chaosCreate
)

var chaosKinds = []string{"count", "user", "create"}

// Chaos is the fault suite's load: creates through the gateway with an
// Idempotency-Key, reads of a user by id and counts of hot emails. Every
// request is a sample with the tags the fault checks read.
type Chaos struct {
	prefix     string
	writeShare float64
	userShare  float64
	noReuse    bool
	users      []byte
	hot        []countKey
	ids        []int64
	idURLs     [][]byte
	idKeys     []string
	tallies    [3][record.NClasses]*record.Counter
}

// NewChaos is the chaos scenario; usernames are <prefix>.<worker>.<iteration>.
func NewChaos(c *Client, prefix string, writeShare, userShare float64, noReuse bool, hot []string, ids []int64) *Chaos {
	s := &Chaos{
		prefix: prefix, writeShare: writeShare, userShare: userShare, noReuse: noReuse,
		users: c.URL("/api/v1/users"), ids: ids,
	}
	for _, e := range hot {
		s.hot = append(s.hot, countKey{email: e, url: c.URL(CountPath(e, ""))})
	}
	for _, id := range ids {
		s.idURLs = append(s.idURLs, userURL(nil, c.Base(), id, ""))
		s.idKeys = append(s.idKeys, itoa(id))
	}
	return s
}

// Name implements Scenario.
func (s *Chaos) Name() string { return "chaos" }

// Names implements Scenario.
func (s *Chaos) Names() []string { return chaosKinds }

// Register implements Counting: <kind>_<class> tallies.
func (s *Chaos) Register(rec *record.Recorder) {
	for k, kind := range chaosKinds {
		for c, class := range record.ClassNames {
			s.tallies[k][c] = rec.AddCounter(kind + "_" + class)
		}
	}
}

// Username is the iteration's user: <USER_PREFIX>.<worker>.<iteration>.
func (s *Chaos) Username(w *Worker) string {
	return s.prefix + "." + itoa(int64(w.ID)) + "." + itoa(w.Iter)
}

// Iterate implements Scenario.
func (s *Chaos) Iterate(w *Worker) bool {
	if w.Rand.Float64() < s.writeShare {
		return s.create(w)
	}
	if w.Rand.Float64() < s.userShare {
		return s.readUser(w)
	}
	return s.readCount(w)
}

func (s *Chaos) readCount(w *Worker) bool {
	k := &s.hot[w.Rand.Intn(len(s.hot))]
	w.Get(k.url)
	s.reuse(w)
	x := w.Do()
	ok := x.Status == 200 && countOf(w, k.email) >= 0
	if w.Sampling() {
		w.Tag("key", k.email)
	}
	return s.finish(w, chaosCount, &x, x.Status == 200, ok)
}

func (s *Chaos) readUser(w *Worker) bool {
	i := w.Rand.Intn(len(s.ids))
	w.Get(s.idURLs[i])
	s.reuse(w)
	x := w.Do()
	ok := false
	if x.Status == 200 {
		ok = idOf(&w.JSON, w.Resp.Body()) == s.ids[i]
	}
	if w.Sampling() {
		w.Tag("key", s.idKeys[i])
	}
	return s.finish(w, chaosUser, &x, x.Status == 200, ok)
}

func (s *Chaos) create(w *Worker) bool {
	username := s.Username(w)
	email := s.hot[w.Rand.Intn(len(s.hot))].email
	w.Buf = appendUser(w.Buf[:0], username, email)
	w.Send("POST", s.users, w.Buf)
	// The key is the username: a retry of this very request reuses it.
	w.Req.Header.Set("Idempotency-Key", username)
	s.reuse(w)
	x := w.Do()
	ok, id := false, ""
	if x.Status == 201 {
		if v, err := w.JSON.ParseBytes(w.Resp.Body()); err == nil {
			if n := wholeOf(v.Get("id")); n >= 0 {
				id = itoa(n)
			}
			ok = id != "" && string(v.GetStringBytes("username")) == username && string(v.GetStringBytes("email")) == email
		}
	}
	if w.Sampling() {
		w.Tag("username", username)
		w.Tag("email", email)
		if x.Status == 201 {
			w.Tag("id", id)
		}
		if x.Status != 0 {
			s.header(w, "Idempotent-Replayed", "replayed")
			s.header(w, "X-Cache-Invalidation", "invalidation")
		}
	}
	return s.finish(w, chaosCreate, &x, x.Status == 201, ok)
}

// reuse makes the request open a connection of its own (NO_REUSE=1).
func (s *Chaos) reuse(w *Worker) {
	if s.noReuse {
		w.Req.SetConnectionClose()
	}
}

func (s *Chaos) header(w *Worker, name, tag string) {
	if v := w.Resp.Header.Peek(name); len(v) > 0 {
		w.Tag(tag, string(v))
	}
}

// finish tallies and records a chaos request; ok is its body check
// (tagged on an expected status).
func (s *Chaos) finish(w *Worker, kind int, x *Exchange, answered, ok bool) bool {
	s.tallies[kind][record.Class(x.Status)].Add(1)
	if w.Sampling() {
		w.Tag("kind", chaosKinds[kind])
		w.Tag("status", itoa(int64(x.Status)))
		if answered {
			flag := "0"
			if ok {
				flag = "1"
			}
			w.Tag("ok", flag)
		}
		if x.Status == 0 {
			w.Tag("error", ErrorCode(x.Err))
		} else {
			s.header(w, "X-Cache", "xcache")
			s.header(w, "X-Cache-Error", "cache_error")
			s.header(w, "Retry-After", "retry_after")
			if x.Status >= 400 {
				w.Tag("code", ErrorBodyCode(&w.JSON, w.Resp.Body()))
			}
		}
	}
	w.Record(kind, x, answered, answered && ok)
	return answered && ok
}

// ErrorBodyCode is the code of the contract's JSON error ({"error": {"code": ...}}),
// "not_json" when the body is not of that shape.
func ErrorBodyCode(p *fastjson.Parser, body []byte) string {
	v, err := p.ParseBytes(body)
	if err != nil {
		return "not_json"
	}
	c := v.Get("error", "code")
	if c == nil || c.Type() != fastjson.TypeString || len(c.GetStringBytes()) == 0 {
		return "not_json"
	}
	return string(c.GetStringBytes())
}
