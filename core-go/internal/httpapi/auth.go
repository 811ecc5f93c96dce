package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// Challenges sent with a 401 (RFC 6750).
const (
	challenge             = `Bearer realm="aside-core"`
	invalidTokenChallenge = `Bearer realm="aside-core", error="invalid_token"`
)

// requireToken refuses a request without "Authorization: Bearer <token>"
// with 401 unauthorized before its handler runs, so nothing is read or
// written. An empty token turns the check off (lab without CORE_TOKEN).
func requireToken(token string) gin.HandlerFunc {
	if token == "" {
		return func(c *gin.Context) { c.Next() }
	}
	// Comparing digests keeps the comparison constant-time in the length
	// too: ConstantTimeCompare returns at once on a length mismatch.
	want := sha256.Sum256([]byte(token))
	return func(c *gin.Context) {
		given, ok := bearerToken(c.GetHeader("Authorization"))
		if !ok {
			abortWith(c, &apiError{status: http.StatusUnauthorized, code: codeUnauthorized,
				message: "this route needs the header Authorization: Bearer <CORE_TOKEN>",
				headers: map[string]string{"WWW-Authenticate": challenge}})
			return
		}
		got := sha256.Sum256([]byte(given))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			abortWith(c, &apiError{status: http.StatusUnauthorized, code: codeUnauthorized,
				message: "the bearer token is not valid",
				headers: map[string]string{"WWW-Authenticate": invalidTokenChallenge}})
			return
		}
		c.Next()
	}
}

// bearerToken is the token of an "Authorization: Bearer <token>" header
// (scheme in any case).
func bearerToken(header string) (string, bool) {
	scheme, token, _ := strings.Cut(strings.TrimSpace(header), " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}
