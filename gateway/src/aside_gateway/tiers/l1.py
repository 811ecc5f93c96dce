"""The in-process L1 tier: one per worker, in front of Redis (L2).

Bounded by entries and by bytes, each entry living at most CACHE_L1_TTL_SECONDS
(cachetools' TLRUCache, least recently used evicted first when a bound is hit);
with CACHE_EXPIRY=jitter each entry's lifetime is drawn uniformly from
[ttl * (1 - CACHE_EXPIRY_JITTER), ttl], as Redis's are. A value that carries its
own expiry (CACHE_EXPIRY early or swr) lives here no longer than until then: past
it, Redis's copy is stale or refreshed, and the reader must see which.
Flask's threads and the event loop share it, so every access holds a lock.

Coherence (contracts/README.md, "Cache tiers"): the core publishes every
invalidation's keys and each worker evicts them here (tiers/invalidations.py). Two
rules keep a stale entry from outliving that message:

* no subscription, no L1: until the subscriber has confirmed its subscription,
  and from the moment it is lost, the tier is flushed and serves nothing;
* a fill stores only if its key was not invalidated while it read.
  `token(key)` is the worker's flush epoch, bumped by every flush and every
  (re)subscription, with the invalidation sequence of the key's stripe (one
  of STRIPES, by CRC-32 of the key), bumped by every eviction message naming
  a key of that stripe; a fill takes it before reading and `put()` refuses
  when either changed. A message that arrives before the store blocks it, one
  that arrives after evicts it: the old value never stays. Stripes, not one
  sequence per worker: under a steady stream of writes a single sequence
  refused nearly every fill (docs/decisions/029-cache-tiers-measured.md); a stripe refuses only the
  fills of keys that share it, and costs a fixed array, however many keys.
"""

from __future__ import annotations

import random
import threading
import time
import zlib
from collections.abc import Callable, Iterable

from cachetools import TLRUCache

from aside_gateway.config import metrics

# Rough per-entry bookkeeping (dict slot, TTL link, key and bytes objects), so
# CACHE_L1_MAX_BYTES bounds the memory of many small entries, not just their text.
ENTRY_OVERHEAD_BYTES = 200
# Invalidation sequences per worker: a message blocks only the fills of its
# keys' stripes (a false block when another key shares one is harmless).
STRIPES = 4096

Token = tuple[int, int]  # (flush epoch, the key's stripe sequence)


def stripe_of(key: str) -> int:
    return zlib.crc32(key.encode()) % STRIPES


def entry_size(key: str, value: bytes) -> int:
    return len(key.encode()) + len(value) + ENTRY_OVERHEAD_BYTES


# An entry is (value, its size, its own life in seconds or None): the cache sizes
# values only, and the key counts too.
Entry = tuple[bytes, int, float | None]


class _SizedByBytes:
    """Sizes entries by bytes and counts what the cache evicts for room (mixed
    into a cachetools cache, before it)."""

    def getsizeof(self, value: Entry) -> int:
        return value[1]

    def popitem(self) -> tuple[str, Entry]:
        item = super().popitem()
        metrics.l1_evicted("capacity")
        return item


class _Entries(_SizedByBytes, TLRUCache[str, Entry]):
    """Each entry's lifetime the tier's TTL, drawn from [ttl * (1 - jitter), ttl]
    under jitter, and no longer than the entry's own life."""

    def __init__(
        self,
        max_bytes: int,
        ttl_s: float,
        jitter: float,
        timer: Callable[[], float],
        draw: Callable[[], float],
    ):
        def ttu(_key: str, entry: Entry, now: float) -> float:
            lifetime = ttl_s * (1 - jitter * draw()) if jitter > 0 else ttl_s
            own = entry[2]
            return now + (lifetime if own is None else min(lifetime, own))

        super().__init__(maxsize=max_bytes, ttu=ttu, timer=timer)


class L1Cache:
    def __init__(
        self,
        max_entries: int,
        max_bytes: int,
        ttl_s: float,
        needs_subscription: bool,
        timer: Callable[[], float] = time.monotonic,
        jitter: float = 0.0,
        draw: Callable[[], float] = random.random,
    ):
        """`jitter`: CACHE_EXPIRY_JITTER when CACHE_EXPIRY=jitter, else 0 (one TTL)."""
        self._lock = threading.Lock()
        self._entries = _Entries(max_bytes, ttl_s, jitter, timer, draw)
        self._max_entries = max_entries
        self._epoch = 0
        self._stripes = [0] * STRIPES
        # Without invalidation messages (a lab switch) only the TTL bounds staleness.
        self._usable = not needs_subscription

    @property
    def usable(self) -> bool:
        return self._usable

    def get(self, key: str) -> bytes | None:
        with self._lock:
            if not self._usable:
                return None
            entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def peek(self, key: str) -> bytes | None:
        """The entry even while the tier serves nothing (a writer's hint of the old row)."""
        with self._lock:
            entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def token(self, key: str) -> Token:
        """Take before reading the value of `key` a later put() will store."""
        with self._lock:
            return self._epoch, self._stripes[stripe_of(key)]

    def put(self, key: str, value: bytes, token: Token, life_ms: int | None = None) -> bool:
        """Store unless the tier is off, or it was flushed or `key`'s stripe
        invalidated since `token`; for no longer than `life_ms` when given (the
        value's own expiry)."""
        with self._lock:
            if not self._usable or token != (self._epoch, self._stripes[stripe_of(key)]):
                return False
            try:
                life_s = None if life_ms is None else max(life_ms, 0) / 1000
                self._entries[key] = (value, entry_size(key, value), life_s)
            except ValueError:  # larger than the whole byte bound
                return False
            while len(self._entries) > self._max_entries:
                self._entries.popitem()
            return True

    def evict(self, keys: Iterable[str]) -> int:
        """Drop `keys` (an invalidation) and block the fills of their stripes
        begun before; returns how many were held."""
        dropped = 0
        with self._lock:
            for key in keys:
                self._stripes[stripe_of(key)] += 1
                dropped += self._entries.pop(key, None) is not None
        if dropped:
            metrics.l1_evicted("invalidation", dropped)
        return dropped

    def flush(self, usable: bool) -> None:
        """Empty the tier and block fills in flight; `usable` says whether it may serve
        again (subscribed) or not (subscription lost)."""
        with self._lock:
            self._epoch += 1
            dropped = len(self._entries)
            self._entries.clear()
            self._usable = usable
        if dropped:
            metrics.l1_evicted("flush", dropped)

    def stats(self) -> tuple[int, int]:
        """(entries, bytes) after dropping the expired ones."""
        with self._lock:
            self._entries.expire()
            return len(self._entries), int(self._entries.currsize)

    def sample_gauges(self, other: L1Cache | None = None) -> None:
        """The entries and bytes of this tier, plus `other`'s (the tracking
        tier's L1, when the worker has one)."""
        entries, size = self.stats()
        if other is not None:
            more, more_size = other.stats()
            entries, size = entries + more, size + more_size
        metrics.L1_ENTRIES.set(entries)
        metrics.L1_BYTES.set(size)
