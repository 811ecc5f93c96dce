package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aside-lab/aside/core-go/internal/store"
	"github.com/aside-lab/aside/core-go/internal/testenv"
)

// holdGate takes the seeding gate EXCLUSIVE on a connection of its own, as
// the seeder does; the returned function lets it go.
func holdGate(t *testing.T) func() {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, env.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", store.WriteGateLock); err != nil {
		t.Fatal(err)
	}
	done := false
	release := func() {
		if !done {
			done = true
			// Unlock before closing: the server lets a closed session's
			// locks go only some time after the client hung up.
			if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", store.WriteGateLock); err != nil {
				t.Error(err)
			}
			_ = conn.Close(ctx)
		}
	}
	t.Cleanup(release)
	return release
}

func TestGateKeyIsTheContracts(t *testing.T) {
	var contract struct {
		WriteGateLock int64 `json:"write_gate_lock"`
	}
	testenv.LoadContract(t, "seeding.json", &contract)
	if contract.WriteGateLock != store.WriteGateLock {
		t.Fatalf("seeding.json write_gate_lock %d, the core uses %d", contract.WriteGateLock, store.WriteGateLock)
	}
}

// While the gate is held every write fails with ErrSeeding and writes
// nothing (no row, no outbox row, no idempotency key); once it is let go
// the same writes go through.
func TestWritesAreRefusedWhileTheGateIsHeld(t *testing.T) {
	env.Reset(t)
	s := newStore(t, env.DatabaseURL, 2*time.Second)
	ctx := context.Background()
	u, err := s.CreateUser(ctx, "ada", "ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetOwed(ctx, []int64{u.Outbox}); err != nil {
		t.Fatal(err)
	}

	release := holdGate(t)
	start := time.Now()
	if _, err := s.CreateUser(ctx, "bob", "bob@example.com"); !errors.Is(err, store.ErrSeeding) {
		t.Errorf("create: %v, want ErrSeeding", err)
	}
	if _, err := s.UpdateUser(ctx, u.ID, store.Update{Email: ptr("new@example.com")}); !errors.Is(err, store.ErrSeeding) {
		t.Errorf("update: %v, want ErrSeeding", err)
	}
	if _, err := s.UpdateUser(ctx, 999, store.Update{Email: ptr("new@example.com")}); !errors.Is(err, store.ErrSeeding) {
		t.Errorf("update of a missing user: %v, want ErrSeeding", err)
	}
	if _, err := s.DeleteUser(ctx, u.ID); !errors.Is(err, store.ErrSeeding) {
		t.Errorf("delete: %v, want ErrSeeding", err)
	}
	if _, err := s.CreateUserOnce(ctx, "k1", []byte("h"), "cy", "cy@example.com"); !errors.Is(err, store.ErrSeeding) {
		t.Errorf("idempotent create: %v, want ErrSeeding", err)
	}
	// A try lock: refused at once, not after waiting for the seed.
	if d := time.Since(start); d > time.Second {
		t.Errorf("five refused writes took %s", d)
	}
	var users, owed, keys int
	if err := env.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM users WHERE email = 'ada@example.com'),
		(SELECT count(*) FROM cache_invalidations), (SELECT count(*) FROM idempotency_keys)`).Scan(&users, &owed, &keys); err != nil {
		t.Fatal(err)
	}
	if env.UserCount(t) != 1 || users != 1 || owed != 0 || keys != 0 {
		t.Fatalf("refused writes left %d users (%d unchanged), %d outbox rows, %d keys", env.UserCount(t), users, owed, keys)
	}

	release()
	if _, err := s.CreateUser(ctx, "bob", "bob@example.com"); err != nil {
		t.Errorf("create after the seed: %v", err)
	}
	if _, err := s.UpdateUser(ctx, u.ID, store.Update{Email: ptr("new@example.com")}); err != nil {
		t.Errorf("update after the seed: %v", err)
	}
	if _, err := s.UpdateUser(ctx, 999, store.Update{Email: ptr("new@example.com")}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("update of a missing user after the seed: %v, want ErrNotFound", err)
	}
	if _, err := s.CreateUserOnce(ctx, "k1", []byte("h"), "cy", "cy@example.com"); err != nil {
		t.Errorf("idempotent create after the seed: %v", err)
	}
	if _, err := s.DeleteUser(ctx, u.ID); err != nil {
		t.Errorf("delete after the seed: %v", err)
	}
}

// A write holds the gate SHARED until it commits: the seeder's EXCLUSIVE
// lock waits for it, so the seed never starts under a write in flight.
func TestTheSeederWaitsForAWriteInFlight(t *testing.T) {
	env.Reset(t)
	ctx := context.Background()
	s := newStore(t, env.DatabaseURL, 5*time.Second)
	u, err := s.CreateUser(ctx, "ada", "ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	// Hold ada's row so the update waits after passing the gate.
	blocker, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(ctx) }()
	if _, err := blocker.Exec(ctx, "SELECT 1 FROM users WHERE id = $1 FOR UPDATE", u.ID); err != nil {
		t.Fatal(err)
	}
	updated := make(chan error, 1)
	go func() {
		_, err := s.UpdateUser(ctx, u.ID, store.Update{Email: ptr("new@example.com")})
		updated <- err
	}()
	seeder, err := pgx.Connect(ctx, env.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer seeder.Close(ctx)
	// Wait until the update holds the gate (it shows in pg_locks).
	deadline := time.Now().Add(5 * time.Second)
	for {
		var held bool
		if err := env.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory'
			AND mode = 'ShareLock' AND granted AND (classid::bigint << 32 | objid::bigint) = $1)`,
			store.WriteGateLock).Scan(&held); err != nil {
			t.Fatal(err)
		}
		if held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the update never took the gate")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var got bool
	if err := seeder.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", store.WriteGateLock).Scan(&got); err != nil || got {
		t.Fatalf("the seeder got the gate under a write in flight (%v, %v)", got, err)
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-updated; err != nil {
		t.Fatalf("the update that passed the gate: %v", err)
	}
	if err := seeder.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", store.WriteGateLock).Scan(&got); err != nil || !got {
		t.Fatalf("the seeder could not take the gate after the write committed (%v, %v)", got, err)
	}
	if _, err := seeder.Exec(ctx, "SELECT pg_advisory_unlock($1)", store.WriteGateLock); err != nil {
		t.Fatal(err)
	}
}
