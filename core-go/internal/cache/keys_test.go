package cache_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/aside-lab/aside/core-go/internal/cache"
	"github.com/aside-lab/aside/core-go/internal/testenv"
)

type ref struct {
	ID    int64  `json:"id"`
	Email string `json:"email"`
}

type cacheContract struct {
	Prefix            string `json:"prefix"`
	TTLSecondsDefault int    `json:"ttl_seconds_default"`
	Lease             struct {
		Suffix string `json:"suffix"`
		TTLMs  int    `json:"ttl_ms"`
	} `json:"lease"`
	Tiers struct {
		InvalidationChannel string   `json:"invalidation_channel"`
		TrackingPrefixes    []string `json:"tracking_prefixes"`
	} `json:"tiers"`
	Keys []struct {
		Kind  string `json:"kind"`
		Email string `json:"email"`
		ID    int64  `json:"id"`
		Key   string `json:"key"`
	} `json:"keys"`
	Invalidation []struct {
		Name   string   `json:"name"`
		Write  string   `json:"write"`
		Before *ref     `json:"before"`
		After  *ref     `json:"after"`
		Keys   []string `json:"keys"`
	} `json:"invalidation"`
}

func loadContract(t *testing.T) cacheContract {
	var c cacheContract
	testenv.LoadContract(t, "cache.json", &c)
	return c
}

func TestConstantsMatchContract(t *testing.T) {
	c := loadContract(t)
	if c.Prefix != cache.Prefix || c.Lease.Suffix != cache.LeaseSuffix ||
		c.TTLSecondsDefault != cache.DefaultTTLSeconds || c.Lease.TTLMs != cache.LeaseTTLMillis {
		t.Fatalf("cache.json %+v differs from the package constants", c)
	}
	if c.Tiers.InvalidationChannel != cache.InvalidationChannel {
		t.Fatalf("cache.json tiers.invalidation_channel %q, package %q", c.Tiers.InvalidationChannel, cache.InvalidationChannel)
	}
}

// The gateway's tracking tier hears of the core's DELs from Redis itself, for
// keys under the contract's tracking prefixes: every key the core invalidates
// must fall under one of them.
func TestInvalidatedKeysFallUnderTheTrackingPrefixes(t *testing.T) {
	c := loadContract(t)
	if len(c.Tiers.TrackingPrefixes) == 0 {
		t.Fatal("cache.json has no tiers.tracking_prefixes")
	}
	for _, key := range []string{cache.CountKey("a@b.co"), cache.UserKey(7)} {
		if !slices.ContainsFunc(c.Tiers.TrackingPrefixes, func(p string) bool { return strings.HasPrefix(key, p) }) {
			t.Errorf("key %q is under no tracking prefix of %q", key, c.Tiers.TrackingPrefixes)
		}
	}
}

func TestKeyVectors(t *testing.T) {
	c := loadContract(t)
	if len(c.Keys) == 0 {
		t.Fatal("no key vectors")
	}
	for _, v := range c.Keys {
		var got string
		switch v.Kind {
		case "count_by_email":
			got = cache.CountKey(v.Email)
		case "user_by_id":
			got = cache.UserKey(v.ID)
		default:
			t.Fatalf("unknown kind %q", v.Kind)
		}
		if got != v.Key {
			t.Errorf("%s %q/%d: key %q, want %q", v.Kind, v.Email, v.ID, got, v.Key)
		}
		if cache.LeaseKey(got) != v.Key+c.Lease.Suffix {
			t.Errorf("lease of %q is %q", got, cache.LeaseKey(got))
		}
	}
}

func TestInvalidationVectors(t *testing.T) {
	c := loadContract(t)
	if len(c.Invalidation) == 0 {
		t.Fatal("no invalidation vectors")
	}
	for _, v := range c.Invalidation {
		t.Run(v.Name, func(t *testing.T) {
			var got []string
			switch v.Write {
			case "create":
				got = cache.StaleAfterCreate(cache.UserRef(*v.After))
			case "update":
				got = cache.StaleAfterUpdate(cache.UserRef(*v.Before), cache.UserRef(*v.After))
			case "delete":
				got = cache.StaleAfterDelete(cache.UserRef(*v.Before))
			default:
				t.Fatalf("unknown write %q", v.Write)
			}
			slices.Sort(got)
			want := slices.Clone(v.Keys)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("stale keys %q, want %q", got, want)
			}
		})
	}
}

// The outbox stores a write as a Change; the keys it owes must be the very
// keys of the contract's vectors.
func TestChangeOwesTheInvalidationVectorsKeys(t *testing.T) {
	for _, v := range loadContract(t).Invalidation {
		t.Run(v.Name, func(t *testing.T) {
			var change cache.Change
			if v.Before != nil {
				change.UserID, change.EmailBefore = v.Before.ID, &v.Before.Email
			}
			if v.After != nil {
				change.UserID, change.EmailAfter = v.After.ID, &v.After.Email
			}
			got := change.StaleKeys()
			slices.Sort(got)
			want := slices.Clone(v.Keys)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("stale keys %q, want %q", got, want)
			}
		})
	}
}

func TestWithLeasesPairsEachKeyWithItsLease(t *testing.T) {
	got := cache.WithLeases([]string{"aside:v1:{user:1}", "aside:v1:{count:a@b.c}"})
	want := []string{"aside:v1:{user:1}", "aside:v1:{user:1}:lease", "aside:v1:{count:a@b.c}", "aside:v1:{count:a@b.c}:lease"}
	if !slices.Equal(got, want) {
		t.Fatalf("WithLeases = %q, want %q", got, want)
	}
}
