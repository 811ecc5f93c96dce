package httpapi

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aside-lab/aside/core-go/internal/cache"
	"github.com/aside-lab/aside/core-go/internal/cachetest"
)

// The contract's lease timings (cache.json).
const (
	leaseTTL  = cache.LeaseTTLMillis * time.Millisecond
	leasePoll = 5 * time.Millisecond
	valueTTL  = cache.DefaultTTLSeconds * time.Second
)

func countInDB(ctx context.Context, email string) (int64, error) {
	var n int64
	err := env.Pool.QueryRow(ctx, "SELECT count(*) FROM users WHERE email = $1", email).Scan(&n)
	return n, err
}

// readThrough is one reader of contracts/README.md: hit, or take the lease,
// read PostgreSQL and store only if the lease is still ours. Without the
// lease it polls, then reads the database itself and stores nothing.
func readThrough(ctx context.Context, rdb *redis.Client, email string, stats *readerStats) (int64, error) {
	key := cache.CountKey(email)
	v, err := rdb.Get(ctx, key).Result()
	if err == nil {
		stats.hits.Add(1)
		return strconv.ParseInt(v, 10, 64)
	}
	if !errors.Is(err, redis.Nil) {
		return 0, err
	}
	token, ok, err := cachetest.TakeLease(ctx, rdb, key, leaseTTL)
	if err != nil {
		return 0, err
	}
	if !ok {
		stats.waits.Add(1)
		time.Sleep(leasePoll) // the protocol's poll interval
		return countInDB(ctx, email)
	}
	n, err := countInDB(ctx, email)
	if err != nil {
		return 0, err
	}
	// Not synchronisation: a gap between the read and the store widens the
	// window in which a writer commits, so the race the lease closes really
	// happens many times per run.
	time.Sleep(stats.fillDelay)
	stored, err := cachetest.FillIfLeaseHeld(ctx, rdb, key, token, strconv.FormatInt(n, 10), valueTTL)
	if err != nil {
		return 0, err
	}
	if stored {
		stats.fills.Add(1)
	} else {
		stats.refused.Add(1)
	}
	return n, nil
}

type readerStats struct {
	hits, fills, refused, waits atomic.Int64
	fillDelay                   time.Duration
}

// Readers run the lease protocol on one count key while writers create,
// re-address and delete users with that email through the real HTTP API.
// The test runs in rounds; whenever the writers pause, whatever the cache
// holds must equal the database.
func TestConcurrentReadersAndWritersKeepTheCountCoherent(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	srv := httptest.NewServer(s.router)
	defer srv.Close()
	client := &http.Client{Timeout: 5 * time.Second}
	ctx := context.Background()
	const hot, cold = "hot@example.com", "cold@example.com"
	key := cache.CountKey(hot)
	stats := &readerStats{fillDelay: 2 * time.Millisecond}

	var writes atomic.Int64
	send := func(method, path, body string, want int) (string, error) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		if resp.StatusCode != want {
			return "", fmt.Errorf("%s %s: status %d", method, path, resp.StatusCode)
		}
		if resp.Header.Get("X-Cache-Invalidation") != "" {
			return "", fmt.Errorf("%s %s: invalidation failed", method, path)
		}
		writes.Add(1)
		return resp.Header.Get("Location"), nil
	}
	// write runs one writer until the deadline; live are its users' paths.
	write := func(w, round int, live *[]string, until time.Time) error {
		for i := 0; time.Now().Before(until); i++ {
			body := fmt.Sprintf(`{"username":"w%d-r%d-%d","email":%q}`, w, round, i, hot)
			loc, err := send(http.MethodPost, "/api/v1/users", body, http.StatusCreated)
			if err != nil {
				return err
			}
			*live = append(*live, loc)
			target := (*live)[rand.IntN(len(*live))]
			switch rand.IntN(3) {
			case 0:
				_, err = send(http.MethodDelete, target, "", http.StatusNoContent)
				*live = removeItem(*live, target)
			case 1:
				_, err = send(http.MethodPatch, target, fmt.Sprintf(`{"email":%q}`, cold), http.StatusOK)
			case 2:
				_, err = send(http.MethodPatch, target, fmt.Sprintf(`{"email":%q}`, hot), http.StatusOK)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}

	const writersN, readersN, rounds = 3, 4, 12
	live := make([][]string, writersN)
	for round := 0; round < rounds; round++ {
		stop := make(chan struct{})
		var readers sync.WaitGroup
		for r := 0; r < readersN; r++ {
			readers.Add(1)
			go func() {
				defer readers.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := readThrough(ctx, env.Redis, hot, stats); err != nil {
						t.Errorf("reader: %v", err)
						return
					}
				}
			}()
		}
		var writers sync.WaitGroup
		until := time.Now().Add(120 * time.Millisecond)
		for w := 0; w < writersN; w++ {
			writers.Add(1)
			go func() {
				defer writers.Done()
				if err := write(w, round, &live[w], until); err != nil {
					t.Error(err)
				}
			}()
		}
		writers.Wait()
		close(stop)
		readers.Wait() // each reader finishes its current read, store included
		if t.Failed() {
			return
		}
		want, err := countInDB(ctx, hot)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := env.Redis.Get(ctx, key).Result(); err == nil {
			if v != strconv.FormatInt(want, 10) {
				t.Fatalf("round %d: stale cache once the writers paused: cached %s, database %d", round, v, want)
			}
		} else if !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
	}

	want, _ := countInDB(ctx, hot)
	fresh := &readerStats{}
	got, err := readThrough(ctx, env.Redis, hot, fresh)
	if err != nil || got != want {
		t.Fatalf("fresh read %d (%v), database %d", got, err, want)
	}
	if v := env.Redis.Get(ctx, key).Val(); v != strconv.FormatInt(want, 10) {
		t.Fatalf("after a fresh read the cache holds %q, database %d", v, want)
	}
	t.Logf("writes %d; reader hits %d, fills %d, fills refused by an invalidation %d, lease waits %d",
		writes.Load(), stats.hits.Load(), stats.fills.Load(), stats.refused.Load(), stats.waits.Load())
	if writes.Load() < 30 || stats.fills.Load() == 0 || stats.refused.Load() == 0 {
		t.Fatal("too little contention for the test to mean anything")
	}
}

func removeItem(list []string, item string) []string {
	for i, v := range list {
		if v == item {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}
