"""Cache-aside reads with leases (contracts/README.md, "Coherence").

`Cache.read_through(route, key, load)` answers from Redis when it can and
otherwise fills the key under a lease:

* a plain GET first (the hot path: one round trip on a hit);
* on a miss one script call either returns a value that appeared meanwhile
  or takes `<key>:lease` with SET NX PX. The holder reads PostgreSQL and
  stores with a compare-and-set script that writes only while the lease is
  still its own, so a writer that deleted key and lease in between wins;
* a reader without the lease polls the same script every lease.poll_ms for
  up to lease.wait_ms: it gets the value once the holder stored it, or takes
  the lease itself if the lease vanished (a writer cleared it, the holder
  failed), and after wait_ms reads PostgreSQL itself and stores nothing.

Redis trouble never fails a read: the value comes from PostgreSQL (outcome
BYPASS, error flagged) and a circuit breaker then skips Redis for
REDIS_BREAKER_MS so a dead or slow Redis does not add its timeout to every
request. After that pause one request probes Redis; success closes the breaker.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from aside_gateway import cache_keys, metrics
from aside_gateway.config import Settings

log = logging.getLogger("aside_gateway")

HIT = "HIT"
MISS = "MISS"
BYPASS = "BYPASS"

REDIS_ERRORS = (RedisError, OSError)

# KEYS[1] key, KEYS[2] lease; ARGV[1] token, ARGV[2] value, ARGV[3] ttl seconds.
STORE_IF_LEASE_HELD = """
if redis.call('GET', KEYS[2]) == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
    redis.call('DEL', KEYS[2])
    return 1
end
return 0
"""

# KEYS[1] key, KEYS[2] lease; ARGV[1] token, ARGV[2] lease ttl ms.
# Returns {1, value} on a value, {2} when the lease was taken, {0} when someone else holds it.
GET_OR_LEASE = """
local value = redis.call('GET', KEYS[1])
if value then
    return {1, value}
end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return {2}
end
return {0}
"""

# KEYS[1] lease; ARGV[1] token. Deletes the lease only if it is still ours.
RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""

HOLD_TIMEOUT_S = 10

# WSGI environ key under which the hot path hands its GET's outcome to Flask.
PREFETCH_KEY = "aside.prefetch"


@dataclass(slots=True)
class Prefetch:
    """The outcome of a GET already done for this request (see hot_path.py)."""

    key: str
    value: bytes | None
    failed: bool


@dataclass(slots=True)
class CacheRead:
    value: bytes
    outcome: str
    error: bool = False


class CircuitBreaker:
    """Skip Redis for `open_s` after a failure; then let one probe through."""

    def __init__(self, open_s: float):
        self._open_s = open_s
        self._retry_at = 0.0  # 0.0 means closed
        self._lock = threading.Lock()

    @property
    def is_open(self) -> bool:
        return self._retry_at != 0.0

    def allow(self) -> bool:
        retry_at = self._retry_at
        if retry_at == 0.0:
            return True
        now = time.monotonic()
        if now < retry_at:
            return False
        with self._lock:
            if self._retry_at != retry_at:  # another thread took the probe, or it closed
                return self._retry_at == 0.0
            self._retry_at = now + self._open_s  # others keep skipping while we probe
            return True

    def record_success(self) -> None:
        if self._retry_at != 0.0:
            self._retry_at = 0.0

    def record_failure(self) -> None:
        if self._open_s > 0:
            self._retry_at = time.monotonic() + self._open_s


def _redis_retry_none() -> Retry:
    # redis-py retries with backoff by default; a cache must fail fast instead.
    return Retry(NoBackoff(), 0)


class TestHooks:
    """Lab-only pause points for the coherence tests (ASIDE_TEST_HOOKS=1)."""

    def __init__(self, settings: Settings):
        # Its own client: BLPOP blocks far longer than the cache's socket timeout.
        self.client = redis.Redis.from_url(
            settings.redis_url,
            socket_timeout=HOLD_TIMEOUT_S + 2,
            socket_connect_timeout=1,
            retry=_redis_retry_none(),
        )

    def hold(self, name: str) -> None:
        """Say we reached the point, then wait until the test releases us."""
        try:
            self.client.rpush(f"aside:test:{name}:reached", "1")
            self.client.blpop([f"aside:test:{name}:release"], timeout=HOLD_TIMEOUT_S)
        except REDIS_ERRORS:
            log.exception("test hold %s failed", name)


class Cache:
    def __init__(self, settings: Settings, hooks: TestHooks | None = None):
        timeout_s = settings.redis_timeout_ms / 1000
        self.pool = redis.BlockingConnectionPool.from_url(
            settings.redis_url,
            max_connections=settings.redis_pool_max,
            timeout=timeout_s,
            socket_timeout=timeout_s,
            socket_connect_timeout=settings.redis_connect_timeout_ms / 1000,
            retry=_redis_retry_none(),
            health_check_interval=0,
        )
        self.client = redis.Redis(connection_pool=self.pool)
        # Script objects call EVALSHA with a SHA computed once, loading on NOSCRIPT.
        self._get_or_lease = self.client.register_script(GET_OR_LEASE)
        self._store_if_lease_held = self.client.register_script(STORE_IF_LEASE_HELD)
        self._release_lease = self.client.register_script(RELEASE_LEASE)
        self.breaker = CircuitBreaker(settings.redis_breaker_ms / 1000)
        self.ttl_seconds = settings.cache_ttl_seconds
        self.naive = settings.cache_coherence == "naive"
        self.hooks = hooks
        self._max_connections = settings.redis_pool_max

    def prefetch(self, key: str) -> Prefetch | None:
        """GET `key` for the hot path; None when the breaker says skip Redis."""
        if not self.breaker.allow():
            return None
        try:
            value = self._get(key)
        except REDIS_ERRORS:
            return Prefetch(key, None, True)
        self.breaker.record_success()
        return Prefetch(key, value, False)

    def read_through(
        self,
        route: str,
        key: str,
        load: Callable[[], bytes],
        hold: str | None = None,
        prefetched: Prefetch | None = None,
    ) -> CacheRead:
        """The value of `key`, from Redis or (filling it under a lease) from `load`.

        `prefetched` is this request's GET of `key` if the hot path already did it.
        """
        if prefetched is not None and prefetched.key == key:
            if prefetched.failed:
                return self._bypass_after_error(route, "get", load)
            value = prefetched.value
        else:
            if not self.breaker.allow():
                metrics.cache_error(route, "breaker_open")
                return CacheRead(load(), BYPASS, True)
            try:
                value = self._get(key)
            except REDIS_ERRORS:
                return self._bypass_after_error(route, "get", load)
            self.breaker.record_success()
        if value is not None:
            return CacheRead(value, HIT)
        return self._fill(route, key, load, hold)

    def _get(self, key: str) -> bytes | None:
        """GET on a pooled connection, skipping redis-py's per-command machinery
        (retry wrapper, event and observability hooks): this is the hit path."""
        conn = self.pool.get_connection()
        try:
            conn.send_command("GET", key)
            return conn.read_response()
        except BaseException:
            conn.disconnect()  # a half-read reply must not be seen by the next user
            raise
        finally:
            self.pool.release(conn)

    def _fill(self, route: str, key: str, load: Callable[[], bytes], hold: str | None) -> CacheRead:
        lease = cache_keys.lease_key(key)
        token = os.urandom(16).hex()
        poll_s = cache_keys.LEASE_POLL_MS / 1000
        deadline = time.monotonic() + cache_keys.LEASE_WAIT_MS / 1000
        while True:
            try:
                reply = self._get_or_lease(keys=[key, lease], args=[token, cache_keys.LEASE_TTL_MS])
            except REDIS_ERRORS:
                return self._bypass_after_error(route, "lease", load)
            if reply[0] == 1:
                return CacheRead(reply[1], HIT)
            if reply[0] == 2:
                return self._fill_as_holder(route, key, lease, token, load, hold)
            if time.monotonic() >= deadline:
                # The holder is slow or gone: answer from the database, store nothing.
                return CacheRead(load(), MISS)
            time.sleep(poll_s)

    def _fill_as_holder(
        self,
        route: str,
        key: str,
        lease: str,
        token: str,
        load: Callable[[], bytes],
        hold: str | None,
    ) -> CacheRead:
        try:
            value = load()
        except BaseException:
            self._release_quietly(lease, token)  # waiters need not wait out the lease
            raise
        if hold and self.hooks:
            self.hooks.hold(hold)
        try:
            if self.naive:
                # Lab-only demonstration of the stale-set race: store whatever we read.
                self.client.set(key, value, ex=self.ttl_seconds)
                self._release_lease(keys=[lease], args=[token])
            else:
                self._store_if_lease_held(keys=[key, lease], args=[token, value, self.ttl_seconds])
        except REDIS_ERRORS:
            self.breaker.record_failure()
            metrics.cache_error(route, "store")
            return CacheRead(value, MISS, True)
        return CacheRead(value, MISS)

    def _bypass_after_error(self, route: str, op: str, load: Callable[[], bytes]) -> CacheRead:
        self.breaker.record_failure()
        metrics.cache_error(route, op)
        return CacheRead(load(), BYPASS, True)

    def _release_quietly(self, lease: str, token: str) -> None:
        try:
            self._release_lease(keys=[lease], args=[token])
        except REDIS_ERRORS:
            self.breaker.record_failure()

    def ping(self) -> None:
        """Raise a Redis error unless Redis answers within the socket timeout."""
        self.client.ping()

    def sample_gauges(self) -> None:
        created = len(getattr(self.pool, "_connections", ()))
        queue = getattr(getattr(self.pool, "pool", None), "queue", ())
        idle = sum(1 for conn in list(queue) if conn is not None)
        metrics.REDIS_POOL_CREATED.set(created)
        metrics.REDIS_POOL_IN_USE.set(max(created - idle, 0))
        metrics.REDIS_POOL_MAX.set(self._max_connections)
        metrics.REDIS_BREAKER_OPEN.set(1 if self.breaker.is_open else 0)

    def close(self) -> None:
        self.pool.disconnect()
        if self.hooks:
            self.hooks.client.close()
