package store

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		name         string
		err          error
		want         error // nil: neither sentinel
		maybeApplied bool
	}{
		{"no rows", pgx.ErrNoRows, ErrNotFound, false},
		{"username taken", &pgconn.PgError{Code: "23505", ConstraintName: "users_username_key"}, ErrConflict, false},
		{"another unique constraint", &pgconn.PgError{Code: "23505", ConstraintName: "users_pkey"}, nil, false},
		{"too many connections", &pgconn.PgError{Code: "53300"}, ErrUnavailable, false},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, ErrUnavailable, false},
		{"syntax error is a bug", &pgconn.PgError{Code: "42601"}, nil, false},
		{"deadline while waiting for the reply", context.DeadlineExceeded, ErrUnavailable, true},
	}
	for _, c := range cases {
		got := classify(c.err)
		if got == nil {
			t.Errorf("%s: classify returned nil", c.name)
			continue
		}
		for _, sentinel := range []error{ErrNotFound, ErrConflict, ErrUnavailable} {
			if is := errors.Is(got, sentinel); is != (sentinel == c.want) {
				t.Errorf("%s: errors.Is(%v, %v) = %v", c.name, got, sentinel, is)
			}
		}
		var u *UnavailableError
		if errors.As(got, &u) && u.MaybeApplied != c.maybeApplied {
			t.Errorf("%s: MaybeApplied = %v", c.name, u.MaybeApplied)
		}
	}
	if classify(nil) != nil {
		t.Error("classify(nil) != nil")
	}
}
