package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aside-lab/aside/core-go/internal/testenv"
)

func TestEmailVectorsThroughTheAPI(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	v := testenv.LoadValidation(t)
	for i, email := range v.EmailValid {
		rec := s.do(http.MethodPost, "/api/v1/users", mustJSON(t, map[string]string{"username": fmt.Sprintf("u%d", i), "email": email}))
		if rec.Code != http.StatusCreated {
			t.Errorf("valid email %q: %d %s", email, rec.Code, rec.Body)
			continue
		}
		if got := decodeUser(t, rec).Email; got != email {
			t.Errorf("email stored as %q, sent %q", got, email)
		}
	}
	s.mustCreate(t, "target", "t@example.com")
	before := rows(t)
	for _, email := range v.EmailInvalid {
		t.Run("create/"+email, func(t *testing.T) {
			wantError(t, s.do(http.MethodPost, "/api/v1/users", mustJSON(t, map[string]string{"username": "fresh", "email": email})),
				http.StatusBadRequest, codeInvalidEmail)
		})
		t.Run("update/"+email, func(t *testing.T) {
			wantError(t, s.do(http.MethodPatch, "/api/v1/users/1", mustJSON(t, map[string]string{"email": email})),
				http.StatusBadRequest, codeInvalidEmail)
		})
	}
	if after := rows(t); !equalRows(before, after) {
		t.Fatal("an invalid email changed the table")
	}
}

func TestUsernameVectorsThroughTheAPI(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	v := testenv.LoadValidation(t)
	for _, name := range v.UsernameValid {
		rec := s.do(http.MethodPost, "/api/v1/users", mustJSON(t, map[string]string{"username": name, "email": "x@example.com"}))
		if rec.Code != http.StatusCreated || decodeUser(t, rec).Username != name {
			t.Errorf("valid username %q: %d %s", name, rec.Code, rec.Body)
		}
	}
	before := rows(t)
	for _, name := range v.UsernameInvalid {
		wantError(t, s.do(http.MethodPost, "/api/v1/users", mustJSON(t, map[string]string{"username": name, "email": "x@example.com"})),
			http.StatusBadRequest, codeInvalidUsername)
		wantError(t, s.do(http.MethodPatch, "/api/v1/users/1", mustJSON(t, map[string]string{"username": name})),
			http.StatusBadRequest, codeInvalidUsername)
	}
	if after := rows(t); !equalRows(before, after) {
		t.Fatal("an invalid username changed the table")
	}
}

func TestIDVectorsThroughTheAPI(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	v := testenv.LoadValidation(t)
	for _, id := range v.IDValid {
		// Valid ids pass validation and find no user.
		wantError(t, s.do(http.MethodDelete, "/api/v1/users/"+url.PathEscape(id), ""), http.StatusNotFound, codeNotFound)
		wantError(t, s.do(http.MethodPatch, "/api/v1/users/"+url.PathEscape(id), `{"username":"x"}`), http.StatusNotFound, codeNotFound)
	}
	for _, id := range v.IDInvalid {
		path := "/api/v1/users/" + url.PathEscape(id)
		t.Run(fmt.Sprintf("%q", id), func(t *testing.T) {
			wantError(t, s.do(http.MethodDelete, path, ""), http.StatusBadRequest, codeInvalidID)
			wantError(t, s.do(http.MethodPatch, path, `{"username":"x"}`), http.StatusBadRequest, codeInvalidID)
		})
	}
}

// Bodies that are not one JSON object of known fields, and wrong types.
func TestBodyErrors(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	s.mustCreate(t, "ada", "ada@example.com")
	before := rows(t)
	cases := []struct {
		name, body string
		status     int
		code       string
	}{
		{"empty", "", http.StatusBadRequest, codeInvalidJSON},
		{"whitespace", "  \n", http.StatusBadRequest, codeInvalidJSON},
		{"truncated", `{"username":"bob"`, http.StatusBadRequest, codeInvalidJSON},
		{"garbage", `username=bob`, http.StatusBadRequest, codeInvalidJSON},
		{"single quotes", `{'username':'bob'}`, http.StatusBadRequest, codeInvalidJSON},
		{"trailing object", `{"username":"bob","email":"b@example.com"}{}`, http.StatusBadRequest, codeInvalidJSON},
		{"trailing garbage", `{"username":"bob","email":"b@example.com"} x`, http.StatusBadRequest, codeInvalidJSON},
		{"not UTF-8", "{\"username\":\"b\xffb\",\"email\":\"b@example.com\"}", http.StatusBadRequest, codeInvalidJSON},
		{"array", `[{"username":"bob"}]`, http.StatusBadRequest, codeInvalidRequest},
		{"null", `null`, http.StatusBadRequest, codeInvalidRequest},
		{"string", `"bob"`, http.StatusBadRequest, codeInvalidRequest},
		{"unknown field", `{"username":"bob","email":"b@example.com","admin":true}`, http.StatusBadRequest, codeUnknownField},
		{"field in other case", `{"Username":"bob","email":"b@example.com"}`, http.StatusBadRequest, codeUnknownField},
		{"id in body", `{"id":5,"username":"bob","email":"b@example.com"}`, http.StatusBadRequest, codeUnknownField},
		{"username number", `{"username":5,"email":"b@example.com"}`, http.StatusBadRequest, codeInvalidUsername},
		{"username null", `{"username":null,"email":"b@example.com"}`, http.StatusBadRequest, codeInvalidUsername},
		{"username array", `{"username":["bob"],"email":"b@example.com"}`, http.StatusBadRequest, codeInvalidUsername},
		{"username missing", `{"email":"b@example.com"}`, http.StatusBadRequest, codeInvalidUsername},
		{"email bool", `{"username":"bob","email":true}`, http.StatusBadRequest, codeInvalidEmail},
		{"email object", `{"username":"bob","email":{"a":1}}`, http.StatusBadRequest, codeInvalidEmail},
		{"email missing", `{"username":"bob"}`, http.StatusBadRequest, codeInvalidEmail},
		{"email with a lone surrogate", `{"username":"bob","email":"a\ud800@example.com"}`, http.StatusBadRequest, codeInvalidEmail},
		{"username with a lone surrogate", `{"username":"b\udc00","email":"b@example.com"}`, http.StatusBadRequest, codeInvalidUsername},
		{"empty object", `{}`, http.StatusBadRequest, codeInvalidUsername},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wantError(t, s.send(jsonRequest(http.MethodPost, "/api/v1/users", c.body, "application/json")), c.status, c.code)
		})
	}
	patchCases := []struct {
		name, body, code string
	}{
		{"nothing to change", `{}`, codeInvalidRequest},
		{"username null", `{"username":null}`, codeInvalidUsername},
		{"email number", `{"email":1}`, codeInvalidEmail},
		{"unknown field", `{"nickname":"x"}`, codeUnknownField},
		{"valid name, bad email", `{"username":"okname","email":"bad"}`, codeInvalidEmail},
		{"trailing data", `{"username":"okname"} 1`, codeInvalidJSON},
	}
	for _, c := range patchCases {
		t.Run("patch "+c.name, func(t *testing.T) {
			wantError(t, s.send(jsonRequest(http.MethodPatch, "/api/v1/users/1", c.body, "application/json")),
				http.StatusBadRequest, c.code)
		})
	}
	if after := rows(t); !equalRows(before, after) {
		t.Fatalf("a rejected body changed rows: %v -> %v", before, after)
	}
}

// U+FFFD itself is an allowed character (only the listed ones are not);
// what is refused is half a surrogate pair that JSON decoding would
// silently have turned into one.
func TestReplacementCharacterIsNotALoneSurrogate(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	for i, body := range []string{
		`{"username":"r1","email":"a\ufffd@example.com"}`,
		`{"username":"r2","email":"a\uFFFD@example.com"}`,
		"{\"username\":\"r3\",\"email\":\"a\uFFFD@example.com\"}",
		`{"username":"r4","email":"a\ud83d\ude00@example.com"}`, // a valid pair
	} {
		if rec := s.do(http.MethodPost, "/api/v1/users", body); rec.Code != http.StatusCreated {
			t.Errorf("body %d %s: %d %s", i, body, rec.Code, rec.Body)
		}
	}
	wantError(t, s.do(http.MethodPost, "/api/v1/users", `{"username":"r5","email":"a\ufffd\udfff@example.com"}`),
		http.StatusBadRequest, codeInvalidEmail)
}

func TestUnsupportedMediaType(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	body := `{"username":"bob","email":"b@example.com"}`
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "application/jsonx", "multipart/form-data; boundary=x"} {
		wantError(t, s.send(jsonRequest(http.MethodPost, "/api/v1/users", body, ct)), http.StatusUnsupportedMediaType, codeUnsupportedMediaType)
		wantError(t, s.send(jsonRequest(http.MethodPost, "/api/v1/compute", `{"complexity":1}`, ct)), http.StatusUnsupportedMediaType, codeUnsupportedMediaType)
	}
	if env.UserCount(t) != 0 {
		t.Fatal("a 415 wrote a row")
	}
}

func TestPayloadTooLarge(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	pad := strings.Repeat(" ", MaxBodyBytes)
	body := `{"username":"bob","email":"b@example.com"}` + pad
	// With a Content-Length, and streamed without one.
	wantError(t, s.send(jsonRequest(http.MethodPost, "/api/v1/users", body, "application/json")), http.StatusRequestEntityTooLarge, codePayloadTooLarge)
	req := jsonRequest(http.MethodPost, "/api/v1/users", body, "application/json")
	req.ContentLength = -1
	wantError(t, s.send(req), http.StatusRequestEntityTooLarge, codePayloadTooLarge)
	// Exactly the limit is fine.
	exact := `{"username":"bob","email":"b@example.com"}`
	exact += strings.Repeat(" ", MaxBodyBytes-len(exact))
	if rec := s.send(jsonRequest(http.MethodPost, "/api/v1/users", exact, "application/json")); rec.Code != http.StatusCreated {
		t.Fatalf("a body of exactly %d bytes: %d %s", MaxBodyBytes, rec.Code, rec.Body)
	}
	if env.UserCount(t) != 1 {
		t.Fatalf("rows: %d, want only the one from the body within the limit", env.UserCount(t))
	}
}
