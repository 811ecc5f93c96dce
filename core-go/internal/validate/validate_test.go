package validate_test

import (
	"strings"
	"testing"

	"github.com/aside-lab/aside/core-go/internal/testenv"
	"github.com/aside-lab/aside/core-go/internal/validate"
)

func TestEmailVectors(t *testing.T) {
	v := testenv.LoadValidation(t)
	for _, e := range v.EmailValid {
		if reason := validate.Email(e); reason != "" {
			t.Errorf("valid email %q rejected: %s", e, reason)
		}
	}
	for _, e := range v.EmailInvalid {
		if validate.Email(e) == "" {
			t.Errorf("invalid email %q accepted", e)
		}
	}
}

func TestUsernameVectors(t *testing.T) {
	v := testenv.LoadValidation(t)
	for _, u := range v.UsernameValid {
		if reason := validate.Username(u); reason != "" {
			t.Errorf("valid username %q rejected: %s", u, reason)
		}
	}
	for _, u := range v.UsernameInvalid {
		if validate.Username(u) == "" {
			t.Errorf("invalid username %q accepted", u)
		}
	}
}

func TestIDVectors(t *testing.T) {
	v := testenv.LoadValidation(t)
	want := map[string]int64{"1": 1, "42": 42, "9223372036854775807": 9223372036854775807}
	for _, s := range v.IDValid {
		id, ok := validate.ID(s)
		if !ok {
			t.Errorf("valid id %q rejected", s)
		}
		if w, known := want[s]; known && id != w {
			t.Errorf("id %q parsed as %d, want %d", s, id, w)
		}
	}
	for _, s := range v.IDInvalid {
		if id, ok := validate.ID(s); ok {
			t.Errorf("invalid id %q accepted as %d", s, id)
		}
	}
}

func TestEmailReasonsNameTheRule(t *testing.T) {
	cases := map[string]string{
		"":                   "must not be empty",
		"a b@example.com":    "whitespace",
		"a\x01@example.com":  "control",
		"a;b@example.com":    "must not contain any of",
		"a@@example.com":     "exactly one '@'",
		"alice@example":      "two labels",
		"alice@example..com": "empty label",
	}
	for in, want := range cases {
		if got := validate.Email(in); !strings.Contains(got, want) {
			t.Errorf("Email(%q) = %q, want it to mention %q", in, got, want)
		}
	}
}
