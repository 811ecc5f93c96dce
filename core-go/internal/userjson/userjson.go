// Package userjson is a user as the API shows it (contracts/cache.json
// user_json): the one rendering of a user, for a create's 201 (fresh or
// replayed under its idempotency key) and an update's 200.
package userjson

import (
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
