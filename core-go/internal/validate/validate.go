// Package validate holds the input rules of contracts/validation.json. Lengths
// count Unicode code points, as in the contract.
package validate

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits from contracts/validation.json.
const (
	EmailMaxLen    = 254
	LocalMaxLen    = 64
	DomainMaxLen   = 253
	UsernameMaxLen = 64
)

// Email returns "" when email is valid, else why not (for the error message).
func Email(email string) string {
	n := utf8.RuneCountInString(email)
	if n == 0 {
		return "email must not be empty"
	}
	if n > EmailMaxLen {
		return fmt.Sprintf("email must be at most %d characters", EmailMaxLen)
	}
	if !utf8.ValidString(email) {
		return "email must be valid UTF-8"
	}
	for _, r := range email {
		if reason := forbiddenInEmail(r); reason != "" {
			return reason
		}
	}
	if strings.Count(email, "@") != 1 {
		return "email must contain exactly one '@'"
	}
	local, domain, _ := strings.Cut(email, "@")
	if l := utf8.RuneCountInString(local); l < 1 || l > LocalMaxLen {
		return fmt.Sprintf("the part before '@' must be 1 to %d characters", LocalMaxLen)
	}
	if d := utf8.RuneCountInString(domain); d < 1 || d > DomainMaxLen {
		return fmt.Sprintf("the domain must be 1 to %d characters", DomainMaxLen)
	}
	labels := strings.Split(domain, ".")
	if len(labels) < 2 {
		return "the domain must have at least two labels, e.g. example.com"
	}
	for _, label := range labels {
		if label == "" {
			return "the domain must not have an empty label"
		}
	}
	return ""
}

func forbiddenInEmail(r rune) string {
	switch {
	case unicode.IsSpace(r):
		return "email must not contain whitespace"
	case r < 0x20 || (r >= 0x7f && r <= 0x9f):
		return "email must not contain control characters"
	case strings.ContainsRune(`"(),:;<>[\]`, r):
		return `email must not contain any of " ( ) , : ; < > [ \ ]`
	}
	return ""
}

// Username returns "" when name is valid, else why not.
func Username(name string) string {
	if n := utf8.RuneCountInString(name); n < 1 || n > UsernameMaxLen {
		return fmt.Sprintf("username must be 1 to %d characters", UsernameMaxLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
		if i == 0 && !alnum {
			return "username must start with a letter or digit"
		}
		if !alnum && c != '_' && c != '.' && c != '-' {
			return "username may only contain letters A-Z a-z, digits, '_', '.' and '-'"
		}
	}
	return ""
}

// ID parses a user id: ASCII decimal digits only, 1 to 9223372036854775807.
func ID(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, false
	}
	return id, true
}
