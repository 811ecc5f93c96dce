package cache

import (
	"os"
	"strings"
	"testing"

	"github.com/aside-lab/aside/core-go/internal/testenv"
)

// scriptLines drops comments, blank lines and indentation: what is left must
// be the same statements in the same order.
func scriptLines(src string) []string {
	var out []string
	for _, line := range strings.Split(src, "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "--") {
			out = append(out, line)
		}
	}
	return out
}

func TestStoreScriptIsTheContracts(t *testing.T) {
	contract, err := os.ReadFile(testenv.ContractPath("store_if_lease_held.lua"))
	if err != nil {
		t.Fatal(err)
	}
	got, want := scriptLines(fillIfLeaseHeldSrc), scriptLines(string(contract))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lease.go's store script differs from contracts/store_if_lease_held.lua:\n%q\nwant\n%q", got, want)
	}
}

func TestFlushScriptIsTheContracts(t *testing.T) {
	contract, err := os.ReadFile(testenv.ContractPath("flush_cache.lua"))
	if err != nil {
		t.Fatal(err)
	}
	got, want := scriptLines(flushAllSrc), scriptLines(string(contract))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("flush.go's script differs from contracts/flush_cache.lua:\n%q\nwant\n%q", got, want)
	}
}
