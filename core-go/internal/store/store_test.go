package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aside-lab/aside/core-go/internal/store"
	"github.com/aside-lab/aside/core-go/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func newStore(t *testing.T, url string, timeout time.Duration, opts ...store.Option) *store.Store {
	t.Helper()
	pool, err := store.NewPool(context.Background(), url, store.PoolOptions{
		MaxConns: 8, ConnectTimeout: time.Second, HealthCheckPeriod: time.Minute, StatementTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return store.New(pool, timeout, opts...)
}

func ptr(s string) *string { return &s }

func TestWritesRoundTrip(t *testing.T) {
	env.Reset(t)
	s := newStore(t, env.DatabaseURL, 2*time.Second)
	ctx := context.Background()

	u, err := s.CreateUser(ctx, "ada", "ada@example.com")
	if err != nil || u.ID != 1 || u.Username != "ada" || u.Email != "ada@example.com" || u.CreatedAt.IsZero() {
		t.Fatalf("create: %+v %v", u, err)
	}
	up, err := s.UpdateUser(ctx, u.ID, store.Update{Email: ptr("lovelace@example.com")})
	if err != nil || up.OldEmail != "ada@example.com" || up.Email != "lovelace@example.com" || up.Username != "ada" {
		t.Fatalf("update: %+v %v", up, err)
	}
	if !up.CreatedAt.Equal(u.CreatedAt) {
		t.Fatalf("created_at changed: %v -> %v", u.CreatedAt, up.CreatedAt)
	}
	del, err := s.DeleteUser(ctx, u.ID)
	if err != nil || del.Email != "lovelace@example.com" {
		t.Fatalf("delete: %+v %v", del, err)
	}
	if _, err := s.DeleteUser(ctx, u.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	if _, err := s.UpdateUser(ctx, u.ID, store.Update{Username: ptr("x")}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of a missing user: %v, want ErrNotFound", err)
	}
}

func TestUsernameConflict(t *testing.T) {
	env.Reset(t)
	s := newStore(t, env.DatabaseURL, 2*time.Second)
	ctx := context.Background()
	a, _ := s.CreateUser(ctx, "ada", "a@example.com")
	b, _ := s.CreateUser(ctx, "bob", "b@example.com")
	if _, err := s.CreateUser(ctx, "ada", "c@example.com"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("create with a taken username: %v", err)
	}
	if _, err := s.UpdateUser(ctx, b.ID, store.Update{Username: ptr("ada"), Email: ptr("z@example.com")}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("rename to a taken username: %v", err)
	}
	// Keeping one's own name is no conflict.
	if _, err := s.UpdateUser(ctx, a.ID, store.Update{Username: ptr("ada")}); err != nil {
		t.Fatalf("rename to own username: %v", err)
	}
	var email string
	_ = env.Pool.QueryRow(ctx, "SELECT email FROM users WHERE id = $1", b.ID).Scan(&email)
	if email != "b@example.com" || env.UserCount(t) != 2 {
		t.Fatalf("a failed write changed data: email %q, %d rows", email, env.UserCount(t))
	}
}

// Concurrent updates of one row must each see the email the previous one
// left: the old emails returned form one unbroken chain.
func TestConcurrentUpdatesReturnAChainOfOldEmails(t *testing.T) {
	env.Reset(t)
	s := newStore(t, env.DatabaseURL, 5*time.Second)
	ctx := context.Background()
	u, err := s.CreateUser(ctx, "chain", "e0@example.com")
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	oldOf := make(map[string]string, n) // new email -> old email it replaced
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			up, err := s.UpdateUser(ctx, u.ID, store.Update{Email: ptr(fmt.Sprintf("e%d@example.com", i))})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			oldOf[up.Email] = up.OldEmail
			mu.Unlock()
		}()
	}
	wg.Wait()
	var final string
	_ = env.Pool.QueryRow(ctx, "SELECT email FROM users WHERE id = $1", u.ID).Scan(&final)
	// Walk back from the final email: every update must be visited once.
	seen := 0
	for e := final; e != "e0@example.com"; seen++ {
		prev, ok := oldOf[e]
		if !ok || seen > n {
			t.Fatalf("broken chain at %q after %d steps (map %v)", e, seen, oldOf)
		}
		e = prev
	}
	if seen != n {
		t.Fatalf("chain has %d links, want %d", seen, n)
	}
}

func TestUnavailableWhenPostgresIsDown(t *testing.T) {
	s := newStore(t, "postgresql://aside@"+testenv.ClosedAddr(t)+"/aside", 2*time.Second)
	start := time.Now()
	_, err := s.CreateUser(context.Background(), "ada", "ada@example.com")
	var u *store.UnavailableError
	if !errors.As(err, &u) || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("err = %v, want an UnavailableError", err)
	}
	if u.MaybeApplied {
		t.Fatal("a failed connect cannot have applied anything")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("took %s to fail", d)
	}
}

func TestPingAndPoolFromURL(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), env.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := store.New(pool, time.Second)
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	// NewPool sets the server's statement_timeout on its connections.
	withTimeout, err := store.NewPool(context.Background(), env.DatabaseURL, store.PoolOptions{
		MaxConns: 1, ConnectTimeout: time.Second, HealthCheckPeriod: time.Minute, StatementTimeout: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer withTimeout.Close()
	var setting string
	if err := withTimeout.QueryRow(context.Background(), "SHOW statement_timeout").Scan(&setting); err != nil || setting != "1500ms" {
		t.Fatalf("statement_timeout %q (%v), want 1500ms", setting, err)
	}
	if _, err := store.NewPool(context.Background(), "::not a url::", store.PoolOptions{MaxConns: 1}); err == nil {
		t.Fatal("NewPool accepted a bad URL")
	}
}
