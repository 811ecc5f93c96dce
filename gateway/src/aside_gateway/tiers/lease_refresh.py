"""swr's refresh behind a stale answer, under the leases of tiers/l2.py.

The keys already answered stale (front/refresh_behind.py) are refreshed in one
go: the lease of each key that still holds the value read, one load of them
all, and a store of each under its lease.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aside_gateway.backends.breaker import CircuitBreaker
from aside_gateway.backends.redis_errors import REDIS_ERRORS
from aside_gateway.config import metrics
from aside_gateway.contracts import cache_keys
from aside_gateway.tiers import expiry


@dataclass(frozen=True, slots=True)
class Stale:
    """A key answered past its expiry (swr), to refresh: `seen` is the stored
    form read, its lease taken only while Redis still holds that."""

    key: str
    seen: bytes


class LeasedCache(Protocol):
    """What the refresh uses of tiers/l2.py's Cache (which calls it), so neither
    module needs the other's names."""

    breaker: CircuitBreaker
    expiry: expiry.ExpiryPolicy
    get_or_lease: Callable[..., Any]  # the GET_OR_LEASE script

    def store_under_lease(self, key: str, lease: str, token: str, form: expiry.Stored) -> bool: ...

    def release_quietly(self, lease: str, token: str) -> None: ...


def refresh_behind(
    cache: LeasedCache,
    route: str,
    stale: Sequence[Stale],
    load_many: Callable[[list[str]], Mapping[str, bytes]],
) -> list[bool]:
    """swr's refresh of keys already answered stale (front/refresh_behind.py),
    all in the calling thread: the lease of each key that still holds the
    value read, one `load_many` of the keys leased, a store of each under its
    lease. Whether each key is refreshed or was found refreshed (or being
    refreshed) by another reader; False for a key a Redis error or the load
    failed, whose stale value stays for the next read to try again."""
    held: dict[str, tuple[str, str]] = {}  # key: its lease and token
    ok = [True] * len(stale)
    for i, read in enumerate(stale):
        lease, token = cache_keys.lease_key(read.key), os.urandom(16).hex()
        try:
            reply = cache.get_or_lease(
                keys=[read.key, lease],
                args=[token, cache_keys.LEASE_TTL_MS, expiry.now_ms(), read.seen],
            )
        except REDIS_ERRORS as exc:
            cache.breaker.record_failure(exc)
            metrics.cache_error(route, "lease")
            ok[i] = False
            continue
        if reply[0] == 2:
            held[read.key] = (lease, token)
    if not held:
        return ok
    read_at = time.monotonic()
    try:
        values = load_many(list(held))
    except Exception:
        for lease, token in held.values():
            cache.release_quietly(lease, token)  # the next read need not wait them out
        return [good and read.key not in held for good, read in zip(ok, stale, strict=True)]
    delta_ms = (time.monotonic() - read_at) * 1000
    for i, read in enumerate(stale):
        if read.key not in held:
            continue
        lease, token = held.pop(read.key)
        try:
            cache.store_under_lease(
                read.key, lease, token, cache.expiry.stored(values[read.key], delta_ms)
            )
        except REDIS_ERRORS as exc:
            cache.breaker.record_failure(exc)
            metrics.cache_error(route, "store")
            ok[i] = False
    return ok
