// Package keytrace reads a key trace (TRACE) and records one
// (KEY_TRACE_PATH). The format is one request a line: the key, optionally a
// TAB and the seconds from the step's start to when the request falls due
// (`jane@example.org\t0.0123`); blank lines and lines starting with `#` are
// ignored; gzip is recognised by its magic bytes. What the recorder writes,
// the reader replays.
package keytrace

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// Var is the variable a replayed trace comes from; its errors name it.
const Var = "TRACE"

// maxLine bounds one line of a trace (bufio.Scanner's default, 64 KiB, is
// plenty for a key, but a stray binary file should fail on its line, not
// on the buffer).
const maxLine = 1 << 20

// Error is a trace that cannot be replayed: the variable, the line (0: the
// file as a whole) and why.
type Error struct {
	Line   int
	Reason string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s: line %d: %s", Var, e.Line, e.Reason)
	}
	return Var + ": " + e.Reason
}

// Trace is a parsed trace: its distinct keys (in order of first
// appearance), each line's key as an index of Keys and, when every line
// has one, each line's timestamp.
type Trace struct {
	Keys  []string
	Lines []int32
	// At is each line's timestamp in seconds (never decreasing), nil when
	// a line has none.
	At []float64
}

// Timed is true when every line has a timestamp.
func (t *Trace) Timed() bool { return t.At != nil }

// Read opens and parses the trace at path, plain or gzip.
func Read(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{Reason: fmt.Sprintf("cannot read %s: %v", path, err)}
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, &Error{Reason: fmt.Sprintf("%s is not gzip: %v", path, err)}
		}
		defer gz.Close()
		r = gz
	}
	t, err := Parse(r)
	if err != nil {
		if e, ok := err.(*Error); ok && e.Line == 0 {
			e.Reason = path + ": " + e.Reason
		}
		return nil, err
	}
	return t, nil
}

// Parse reads a trace from r.
func Parse(r io.Reader) (*Trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), maxLine)
	t := &Trace{}
	index := map[string]int32{}
	var at []float64
	untimed := false
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, stamp, hasStamp := strings.Cut(line, "\t")
		key = strings.TrimSpace(key)
		if key == "" {
			return nil, &Error{Line: n, Reason: "no key before the TAB"}
		}
		if strings.ContainsAny(key, " \t") {
			return nil, &Error{Line: n, Reason: fmt.Sprintf("a key holds no blank, got %q", key)}
		}
		if hasStamp {
			s, err := strconv.ParseFloat(strings.TrimSpace(stamp), 64)
			if err != nil || !(s >= 0) || math.IsInf(s, 0) {
				return nil, &Error{Line: n, Reason: fmt.Sprintf("the timestamp must be seconds >= 0, got %q", stamp)}
			}
			if len(at) > 0 && s < at[len(at)-1] {
				return nil, &Error{Line: n, Reason: fmt.Sprintf("the timestamp %s is below the line before's (%g): a trace is in send order", strings.TrimSpace(stamp), at[len(at)-1])}
			}
			at = append(at, s)
		} else {
			untimed = true
		}
		id, seen := index[key]
		if !seen {
			if len(t.Keys) == math.MaxInt32 {
				return nil, &Error{Line: n, Reason: "too many distinct keys"}
			}
			id = int32(len(t.Keys))
			index[key] = id
			t.Keys = append(t.Keys, key)
		}
		t.Lines = append(t.Lines, id)
	}
	if err := sc.Err(); err != nil {
		return nil, &Error{Line: n + 1, Reason: err.Error()}
	}
	if len(t.Lines) == 0 {
		return nil, &Error{Reason: "holds no key"}
	}
	if !untimed {
		if at[len(at)-1] == 0 {
			return nil, &Error{Reason: "every timestamp is 0: a timed trace must span some time"}
		}
		t.At = at
	}
	return t, nil
}
