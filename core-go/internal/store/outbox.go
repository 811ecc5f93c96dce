package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aside-lab/aside/core-go/internal/cache"
)

// The cache_invalidations table is the write side's outbox: each write's
// statement inserts the change it made, so a committed write always owes its
// cache invalidation in the database until Redis took the DEL. The outbox
// package's relay settles what the write's own DEL could not.

// Owed is one outbox row: a committed change whose stale keys may still be in
// Redis, and how long ago it committed.
type Owed struct {
	ID     int64
	Change cache.Change
	Age    time.Duration
}

// The rows from id $1 on when $1 > 0 (the retry window: from the lowest id
// whose write's own DEL failed, every row still owed, read in pages), and
// any row older than the grace period (its write's core died, or forgot it):
// each round takes a bounded page, and SKIP LOCKED lets several cores share
// the table.
const claimOwedSQL = `
SELECT id, user_id, email_before, email_after, extract(epoch FROM clock_timestamp() - created_at)::float8
FROM cache_invalidations
WHERE kind = 'keys' AND (($1::bigint > 0 AND id >= $1) OR created_at < clock_timestamp() - make_interval(secs => $2))
ORDER BY id
LIMIT $3
FOR UPDATE SKIP LOCKED`

// How many rows the retry window holds, counted up to a cap so the count's
// cost stays bounded however long Redis stays away.
const countOwedSQL = `
SELECT count(*) FROM (
  SELECT 1 FROM cache_invalidations WHERE kind = 'keys' AND id >= $1 LIMIT $2
) AS window_rows`

const settleOwedSQL = `DELETE FROM cache_invalidations WHERE id = ANY($1)`

// SettleOwed claims up to limit rows (those from id `from` on when from > 0,
// and those older than grace), hands them to del and, if del succeeds,
// deletes them, all in one transaction: a row whose DEL failed stays for the
// next round. It returns the rows it settled.
func (s *Store) SettleOwed(ctx context.Context, from int64, grace time.Duration, limit int,
	del func([]Owed) error) ([]Owed, error) {
	var owed []Owed
	err := s.withTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		if owed, err = claimOwed(ctx, tx, from, grace, limit); err != nil || len(owed) == 0 {
			return err
		}
		if err := del(owed); err != nil {
			return err
		}
		settled := make([]int64, len(owed))
		for i, o := range owed {
			settled[i] = o.ID
		}
		_, err = tx.Exec(ctx, settleOwedSQL, settled)
		return err
	})
	if err != nil {
		return nil, err
	}
	return owed, nil
}

func claimOwed(ctx context.Context, tx pgx.Tx, from int64, grace time.Duration, limit int) ([]Owed, error) {
	rows, err := tx.Query(ctx, claimOwedSQL, from, grace.Seconds(), limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Owed, error) {
		var o Owed
		var ageSeconds float64
		err := row.Scan(&o.ID, &o.Change.UserID, &o.Change.EmailBefore, &o.Change.EmailAfter, &ageSeconds)
		o.Age = time.Duration(ageSeconds * float64(time.Second))
		return o, err
	})
}

// CountOwed is how many rows of changes are owed from id `from` on, counted
// up to limit.
func (s *Store) CountOwed(ctx context.Context, from int64, limit int) (int, error) {
	var n int
	err := s.withConn(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		return conn.QueryRow(ctx, countOwedSQL, from, limit).Scan(&n)
	})
	return n, err
}

// ForgetOwed deletes the rows of writes whose own DEL succeeded.
func (s *Store) ForgetOwed(ctx context.Context, ids []int64) error {
	return s.withConn(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		_, err := conn.Exec(ctx, settleOwedSQL, ids)
		return err
	})
}

// The flushes a seed owes (kind 'flush', written by the seeder's swap) that
// are older than the grace period. A seeder flushing right now holds its
// row's lock, so SKIP LOCKED leaves the row to it; a row the seeder left
// behind (it died, or Redis failed it) is free.
const claimFlushesSQL = `
SELECT id, extract(epoch FROM clock_timestamp() - created_at)::float8
FROM cache_invalidations
WHERE kind = 'flush' AND created_at < clock_timestamp() - make_interval(secs => $1)
ORDER BY id
FOR UPDATE SKIP LOCKED`

// SettleFlushes claims the owed flushes older than grace, runs flush once
// for all of them and, if it succeeds, deletes them, in one transaction
// (the row locks keep any other core from flushing too). The transaction
// gets a write's bound plus flushDeadline, which bounds flush. It returns
// how long after their commit the settled rows were flushed.
func (s *Store) SettleFlushes(ctx context.Context, grace, flushDeadline time.Duration,
	flush func(context.Context) error) ([]time.Duration, error) {
	var ids []int64
	var ages []time.Duration
	err := s.withTxFor(ctx, s.timeout+ClientGrace+flushDeadline, func(ctx context.Context, tx pgx.Tx) error {
		rows, err := tx.Query(ctx, claimFlushesSQL, grace.Seconds())
		if err != nil {
			return err
		}
		var id int64
		var age float64
		if _, err := pgx.ForEachRow(rows, []any{&id, &age}, func() error {
			ids = append(ids, id)
			ages = append(ages, time.Duration(age*float64(time.Second)))
			return nil
		}); err != nil || len(ids) == 0 {
			return err
		}
		if err := flush(ctx); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, settleOwedSQL, ids)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ages, nil
}
