"""Cache-aside reads with leases (contracts/README.md, "Coherence").

`Cache.read_through(route, key, load)` answers from Redis when it can and
otherwise fills the key under a lease:

* a plain GET first (the hot path: one round trip on a hit);
* on a miss one script call either returns a value that appeared meanwhile
  or takes `<key>:lease` with SET NX PX. The holder reads PostgreSQL and
  stores with a compare-and-set script that writes only while the lease is
  still its own, so a writer that deleted key and lease in between wins;
* within one worker process only the first thread that misses a key (the
  local leader) does the above; threads missing the same key meanwhile wait
  for the leader's result (coalesce.SingleFlight) and touch neither Redis nor
  PostgreSQL;
* a leader without the lease polls the same script, backing off from
  lease.poll_ms to POLL_MAX_MS, for up to lease.ttl_ms: it gets the value once
  the holder stored it, or takes the lease itself if the lease vanished (a
  writer cleared it, the holder failed, the lease expired). Only after a whole
  lease TTL without either does it read PostgreSQL itself, storing nothing.
  Waiting a whole TTL means an overloaded database is not sent a second
  scan of a key whose holder is merely slow;
* a holder whose database read failed replaces its lease with a failure mark
  for CACHE_LEASE_FAILURE_MARK_MS (scripts/fail_lease.lua): the readers
  waiting on it answer 503 at once instead of each waiting and reading the
  failing database again;
* a miss keeps to its own deadline, DB_POOL_TIMEOUT_MS + DB_STATEMENT_TIMEOUT_MS
  from when it missed, over every wait above (misses/read_deadline.py).

Redis trouble never fails a read: the value comes from PostgreSQL (outcome
BYPASS, error flagged) and the worker's circuit breaker (backends/breaker.py) then
skips Redis for REDIS_BREAKER_MS. Those reads from PostgreSQL are bounded
(door/fallback.py): past CACHE_FALLBACK_MAX_CONCURRENCY at once, 503, so that a
storm of hits never becomes a storm of scans.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files

from aside_gateway.backends import redis_clients
from aside_gateway.backends.breaker import CircuitBreaker
from aside_gateway.backends.redis_errors import REDIS_ERRORS
from aside_gateway.config import metrics
from aside_gateway.config.settings import Settings
from aside_gateway.contracts import cache_keys
from aside_gateway.contracts.cache_keys import BYPASS, HIT, MISS, STALE
from aside_gateway.contracts.errors import ApiError, ClientGone
from aside_gateway.contracts.routes import EarlyGet
from aside_gateway.door.fallback import FallbackSlots
from aside_gateway.misses import read_deadline
from aside_gateway.misses.coalesce import Flight, SingleFlight, shared_error
from aside_gateway.tiers import expiry, lease_refresh
from aside_gateway.tiers.expiry import ExpiryPolicy, Judged
from aside_gateway.tiers.hooks import TestHooks
from aside_gateway.tiers.lease_refresh import Stale


def _script(name: str) -> str:
    return (files("aside_gateway") / "scripts" / name).read_text()


# The lease holder's store (contracts/store_if_lease_held.lua links to its file).
STORE_IF_LEASE_HELD = _script("store_if_lease_held.lua")
# A miss's one call: the value, or the lease.
GET_OR_LEASE = _script("get_or_lease.lua")
# A lease's release, and the removal of a malformed value.
DELETE_IF_EQUAL = _script("delete_if_equal.lua")
# A failed holder's lease replaced by a failure mark.
FAIL_LEASE = _script("fail_lease.lua")
# The holder's failures that leave a mark: PostgreSQL down, silent or too slow.
MARKED_FAILURES = ("database_unavailable", "timeout")

POLL_MAX_MS = 20  # a waiting leader's poll interval grows from lease.poll_ms up to this
# A follower's safety net: longer than anything its leader waits for (a lease
# TTL of polling, a batched read queued behind another, a test hold).
FOLLOW_TIMEOUT_S = 30


@dataclass(slots=True)
class CacheRead:
    value: bytes
    outcome: str
    error: bool = False
    tier: str | None = None  # on a HIT or STALE: the tier that answered, "l1" or "l2"
    # Redis held this value when it was read: a GET, or a store under a
    # still-held lease. Only such a value may enter the tracking tier's L1,
    # whose invalidations Redis sends for keys it holds (tiers/tracking.py).
    in_redis: bool = False
    stale_ms: int = 0  # STALE: how long past its expiry the value was
    # Until the value's own expiry (an envelope's; None: a bare value), which an
    # L1 tier keeps it no longer than.
    life_ms: int | None = None


@dataclass(slots=True)
class Fill:
    """A leader's answer and the monotonic instant it was known current."""

    read: CacheRead
    valid_at: float


class Cache:
    def __init__(
        self,
        settings: Settings,
        breaker: CircuitBreaker,
        hooks: TestHooks | None = None,
        fallback: FallbackSlots | None = None,
    ):
        timeout_s = settings.redis_timeout_ms / 1000
        self.client = redis_clients.sync_client(
            settings,
            socket_timeout=timeout_s,
            connect_timeout=settings.redis_connect_timeout_ms / 1000,
            max_connections=settings.redis_pool_max,
            pool_timeout=timeout_s,
        )
        # The hit path's own GET needs one server's pool; a cluster routes by key.
        self.pool = redis_clients.single_pool(self.client)
        # Script objects call EVALSHA with a SHA computed once, loading on NOSCRIPT.
        self.get_or_lease = self.client.register_script(GET_OR_LEASE)
        self._store_if_lease_held = self.client.register_script(STORE_IF_LEASE_HELD)
        self._delete_if_equal = self.client.register_script(DELETE_IF_EQUAL)
        self._fail_lease = self.client.register_script(FAIL_LEASE)
        self.failure_mark_ms = settings.cache_lease_failure_mark_ms
        self.miss_deadline_s = (
            settings.db_pool_timeout_ms + settings.db_statement_timeout_ms
        ) / 1000
        self.breaker = breaker
        self.fallback = fallback or FallbackSlots(settings.cache_fallback_max_concurrency)
        self.ttl_seconds = settings.cache_ttl_seconds
        self.expiry = ExpiryPolicy.from_settings(settings)
        self.naive = settings.cache_coherence == "naive"
        self.hooks = hooks
        self._max_connections = settings.redis_pool_max
        self._flights: SingleFlight[CacheRead] = SingleFlight()

    def read_through(
        self,
        route: str,
        key: str,
        load: Callable[[], bytes],
        hold: str | None = None,
        early_get: EarlyGet | None = None,
    ) -> CacheRead:
        """The value of `key`, from Redis or (filling it under a lease) from `load`.

        `early_get` is this request's GET of `key` if the hot path already did it.
        """
        roll = True
        if early_get is not None and early_get.key == key:
            if early_get.failed:
                return self._bypass_after_error(route, "get", load)
            value = early_get.value
            roll = False  # the hot path drew XFetch's dice for this GET
        else:
            if not self.breaker.allow():
                metrics.cache_error(route, "breaker_open")
                return CacheRead(self.fallback.load(load), BYPASS, True)
            try:
                value = self._get(key)
            except REDIS_ERRORS as exc:
                return self._bypass_after_error(route, "get", load, exc)
            self.breaker.record_success()
        if value is None:
            return self._fill(route, key, load, hold)
        judged = self.expiry.judge(value, roll=roll)
        if early_get is not None and early_get.refresh and judged.state == expiry.FRESH:
            judged = Judged(judged.value, expiry.REFRESH)
        if not cache_keys.value_is_valid(key, judged.value):
            self._discard(route, key, value)
            return self._fill(route, key, load, hold)
        if judged.state == expiry.FRESH:
            return CacheRead(judged.value, HIT, in_redis=True, life_ms=judged.life_ms)
        if judged.state == expiry.EXPIRED:
            return self._fill(route, key, load, hold)
        # To refresh (early) or stale (swr): one thread of the process asks for the
        # lease (the key's flight); the others answer the value read, without waiting.
        flight, leads = self._flights.join(key)
        if not leads:
            return self._meanwhile(judged)
        return self._lead(
            key, flight, lambda: self._refresh_as_leader(route, key, value, load, hold, judged)
        )

    def discard(self, route: str, key: str, value: bytes) -> None:
        """A caller found `value` malformed after all (a frame that does not
        decode): delete it, if still the same, so the next read fills it again."""
        if self.expiry.enveloped:
            try:
                stored = self.client.get(key)
            except REDIS_ERRORS as exc:
                self.breaker.record_failure(exc)
                return
            if stored is None or self.expiry.judge(stored, roll=False).value != value:
                return
            value = stored
        self._discard(route, key, value)

    def _discard(self, route: str, key: str, value: bytes) -> None:
        """Delete a malformed `value` of `key` so the fill that follows replaces it."""
        metrics.cache_error(route, "malformed")
        try:
            self._delete_if_equal(keys=[key], args=[value])
        except REDIS_ERRORS as exc:
            self.breaker.record_failure(exc)

    def _get(self, key: str) -> bytes | None:
        """GET on a pooled connection, skipping redis-py's per-command machinery
        (retry wrapper, event and observability hooks): this is the hit path.
        On a cluster, the client's GET, which finds the key's node."""
        if self.pool is None:
            return self.client.get(key)
        conn = self.pool.get_connection()
        try:
            conn.send_command("GET", key)
            return conn.read_response()
        except BaseException:
            conn.disconnect()  # a half-read reply must not be seen by the next user
            raise
        finally:
            self.pool.release(conn)

    def _refresh_as_leader(
        self,
        route: str,
        key: str,
        seen: bytes,
        load: Callable[[], bytes],
        hold: str | None,
        judged: Judged,
    ) -> Fill:
        """A value to refresh (early) or an expired one still within its bound (swr):
        if this reader takes the key's lease, it recomputes the value and answers
        the new one; otherwise it answers the one it read. `seen` is the stored
        form read: the lease is taken only while it is still there."""
        lease = cache_keys.lease_key(key)
        token = os.urandom(16).hex()
        asked = time.monotonic()
        try:
            reply = self.get_or_lease(
                keys=[key, lease], args=[token, cache_keys.LEASE_TTL_MS, expiry.now_ms(), seen]
            )
        except REDIS_ERRORS as exc:
            self.breaker.record_failure(exc)
            metrics.cache_error(route, "lease")
            reply = [0]
        if reply[0] == 1:
            return self._refreshed_meanwhile(key, reply[1], judged, asked)
        if reply[0] != 2:
            # valid_at 0: a thread that joined this flight to fill the key goes round again.
            return Fill(self._meanwhile(judged), 0.0)
        if judged.state == expiry.REFRESH:
            metrics.early_refresh(route)
        return self._fill_as_holder(route, key, lease, token, load, hold)

    def _refreshed_meanwhile(self, key: str, stored: bytes, judged: Judged, asked: float) -> Fill:
        """Another reader's refresh landed after this one read the old value:
        answer the new value if it is whole and current, else the old one."""
        current = self.expiry.judge(stored, roll=False)
        current_now = current.state in (expiry.FRESH, expiry.REFRESH)
        if current_now and cache_keys.value_is_valid(key, current.value):
            return Fill(
                CacheRead(current.value, HIT, in_redis=True, life_ms=current.life_ms), asked
            )
        return Fill(self._meanwhile(judged), 0.0)

    @staticmethod
    def _meanwhile(judged: Judged) -> CacheRead:
        """The answer of a reader that does not refresh the value it read (its
        caller counts it, as it counts every answer)."""
        if judged.state == expiry.STALE:
            return CacheRead(judged.value, STALE, stale_ms=judged.age_ms)
        return CacheRead(judged.value, HIT, in_redis=True, life_ms=judged.life_ms)

    def _fill(self, route: str, key: str, load: Callable[[], bytes], hold: str | None) -> CacheRead:
        """Fill `key` once per process: lead the flight, or share the leader's result.

        A follower takes the leader's value only if it was known current at or
        after the instant the follower joined (`Fill.valid_at`): read from
        Redis, read from PostgreSQL, or stored under a still-held lease after
        that instant. A leader whose late store found its lease gone (a write
        came in between) may answer its own old read, like any lease holder,
        but its followers go round again instead of inheriting that value.
        """
        with read_deadline.bounded(self.miss_deadline_s) as miss_deadline:
            deadline = min(time.monotonic() + FOLLOW_TIMEOUT_S, miss_deadline)
            while True:
                joined = time.monotonic()
                flight, leads = self._flights.join(key)
                if leads:
                    return self._lead(
                        key, flight, lambda: self._fill_under_lease(route, key, load, hold)
                    )
                if hold and self.hooks:
                    self.hooks.joined(hold)
                shared = self._await(flight, joined, deadline)
                if shared is not None:
                    metrics.singleflight_shared(route)
                    return shared

    def _await(self, flight: Flight[CacheRead], joined: float, deadline: float) -> CacheRead | None:
        """The leader's result for a follower that joined at `joined`, or None
        when the follower must go round again (see _fill)."""
        if not flight.done.wait(max(deadline - time.monotonic(), 0.0)):
            raise ApiError("unavailable", "the cache fill took too long", {"Retry-After": "1"})
        if isinstance(flight.error, ClientGone):
            return None  # the leader's client left, not ours: fill it ourselves
        if flight.error is not None:
            raise shared_error(flight.error)
        shared = flight.result
        if shared is None or flight.valid_at < joined:
            return None
        outcome = BYPASS if shared.outcome == BYPASS else HIT  # no query of our own
        return CacheRead(
            shared.value, outcome, shared.error, in_redis=shared.in_redis, life_ms=shared.life_ms
        )

    def _lead(self, key: str, flight: Flight[CacheRead], fill_key: Callable[[], Fill]) -> CacheRead:
        """The flight's leader: fill the key, and land the flight with the fill's
        read (or its error) for the readers waiting on it."""
        try:
            fill = fill_key()
        except BaseException as exc:
            self._flights.land(key, flight, error=exc)
            raise
        self._flights.land(key, flight, fill.read, fill.valid_at)
        return fill.read

    def _fill_under_lease(
        self, route: str, key: str, load: Callable[[], bytes], hold: str | None
    ) -> Fill:
        lease = cache_keys.lease_key(key)
        token = os.urandom(16).hex()
        pause_s = cache_keys.LEASE_POLL_MS / 1000
        deadline = time.monotonic() + cache_keys.LEASE_TTL_MS / 1000
        # This miss's own deadline may come first (misses/read_deadline.py).
        miss_deadline = time.monotonic() + (read_deadline.within(self.miss_deadline_s) or 0.0)
        while True:
            asked = time.monotonic()
            now = expiry.now_ms()
            try:
                reply = self.get_or_lease(
                    keys=[key, lease], args=[token, cache_keys.LEASE_TTL_MS, now]
                )
            except REDIS_ERRORS as exc:
                self.breaker.record_failure(exc)
                metrics.cache_error(route, "lease")
                return _timed_load(lambda: self.fallback.load(load), BYPASS, error=True)
            if reply[0] == 1:
                judged = self.expiry.judge(reply[1], now, roll=False)
                if cache_keys.value_is_valid(key, judged.value):
                    found = CacheRead(judged.value, HIT, in_redis=True, life_ms=judged.life_ms)
                    return Fill(found, asked)
                self._discard(route, key, reply[1])  # then ask again, after the pause
            elif reply[0] == 2:
                return self._fill_as_holder(route, key, lease, token, load, hold)
            elif reply[0] == 3:
                metrics.shed("lease_failed")
                raise ApiError(
                    "database_unavailable",
                    "the read of this key failed just now",
                    read_deadline.RETRY_LATER,
                )
            if asked >= miss_deadline:
                raise read_deadline.past_deadline()
            if asked >= deadline:
                # Leases kept being held for a whole TTL: answer from the database once,
                # store nothing (we hold no lease).
                return _timed_load(load, MISS)
            time.sleep(min(pause_s, deadline - asked, miss_deadline - asked))
            pause_s = min(pause_s * 2, POLL_MAX_MS / 1000)

    def _fill_as_holder(
        self,
        route: str,
        key: str,
        lease: str,
        token: str,
        load: Callable[[], bytes],
        hold: str | None,
    ) -> Fill:
        read_at = time.monotonic()
        try:
            value = load()
        except ApiError as exc:
            marked = exc.code in MARKED_FAILURES and self.failure_mark_ms > 0
            if marked and not isinstance(exc, read_deadline.MissPastDeadline):
                self._mark_failed(lease, token, exc.code)  # waiters answer 503 at once
            else:
                self.release_quietly(lease, token)
            raise
        except BaseException:
            self.release_quietly(lease, token)  # waiters need not wait out the lease
            raise
        # delta: what computing the value cost, measured (early's XFetch scales by it).
        form = self.expiry.stored(value, (time.monotonic() - read_at) * 1000)
        if hold and self.hooks:
            self.hooks.hold(hold)
        stored_at = time.monotonic()
        try:
            stored = self.store_under_lease(key, lease, token, form)
        except REDIS_ERRORS as exc:
            self.breaker.record_failure(exc)
            metrics.cache_error(route, "store")
            return Fill(CacheRead(value, MISS, True), read_at)
        # A store under a still-held lease proves no write invalidated the key
        # between our read and the store: the value was current then.
        if stored:
            return Fill(CacheRead(value, MISS, in_redis=True, life_ms=form.life_ms), stored_at)
        return Fill(CacheRead(value, MISS, life_ms=form.life_ms), read_at)

    def store_under_lease(self, key: str, lease: str, token: str, form: expiry.Stored) -> bool:
        """Store `form` while the lease is still `token`'s: whether it was."""
        if self.naive:
            # Lab-only demonstration of the stale-set race: store whatever we read.
            self.client.set(key, form.data, px=form.ttl_ms)
            self._delete_if_equal(keys=[lease], args=[token])
            return False
        stored = self._store_if_lease_held(
            keys=[key, lease], args=[token, form.data, form.ttl_s, form.ttl_ms]
        )
        return stored == 1

    def refresh_behind(
        self,
        route: str,
        stale: Sequence[Stale],
        load_many: Callable[[list[str]], Mapping[str, bytes]],
    ) -> list[bool]:
        """swr's refresh of keys already answered stale (tiers/lease_refresh.py)."""
        return lease_refresh.refresh_behind(self, route, stale, load_many)

    def _bypass_after_error(
        self,
        route: str,
        op: str,
        load: Callable[[], bytes],
        exc: BaseException | None = None,
    ) -> CacheRead:
        self.breaker.record_failure(exc)
        metrics.cache_error(route, op)
        return CacheRead(self.fallback.load(load), BYPASS, True)

    def _mark_failed(self, lease: str, token: str, code: str) -> None:
        """Replace our lease with a failure mark (contracts/README.md, "Coherence")."""
        mark = f"{cache_keys.LEASE_FAILURE_PREFIX}{code}"
        try:
            self._fail_lease(keys=[lease], args=[token, mark, self.failure_mark_ms])
        except REDIS_ERRORS as exc:
            self.breaker.record_failure(exc)

    def release_quietly(self, lease: str, token: str) -> None:
        try:
            self._delete_if_equal(keys=[lease], args=[token])
        except REDIS_ERRORS as exc:
            self.breaker.record_failure(exc)

    def ping(self) -> None:
        """Raise a Redis error unless Redis answers within the socket timeout."""
        self.client.ping()

    def sample_gauges(self) -> None:
        created = idle = 0
        for pool in redis_clients.pools(self.client):  # one per node on a cluster
            created += len(getattr(pool, "_connections", ()))
            queue = getattr(getattr(pool, "pool", None), "queue", ())
            idle += sum(1 for conn in list(queue) if conn is not None)
        metrics.REDIS_POOL_CREATED.set(created)
        metrics.REDIS_POOL_IN_USE.set(max(created - idle, 0))
        metrics.REDIS_POOL_MAX.set(self._max_connections)
        metrics.REDIS_BREAKER_OPEN.set(1 if self.breaker.is_open else 0)

    def close(self) -> None:
        redis_clients.close(self.client)
        if self.hooks:
            self.hooks.close()


def _timed_load(load: Callable[[], bytes], outcome: str, error: bool = False) -> Fill:
    read_at = time.monotonic()
    return Fill(CacheRead(load(), outcome, error), read_at)
