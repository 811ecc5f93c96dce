package outbox_test

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aside-lab/aside/core-go/internal/cache"
	"github.com/aside-lab/aside/core-go/internal/outbox"
	"github.com/aside-lab/aside/core-go/internal/store"
	"github.com/aside-lab/aside/core-go/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// pagedStore is the real store, recording the most rows one page handed to the DEL.
type pagedStore struct {
	*store.Store
	mu      sync.Mutex
	largest int
}

func (p *pagedStore) SettleOwed(ctx context.Context, from int64, grace time.Duration, limit int,
	del func([]store.Owed) error) ([]store.Owed, error) {
	return p.Store.SettleOwed(ctx, from, grace, limit, func(owed []store.Owed) error {
		p.mu.Lock()
		p.largest = max(p.largest, len(owed))
		p.mu.Unlock()
		return del(owed)
	})
}

func (p *pagedStore) largestPage() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.largest
}

type observed struct {
	waiting, failures atomic.Int64
}

func (o *observed) Settled([]time.Duration) {}
func (o *observed) Failed()                 { o.failures.Add(1) }
func (o *observed) Waiting(rows int)        { o.waiting.Store(int64(rows)) }

func pollUntil(t *testing.T, within time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// While Redis is away, the writes whose DEL failed wait in the table, not in
// the relay: each round reads one page of them, however many there are, and
// the gauge counts them. Once Redis answers, every stale key goes and every
// row is settled.
func TestRetriesWaitInTheTableReadInPagesAndNoneIsLost(t *testing.T) {
	env.Reset(t)
	ctx := context.Background()
	redisURL, err := url.Parse(env.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.StartProxy(t, redisURL.Host)
	redisURL.Host = proxy.Addr
	paged := &pagedStore{Store: store.New(env.Pool, 2*time.Second)}
	opts := outbox.DefaultOptions(300 * time.Millisecond)
	opts.Grace = time.Hour // only the retry window settles rows here
	opts.Batch = 50
	opts.RetryEvery = 20 * time.Millisecond
	obs := &observed{}
	relay := outbox.New(paged, func(readTimeout time.Duration) redis.UniversalClient {
		client, _ := cache.NewClient(redisURL.String(),
			cache.ClientOptions{Timeout: 200 * time.Millisecond, ReadTimeout: readTimeout, PoolSize: 1})
		return client
	}, opts, obs)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go relay.Run(runCtx)

	proxy.Cut()
	const writes = 600
	var stale []string
	for i := range writes {
		name := fmt.Sprintf("retried%d", i)
		email := name + "@example.com"
		u, err := paged.CreateUser(ctx, name, email)
		if err != nil {
			t.Fatal(err)
		}
		keys := cache.StaleAfterCreate(cache.UserRef{ID: u.ID, Email: email})
		for _, key := range keys {
			if err := env.Redis.Set(ctx, key, "stale", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
		}
		stale = append(stale, keys...)
		relay.Retry(u.Outbox)
	}
	pollUntil(t, 10*time.Second, "the window counted while Redis is away", func() bool {
		return obs.waiting.Load() == writes && obs.failures.Load() >= 3
	})
	if got := paged.largestPage(); got > opts.Batch {
		t.Fatalf("a round read %d owed rows at once while Redis was away, want at most %d", got, opts.Batch)
	}

	proxy.Resume()
	pollUntil(t, 10*time.Second, "every stale key deleted and every row settled", func() bool {
		return env.Redis.Exists(ctx, stale...).Val() == 0 && owedRows(t) == 0 && obs.waiting.Load() == 0
	})
	if got := paged.largestPage(); got > opts.Batch {
		t.Fatalf("a round read %d owed rows at once, want at most %d", got, opts.Batch)
	}
}

func owedRows(t *testing.T) int {
	t.Helper()
	var n int
	if err := env.Pool.QueryRow(context.Background(), "SELECT count(*) FROM cache_invalidations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
