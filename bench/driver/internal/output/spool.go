package output

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Spool is a file of line protocol the points InfluxDB did not take are
// appended to, opened at the first; `aside-bench report --run <id>` sends it
// later (a point sent twice overwrites itself: same series, same instant).
type Spool struct {
	mu   sync.Mutex
	path string
	f    *os.File
}

// NewSpool appends to path; an empty path keeps nothing.
func NewSpool(path string) *Spool { return &Spool{path: path} }

// Path is the spool file's.
func (s *Spool) Path() string { return s.path }

// Append adds body's lines, whole, to the file.
func (s *Spool) Append(body []byte) error {
	if s.path == "" {
		return fmt.Errorf("no spool file")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(s.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		s.f = f
	}
	if len(body) > 0 && body[len(body)-1] != '\n' {
		body = append(body[:len(body):len(body)], '\n')
	}
	_, err := s.f.Write(body)
	return err
}

// Close syncs and closes the file, if one was opened.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Sync()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	s.f = nil
	return err
}
