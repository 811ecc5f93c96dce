package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aside-lab/aside/core-go/internal/cache"
	"github.com/aside-lab/aside/core-go/internal/store"
)

// Every committed write leaves exactly one owed row describing its change; a
// write that fails leaves none.
func TestEachWriteOwesItsChange(t *testing.T) {
	env.Reset(t)
	s := newStore(t, env.DatabaseURL, 2*time.Second)
	ctx := context.Background()

	u, err := s.CreateUser(ctx, "ada", "ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	up, err := s.UpdateUser(ctx, u.ID, store.Update{Email: ptr("lovelace@example.com")})
	if err != nil {
		t.Fatal(err)
	}
	del, err := s.DeleteUser(ctx, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateUser(ctx, "bob", "b@example.com"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateUser(ctx, "bob", "c@example.com"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate: %v", err)
	}
	if _, err := s.DeleteUser(ctx, u.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}

	// Claim everything (grace 0) without settling: the DEL fails.
	var owed []store.Owed
	_, err = s.SettleOwed(ctx, 0, 0, 100, func(o []store.Owed) error {
		owed = o
		return errors.New("redis down")
	})
	if err == nil || len(owed) != 4 {
		t.Fatalf("claimed %d rows (%v), want 4 and the DEL's error", len(owed), err)
	}
	wantIDs := []int64{u.Outbox, up.Outbox, del.Outbox}
	for i, w := range wantIDs {
		if owed[i].ID != w {
			t.Fatalf("row %d has id %d, the write said %d", i, owed[i].ID, w)
		}
	}
	want := [][]string{
		cache.StaleAfterCreate(cache.UserRef{ID: u.ID, Email: "ada@example.com"}),
		cache.StaleAfterUpdate(cache.UserRef{ID: u.ID, Email: "ada@example.com"}, cache.UserRef{ID: u.ID, Email: "lovelace@example.com"}),
		cache.StaleAfterDelete(cache.UserRef{ID: u.ID, Email: "lovelace@example.com"}),
	}
	for i, keys := range want {
		if got := owed[i].Change.StaleKeys(); !slices.Equal(got, keys) {
			t.Fatalf("row %d owes %q, want %q", i, got, keys)
		}
	}

	// The failed DEL left every row; a successful one settles them all.
	settled, err := s.SettleOwed(ctx, 0, 0, 100, func([]store.Owed) error { return nil })
	if err != nil || len(settled) != 4 {
		t.Fatalf("settled %d (%v), want 4", len(settled), err)
	}
	if err := s.ForgetOwed(ctx, []int64{u.Outbox}); err != nil {
		t.Fatalf("forgetting a settled row: %v", err)
	}
	left, err := s.SettleOwed(ctx, 0, 0, 100, func([]store.Owed) error { return nil })
	if err != nil || len(left) != 0 {
		t.Fatalf("rows left: %d (%v)", len(left), err)
	}
}

// Rows younger than the grace period are taken only when asked for by id.
func TestYoungRowsWaitForTheirWriteUnlessAskedFor(t *testing.T) {
	env.Reset(t)
	s := newStore(t, env.DatabaseURL, 2*time.Second)
	ctx := context.Background()
	a, _ := s.CreateUser(ctx, "a", "a@example.com")
	b, _ := s.CreateUser(ctx, "b", "b@example.com")
	var seen []int64
	collect := func(o []store.Owed) error {
		for _, r := range o {
			seen = append(seen, r.ID)
		}
		return nil
	}
	if _, err := s.SettleOwed(ctx, b.Outbox, time.Hour, 100, collect); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seen, []int64{b.Outbox}) {
		t.Fatalf("settled %v, want only the asked-for %d (not %d)", seen, b.Outbox, a.Outbox)
	}
}

// owedFlush inserts the row a seeder's swap leaves: a flush of the whole cache.
func owedFlush(t *testing.T) int64 {
	t.Helper()
	var id int64
	if err := env.Pool.QueryRow(context.Background(),
		"INSERT INTO cache_invalidations (kind) VALUES ('flush') RETURNING id").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func owedRows(t *testing.T) int {
	t.Helper()
	var n int
	if err := env.Pool.QueryRow(context.Background(), "SELECT count(*) FROM cache_invalidations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// An owed flush is run once and then deleted; a failed one stays; one
// younger than the grace period, or locked by a seeder still flushing, is
// left alone; and the writes' DEL rounds never take it.
func TestOwedFlushIsRunOnceWhenFreeAndOld(t *testing.T) {
	env.Reset(t)
	s := newStore(t, env.DatabaseURL, 2*time.Second)
	ctx := context.Background()
	owedFlush(t)
	flushes := 0
	flush := func(context.Context) error { flushes++; return nil }

	if got, err := s.SettleFlushes(ctx, time.Hour, time.Second, flush); err != nil || len(got) != 0 || flushes != 0 {
		t.Fatalf("young row: settled %d, flushed %d, %v; want it left alone", len(got), flushes, err)
	}
	if claimed, err := s.SettleOwed(ctx, 0, 0, 100, func([]store.Owed) error { return nil }); err != nil || len(claimed) != 0 {
		t.Fatalf("a DEL round took %d rows (%v): a flush row is not a change", len(claimed), err)
	}

	// A seeder flushing right now holds the row's lock.
	seeder, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := seeder.Exec(ctx, "SELECT id FROM cache_invalidations WHERE kind = 'flush' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	got, err := s.SettleFlushes(ctx, 0, time.Second, flush)
	_ = seeder.Rollback(ctx) // the seeder died: the row is free again
	if err != nil || len(got) != 0 || flushes != 0 {
		t.Fatalf("locked row: settled %d, flushed %d, %v; want it left to the seeder", len(got), flushes, err)
	}

	if _, err := s.SettleFlushes(ctx, 0, time.Second, func(context.Context) error {
		return errors.New("redis down")
	}); err == nil || owedRows(t) != 1 {
		t.Fatalf("failed flush: err %v, %d rows; want the error and the row kept", err, owedRows(t))
	}
	owedFlush(t) // a second seed's, not yet flushed: one flush serves both
	got, err = s.SettleFlushes(ctx, 0, time.Second, flush)
	if err != nil || len(got) != 2 || flushes != 1 || owedRows(t) != 0 {
		t.Fatalf("settled %d, flushed %d, %v, %d rows left; want 2 settled by 1 flush", len(got), flushes, err, owedRows(t))
	}
}
