// Package userjson is a user as the API shows it (contracts/cache.json
// user_json) and the answer a create keeps under its idempotency key. It
// holds no HTTP handling, so the store can be handed Created as a plain
// function of the inserted row.
package userjson

import (
	"encoding/json"
	"net/http"

	"github.com/aside-lab/aside/core-go/internal/store"
)

// User is the JSON form of a user.
type User struct {
	ID        int64  `json:"id"`
	Username  string `json:"username"`
	Email     string `json:"email"`
	CreatedAt string `json:"created_at"`
}

// CreatedAtLayout is RFC 3339 in UTC with exactly six fractional digits.
const CreatedAtLayout = "2006-01-02T15:04:05.000000Z"

// From is u as the API shows it.
func From(u store.User) User {
	return User{ID: u.ID, Username: u.Username, Email: u.Email,
		CreatedAt: u.CreatedAt.UTC().Format(CreatedAtLayout)}
}

// Created is the 201 of a create, as sent and as stored under a key. It is
// a pure function of the row (store.AnswerFunc).
func Created(u store.User) store.Answer {
	body, err := json.Marshal(From(u))
	if err != nil {
		panic(err) // a struct of strings and an int always encodes
	}
	return store.Answer{Status: http.StatusCreated, Body: body}
}

// CreatedID is the user id in an answer Created rendered (0 if there is
// none). A replay needs it for Location: the key's row keeps only the
// answer, and the user may have changed or gone since.
func CreatedID(a store.Answer) int64 {
	var created struct {
		ID int64 `json:"id"`
	}
	if json.Unmarshal(a.Body, &created) != nil {
		return 0
	}
	return created.ID
}
