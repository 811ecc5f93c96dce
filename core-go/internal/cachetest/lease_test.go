package cachetest

import (
	"os"
	"strings"
	"testing"

	"github.com/aside-lab/aside/core-go/internal/testenv"
)

func TestStoreScriptIsTheContracts(t *testing.T) {
	contract, err := os.ReadFile(testenv.ContractPath("store_if_lease_held.lua"))
	if err != nil {
		t.Fatal(err)
	}
	got, want := testenv.ScriptLines(fillIfLeaseHeldSrc), testenv.ScriptLines(string(contract))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lease.go's store script differs from contracts/store_if_lease_held.lua:\n%q\nwant\n%q", got, want)
	}
}
