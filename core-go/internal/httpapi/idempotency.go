package httpapi

import (
	"crypto/sha256"
	"encoding/json"
	"net/http"
)

// idempotencyKeyHeader names the key that makes POST /api/v1/users safe to retry.
const idempotencyKeyHeader = "Idempotency-Key"

// maxIdempotencyKeyLen is the longest key accepted (bytes; keys are ASCII).
const maxIdempotencyKeyLen = 255

// idempotencyKey reads the request's Idempotency-Key: absent is fine, but a
// present one must be 1 to 255 printable ASCII characters (space to '~').
func idempotencyKey(r *http.Request) (key string, ok bool, err error) {
	values := r.Header.Values(idempotencyKeyHeader)
	if len(values) == 0 {
		return "", false, nil
	}
	if len(values) > 1 {
		return "", false, badRequest(codeInvalidRequest, "give one Idempotency-Key header, not several")
	}
	if !validIdempotencyKey(values[0]) {
		return "", false, badRequest(codeInvalidRequest, "Idempotency-Key must be 1 to 255 printable ASCII characters")
	}
	return values[0], true, nil
}

// validIdempotencyKey applies the key rule: 1 to 255 bytes, each 0x20..0x7E.
func validIdempotencyKey(key string) bool {
	if len(key) == 0 || len(key) > maxIdempotencyKeyLen {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return false
		}
	}
	return true
}

// createRequestHash identifies a create's request by its validated fields,
// so a retry that only reorders or re-spaces the JSON is the same request.
func createRequestHash(username, email string) []byte {
	canonical, err := json.Marshal([2]string{username, email})
	if err != nil {
		panic(err) // two strings always encode
	}
	sum := sha256.Sum256(canonical)
	return sum[:]
}
