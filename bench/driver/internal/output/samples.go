package output

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"sync"

	"aside/bench/driver/internal/record"
)

// Samples writes every request (and dropped iteration) as a JSON line.
// Lines are built by hand into the buffered writer under one mutex.
type Samples struct {
	mu  sync.Mutex
	f   *os.File
	w   *bufio.Writer
	err error
}

// OpenSamples creates (truncates) the samples file at path.
func OpenSamples(path string) (*Samples, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cannot open the samples file: %w", err)
	}
	return &Samples{f: f, w: bufio.NewWriterSize(f, 256<<10)}, nil
}

func appendSeconds(b []byte, key string, v float64, prec int) []byte {
	b = append(b, key...)
	return strconv.AppendFloat(b, v, 'f', prec, 64)
}

// Request implements record.Sink.
func (s *Samples) Request(x *record.Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.w.AvailableBuffer()
	b = appendSeconds(b, `{"t":`, x.Sent, 6)
	b = appendSeconds(b, `,"due":`, x.Due, 6)
	b = appendSeconds(b, `,"ms":`, x.Ms, 3)
	b = append(b, `,"scenario":`...)
	b = record.AppendJSONString(b, x.Scenario)
	b = append(b, `,"name":`...)
	b = record.AppendJSONString(b, x.Name)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(x.Status), 10)
	b = append(b, `,"ok":`...)
	b = strconv.AppendBool(b, x.OK)
	b = append(b, `,"new_conn":`...)
	b = strconv.AppendBool(b, x.NewConn)
	b = append(b, `,"tags":{`...)
	for i, t := range x.Tags {
		if i > 0 {
			b = append(b, ',')
		}
		b = record.AppendJSONString(b, t.Key)
		b = append(b, ':')
		b = record.AppendJSONString(b, t.Value)
	}
	b = append(b, "}}\n"...)
	s.write(b)
}

// Dropped implements record.Sink.
func (s *Samples) Dropped(scenario string, t, due float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.w.AvailableBuffer()
	b = appendSeconds(b, `{"t":`, t, 6)
	b = appendSeconds(b, `,"due":`, due, 6)
	b = append(b, `,"scenario":`...)
	b = record.AppendJSONString(b, scenario)
	b = append(b, `,"dropped":true}`+"\n"...)
	s.write(b)
}

func (s *Samples) write(b []byte) {
	if _, err := s.w.Write(b); err != nil && s.err == nil {
		s.err = err
	}
}

// Flush writes out what is buffered, so a reader of the file sees whole lines up to now.
func (s *Samples) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.w.Flush(); err != nil && s.err == nil {
		s.err = err
	}
}

// Close flushes and closes the file; the first write error, if any.
func (s *Samples) Close() error {
	s.Flush()
	if err := s.f.Close(); err != nil && s.err == nil {
		s.err = err
	}
	if s.err != nil {
		return fmt.Errorf("cannot write the samples file: %w", s.err)
	}
	return nil
}
