// Package atomicfile writes a file whole or not at all: a reader of the path
// never sees half of it (a temporary file beside it, renamed over it).
package atomicfile

import (
	"io"
	"os"
	"path/filepath"
)

// Write fills a temporary file beside path with fill and renames it to path;
// on any error the temporary file is removed and path left as it was.
func Write(path string, fill func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	err = fill(tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
