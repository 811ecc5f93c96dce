package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
)

// MaxBodyBytes is the largest request body the core reads (64 KiB).
const MaxBodyBytes = 64 << 10

// decodeObject reads a JSON object body into dst, a struct whose fields are
// json.RawMessage tagged with their exact names. It rejects: another media
// type (415), a body over MaxBodyBytes (413), bytes that are not one JSON
// object (400 invalid_json / invalid_request) and any field not in dst
// (400 unknown_field).
func decodeObject(c *gin.Context, dst any, fields ...string) error {
	if err := requireJSON(c.Request); err != nil {
		return err
	}
	tooLarge := &apiError{status: http.StatusRequestEntityTooLarge, code: codePayloadTooLarge,
		message: fmt.Sprintf("request body must be at most %d bytes", MaxBodyBytes)}
	if c.Request.ContentLength > MaxBodyBytes {
		return tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, MaxBodyBytes))
	if err != nil {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return tooLarge
		}
		return badRequest(codeInvalidJSON, "could not read the request body")
	}
	if !utf8.Valid(body) {
		return badRequest(codeInvalidJSON, "request body must be UTF-8")
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		return badRequest(codeInvalidJSON, "request body is empty; expected a JSON object")
	}
	if trimmed[0] != '{' {
		if !json.Valid(body) {
			return badRequest(codeInvalidJSON, "request body is not valid JSON")
		}
		return badRequest(codeInvalidRequest, "request body must be a JSON object")
	}

	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest(codeInvalidJSON, "unexpected data after the JSON object")
	}
	// encoding/json matches field names case-insensitively; the API does not,
	// so "Username" is as unknown as "nickname".
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(body, &keys); err != nil {
		return badRequest(codeInvalidJSON, "request body is not valid JSON")
	}
	for k := range keys {
		if !contains(fields, k) {
			return unknownField(k)
		}
	}
	return nil
}

// requireJSON accepts application/json with or without parameters (charset).
func requireJSON(r *http.Request) error {
	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mediaType != "application/json" {
		return &apiError{status: http.StatusUnsupportedMediaType, code: codeUnsupportedMediaType,
			message: "Content-Type must be application/json"}
	}
	return nil
}

func decodeError(err error) error {
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return badRequest(codeInvalidJSON, "request body is not valid JSON")
	case errors.As(err, &typeErr):
		return badRequest(codeInvalidRequest, "request body must be a JSON object")
	}
	// encoding/json has no typed error for DisallowUnknownFields; its message
	// is `json: unknown field "<name>"`.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return unknownField(strings.Trim(name, `"`))
	}
	return badRequest(codeInvalidJSON, "request body is not valid JSON")
}

func unknownField(name string) *apiError {
	if utf8.RuneCountInString(name) > 64 {
		name = string([]rune(name)[:64]) + "…"
	}
	return badRequest(codeUnknownField, fmt.Sprintf("unknown field %q", name))
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// present reports whether a field was given at all (null counts as given).
func present(raw json.RawMessage) bool { return raw != nil }

// stringField decodes a field that must be a JSON string.
func stringField(raw json.RawMessage) (string, bool) {
	var s string
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return "", false
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// hadLoneSurrogate tells whether decoding raw put a U+FFFD into s that the
// client did not send: encoding/json silently replaces an escape such as
// "\ud800" (half a UTF-16 pair, not a character) with U+FFFD. The body is
// already known to be valid UTF-8, so that is the only way one appears.
func hadLoneSurrogate(raw json.RawMessage, s string) bool {
	if !strings.ContainsRune(s, utf8.RuneError) {
		return false
	}
	sent := bytes.Count(bytes.ToLower(raw), []byte(`\ufffd`)) + bytes.Count(raw, []byte(string(utf8.RuneError)))
	return strings.Count(s, string(utf8.RuneError)) > sent
}
