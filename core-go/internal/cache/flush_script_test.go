package cache

import (
	"os"
	"strings"
	"testing"

	"github.com/aside-lab/aside/core-go/internal/testenv"
)

func TestFlushScriptIsTheContracts(t *testing.T) {
	contract, err := os.ReadFile(testenv.ContractPath("flush_cache.lua"))
	if err != nil {
		t.Fatal(err)
	}
	got, want := testenv.ScriptLines(flushAllSrc), testenv.ScriptLines(string(contract))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("flush.go's script differs from contracts/flush_cache.lua:\n%q\nwant\n%q", got, want)
	}
}
