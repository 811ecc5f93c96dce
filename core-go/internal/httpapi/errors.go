package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// Error codes of contracts/errors.json that the core answers with.
const (
	codeInvalidRequest       = "invalid_request"
	codeInvalidEmail         = "invalid_email"
	codeInvalidID            = "invalid_id"
	codeInvalidUsername      = "invalid_username"
	codeInvalidComplexity    = "invalid_complexity"
	codeUnknownField         = "unknown_field"
	codeInvalidJSON          = "invalid_json"
	codeNotFound             = "not_found"
	codeMethodNotAllowed     = "method_not_allowed"
	codeConflict             = "conflict"
	codePayloadTooLarge      = "payload_too_large"
	codeUnsupportedMediaType = "unsupported_media_type"
	codeIdempotencyKeyReused = "idempotency_key_reused"
	codeInternal             = "internal"
	codeDatabaseUnavailable  = "database_unavailable"
	codeUnavailable          = "unavailable"
)

// apiError is an error answer: {"error": {"code": ..., "message": ...}}.
type apiError struct {
	status  int
	code    string
	message string
}

func badRequest(code, message string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: code, message: message}
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// abortWith writes the error body and stops the handler chain.
func abortWith(c *gin.Context, e *apiError) {
	c.AbortWithStatusJSON(e.status, errorBody{Error: errorDetail{Code: e.code, Message: e.message}})
}

// abortUnavailable answers 503 with a hint of when to retry.
func abortUnavailable(c *gin.Context, code, message string) {
	c.Header("Retry-After", "1")
	abortWith(c, &apiError{status: http.StatusServiceUnavailable, code: code, message: message})
}
