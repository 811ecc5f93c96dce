package compute

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/crypto/pbkdf2"
)

// The kinds of work POST /api/v1/compute runs (contracts/compute.json "kinds").
const (
	KindChecksum = "checksum"
	KindPBKDF2   = "pbkdf2"
	KindBcrypt   = "bcrypt"
)

// Kinds in the contract's order; KindChecksum is the default.
var Kinds = []string{KindChecksum, KindPBKDF2, KindBcrypt}

// Password-hashing bounds (contracts/compute.json "pbkdf2", "bcrypt").
// PBKDF2's default is OWASP's figure for PBKDF2-HMAC-SHA256; bcrypt's is
// x/crypto's DefaultCost. The upper bounds keep one request short, since
// neither hash can stop half-way when its client hangs up (the timings: see
// docs/decisions/026-password-hashing-as-compute-with-bounds.md).
const (
	PBKDF2KeyBytes          = 32
	PBKDF2MinIterations     = 1
	PBKDF2MaxIterations     = 1_000_000
	PBKDF2DefaultIterations = 600_000
	BcryptMinCost           = bcrypt.MinCost
	BcryptMaxCost           = 12
	BcryptDefaultCost       = bcrypt.DefaultCost
	// PasswordMaxBytes is bcrypt's limit, applied to both kinds alike.
	PasswordMaxBytes = 72
	SaltMaxBytes     = 64
)

// bcryptHashRE is the modular crypt format of a bcrypt hash: version, two
// cost digits, 22 characters of salt and 31 of hash. The last character of
// each carries unused bits, which must be zero: x/crypto ignores them while
// the Python engine refuses them, so only canonical hashes are taken.
var bcryptHashRE = regexp.MustCompile(`^\$2[aby]\$([0-9]{2})\$[./A-Za-z0-9]{21}[.Oeu][./A-Za-z0-9]{30}[.CGKOSWaeimquy26]$`)

// ErrBadHash means a string is not a bcrypt hash this API verifies.
var ErrBadHash = errors.New("not a bcrypt hash")

// PBKDF2 derives PBKDF2KeyBytes bytes from password and salt with
// HMAC-SHA256. Deterministic: the same inputs always give the same key.
func PBKDF2(password, salt []byte, iterations int) ([]byte, error) {
	if iterations < PBKDF2MinIterations || iterations > PBKDF2MaxIterations {
		return nil, fmt.Errorf("iterations %d out of range", iterations)
	}
	return pbkdf2.Key(password, salt, iterations, PBKDF2KeyBytes, sha256.New), nil
}

// BcryptHash hashes password at cost with a fresh random salt, so two calls
// never return the same hash; both verify.
func BcryptHash(password []byte, cost int) (string, error) {
	if cost < BcryptMinCost || cost > BcryptMaxCost {
		return "", fmt.Errorf("cost %d out of range", cost)
	}
	hash, err := bcrypt.GenerateFromPassword(password, cost)
	if err != nil {
		return "", err
	}
	return string(hash), nil
}

// BcryptCost is the cost a bcrypt hash names, or ErrBadHash. It does not
// check the range: a caller refuses a cost above BcryptMaxCost before
// verifying, since verifying costs what hashing did.
func BcryptCost(hash string) (int, error) {
	m := bcryptHashRE.FindStringSubmatch(hash)
	if m == nil {
		return 0, ErrBadHash
	}
	cost, err := strconv.Atoi(m[1])
	if err != nil {
		return 0, ErrBadHash
	}
	return cost, nil
}

// BcryptVerify reports whether password is the one hash was made from: it
// hashes password again with the salt and cost hash carries, which is
// deterministic, and compares.
func BcryptVerify(password []byte, hash string) (bool, error) {
	cost, err := BcryptCost(hash)
	if err != nil {
		return false, err
	}
	if cost < BcryptMinCost || cost > BcryptMaxCost {
		return false, fmt.Errorf("cost %d out of range", cost)
	}
	err = bcrypt.CompareHashAndPassword([]byte(hash), password)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, bcrypt.ErrMismatchedHashAndPassword):
		return false, nil
	default:
		return false, fmt.Errorf("%w: %v", ErrBadHash, err)
	}
}
