package keytrace

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"

	"aside/bench/driver/internal/atomicfile"
)

// MaxLines bounds a recording: 12 bytes a slot, about 50 MB at most
// (2,000 requests a second for 35 minutes); requests beyond it are counted
// as lost, never waited for.
const MaxLines = 1 << 22

// Recorder keeps the key and due time of every request one scenario sent,
// by its iteration's place in the schedule: each iteration owns its slot,
// so noting one is two stores, with no lock and no shared counter, and the
// lines come out in the schedule's order (the order the requests were
// handed to the workers) whichever worker sent them.
//
// The due time, not the instant the request left, is what it keeps: the
// open model's arrival, so that replaying a recording sends the same
// schedule again instead of adding the driver's own lag to it each time
// (the lag is in the summary's latency from due).
type Recorder struct {
	keys []int32 // key index + 1; 0: no request (dropped, or never due)
	due  []int64 // Clock offset, ns
	lost atomic.Int64
}

// NewRecorder holds up to slots requests (at most MaxLines): the schedule's
// iterations 1 to slots.
func NewRecorder(slots uint64) *Recorder {
	n := min(slots, MaxLines)
	return &Recorder{keys: make([]int32, n), due: make([]int64, n)}
}

// Note records that iteration index (from 1), due at due (a Clock offset,
// ns), asked for key (an index of the scenario's keys).
func (r *Recorder) Note(index uint64, key int, due int64) {
	if index == 0 || index > uint64(len(r.keys)) {
		r.lost.Add(1)
		return
	}
	r.keys[index-1] = int32(key + 1)
	r.due[index-1] = due
}

// Lost is how many requests did not fit.
func (r *Recorder) Lost() int64 { return r.lost.Load() }

// Write writes the recorded requests to path, gzip when it ends in .gz,
// whole or not at all (a temporary file renamed): a line per request, the
// key, a TAB and the seconds from start (a Clock offset) to its due time. name
// gives a key index's key. It returns the lines written. Call it after
// every worker has finished.
func (r *Recorder) Write(path string, name func(int) string, start int64) (int64, error) {
	var lines int64
	err := atomicfile.Write(path, func(w io.Writer) error {
		var err error
		lines, err = r.writeTo(w, strings.HasSuffix(path, ".gz"), name, start)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("KEY_TRACE_PATH: cannot write %s: %w", path, err)
	}
	return lines, nil
}

func (r *Recorder) writeTo(f io.Writer, gz bool, name func(int) string, start int64) (int64, error) {
	var gzw *gzip.Writer
	if gz {
		gzw = gzip.NewWriter(f)
		f = gzw
	}
	bw := bufio.NewWriterSize(f, 256*1024)
	var lines int64
	var buf []byte
	for i, k := range r.keys {
		if k == 0 {
			continue
		}
		buf = append(buf[:0], name(int(k-1))...)
		buf = append(buf, '\t')
		buf = strconv.AppendFloat(buf, float64(r.due[i]-start)/1e9, 'f', 6, 64)
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return 0, err
		}
		lines++
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	if gzw != nil {
		if err := gzw.Close(); err != nil {
			return 0, err
		}
	}
	return lines, nil
}
