package atomicfile_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"aside/bench/driver/internal/atomicfile"
)

func TestWriteReplacesTheFileWholeOrLeavesIt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	failed := errors.New("half written")
	err := atomicfile.Write(path, func(w io.Writer) error {
		io.WriteString(w, "ne")
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("a failing fill returned %v", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Fatalf("a failed write left %q, want the old file", got)
	}
	if err := atomicfile.Write(path, func(w io.Writer) error {
		_, err := io.WriteString(w, "new")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "new" {
		t.Fatalf("got %q, want new", got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("%d files left in the folder, want 1 (no temporary file)", len(entries))
	}
}
