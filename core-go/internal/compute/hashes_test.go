package compute_test

import (
	"encoding/hex"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aside-lab/aside/core-go/internal/compute"
	"github.com/aside-lab/aside/core-go/internal/testenv"
)

type hashContract struct {
	DefaultKind string   `json:"default_kind"`
	Kinds       []string `json:"kinds"`
	Secrets     struct {
		PasswordMaxBytes int `json:"password_max_bytes"`
		SaltMaxBytes     int `json:"salt_max_bytes"`
	} `json:"secrets"`
	PBKDF2 struct {
		Hash              string `json:"hash"`
		KeyBytes          int    `json:"key_bytes"`
		IterationsMin     int    `json:"iterations_min"`
		IterationsMax     int    `json:"iterations_max"`
		IterationsDefault int    `json:"iterations_default"`
		Vectors           []struct {
			Password   string `json:"password"`
			Salt       string `json:"salt"`
			Iterations int    `json:"iterations"`
			DerivedKey string `json:"derived_key"`
		} `json:"vectors"`
	} `json:"pbkdf2"`
	Bcrypt struct {
		CostMin       int    `json:"cost_min"`
		CostMax       int    `json:"cost_max"`
		CostDefault   int    `json:"cost_default"`
		HashPattern   string `json:"hash_pattern"`
		VerifyVectors []struct {
			Password string `json:"password"`
			Hash     string `json:"hash"`
			Match    bool   `json:"match"`
		} `json:"verify_vectors"`
		InvalidHashes    []any    `json:"invalid_hashes"`
		OutOfRangeHashes []string `json:"out_of_range_hashes"`
	} `json:"bcrypt"`
}

func loadHashContract(t *testing.T) hashContract {
	t.Helper()
	var c hashContract
	testenv.LoadContract(t, "compute.json", &c)
	return c
}

func TestHashConstantsMatchTheContract(t *testing.T) {
	c := loadHashContract(t)
	if c.DefaultKind != compute.KindChecksum || !slices.Equal(c.Kinds, compute.Kinds) {
		t.Fatalf("kinds %v default %q, want %v default %q", c.Kinds, c.DefaultKind, compute.Kinds, compute.KindChecksum)
	}
	p, b := c.PBKDF2, c.Bcrypt
	if p.Hash != "sha256" || p.KeyBytes != compute.PBKDF2KeyBytes || p.IterationsMin != compute.PBKDF2MinIterations ||
		p.IterationsMax != compute.PBKDF2MaxIterations || p.IterationsDefault != compute.PBKDF2DefaultIterations {
		t.Fatalf("pbkdf2 constants differ from compute.json: %+v", p)
	}
	if b.CostMin != compute.BcryptMinCost || b.CostMax != compute.BcryptMaxCost || b.CostDefault != compute.BcryptDefaultCost {
		t.Fatalf("bcrypt constants differ from compute.json: %+v", b)
	}
	if c.Secrets.PasswordMaxBytes != compute.PasswordMaxBytes || c.Secrets.SaltMaxBytes != compute.SaltMaxBytes {
		t.Fatalf("secret bounds differ from compute.json: %+v", c.Secrets)
	}
}

func TestPBKDF2Vectors(t *testing.T) {
	c := loadHashContract(t)
	if len(c.PBKDF2.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range c.PBKDF2.Vectors {
		key, err := compute.PBKDF2([]byte(v.Password), []byte(v.Salt), v.Iterations)
		if err != nil || hex.EncodeToString(key) != v.DerivedKey {
			t.Errorf("PBKDF2(%q, %q, %d) = %x, %v; want %s", v.Password, v.Salt, v.Iterations, key, err, v.DerivedKey)
		}
	}
}

func TestPBKDF2RejectsIterationsOutOfRange(t *testing.T) {
	for _, n := range []int{0, -1, compute.PBKDF2MaxIterations + 1} {
		if _, err := compute.PBKDF2([]byte("p"), []byte("s"), n); err == nil {
			t.Errorf("PBKDF2 with %d iterations accepted", n)
		}
	}
}

func TestBcryptVerifyVectors(t *testing.T) {
	c := loadHashContract(t)
	matches := 0
	for _, v := range c.Bcrypt.VerifyVectors {
		got, err := compute.BcryptVerify([]byte(v.Password), v.Hash)
		if err != nil || got != v.Match {
			t.Errorf("BcryptVerify(%q, %s) = %v, %v; want %v", v.Password, v.Hash, got, err, v.Match)
		}
		if v.Match {
			matches++
		}
	}
	if matches == 0 || matches == len(c.Bcrypt.VerifyVectors) {
		t.Fatalf("the vectors need matching and non-matching pairs, got %d of %d matching", matches, len(c.Bcrypt.VerifyVectors))
	}
}

// A hash is random (a fresh salt each time); what is fixed is its format,
// its cost, and that it verifies.
func TestBcryptHashHasTheCostAndVerifies(t *testing.T) {
	c := loadHashContract(t)
	pattern := regexp.MustCompile(c.Bcrypt.HashPattern)
	password := []byte("p\u00e4ssw\u00f6rd \u2615")
	first, err := compute.BcryptHash(password, compute.BcryptMinCost)
	if err != nil {
		t.Fatal(err)
	}
	second, _ := compute.BcryptHash(password, compute.BcryptMinCost)
	if !pattern.MatchString(first) || !strings.HasPrefix(first[3:], "$04$") {
		t.Fatalf("hash %q does not match %s at cost 4", first, c.Bcrypt.HashPattern)
	}
	if first == second {
		t.Fatal("two hashes of one password are equal: the salt is not random")
	}
	for _, h := range []string{first, second} {
		if ok, err := compute.BcryptVerify(password, h); !ok || err != nil {
			t.Fatalf("own hash %q does not verify: %v %v", h, ok, err)
		}
		if ok, _ := compute.BcryptVerify([]byte("other"), h); ok {
			t.Fatalf("hash %q verifies another password", h)
		}
	}
}

func TestBcryptRefusesCostsOutOfRange(t *testing.T) {
	c := loadHashContract(t)
	for _, cost := range []int{compute.BcryptMinCost - 1, compute.BcryptMaxCost + 1, 31} {
		if _, err := compute.BcryptHash([]byte("p"), cost); err == nil {
			t.Errorf("BcryptHash at cost %d accepted", cost)
		}
	}
	// Verifying costs what hashing did: a hash above the bound is refused
	// without being run.
	for _, h := range c.Bcrypt.OutOfRangeHashes {
		cost, err := compute.BcryptCost(h)
		if err != nil {
			t.Fatalf("BcryptCost(%s): %v", h, err)
		}
		if cost >= compute.BcryptMinCost && cost <= compute.BcryptMaxCost {
			t.Fatalf("%s: cost %d is in range", h, cost)
		}
		if _, err := compute.BcryptVerify([]byte("abc"), h); err == nil {
			t.Errorf("BcryptVerify accepted %s", h)
		}
	}
}

func TestBcryptRefusesMalformedHashes(t *testing.T) {
	c := loadHashContract(t)
	pattern := regexp.MustCompile(c.Bcrypt.HashPattern)
	for _, raw := range c.Bcrypt.InvalidHashes {
		h, ok := raw.(string)
		if !ok {
			continue // not a string: the handler's business
		}
		if pattern.MatchString(h) {
			t.Fatalf("%q matches the contract's pattern", h)
		}
		if _, err := compute.BcryptVerify([]byte("abc"), h); !errors.Is(err, compute.ErrBadHash) {
			t.Errorf("BcryptVerify(%q) = %v, want ErrBadHash", h, err)
		}
	}
	for _, v := range c.Bcrypt.VerifyVectors {
		if !pattern.MatchString(v.Hash) {
			t.Errorf("vector hash %q does not match the pattern", v.Hash)
		}
		cost, err := compute.BcryptCost(v.Hash)
		if err != nil || strconv.Itoa(cost) != strings.TrimLeft(v.Hash[4:6], "0") {
			t.Errorf("BcryptCost(%s) = %d, %v", v.Hash, cost, err)
		}
	}
}

var keySink []byte

func BenchmarkPBKDF2Default(b *testing.B) {
	for b.Loop() {
		keySink, _ = compute.PBKDF2([]byte("password"), []byte("salt"), compute.PBKDF2DefaultIterations)
	}
}

func BenchmarkBcryptDefault(b *testing.B) {
	for b.Loop() {
		h, _ := compute.BcryptHash([]byte("password"), compute.BcryptDefaultCost)
		keySink = []byte(h)
	}
}
