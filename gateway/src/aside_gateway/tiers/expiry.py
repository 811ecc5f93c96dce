"""Expiry handling (CACHE_EXPIRY; contracts/cache.json `expiry`): what a cached
value's end does to its readers.

* `plain`: the value is stored as it is and lives CACHE_TTL_SECONDS in Redis;
  at its end every reader misses at once (the fill is single-flight and under a
  lease, but the readers wait for it);
* `jitter`: the same, each stored TTL drawn uniformly from
  [ttl * (1 - CACHE_EXPIRY_JITTER), ttl] (in ms), so keys filled together end
  apart; the L1 tiers draw their own TTL the same way;
* `early` (XFetch, Vattani, Chierichetti and Lowenstein, VLDB 2015): the value
  is stored in an envelope with its logical expiry and delta, the time its
  computation took (measured around the load); a read recomputes it when
  `now - delta * beta * ln(draw) >= expiry`, draw uniform in (0, 1], so with
  a probability that grows as the expiry nears and with the cost of the
  recomputation. Only the reader that then takes the key's lease recomputes;
  every other reader keeps answering the value;
* `swr` (stale-while-revalidate): the envelope too, its logical expiry drawn
  as jitter draws a TTL, and the Redis key lives that plus
  CACHE_EXPIRY_STALE_MAX_SECONDS. Past its logical expiry a value is
  answered (X-Cache: STALE) for at most that bound while the reader that took
  the lease refreshes it (on the event loop, behind its own stale answer:
  front/refresh_behind.py); beyond the bound it is a miss. A value the core's
  invalidation deleted is gone with its key: there is nothing stale to serve.

A value written under one mode is read safely under any other: a bare value
is fresh until Redis ends it, an envelope's logical expiry is always honoured
(a `plain` reader treats an expired envelope as a miss, never as stale).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aside_gateway.config.settings import Settings
from aside_gateway.contracts import cache_keys

FRESH = "fresh"  # answer it
REFRESH = "refresh"  # answer it, or recompute it first if this reader gets the lease (early)
STALE = "stale"  # past its expiry, within the bound: answer it unless this reader refreshes it
EXPIRED = "expired"  # a miss

# The smallest draw XFetch takes: ln(0) is -inf (always refresh).
_MIN_DRAW = 1e-12


def now_ms() -> int:
    """Unix time in ms: envelopes are shared by every gateway, so wall clock."""
    return time.time_ns() // 1_000_000


def xfetch(now: float, expires: float, delta: float, beta: float, draw: float) -> bool:
    """XFetch's test: recompute when now - delta * beta * ln(draw) >= expires."""
    return now - delta * beta * math.log(max(draw, _MIN_DRAW)) >= expires


def jittered(ttl_ms: int, jitter: float, draw: float) -> int:
    """A TTL from [ttl * (1 - jitter), ttl] for `draw` uniform in [0, 1)."""
    return max(1, round(ttl_ms * (1 - jitter * draw)))


@dataclass(frozen=True, slots=True)
class Judged:
    """A stored value read: the value itself and what to do with it."""

    value: bytes
    state: str
    age_ms: int = 0  # STALE: how long past its expiry
    # FRESH or REFRESH in an envelope: how long until its expiry (None: a bare
    # value, which Redis ends), so an L1 tier keeps it no longer.
    life_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Stored:
    """What a fill writes to Redis: the stored form and the key's TTL in ms."""

    data: bytes
    ttl_ms: int
    life_ms: int | None = None  # an envelope's: until its expiry, as Judged's

    @property
    def ttl_s(self) -> int:
        return max(1, math.ceil(self.ttl_ms / 1000))


@dataclass(frozen=True, slots=True)
class ExpiryPolicy:
    mode: str = cache_keys.DEFAULT_EXPIRY
    ttl_s: int = cache_keys.TTL_SECONDS_DEFAULT
    jitter: float = cache_keys.EXPIRY_JITTER_DEFAULT
    beta: float = cache_keys.EXPIRY_EARLY_BETA_DEFAULT
    stale_max_s: int = cache_keys.EXPIRY_STALE_MAX_SECONDS_DEFAULT
    draw: Callable[[], float] = field(default=random.random, compare=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> ExpiryPolicy:
        return cls(
            mode=settings.cache_expiry,
            ttl_s=settings.cache_ttl_seconds,
            jitter=settings.cache_expiry_jitter,
            beta=settings.cache_expiry_early_beta,
            stale_max_s=settings.cache_expiry_stale_max_seconds,
        )

    @property
    def enveloped(self) -> bool:
        return self.mode in (cache_keys.EXPIRY_EARLY, cache_keys.EXPIRY_SWR)

    def stored(self, value: bytes, delta_ms: float, now: int | None = None) -> Stored:
        """The stored form of a value whose computation took `delta_ms`."""
        ttl_ms = self.ttl_s * 1000
        if self.mode == cache_keys.EXPIRY_JITTER:
            return Stored(value, jittered(ttl_ms, self.jitter, self.draw()))
        if not self.enveloped:
            return Stored(value, ttl_ms)
        if self.mode == cache_keys.EXPIRY_SWR:
            # Spread like jitter's TTLs: keys filled together would go stale, and
            # start their refreshes, in the same instant.
            ttl_ms = jittered(ttl_ms, self.jitter, self.draw())
        expires = (now_ms() if now is None else now) + ttl_ms
        data = cache_keys.wrap(value, expires, max(0, round(delta_ms)))
        if self.mode == cache_keys.EXPIRY_SWR:
            return Stored(data, ttl_ms + self.stale_max_s * 1000, ttl_ms)
        return Stored(data, ttl_ms, ttl_ms)

    def judge(self, stored: bytes, now: int | None = None, roll: bool = True) -> Judged:
        """What a read of `stored` does. `roll`: whether this read draws XFetch's
        dice (a read that another layer already judged does not draw again)."""
        envelope = cache_keys.unwrap(stored)
        if envelope is None:
            return Judged(stored, FRESH)
        at = now_ms() if now is None else now
        if at < envelope.expires_ms:
            if (
                roll
                and self.mode == cache_keys.EXPIRY_EARLY
                and xfetch(at, envelope.expires_ms, envelope.delta_ms, self.beta, self.draw())
            ):
                return Judged(envelope.value, REFRESH, life_ms=envelope.expires_ms - at)
            return Judged(envelope.value, FRESH, life_ms=envelope.expires_ms - at)
        age = at - envelope.expires_ms
        if self.mode == cache_keys.EXPIRY_SWR and age <= self.stale_max_s * 1000:
            return Judged(envelope.value, STALE, age)
        return Judged(envelope.value, EXPIRED, age)
