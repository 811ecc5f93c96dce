package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultIdempotencyTTL is how long an idempotency key is remembered unless
// WithIdempotencyTTL says otherwise. An older row counts as absent (its key
// can be used afresh) until the purge removes it.
const DefaultIdempotencyTTL = 24 * time.Hour

// WithIdempotencyTTL sets how long a key is remembered, both for the claim
// and for the purge, which must agree: a purge with a shorter lifetime
// would delete keys a retry may still replay.
func WithIdempotencyTTL(ttl time.Duration) Option {
	return func(s *Store) { s.keyTTL = ttl }
}

// ErrKeyReused: the idempotency key was first used with another request (422).
var ErrKeyReused = errors.New("idempotency key already used with a different request")

// errInconsistentKey is a key row in a state the protocol never commits; it
// is a bug, answered 500, not a database outage.
var errInconsistentKey = errors.New("inconsistent idempotency key")

// Once is the outcome of CreateUserOnce.
type Once struct {
	// Written is the user a create's 201 shows. Fresh: the row this call
	// inserted, and the outbox row its invalidation owes. Replayed: the row
	// as the first call inserted it (it may have changed or gone since), and
	// Outbox 0, as the first call's row was settled by that call.
	Written
	Replayed bool
}

// claimKeySQL takes the key for this transaction, or takes over a row older
// than the TTL. A concurrent transaction holding the same key makes this
// statement wait until it commits (then no row comes back: the key is taken)
// or rolls back (then the claim succeeds): that wait is what lets exactly one
// of two simultaneous duplicates insert a user.
const claimKeySQL = `
INSERT INTO idempotency_keys AS k (key, request_hash) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE
SET request_hash = EXCLUDED.request_hash, status = NULL, response = NULL, created_at = now()
WHERE k.created_at < now() - make_interval(secs => $3)
RETURNING true`

const storedRowSQL = `SELECT request_hash, status, response FROM idempotency_keys WHERE key = $1`

const saveRowSQL = `UPDATE idempotency_keys SET status = $2, response = $3 WHERE key = $1`

// claimTries bounds the claim/read loop: the only way round it is a row
// purged between the claim and the read, which the next claim then wins.
const claimTries = 3

// CreateUserOnce inserts a user at most once per idempotency key. The key
// row and the user are written in one transaction, so a key is either absent
// or holds the created row. A key already stored with the same requestHash
// replays that row, as it was created: the HTTP layer renders it as it
// rendered the first answer, so the replay is the same bytes. With another
// hash it is ErrKeyReused. Errors are those of CreateUser.
func (s *Store) CreateUserOnce(ctx context.Context, key string, requestHash []byte, username, email string) (Once, error) {
	var out Once
	err := s.withTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		// First, so that neither the claim nor a replay of a key the seed
		// is about to clear happens while a seed runs.
		if err := passGate(ctx, tx); err != nil {
			return err
		}
		for range claimTries {
			claimed, err := s.claimKey(ctx, tx, key, requestHash)
			if err != nil {
				return err
			}
			if claimed {
				return createAndSave(ctx, tx, key, username, email, &out)
			}
			var storedHash, body []byte
			var status *int16
			err = tx.QueryRow(ctx, storedRowSQL, key).Scan(&storedHash, &status, &body)
			if errors.Is(err, pgx.ErrNoRows) {
				continue // purged since the claim looked; claim again
			}
			if err != nil {
				return err
			}
			if !bytes.Equal(storedHash, requestHash) {
				return ErrKeyReused
			}
			if status == nil {
				return fmt.Errorf("%w: key %q has no answer", errInconsistentKey, key)
			}
			var row createdRow
			if err := json.Unmarshal(body, &row); err != nil {
				return fmt.Errorf("%w: key %q holds no created row: %v", errInconsistentKey, key, err)
			}
			out = Once{Written: Written{User: User(row)}, Replayed: true}
			return nil
		}
		return fmt.Errorf("%w: key %q vanished %d times", errInconsistentKey, key, claimTries)
	})
	return out, err
}

func (s *Store) claimKey(ctx context.Context, tx pgx.Tx, key string, requestHash []byte) (bool, error) {
	var claimed bool
	err := tx.QueryRow(ctx, claimKeySQL, key, requestHash, s.keyTTL.Seconds()).Scan(&claimed)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return claimed, err
}

// createdStatus is the status column of a key's row: the created row it
// holds is answered 201 Created.
const createdStatus = 201

// createdRow is the user as a key's row keeps it, in the response column:
// JSON of the same fields as the API's user, created_at to the microsecond
// PostgreSQL keeps, so a replay shows exactly the row the first call made
// (and a key that kept the API's own body reads back the same).
type createdRow struct {
	ID        int64     `json:"id"`
	Username  string    `json:"username"`
	Email     string    `json:"email"`
	CreatedAt time.Time `json:"created_at"`
}

func createAndSave(ctx context.Context, tx pgx.Tx, key, username, email string, out *Once) error {
	var w Written
	if err := scanWritten(tx.QueryRow(ctx, createSQL, username, email, WriteGateLock), &w); err != nil {
		return err
	}
	row := createdRow(w.User)
	row.CreatedAt = row.CreatedAt.UTC()
	body, err := json.Marshal(row)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, saveRowSQL, key, createdStatus, body); err != nil {
		return err
	}
	*out = Once{Written: w}
	return nil
}

// purgeSQL deletes one bounded batch of expired keys, oldest first; SKIP
// LOCKED keeps it from waiting on a key a write is taking over right now.
const purgeSQL = `
DELETE FROM idempotency_keys WHERE key IN (
    SELECT key FROM idempotency_keys
    WHERE created_at < now() - make_interval(secs => $1)
    ORDER BY created_at LIMIT $2
    FOR UPDATE SKIP LOCKED)`

// PurgeExpiredKeys deletes at most limit keys older than the store's TTL and
// returns how many it deleted.
func (s *Store) PurgeExpiredKeys(ctx context.Context, limit int) (int64, error) {
	var n int64
	err := s.withConn(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		tag, err := conn.Exec(ctx, purgeSQL, s.keyTTL.Seconds(), limit)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

// PurgeOptions pace the purge of expired idempotency keys.
type PurgeOptions struct {
	// Interval between cycles.
	Interval time.Duration
	// Batch bounds one round's DELETE: a short statement holding few locks.
	Batch int
	// Pause between the rounds of one cycle, so a long backlog never keeps
	// a pooled connection busy back to back.
	Pause time.Duration
}

// PurgeExpiredKeysCycle deletes expired keys in rounds of at most batch,
// pause apart, until a round deletes less than a full batch: however many
// keys expired since the last cycle, one cycle removes them all. It returns
// how many it deleted; on an error or when ctx ends it stops there.
func (s *Store) PurgeExpiredKeysCycle(ctx context.Context, batch int, pause time.Duration) (int64, error) {
	var total int64
	for {
		n, err := s.PurgeExpiredKeys(ctx, batch)
		total += n
		if err != nil || n < int64(batch) {
			return total, err
		}
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(pause):
		}
	}
}

// PurgeExpiredKeysEvery runs a purge cycle at once and then every
// o.Interval until ctx ends; a failure is handed to onError and the next
// cycle tries again.
func (s *Store) PurgeExpiredKeysEvery(ctx context.Context, o PurgeOptions, onError func(error)) {
	ticker := time.NewTicker(o.Interval)
	defer ticker.Stop()
	for {
		if _, err := s.PurgeExpiredKeysCycle(ctx, o.Batch, o.Pause); err != nil && ctx.Err() == nil {
			onError(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// withTx runs fn in one transaction on a pooled connection and commits.
// Only a failed COMMIT can leave the outcome unknown: a failure before it
// rolls the whole transaction back, so nothing was applied.
func (s *Store) withTx(ctx context.Context, fn func(context.Context, pgx.Tx) error) error {
	return s.withTxFor(ctx, s.timeout+ClientGrace, fn)
}

// withTxFor is withTx with the transaction's statements bounded by bound.
func (s *Store) withTxFor(ctx context.Context, bound time.Duration, fn func(context.Context, pgx.Tx) error) error {
	return s.withConnFor(ctx, bound, func(ctx context.Context, conn *pgxpool.Conn) error {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return notApplied(err)
		}
		if err := fn(ctx, tx); err != nil {
			rollback(ctx, tx)
			return notApplied(err)
		}
		return tx.Commit(ctx)
	})
}

// rollback ends a failed transaction within the write's own deadline (ctx),
// so that WriteBound holds. When it cannot (a broken connection, or no time
// left), pgx closes the connection and the server rolls back on its own.
func rollback(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// notApplied marks a driver error as one after which nothing was committed.
type notAppliedError struct{ err error }

func (e *notAppliedError) Error() string { return e.err.Error() }
func (e *notAppliedError) Unwrap() error { return e.err }

func notApplied(err error) error { return &notAppliedError{err: err} }
