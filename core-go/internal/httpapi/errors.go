package httpapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/aside-lab/aside/core-go/internal/store"
)

// Error codes of contracts/errors.json that the core answers with.
const (
	codeInvalidRequest       = "invalid_request"
	codeInvalidEmail         = "invalid_email"
	codeInvalidID            = "invalid_id"
	codeInvalidUsername      = "invalid_username"
	codeInvalidComplexity    = "invalid_complexity"
	codeInvalidTolerance     = "invalid_tolerance"
	codeInvalidCost          = "invalid_cost"
	codeUnknownField         = "unknown_field"
	codeInvalidJSON          = "invalid_json"
	codeUnauthorized         = "unauthorized"
	codeNotFound             = "not_found"
	codeMethodNotAllowed     = "method_not_allowed"
	codeConflict             = "conflict"
	codePayloadTooLarge      = "payload_too_large"
	codeUnsupportedMediaType = "unsupported_media_type"
	codeIdempotencyKeyReused = "idempotency_key_reused"
	codeInternal             = "internal"
	codeDatabaseUnavailable  = "database_unavailable"
	codeUnavailable          = "unavailable"
	codeSeeding              = "seeding"
)

// seedingRetryAfter is the Retry-After of a write refused during a seed
// (why 2: see docs/decisions/017-retry-after-2-for-a-write-refused-during-a-seed.md).
const seedingRetryAfter = "2"

// apiError is an error answer: {"error": {"code": ..., "message": ...}},
// with the status and any headers that go with it (Retry-After).
type apiError struct {
	status  int
	code    string
	message string
	headers map[string]string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.code, e.message) }

func badRequest(code, message string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: code, message: message}
}

// unavailable is a 503 with a hint of when to retry.
func unavailable(code, message string) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, code: code, message: message,
		headers: map[string]string{"Retry-After": "1"}}
}

// errInternal is every 500: the detail goes to the log, never into the body.
var errInternal = &apiError{status: http.StatusInternalServerError, code: codeInternal, message: "internal error"}

// handlerFunc is a handler that answers success itself and returns the
// error to answer with; handle writes that answer.
type handlerFunc func(*gin.Context) error

// handle adapts fn to gin: the error fn returns is written once, as JSON.
// An error that is neither an *apiError nor a store error is a bug: it is
// logged and answered 500 internal.
func handle(log *slog.Logger, fn handlerFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		err := fn(c)
		if err == nil {
			return
		}
		e, ok := asAPIError(err)
		if !ok {
			log.Error("request failed", "method", c.Request.Method, "path", c.Request.URL.Path, "err", err)
			e = errInternal
		}
		abortWith(c, e)
	}
}

// asAPIError is the one mapping of errors to answers: an *apiError as it
// is, a store error to its status and code.
func asAPIError(err error) (*apiError, bool) {
	var e *apiError
	switch {
	case errors.As(err, &e):
		return e, true
	case errors.Is(err, store.ErrNotFound):
		return &apiError{status: http.StatusNotFound, code: codeNotFound, message: "no user with this id"}, true
	case errors.Is(err, store.ErrNoTrack):
		return &apiError{status: http.StatusNotFound, code: codeNotFound, message: "no track with this id"}, true
	case errors.Is(err, store.ErrConflict):
		return &apiError{status: http.StatusConflict, code: codeConflict, message: "username already exists"}, true
	case errors.Is(err, store.ErrKeyReused):
		return &apiError{status: http.StatusUnprocessableEntity, code: codeIdempotencyKeyReused,
			message: "this Idempotency-Key was already used with a different request body"}, true
	case errors.Is(err, store.ErrSeeding):
		return &apiError{status: http.StatusServiceUnavailable, code: codeSeeding,
			message: "a seed is replacing the data; nothing was written, retry later",
			headers: map[string]string{"Retry-After": seedingRetryAfter}}, true
	case errors.As(err, new(*store.UnavailableError)):
		return unavailable(codeDatabaseUnavailable, "the database is unavailable; retry later"), true
	}
	return nil, false
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// abortWith writes the error answer and stops the handler chain.
func abortWith(c *gin.Context, e *apiError) {
	for name, value := range e.headers {
		c.Header(name, value)
	}
	c.AbortWithStatusJSON(e.status, errorBody{Error: errorDetail{Code: e.code, Message: e.message}})
}
