package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// The seeding gate (contracts/seeding.json, contracts/README.md "Seeding
// under traffic"). The seeder holds WriteGateLock EXCLUSIVE for its whole
// run; every write takes it SHARED inside its own transaction with a try
// lock, and writes only if it got it. The shared lock lasts until the
// write commits, so the two never overlap: a write either commits before
// the seeder gets its lock (and the seed then replaces it, as it replaces
// every row from before), or finds the gate closed and writes nothing, or
// runs after the seeder let go, against the new table.
//
// A try lock never waits: while the seeder holds the lock, or waits for the
// writes in flight to finish, a write fails at once.

// WriteGateLock is the advisory lock key of contracts/seeding.json.
const WriteGateLock int64 = 1592593022

// ErrSeeding: a seed is replacing the users table; nothing was written (503).
var ErrSeeding = errors.New("a seed is loading the database")

const gateSQL = `SELECT pg_try_advisory_xact_lock_shared($1)`

// passGate takes the gate's shared lock for the rest of tx, or returns
// ErrSeeding.
func passGate(ctx context.Context, tx pgx.Tx) error {
	var open bool
	if err := tx.QueryRow(ctx, gateSQL, WriteGateLock).Scan(&open); err != nil {
		return err
	}
	if !open {
		return ErrSeeding
	}
	return nil
}
