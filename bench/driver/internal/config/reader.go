package config

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// reader keeps the first error so Load reads like a list of variables.
type reader struct {
	getenv func(string) string
	err    error
}

func (r *reader) fail(name, reason string) {
	if r.err == nil {
		r.err = &Error{Name: name, Reason: reason}
	}
}

func (r *reader) str(name, def string) string {
	if v := r.getenv(name); v != "" {
		return v
	}
	return def
}

func (r *reader) required(name string) string {
	v := r.getenv(name)
	if v == "" {
		r.fail(name, "is required")
	}
	return v
}

// positive reads a finite number above 0, def when unset.
func (r *reader) positive(name string, def float64) float64 {
	return r.number(name, def, "a number above 0", func(f float64) bool { return f > 0 && !math.IsInf(f, 0) })
}

// share reads a number in [0, 1], def when unset.
func (r *reader) share(name string, def float64) float64 {
	return r.number(name, def, "a number in [0, 1]", func(f float64) bool { return f >= 0 && f <= 1 })
}

// number reads a number that ok accepts (want says which), def when unset.
func (r *reader) number(name string, def float64, want string, ok func(float64) bool) float64 {
	v := r.getenv(name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !ok(f) {
		r.fail(name, fmt.Sprintf("must be %s, got %q", want, v))
		return 0
	}
	return f
}

// whole reads a whole number >= lo, def when unset.
func (r *reader) whole(name string, def, lo int) int {
	v := r.getenv(name)
	if v == "" {
		return def
	}
	return r.parseWhole(name, v, lo)
}

func (r *reader) wholeRequired(name string, lo int) int {
	v := r.required(name)
	if v == "" {
		return 0
	}
	return r.parseWhole(name, v, lo)
}

func (r *reader) parseWhole(name, v string, lo int) int {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > math.MaxInt32 {
		r.fail(name, fmt.Sprintf("must be a whole number >= %d, got %q", lo, v))
		return 0
	}
	return n
}

func (r *reader) flag(name string) bool {
	switch v := r.getenv(name); v {
	case "", "0":
		return false
	case "1":
		return true
	default:
		r.fail(name, fmt.Sprintf("must be 0 or 1, got %q", v))
		return false
	}
}

func (r *reader) oneOf(name, def string, values []string) string {
	v := r.str(name, def)
	if v == "" {
		r.fail(name, fmt.Sprintf("is required: one of %s", strings.Join(values, ", ")))
		return ""
	}
	if !contains(values, v) {
		r.fail(name, fmt.Sprintf("must be one of %s, got %q", strings.Join(values, ", "), v))
	}
	return v
}

// unixMs reads an instant as whole milliseconds since the Unix epoch (zero: unset).
func (r *reader) unixMs(name string) time.Time {
	v := r.getenv(name)
	if v == "" {
		return time.Time{}
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		r.fail(name, fmt.Sprintf("must be a Unix time in whole milliseconds, got %q", v))
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func (r *reader) duration(name string) time.Duration {
	v := r.required(name)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		r.fail(name, fmt.Sprintf("must be a duration like 30s, 2m or 500ms, got %q", v))
		return 0
	}
	return d
}

// bounds reads increasing byte sizes separated by commas.
func (r *reader) bounds(name string) []int64 {
	v := r.required(name)
	if v == "" {
		return nil
	}
	var out []int64
	for _, part := range strings.Split(v, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(part), 10, 64)
		if err != nil || n <= 0 || (len(out) > 0 && n <= out[len(out)-1]) {
			r.fail(name, fmt.Sprintf("must be increasing byte sizes separated by commas, got %q", v))
			return nil
		}
		out = append(out, n)
	}
	return out
}

// influx turns http://host:port/db into http://host:port/write?db=db&precision=ms.
func (r *reader) influx(raw string) string {
	u, err := url.Parse(raw)
	bad := err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == ""
	var db string
	if !bad {
		path := strings.TrimRight(u.Path, "/")
		cut := strings.LastIndexByte(path, '/')
		db = path[cut+1:]
		u.Path = path[:max(cut, 0)] + "/write"
		bad = db == ""
	}
	if bad {
		r.fail("INFLUX_URL", fmt.Sprintf("must be http://host:port/db, got %q", raw))
		return ""
	}
	u.RawQuery = url.Values{"db": {db}, "precision": {"ms"}}.Encode()
	return u.String()
}
