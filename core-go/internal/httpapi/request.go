package httpapi

import (
	"encoding/json"

	"github.com/gin-gonic/gin"

	"github.com/aside-lab/aside/core-go/internal/store"
	"github.com/aside-lab/aside/core-go/internal/tracks"
	"github.com/aside-lab/aside/core-go/internal/validate"
)

// userBody is the body of a create or an update; each field stays raw until
// checked, so a missing field, null and a wrong type get their own messages.
type userBody struct {
	Username json.RawMessage `json:"username"`
	Email    json.RawMessage `json:"email"`
}

var userFields = []string{"username", "email"}

// createRequest is a validated POST /api/v1/users.
type createRequest struct {
	key      string // Idempotency-Key, when hasKey
	hasKey   bool
	username string
	email    string
}

// parseCreate checks, in this order, the Idempotency-Key, the body, the
// username and the email, and returns the first error.
func parseCreate(c *gin.Context) (createRequest, error) {
	var req createRequest
	var err error
	if req.key, req.hasKey, err = idempotencyKey(c.Request); err != nil {
		return req, err
	}
	var body userBody
	if err := decodeObject(c, &body, userFields...); err != nil {
		return req, err
	}
	if req.username, err = requiredUsername(body.Username); err != nil {
		return req, err
	}
	if req.email, err = requiredEmail(body.Email); err != nil {
		return req, err
	}
	return req, nil
}

// updateRequest is a validated PATCH /api/v1/users/:id.
type updateRequest struct {
	id  int64
	upd store.Update
}

// parseUpdate checks, in this order, the id, the body, that it changes
// something, the username and the email, and returns the first error.
func parseUpdate(c *gin.Context) (updateRequest, error) {
	var req updateRequest
	var err error
	if req.id, err = parsePathID(c); err != nil {
		return req, err
	}
	var body userBody
	if err := decodeObject(c, &body, userFields...); err != nil {
		return req, err
	}
	if !present(body.Username) && !present(body.Email) {
		return req, badRequest(codeInvalidRequest, "give at least one of username, email")
	}
	if present(body.Username) {
		s, err := usernameValue(body.Username)
		if err != nil {
			return req, err
		}
		req.upd.Username = &s
	}
	if present(body.Email) {
		s, err := emailValue(body.Email)
		if err != nil {
			return req, err
		}
		req.upd.Email = &s
	}
	return req, nil
}

// simplifyRequest is a validated GET /internal/v1/tracks/:id/simplified.
type simplifyRequest struct {
	id        int64
	canonical string // the tolerance as the cache key spells it
	tolerance float64
}

// parseSimplify checks, in this order, the id and the tolerance, and
// returns the first error.
func parseSimplify(c *gin.Context) (simplifyRequest, error) {
	var req simplifyRequest
	var err error
	if req.id, err = parsePathID(c); err != nil {
		return req, err
	}
	values := c.Request.URL.Query()["tolerance"]
	if len(values) != 1 {
		return req, badRequest(codeInvalidTolerance, "give one tolerance parameter: "+tracks.ErrTolerance.Error())
	}
	if req.canonical, req.tolerance, err = tracks.ParseTolerance(values[0]); err != nil {
		return req, badRequest(codeInvalidTolerance, err.Error())
	}
	return req, nil
}

// parsePathID is the :id of a user path (empty for /api/v1/users/).
func parsePathID(c *gin.Context) (int64, error) {
	id, ok := validate.ID(c.Param("id"))
	if !ok {
		return 0, badRequest(codeInvalidID, "id must be a decimal integer from 1 to 9223372036854775807")
	}
	return id, nil
}

func requiredUsername(raw json.RawMessage) (string, error) {
	if !present(raw) {
		return "", badRequest(codeInvalidUsername, "username is required")
	}
	return usernameValue(raw)
}

func requiredEmail(raw json.RawMessage) (string, error) {
	if !present(raw) {
		return "", badRequest(codeInvalidEmail, "email is required")
	}
	return emailValue(raw)
}

func usernameValue(raw json.RawMessage) (string, error) {
	s, ok := stringField(raw)
	if !ok {
		return "", badRequest(codeInvalidUsername, "username must be a string")
	}
	if reason := validate.Username(s); reason != "" {
		return "", badRequest(codeInvalidUsername, reason)
	}
	return s, nil
}

func emailValue(raw json.RawMessage) (string, error) {
	s, ok := stringField(raw)
	if !ok {
		return "", badRequest(codeInvalidEmail, "email must be a string")
	}
	if hadLoneSurrogate(raw, s) {
		return "", badRequest(codeInvalidEmail, "email must not contain a lone UTF-16 surrogate escape")
	}
	if reason := validate.Email(s); reason != "" {
		return "", badRequest(codeInvalidEmail, reason)
	}
	return s, nil
}
