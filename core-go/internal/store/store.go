// Package store is the core's access to PostgreSQL: the three writes, each a
// single statement (so an error never leaves part of a write behind), the
// idempotent create (one transaction: key and user together), and the
// mapping of driver errors to what the API answers.
package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Errors the handlers map to statuses.
var (
	// ErrNotFound: no user with that id (404).
	ErrNotFound = errors.New("no such user")
	// ErrConflict: the username is taken (409).
	ErrConflict = errors.New("username already exists")
	// ErrUnavailable: PostgreSQL could not be reached in time (503). Use
	// errors.As with *UnavailableError to learn whether the write may still
	// have been applied.
	ErrUnavailable = errors.New("database unavailable")
)

// usernameUniqueConstraint is the name PostgreSQL gives the UNIQUE on
// users.username in contracts/schema.sql.
const usernameUniqueConstraint = "users_username_key"

// UnavailableError wraps a connection-level failure.
type UnavailableError struct {
	Err error
	// MaybeApplied is true when the statement may have reached the server
	// before the failure (a timeout while waiting for the reply): the write
	// may have committed, so its cache keys should be dropped anyway.
	MaybeApplied bool
}

func (e *UnavailableError) Error() string        { return "database unavailable: " + e.Err.Error() }
func (e *UnavailableError) Unwrap() error        { return e.Err }
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// User is a row of the users table.
type User struct {
	ID        int64
	Username  string
	Email     string
	CreatedAt time.Time
}

// Update is a partial update: nil fields keep their value.
type Update struct {
	Username *string
	Email    *string
}

// Written is a committed write: the row as the write left it (as it was,
// for a delete), the email it had before (updates), and the id of the
// cache_invalidations row that owes the write's cache invalidation (see
// outbox.go).
type Written struct {
	User
	OldEmail string
	Outbox   int64
}

// ClientGrace is how much longer than the server's statement_timeout the
// client waits for an answer. The server must be the one to give up: a
// statement it aborts (57014) certainly did not commit, while a statement
// the client abandons may still commit later (PostgreSQL does not notice a
// closed socket while the statement waits, e.g. for a row lock). The
// client-side deadline only catches a connection that hangs.
const ClientGrace = time.Second

// WriteBound is the longest a write spends in a store built with timeout:
// the wait for a pooled connection, then every statement of the write, its
// COMMIT or ROLLBACK included, under one client-side deadline. It is part
// of the core's worst case for a write that the gateway's CORE_TIMEOUT_MS
// must outlast (contracts/timeouts.json).
func WriteBound(timeout time.Duration) time.Duration {
	return timeout + timeout + ClientGrace
}

// Store runs the core's statements through a pool.
type Store struct {
	pool    *pgxpool.Pool
	timeout time.Duration
	keyTTL  time.Duration
}

// Option changes a Store's defaults.
type Option func(*Store)

// New returns a store that waits at most timeout for a pooled connection
// and then timeout+ClientGrace for the statement's answer. Build the pool
// with the same timeout as PoolOptions.StatementTimeout.
func New(pool *pgxpool.Pool, timeout time.Duration, opts ...Option) *Store {
	s := &Store{pool: pool, timeout: timeout, keyTTL: DefaultIdempotencyTTL}
	for _, o := range opts {
		o(s)
	}
	return s
}

// PoolOptions are the pool settings from the configuration.
type PoolOptions struct {
	MaxConns          int32
	ConnectTimeout    time.Duration
	HealthCheckPeriod time.Duration
	// StatementTimeout is set as the server's statement_timeout on every
	// connection (unless DATABASE_URL sets one); 0 leaves the server's default.
	StatementTimeout time.Duration
}

// NewPool builds a pool without connecting: the core starts, and reports
// not ready, while PostgreSQL is down.
func NewPool(ctx context.Context, databaseURL string, opts PoolOptions) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, errors.New("DATABASE_URL: not a valid PostgreSQL URL")
	}
	cfg.MaxConns = opts.MaxConns
	cfg.MinConns = 0
	cfg.HealthCheckPeriod = opts.HealthCheckPeriod
	cfg.ConnConfig.ConnectTimeout = opts.ConnectTimeout
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "aside-core"
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["statement_timeout"]; !ok && opts.StatementTimeout > 0 {
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(opts.StatementTimeout.Milliseconds(), 10)
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// Ping checks that a connection can be had and answers, within ctx.
func (s *Store) Ping(ctx context.Context) error {
	return s.pool.Ping(ctx)
}

// Each write is one statement that also records the cache invalidation it
// owes (outbox.go): the change and its outbox row commit together or not at
// all. Each also passes the seeding gate first (gate.go): the write happens
// only if the statement got the gate's shared lock, which it then holds until
// it commits, so no write ever commits into a table a seed is replacing.
// All three answer the same columns: the gate's verdict, then the row (all
// NULL when nothing was written).
const createSQL = `
WITH gate AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock_shared($3) AS open
), created AS (
    INSERT INTO users (username, email) SELECT $1::text, $2::text FROM gate WHERE gate.open
    RETURNING id, username, email, created_at
), owed AS (
    INSERT INTO cache_invalidations (user_id, email_after) SELECT id, email FROM created
    RETURNING id
)
SELECT gate.open, created.id, username, email, created_at, NULL::text, owed.id
FROM gate LEFT JOIN (created CROSS JOIN owed) ON true`

// CreateUser inserts a user.
func (s *Store) CreateUser(ctx context.Context, username, email string) (Written, error) {
	var w Written
	err := s.withConn(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		return scanWritten(conn.QueryRow(ctx, createSQL, username, email, WriteGateLock), &w)
	})
	return w, err
}

// scanWritten reads a gated write's answer: ErrSeeding when the gate was
// closed, pgx.ErrNoRows when the write found no row.
func scanWritten(row pgx.Row, w *Written) error {
	var (
		open                      bool
		id, outbox                *int64
		username, email, oldEmail *string
		createdAt                 *time.Time
	)
	if err := row.Scan(&open, &id, &username, &email, &createdAt, &oldEmail, &outbox); err != nil {
		return err
	}
	if !open {
		return ErrSeeding
	}
	if id == nil || username == nil || email == nil || createdAt == nil || outbox == nil {
		return pgx.ErrNoRows
	}
	*w = Written{User: User{ID: *id, Username: *username, Email: *email, CreatedAt: *createdAt}, Outbox: *outbox}
	if oldEmail != nil {
		w.OldEmail = *oldEmail
	}
	return nil
}

// The subquery locks the row and yields its email before the update, so
// one statement returns both the old and the new email: the cache needs the
// old one to drop count:<old email>. A concurrent update of the same row
// waits for the lock and then sees the committed value.
const updateSQL = `
WITH gate AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock_shared($4) AS open
), updated AS (
    UPDATE users AS u
    SET username = COALESCE($2, u.username),
        email    = COALESCE($3, u.email)
    FROM gate, (SELECT id, email FROM users WHERE id = $1 FOR UPDATE) AS old
    WHERE gate.open AND u.id = old.id
    RETURNING u.id, u.username, u.email, u.created_at, old.email AS old_email
), owed AS (
    INSERT INTO cache_invalidations (user_id, email_before, email_after)
    SELECT id, old_email, email FROM updated
    RETURNING id
)
SELECT gate.open, updated.id, username, email, created_at, old_email, owed.id
FROM gate LEFT JOIN (updated CROSS JOIN owed) ON true`

// UpdateUser changes the given fields of user id.
func (s *Store) UpdateUser(ctx context.Context, id int64, upd Update) (Written, error) {
	var w Written
	err := s.withConn(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		return scanWritten(conn.QueryRow(ctx, updateSQL, id, upd.Username, upd.Email, WriteGateLock), &w)
	})
	return w, err
}

const deleteSQL = `
WITH gate AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock_shared($2) AS open
), deleted AS (
    DELETE FROM users USING gate WHERE gate.open AND id = $1 RETURNING id, username, email, created_at
), owed AS (
    INSERT INTO cache_invalidations (user_id, email_before) SELECT id, email FROM deleted
    RETURNING id
)
SELECT gate.open, deleted.id, username, email, created_at, NULL::text, owed.id
FROM gate LEFT JOIN (deleted CROSS JOIN owed) ON true`

// DeleteUser removes user id and returns the row it removed.
func (s *Store) DeleteUser(ctx context.Context, id int64) (Written, error) {
	var w Written
	err := s.withConn(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		return scanWritten(conn.QueryRow(ctx, deleteSQL, id, WriteGateLock), &w)
	})
	return w, err
}

// withConn acquires a connection explicitly so that a failure to get one
// (nothing was sent) is told apart from a failure mid-statement.
func (s *Store) withConn(ctx context.Context, fn func(context.Context, *pgxpool.Conn) error) error {
	return s.withConnFor(ctx, s.timeout+ClientGrace, fn)
}

// withConnFor is withConn with fn's statements bounded by bound instead.
func (s *Store) withConnFor(ctx context.Context, bound time.Duration,
	fn func(context.Context, *pgxpool.Conn) error) error {
	acquireCtx, cancelAcquire := context.WithTimeout(ctx, s.timeout)
	defer cancelAcquire()
	conn, err := s.pool.Acquire(acquireCtx)
	if err != nil {
		return &UnavailableError{Err: err, MaybeApplied: false}
	}
	defer conn.Release()
	stmtCtx, cancelStmt := context.WithTimeout(ctx, bound)
	defer cancelStmt()
	return classify(fn(stmtCtx, conn))
}

// classify maps a driver error to ErrNotFound, ErrConflict, an
// *UnavailableError, or (for anything unexpected) a plain error.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrKeyReused) || errors.Is(err, errInconsistentKey) || errors.Is(err, ErrSeeding) {
		return err
	}
	var before *notAppliedError
	if errors.As(err, &before) {
		// Failed before COMMIT: the transaction is rolled back whatever broke.
		classified := classify(before.err)
		var unavailable *UnavailableError
		if errors.As(classified, &unavailable) {
			unavailable.MaybeApplied = false
		}
		return classified
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "23505" && pgErr.ConstraintName == usernameUniqueConstraint:
			return ErrConflict
		case unavailableState(pgErr.Code):
			// The server refused or aborted the statement: nothing was applied.
			return &UnavailableError{Err: err, MaybeApplied: false}
		}
		return fmt.Errorf("unexpected database error: %w", err)
	}
	// Not an answer from the server: the connection broke or the deadline
	// hit. Unless pgconn guarantees nothing was sent, the write may have
	// committed without our hearing of it.
	return &UnavailableError{Err: err, MaybeApplied: !pgconn.SafeToRetry(err)}
}

// unavailableState is true for SQLSTATEs that mean "try later", not "bad request".
func unavailableState(code string) bool {
	switch {
	case len(code) == 5 && code[:2] == "08": // connection exception
		return true
	case len(code) == 5 && code[:2] == "53": // insufficient resources (e.g. too many connections)
		return true
	case code == "57014", code == "57P01", code == "57P02", code == "57P03": // statement timeout or cancel, shutting down
		return true
	case code == "40001", code == "40P01": // serialization failure, deadlock
		return true
	}
	return false
}
