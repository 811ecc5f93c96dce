package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aside-lab/aside/core-go/internal/store"
	"github.com/aside-lab/aside/core-go/internal/testenv"
)

func keyCount(t *testing.T) int {
	t.Helper()
	var n int
	if err := env.Pool.QueryRow(context.Background(), "SELECT count(*) FROM idempotency_keys").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCreateUserOnceStoresThenReplays(t *testing.T) {
	env.Reset(t)
	s := newStore(t, env.DatabaseURL, 2*time.Second)
	ctx := context.Background()
	hash := []byte("hash-a")

	first, err := s.CreateUserOnce(ctx, "k1", hash, "ada", "ada@example.com")
	if err != nil || first.Replayed || first.ID != 1 || first.Outbox == 0 {
		t.Fatalf("first: %+v %v", first, err)
	}
	var status int
	var body []byte
	if err := env.Pool.QueryRow(ctx, "SELECT status, response FROM idempotency_keys WHERE key = 'k1'").Scan(&status, &body); err != nil ||
		status != 201 || !strings.HasPrefix(string(body), `{"id":1,"username":"ada","email":"ada@example.com","created_at":`) {
		t.Fatalf("stored %d %q %v", status, body, err)
	}
	// The replay is the row as created, to the microsecond, and owes no invalidation of its own.
	again, err := s.CreateUserOnce(ctx, "k1", hash, "ada", "ada@example.com")
	if err != nil || !again.Replayed || again.User != (store.User{ID: 1, Username: "ada", Email: "ada@example.com", CreatedAt: again.CreatedAt}) ||
		!again.CreatedAt.Equal(first.CreatedAt) || again.Outbox != 0 {
		t.Fatalf("replay: %+v %v, first %+v", again, err, first)
	}
	if n := env.UserCount(t); n != 1 {
		t.Fatalf("%d users after a replay, want 1", n)
	}
	// Another key is another request.
	other, err := s.CreateUserOnce(ctx, "k2", hash, "bob", "bob@example.com")
	if err != nil || other.Replayed || other.ID != 2 {
		t.Fatalf("second key: %+v %v", other, err)
	}
}

func TestCreateUserOnceRefusesAKeyReusedForAnotherRequest(t *testing.T) {
	env.Reset(t)
	s := newStore(t, env.DatabaseURL, 2*time.Second)
	ctx := context.Background()
	if _, err := s.CreateUserOnce(ctx, "k", []byte("one"), "ada", "ada@example.com"); err != nil {
		t.Fatal(err)
	}
	_, err := s.CreateUserOnce(ctx, "k", []byte("two"), "bob", "bob@example.com")
	if !errors.Is(err, store.ErrKeyReused) {
		t.Fatalf("err = %v, want ErrKeyReused", err)
	}
	if n := env.UserCount(t); n != 1 {
		t.Fatalf("%d users, want 1", n)
	}
}

// A failed create leaves no key behind: a retry with it can still succeed.
func TestAFailedCreateDoesNotConsumeTheKey(t *testing.T) {
	env.Reset(t)
	s := newStore(t, env.DatabaseURL, 2*time.Second)
	ctx := context.Background()
	taken, err := s.CreateUser(ctx, "ada", "ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateUserOnce(ctx, "k", []byte("h"), "ada", "x@example.com"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
	if n := keyCount(t); n != 0 {
		t.Fatalf("%d keys stored by a failed create", n)
	}
	if _, err := s.DeleteUser(ctx, taken.ID); err != nil {
		t.Fatal(err)
	}
	once, err := s.CreateUserOnce(ctx, "k", []byte("h"), "ada", "x@example.com")
	if err != nil || once.Replayed {
		t.Fatalf("retry after the name was freed: %+v %v", once, err)
	}
}

// Many simultaneous requests with one key: one insert, every other one
// waits for it and replays its answer.
func TestConcurrentDuplicatesCreateExactlyOneRow(t *testing.T) {
	env.Reset(t)
	s := newStore(t, env.DatabaseURL, 5*time.Second)
	const n = 16
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]store.Once, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = s.CreateUserOnce(context.Background(), "same", []byte("h"), "ada", "ada@example.com")
		}()
	}
	close(start)
	wg.Wait()
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if !results[i].Replayed {
			fresh++
		}
		if results[i].ID != 1 || !results[i].CreatedAt.Equal(results[0].CreatedAt) {
			t.Fatalf("request %d answered %+v, want the first row", i, results[i].User)
		}
	}
	if fresh != 1 || env.UserCount(t) != 1 || keyCount(t) != 1 {
		t.Fatalf("%d fresh answers, %d users, %d keys; want 1, 1, 1", fresh, env.UserCount(t), keyCount(t))
	}
}

func TestAnExpiredKeyIsUsedAfresh(t *testing.T) {
	env.Reset(t)
	s := newStore(t, env.DatabaseURL, 2*time.Second)
	ctx := context.Background()
	if _, err := env.Pool.Exec(ctx, `INSERT INTO idempotency_keys (key, request_hash, status, response, created_at)
		VALUES ('old', 'other', 201, '99', now() - interval '24 hours 1 minute')`); err != nil {
		t.Fatal(err)
	}
	once, err := s.CreateUserOnce(ctx, "old", []byte("h"), "ada", "ada@example.com")
	if err != nil || once.Replayed || once.ID != 1 {
		t.Fatalf("expired key: %+v %v", once, err)
	}
	var hash string
	var age time.Duration
	if err := env.Pool.QueryRow(ctx, "SELECT convert_from(request_hash, 'UTF8'), extract(epoch FROM now() - created_at)::bigint * 1000000000 FROM idempotency_keys WHERE key = 'old'").
		Scan(&hash, &age); err != nil || hash != "h" || age > time.Minute {
		t.Fatalf("row not taken over: hash %q age %s err %v", hash, age, err)
	}
	// A key just inside the TTL still replays.
	if _, err := env.Pool.Exec(ctx, `INSERT INTO idempotency_keys (key, request_hash, status, response, created_at)
		VALUES ('recent', 'h', 201, '{"id":7,"username":"bob","email":"bob@example.com","created_at":"2026-01-02T03:04:05.000006Z"}',
			now() - interval '23 hours 59 minutes')`); err != nil {
		t.Fatal(err)
	}
	recent, err := s.CreateUserOnce(ctx, "recent", []byte("h"), "bob", "bob@example.com")
	if err != nil || !recent.Replayed || recent.ID != 7 || recent.Username != "bob" ||
		!recent.CreatedAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)) {
		t.Fatalf("key inside the TTL: %+v %v", recent, err)
	}
}

func TestPurgeDeletesExpiredKeysInBoundedBatches(t *testing.T) {
	env.Reset(t)
	s := newStore(t, env.DatabaseURL, 2*time.Second)
	ctx := context.Background()
	for i, age := range []string{"25 hours", "30 hours", "48 hours", "1 hour"} {
		if _, err := env.Pool.Exec(ctx, `INSERT INTO idempotency_keys (key, request_hash, status, response, created_at)
			VALUES ($1, 'h', 201, '1', now() - $2::interval)`, fmt.Sprintf("k%d", i), age); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.PurgeExpiredKeys(ctx, 2); err != nil || n != 2 {
		t.Fatalf("first batch deleted %d (%v), want 2", n, err)
	}
	if n, err := s.PurgeExpiredKeys(ctx, 2); err != nil || n != 1 {
		t.Fatalf("second batch deleted %d (%v), want 1", n, err)
	}
	var left string
	if err := env.Pool.QueryRow(ctx, "SELECT string_agg(key, ',') FROM idempotency_keys").Scan(&left); err != nil || left != "k3" {
		t.Fatalf("left %q (%v), want only the fresh key k3", left, err)
	}
}

// insertExpiredKeys adds n keys past the TTL, of distinct ages, and one
// fresh key that no purge may touch.
func insertExpiredKeys(t *testing.T, n int) {
	t.Helper()
	if _, err := env.Pool.Exec(context.Background(), `
		INSERT INTO idempotency_keys (key, request_hash, status, response, created_at)
		SELECT 'old-' || i, 'h'::bytea, 201, '1'::bytea, now() - interval '25 hours' - i * interval '1 second'
		FROM generate_series(1, $1) AS i
		UNION ALL SELECT 'fresh', 'h'::bytea, 201, '1'::bytea, now()`, n); err != nil {
		t.Fatal(err)
	}
}

// A backlog of many batches goes in one cycle, in bounded rounds: one batch
// per cycle (per minute in the core) could never keep up with more than
// batch/interval keyed creates a second.
func TestOnePurgeCycleRemovesABacklogOfManyBatches(t *testing.T) {
	env.Reset(t)
	s := newStore(t, env.DatabaseURL, 2*time.Second)
	const keys, batch = 5000, 1000
	insertExpiredKeys(t, keys)
	start := time.Now()
	n, err := s.PurgeExpiredKeysCycle(context.Background(), batch, 50*time.Millisecond)
	took := time.Since(start)
	if err != nil || n != keys {
		t.Fatalf("one cycle deleted %d (%v), want all %d", n, err, keys)
	}
	if left := keyCount(t); left != 1 {
		t.Fatalf("%d keys left, want only the fresh one", left)
	}
	// Five rounds and four 50 ms pauses; the bound leaves room for a busy machine.
	if took > 10*time.Second {
		t.Fatalf("the cycle took %s", took)
	}
	t.Logf("%d expired keys purged in %s (%.0f keys/s, batch %d, 50 ms pauses)", n, took,
		float64(n)/took.Seconds(), batch)
}

// A cycle ends between rounds when its context does, without another round.
func TestPurgeCycleStopsWithItsContext(t *testing.T) {
	env.Reset(t)
	s := newStore(t, env.DatabaseURL, 2*time.Second)
	insertExpiredKeys(t, 30)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	n, err := s.PurgeExpiredKeysCycle(ctx, 10, time.Hour)
	if !errors.Is(err, context.DeadlineExceeded) || n != 10 {
		t.Fatalf("deleted %d (%v), want one round of 10 then the context's end", n, err)
	}
}

// The loop runs a whole cycle when it starts (a restarted core does not
// wait an interval), then one per interval until cancelled.
func TestPurgeLoopRunsUntilCancelled(t *testing.T) {
	env.Reset(t)
	s := newStore(t, env.DatabaseURL, 2*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	insertExpiredKeys(t, 25)
	done := make(chan struct{})
	go func() {
		s.PurgeExpiredKeysEvery(ctx, store.PurgeOptions{Interval: time.Hour, Batch: 10, Pause: time.Millisecond},
			func(err error) { t.Error(err) })
		close(done)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for keyCount(t) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the purge loop left %d keys, want only the fresh one", keyCount(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the purge loop did not stop when cancelled")
	}
}

// With a lifetime of seconds, a key is replayed while it lives, then taken
// over by a new request and, once expired again, purged: claim and purge
// both follow the store's TTL, not a fixed 24 h.
func TestAShortTTLLetsAKeyBeReclaimedAndPurged(t *testing.T) {
	env.Reset(t)
	const ttl = time.Second
	s := newStore(t, env.DatabaseURL, 2*time.Second, store.WithIdempotencyTTL(ttl))
	ctx := context.Background()
	first, err := s.CreateUserOnce(ctx, "k", []byte("one"), "ada", "ada@example.com")
	if err != nil || first.Replayed {
		t.Fatalf("first: %+v %v", first, err)
	}
	if again, err := s.CreateUserOnce(ctx, "k", []byte("one"), "ada", "ada@example.com"); err != nil || !again.Replayed {
		t.Fatalf("within the TTL: %+v %v, want a replay", again, err)
	}
	if n, err := s.PurgeExpiredKeys(ctx, 10); err != nil || n != 0 {
		t.Fatalf("purge within the TTL deleted %d (%v), want 0", n, err)
	}
	// Another request under the same key: refused while the key lives,
	// created once it has expired (polled: the database's clock decides).
	deadline := time.Now().Add(10 * ttl)
	var taken store.Once
	for {
		taken, err = s.CreateUserOnce(ctx, "k", []byte("two"), "bob", "bob@example.com")
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrKeyReused) || time.Now().After(deadline) {
			t.Fatalf("reuse after the TTL: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if taken.Replayed || taken.Username != "bob" {
		t.Fatalf("expired key not taken over: %+v", taken)
	}
	for keyCount(t) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the purge left %d keys past the TTL", keyCount(t))
		}
		if _, err := s.PurgeExpiredKeys(ctx, 10); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A store of the default lifetime keeps a key of a few seconds.
	if _, err := s.CreateUserOnce(ctx, "k2", []byte("h"), "cy", "cy@example.com"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, "UPDATE idempotency_keys SET created_at = now() - interval '5 seconds'"); err != nil {
		t.Fatal(err)
	}
	if n, err := newStore(t, env.DatabaseURL, 2*time.Second).PurgeExpiredKeys(ctx, 10); err != nil || n != 0 {
		t.Fatalf("a store of the default TTL purged %d keys of 5 s (%v)", n, err)
	}
}

func TestCreateUserOnceUnavailableAppliesNothing(t *testing.T) {
	s := newStore(t, "postgresql://aside@"+testenv.ClosedAddr(t)+"/aside", 2*time.Second)
	_, err := s.CreateUserOnce(context.Background(), "k", []byte("h"), "ada", "ada@example.com")
	var u *store.UnavailableError
	if !errors.As(err, &u) || u.MaybeApplied {
		t.Fatalf("err = %v, want an UnavailableError that applied nothing", err)
	}
}
