"""The services a worker builds once and shares between its two layers.

`build_services(settings)` opens the pools and starts the gauge sampler; the
result goes to the Flask app (`create_app(settings, services)`) and to the
async hot path, so both use the same cache, database and circuit breaker.
Build it once per worker, after gunicorn's fork.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from aside_gateway.backends import redis_clients
from aside_gateway.backends.breaker import CircuitBreaker
from aside_gateway.backends.compute import Slots
from aside_gateway.backends.core_client import CoreClient
from aside_gateway.config import metrics
from aside_gateway.config.settings import Settings
from aside_gateway.door.fallback import FallbackSlots
from aside_gateway.door.lateness import LoopLag
from aside_gateway.door.miss_budget import MissBudget
from aside_gateway.misses.db import Database
from aside_gateway.tiers import hooks as test_hooks
from aside_gateway.tiers.invalidations import InvalidationSubscriber
from aside_gateway.tiers.l1 import L1Cache
from aside_gateway.tiers.l2 import Cache
from aside_gateway.tiers.strategies import TieredCache


@dataclass(frozen=True)
class Verdict:
    """/readyz's answer, and when (time.monotonic) it was checked."""

    status: int
    body: bytes
    at: float


class ReadinessCache:
    """/readyz's verdict, shared by every caller for GATEWAY_READY_CACHE_MS
    after it was checked: one check at a time per worker, the callers behind
    it take its verdict, and the event loop answers it itself
    (front/hot_path.py), fresh or while its next check runs, so the probe's
    cost does not grow with its callers."""

    # A check the loop handed over and never heard of again (its request
    # refused) is asked for again after this long.
    CLAIM_S = 5.0

    def __init__(self, ttl_s: float):
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._verdict: Verdict | None = None
        self._claimed_at: float | None = None

    def answer_now(self) -> Verdict | None:
        """For the event loop: the last verdict while fresh or while its next
        check runs; None once, when it is stale, for that caller to check."""
        verdict = self._verdict
        if verdict is None or self.ttl_s <= 0:
            return None
        now = time.monotonic()
        if now - verdict.at < self.ttl_s:
            return verdict
        claimed = self._claimed_at
        if claimed is not None and now - claimed < self.CLAIM_S:
            return verdict
        self._claimed_at = now
        return None

    def fresh(self, asked: float | None = None) -> Verdict | None:
        """The last verdict if checked within the TTL (or since `asked`)."""
        verdict = self._verdict
        if verdict is None or self.ttl_s <= 0:
            return None
        asked = time.monotonic() if asked is None else asked
        if verdict.at >= asked or asked - verdict.at < self.ttl_s:
            return verdict
        return None

    def verdict(self, check: Callable[[], Verdict]) -> Verdict:
        if self.ttl_s <= 0:  # checked on each call
            return check()
        asked = time.monotonic()
        verdict = self.fresh(asked)
        if verdict is None:
            with self._lock:
                verdict = self.fresh(asked)
                if verdict is None:
                    verdict = self._verdict = check()
                    self._claimed_at = None
        return verdict


@dataclass
class Services:
    """Everything a worker builds once at start and shares between its threads."""

    settings: Settings
    db: Database
    cache: Cache
    tiers: TieredCache
    subscriber: InvalidationSubscriber | None
    breaker: CircuitBreaker
    core: CoreClient
    bypass_slots: threading.BoundedSemaphore
    python_compute: Slots
    sampler_stop: threading.Event
    # The event loop's lag, sampled once the loop runs (front/hot_path.py's lifespan).
    loop_lag: LoopLag
    # Production's misses a second per route and client (door/miss_budget.py).
    miss_budget: MissBudget
    readiness: ReadinessCache

    def close(self) -> None:
        """Stop the sampler and close the pools (tests; gunicorn just exits)."""
        self.sampler_stop.set()
        if self.subscriber is not None:
            self.subscriber.stop()
        self.core.close()
        self.cache.close()
        self.db.close()


def _test_hooks(settings: Settings) -> test_hooks.TestHooks:
    client = redis_clients.sync_client(
        settings, socket_timeout=test_hooks.CLIENT_TIMEOUT_S, connect_timeout=1
    )
    return test_hooks.TestHooks(client)


def build_services(settings: Settings) -> Services:
    loop_lag = LoopLag(settings.loop_late_ms / 1000)
    # A timeout spans at most REDIS_TIMEOUT_MS: lateness within it (and one
    # tick of the monitor) excuses it.
    late_window_s = settings.redis_timeout_ms / 1000 + loop_lag.tick_s
    breaker = CircuitBreaker(
        settings.redis_breaker_ms / 1000, lambda: loop_lag.late_within(late_window_s)
    )
    hooks = _test_hooks(settings) if settings.test_hooks else None
    db = Database(settings)
    cache = Cache(settings, breaker, hooks, FallbackSlots(settings.cache_fallback_max_concurrency))
    l1_jitter = settings.cache_expiry_jitter if settings.cache_expiry == "jitter" else 0.0
    l1 = L1Cache(
        settings.cache_l1_max_entries,
        settings.cache_l1_max_bytes,
        settings.cache_l1_ttl_seconds,
        needs_subscription=settings.cache_l1_invalidation,
        jitter=l1_jitter,
    )
    # The tracking tier's own L1, fed by Redis's invalidations (tiers/tracking.py,
    # started by the ASGI lifespan); it serves only while tracked.
    tracked = (
        L1Cache(
            settings.cache_l1_max_entries,
            settings.cache_l1_max_bytes,
            settings.cache_l1_ttl_seconds,
            needs_subscription=True,
            jitter=l1_jitter,
        )
        if settings.l1_tracks
        else None
    )
    metrics.L1_SUBSCRIBED.set(0)
    metrics.L1_TRACKING.set(0)
    # The loop's subscriber is started by the ASGI lifespan (front/asgi.py), in that loop.
    threaded = settings.l1_subscribes and settings.cache_l1_subscriber == "thread"
    subscriber = InvalidationSubscriber(settings, l1) if threaded else None
    if subscriber is not None:
        subscriber.start()

    def sample() -> None:
        db.sample_gauges()
        cache.sample_gauges()
        l1.sample_gauges(tracked)

    return Services(
        settings=settings,
        db=db,
        cache=cache,
        tiers=TieredCache(l1, cache, hooks, tracked),
        subscriber=subscriber,
        breaker=breaker,
        core=CoreClient(settings),
        bypass_slots=threading.BoundedSemaphore(settings.lab_max_concurrent_bypass),
        python_compute=Slots(
            settings.python_compute_max_concurrency, settings.python_compute_queue_wait_ms / 1000
        ),
        sampler_stop=metrics.start_sampler(sample),
        loop_lag=loop_lag,
        miss_budget=MissBudget.from_settings(settings),
        readiness=ReadinessCache(settings.ready_cache_ms / 1000),
    )
