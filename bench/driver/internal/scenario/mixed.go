package scenario

import (
	"strconv"

	"github.com/valyala/fastjson"

	"aside/bench/driver/internal/record"
)

// appendUser appends a user's JSON body; an empty username leaves it out.
func appendUser(dst []byte, username, email string) []byte {
	dst = append(dst, '{')
	if username != "" {
		dst = append(dst, `"username":`...)
		dst = record.AppendJSONString(dst, username)
		dst = append(dst, ',')
	}
	dst = append(dst, `"email":`...)
	dst = record.AppendJSONString(dst, email)
	return append(dst, '}')
}

// userURL appends base/api/v1/users/<id> (and ?cache=mode unless mode is "").
func userURL(dst []byte, base string, id int64, mode string) []byte {
	dst = append(dst, base...)
	dst = append(dst, "/api/v1/users/"...)
	dst = strconv.AppendInt(dst, id, 10)
	if mode != "" {
		dst = append(dst, "?cache="...)
		dst = append(dst, mode...)
	}
	return dst
}

// idOf is the whole id of a JSON answer, -1 when there is none.
func idOf(p *fastjson.Parser, body []byte) int64 {
	v, err := p.ParseBytes(body)
	if err != nil {
		return -1
	}
	return wholeOf(v.Get("id"))
}

// Request names of mixed.
const (
	mixedCount = iota
	mixedCreate
	mixedDelete
)

// Mixed is reads and writes together: with probability writing an
// iteration creates a user with a hot email and deletes it again (two
// writes), else it reads as read does; so WRITE_SHARE of the requests write.
type Mixed struct {
	runID   string
	base    string
	users   []byte
	mode    string
	writing float64
	keys    countKeys
}

// NewMixed is the mixed scenario.
func NewMixed(c *Client, runID, mode string, hotShare, writeShare float64, hot, cold []string) *Mixed {
	return &Mixed{
		runID: runID, base: c.Base(), users: c.URL("/api/v1/users"), mode: mode,
		writing: writeShare / (2 - writeShare), keys: newCountKeys(c, mode, hotShare, hot, cold),
	}
}

// Name implements Scenario.
func (s *Mixed) Name() string { return "mixed" }

// Names implements Scenario.
func (s *Mixed) Names() []string { return []string{"count", "create", "delete"} }

// Iterate implements Scenario.
func (s *Mixed) Iterate(w *Worker) bool {
	if w.Rand.Float64() < s.writing {
		return s.createAndDelete(w)
	}
	return readCount(w, mixedCount, &s.keys.all[s.keys.pick(w)], s.mode, false)
}

// Username is a mixed write's user: load.<RUN_ID>.<worker>.<iteration>.
func (s *Mixed) Username(w *Worker) string {
	return "load." + s.runID + "." + itoa(int64(w.ID)) + "." + itoa(w.Iter)
}

func (s *Mixed) createAndDelete(w *Worker) bool {
	email := s.keys.all[w.Rand.Intn(s.keys.hot)].email
	w.Buf = appendUser(w.Buf[:0], s.Username(w), email)
	w.Send("POST", s.users, w.Buf)
	x := w.Do()
	answered := x.Status == 201
	id := int64(-1)
	if answered {
		id = idOf(&w.JSON, w.Resp.Body())
	}
	ok := answered && id >= 0
	w.Record(mixedCreate, &x, answered, ok)
	if !ok || w.Stopped() {
		return false
	}
	w.Buf = userURL(w.Buf[:0], s.base, id, "")
	w.Send("DELETE", w.Buf, nil)
	x = w.Do()
	ok = x.Status == 200 || x.Status == 204
	w.Record(mixedDelete, &x, ok, ok)
	return ok
}

// Request names of the stale checker.
const (
	staleCount = iota
	staleUser
	staleCreate
	stalePatch
	staleDelete
)

// Stale is the stale-read checker beside mixed: each iteration walks a
// user of its own through create, PATCH and delete, and reads every key a
// write touched, over fresh connections, after each acknowledged one.
type Stale struct {
	runID, arm, phase string
	rate              int
	base              string
	users             []byte
	mode              string
	readsAfter        int

	checked, stale, errors *record.Counter
}

// NewStale is the stale checker of a mixed step (rate: the step's RATE, a
// part of the checker's emails).
func NewStale(c *Client, runID, arm, phase string, rate int, mode string, readsAfter int) *Stale {
	return &Stale{
		runID: runID, arm: arm, phase: phase, rate: rate, base: c.Base(),
		users: c.URL("/api/v1/users"), mode: mode, readsAfter: readsAfter,
	}
}

// Name implements Scenario.
func (s *Stale) Name() string { return "stale" }

// Names implements Scenario.
func (s *Stale) Names() []string {
	return []string{"stale_count", "stale_user", "stale_create", "stale_patch", "stale_delete"}
}

// Register implements Counting.
func (s *Stale) Register(rec *record.Recorder) {
	s.checked = rec.AddCounter("stale_checked")
	s.stale = rec.AddCounter("stale_reads")
	s.errors = rec.AddCounter("stale_check_errors")
}

// Emails are the two emails the worker's iterations own in its current generation.
func (s *Stale) Emails(w *Worker) (a, b string) {
	local := "s" + itoa(int64(w.ID)) + "g" + itoa(int64(w.Generation)) + "." + s.arm + "." + s.phase + "." + itoa(int64(s.rate))
	return local + ".a@" + s.runID + ".stale.example", local + ".b@" + s.runID + ".stale.example"
}

// Username is the checker's user of this iteration: load.<RUN_ID>.s<worker>.<iteration>.
func (s *Stale) Username(w *Worker) string {
	return "load." + s.runID + ".s" + itoa(int64(w.ID)) + "." + itoa(w.Iter)
}

// staleWalk is one iteration's state.
type staleWalk struct {
	s       *Stale
	w       *Worker
	clean   bool // no stale read, no error
	stopped bool // the drain's deadline passed: send nothing more
}

// Iterate implements Scenario.
func (s *Stale) Iterate(w *Worker) bool {
	a, b := s.Emails(w)
	it := &staleWalk{s: s, w: w, clean: true}
	// Before any write both counts are 0; these reads also put that state
	// into the tiers the writes below must invalidate.
	it.checkCount(a, 0)
	it.checkCount(b, 0)
	if it.stopped {
		return false
	}
	w.Buf = appendUser(w.Buf[:0], s.Username(w), a)
	w.Send("POST", s.users, w.Buf)
	x := w.Do()
	id := int64(-1)
	if x.Status == 201 {
		id = idOf(&w.JSON, w.Resp.Body())
	}
	created := x.Status == 201 && id >= 0
	w.Record(staleCreate, &x, x.Status == 201, created)
	if !it.acknowledged(created) {
		return false
	}
	it.checkCount(a, 1)
	it.checkUser(id, a, true)
	if it.stopped {
		return false
	}

	w.Buf = userURL(w.Buf[:0], s.base, id, "")
	url := append([]byte(nil), w.Buf...)
	w.Buf = appendUser(w.Buf[:0], "", b)
	w.Send("PATCH", url, w.Buf)
	x = w.Do()
	patched := it.acknowledged(x.Status == 200)
	w.Record(stalePatch, &x, x.Status == 200, patched)
	if patched {
		it.checkCount(a, 0)
		it.checkCount(b, 1)
		it.checkUser(id, b, true)
	}
	if it.stopped {
		return false
	}

	w.Send("DELETE", url, nil)
	x = w.Do()
	deleted := x.Status == 200 || x.Status == 204
	w.Record(staleDelete, &x, deleted, deleted)
	if !it.acknowledged(deleted) || !patched {
		return false
	}
	it.checkCount(b, 0)
	it.checkUser(id, "", false)
	return it.clean && !it.stopped
}

// acknowledged says whether a write was; if not, the iteration stops and
// the worker's next one takes fresh emails (a user left behind must not
// pass for a stale read).
func (it *staleWalk) acknowledged(ok bool) bool {
	if ok {
		return true
	}
	it.s.errors.Add(1)
	it.w.Generation++
	it.clean = false
	return false
}

// verdict counts one judged read (matches) or one without a usable answer (usable false).
func (it *staleWalk) verdict(usable, matches bool) bool {
	if !usable {
		it.s.errors.Add(1)
		it.clean = false
		return false
	}
	it.s.checked.Add(1)
	if !matches {
		it.s.stale.Add(1)
		it.clean = false
	}
	return matches
}

// fresh sends a GET over a new connection; false when the drain's deadline passed.
func (it *staleWalk) fresh(url []byte) (Exchange, bool) {
	if it.stopped || it.w.Stopped() {
		it.stopped = true
		return Exchange{}, false
	}
	it.w.Get(url)
	it.w.Req.SetConnectionClose()
	return it.w.Do(), true
}

// checkCount reads the count of email readsAfter times; it must be expected.
func (it *staleWalk) checkCount(email string, expected int64) {
	url := it.w.env.Client.URL(CountPath(email, it.s.mode))
	for range it.s.readsAfter {
		x, sent := it.fresh(url)
		if !sent {
			return
		}
		count, usable := int64(0), false
		if x.Status == 200 {
			if v, err := it.w.JSON.ParseBytes(it.w.Resp.Body()); err == nil {
				if c := v.Get("count"); c != nil && c.Type() == fastjson.TypeNumber {
					n, err := c.Int64()
					count, usable = n, err == nil
				}
			}
		}
		ok := it.verdict(usable, count == expected)
		it.w.Record(staleCount, &x, x.Status == 200, ok)
	}
}

// checkUser reads user id readsAfter times; it must have email, or be gone when !exists.
func (it *staleWalk) checkUser(id int64, email string, exists bool) {
	url := userURL(nil, it.s.base, id, it.s.mode)
	for range it.s.readsAfter {
		x, sent := it.fresh(url)
		if !sent {
			return
		}
		var ok bool
		switch x.Status {
		case 404:
			ok = it.verdict(true, !exists)
		case 200:
			v, err := it.w.JSON.ParseBytes(it.w.Resp.Body())
			ok = it.verdict(err == nil, err == nil && exists && string(v.GetStringBytes("email")) == email)
		default:
			ok = it.verdict(false, false)
		}
		it.w.Record(staleUser, &x, x.Status == 200 || x.Status == 404, ok)
	}
}
