"""Prometheus metrics, exact across gunicorn workers (prometheus-client multiprocess mode).

Multiprocess mode is chosen by prometheus-client when it is first imported,
from PROMETHEUS_MULTIPROC_DIR; gunicorn.conf.py makes sure it is set (and
emptied) in the master before any worker forks. Each worker writes its own
mmap files; /metrics merges them, so counters are exact whichever worker
answers the scrape. Pool gauges use `livesum`: the sum over live workers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from aside_gateway.contracts.cache_keys import BYPASS, HIT, MISS, STALE

log = logging.getLogger("aside_gateway")

# Fine-grained at the low end: warm-cache answers live between 0.5 and 10 ms.
DURATION_BUCKETS = (
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

READINESS_CHECKS = Counter(
    "aside_gateway_readiness_checks_total",
    "Dependency checks /readyz ran (PostgreSQL, Redis, the email index); callers "
    "within GATEWAY_READY_CACHE_MS of one share its verdict.",
)
HTTP_REQUESTS = Counter(
    "aside_gateway_http_requests_total",
    "HTTP requests answered, by route rule, method and status.",
    ["route", "method", "status"],
)
HTTP_DURATION = Histogram(
    "aside_gateway_http_request_duration_seconds",
    "Time from request start to response ready, by route rule, method and status.",
    ["route", "method", "status"],
    buckets=DURATION_BUCKETS,
)
CACHE_HITS = Counter(
    "aside_gateway_cache_hits_total",
    "Cacheable reads that ran no query of their own: answered from Redis, or with the "
    "fill of another reader (a lease holder, or a thread of the same worker).",
    ["route"],
)
CACHE_MISSES = Counter(
    "aside_gateway_cache_misses_total",
    "Cacheable reads that went to PostgreSQL because Redis had no value.",
    ["route"],
)
CACHE_BYPASS = Counter(
    "aside_gateway_cache_bypass_total",
    "Reads answered from PostgreSQL without the cache: cache=off, or Redis failing.",
    ["route"],
)
CACHE_ERRORS = Counter(
    "aside_gateway_cache_errors_total",
    "Redis operations that failed (op=breaker_open: skipped while the breaker is open).",
    ["route", "op"],
)
# Expiry handling (tiers/expiry.py, CACHE_EXPIRY).
CACHE_STALE_SERVED = Counter(
    "aside_cache_stale_served",
    "Cacheable reads answered with a value past its expiry (CACHE_EXPIRY=swr, X-Cache: STALE) "
    "while another reader refreshed it; also counted as hits.",
    ["route"],
)
STALE_AGE_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
CACHE_STALE_AGE = Histogram(
    "aside_cache_stale_age_seconds",
    "How long past its expiry each stale answer's value was (at most "
    "CACHE_EXPIRY_STALE_MAX_SECONDS).",
    ["route"],
    buckets=STALE_AGE_BUCKETS,
)
CACHE_STALE_AGE_MAX = Gauge(
    "aside_cache_stale_age_max_seconds",
    "The largest age past expiry of a stale answer since the worker started (max over workers).",
    ["route"],
    multiprocess_mode="max",
)
CACHE_EARLY_REFRESH = Counter(
    "aside_cache_early_refresh",
    "Values recomputed before their expiry (CACHE_EXPIRY=early: the XFetch draw said so "
    "and this reader took the lease).",
    ["route"],
)
CACHE_REFRESH_BEHIND = Counter(
    "aside_cache_refresh_behind",
    "Refreshes of a stale value run behind its answer (CACHE_EXPIRY=swr), by outcome: "
    "done (Flask answered 200), failed (another status or an error), skipped (the "
    "worker's bound of refreshes at once was reached: the next stale read tries again).",
    ["route", "outcome"],
)
DB_QUERIES = Counter(
    "aside_gateway_db_queries_total",
    "Queries sent to PostgreSQL, by query name (a batch of count misses counts once).",
    ["query"],
)
DB_UNPOOLED_CONNECTIONS = Counter(
    "aside_gateway_db_unpooled_connections_total",
    "PostgreSQL connections opened for one read each and closed after it (cache=nopool, lab).",
)
SHED = Counter(
    "aside_gateway_shed_total",
    "Requests answered 503 without their work: waited too long for a thread "
    "(queue_timeout), client gone before a thread took them (client_gone), "
    "too many count misses waiting for a batch (batch_queue_full), every python "
    "compute slot stayed busy (python_compute_busy), the event loop's door was at its "
    "limit (admission_limit) "
    "or was refused with the late loop's drop probability (loop_late), "
    "too many reads falling back to PostgreSQL (fallback_busy) or asking it "
    "uncached, the lab's bypass (uncached_busy), or PostgreSQL just failed a read "
    "and the worker's breaker holds its misses off (db_breaker_open), or the "
    "lease a miss waited on was left failed by its holder (lease_failed)",
    ["reason"],
)
OPS_HELD = Counter(
    "aside_gateway_ops_held_total",
    "Requests to /healthz, /readyz or /metrics held, their connection not read, until "
    "their client's turn of production's ops pace was due (door/ops_pace.py), by path.",
    ["path"],
)
MISS_HELD = Counter(
    "aside_gateway_miss_held_total",
    "Misses of a client the miss budget had answered 429 that waited out its "
    "Retry-After on the event loop before going on (door/miss_hold.py).",
)
MISS_BUDGET_REFUSED = Counter(
    "aside_gateway_miss_budget_refused_total",
    "Misses answered 429 before reaching PostgreSQL or the core, by route and by the "
    "budget spent: the route's (route) or one client's of the route (client); production's "
    "miss budget (door/miss_budget.py)",
    ["route", "scope"],
)
MISS_BATCH_SIZE = Histogram(
    "aside_gateway_miss_batch_size",
    "Count misses read by one batched query (a batch of 1 is the plain count query).",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
)
SINGLEFLIGHT_SHARED = Counter(
    "aside_gateway_singleflight_shared_total",
    "Cacheable reads answered with the fill of another thread of the same worker.",
    ["route"],
)
LOOP_FOLLOWERS = Counter(
    "aside_gateway_loop_followers_total",
    "Cacheable reads that waited on the event loop, holding no Flask thread, for another "
    "request of the same worker to fill their key; outcome: hit (then answered from the "
    "cache on the loop) or fallback (still no value: answered by Flask).",
    ["route", "outcome"],
)
LOOP_FOLLOWERS_WAITING = Gauge(
    "aside_gateway_loop_followers_waiting",
    "Reads waiting on the event loop for another request's fill of their key.",
    multiprocess_mode="livesum",
)
DB_POOL_SIZE = Gauge(
    "aside_gateway_db_pool_size", "Open PostgreSQL connections.", multiprocess_mode="livesum"
)
DB_POOL_AVAILABLE = Gauge(
    "aside_gateway_db_pool_available",
    "Idle PostgreSQL connections in the pool.",
    multiprocess_mode="livesum",
)
DB_POOL_WAITING = Gauge(
    "aside_gateway_db_pool_waiting",
    "Requests waiting for a PostgreSQL connection.",
    multiprocess_mode="livesum",
)
DB_POOL_MAX = Gauge(
    "aside_gateway_db_pool_max", "PostgreSQL pool size limit.", multiprocess_mode="livesum"
)
REDIS_POOL_CREATED = Gauge(
    "aside_gateway_redis_pool_created",
    "Redis connections created by the pool.",
    multiprocess_mode="livesum",
)
REDIS_POOL_IN_USE = Gauge(
    "aside_gateway_redis_pool_in_use", "Redis connections in use.", multiprocess_mode="livesum"
)
REDIS_POOL_MAX = Gauge(
    "aside_gateway_redis_pool_max", "Redis pool size limit.", multiprocess_mode="livesum"
)
ADMISSION_LIMIT = Gauge(
    "aside_gateway_admission_limit",
    "Requests each worker's event loop admits at once (GATEWAY_ADMISSION), summed over workers.",
    multiprocess_mode="livesum",
)
ADMISSION_IN_FLIGHT = Gauge(
    "aside_gateway_admission_in_flight",
    "Requests in flight in the workers (admitted, not yet answered).",
    multiprocess_mode="livesum",
)
CONNECTIONS_MAX = Gauge(
    "aside_gateway_connections_max",
    "Connections a worker holds before it answers a new one 503 "
    "(GATEWAY_MAX_CONNECTIONS), the fewest over live workers.",
    multiprocess_mode="livemin",
)
LOOP_LAG = Gauge(
    "aside_gateway_loop_lag_seconds",
    "How late the event loop ran its lag ticks: the largest of the last quarter "
    "second's, the largest over live workers.",
    multiprocess_mode="livemax",
)
GC_PAUSE = Histogram(
    "aside_gateway_gc_pause_seconds",
    "Collections of the cyclic garbage collector by generation, and how long "
    "each held the worker (its event loop included).",
    ["generation"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2),
)
FALLBACK_IN_FLIGHT = Gauge(
    "aside_gateway_fallback_in_flight",
    "Reads answered from PostgreSQL because Redis was skipped or failed, in flight now.",
    multiprocess_mode="livesum",
)
REDIS_ERRORS_JUDGED = Counter(
    "aside_gateway_redis_errors_judged_total",
    "Redis errors as the circuit breaker judged them: redis (it opens) or gateway_late "
    "(a timeout while the worker's event loop ran late: it stays as it was).",
    ["verdict"],
)
REDIS_BREAKER_OPEN = Gauge(
    "aside_gateway_redis_breaker_open",
    "Workers whose Redis circuit breaker is open (Redis skipped).",
    multiprocess_mode="livesum",
)
DB_BREAKER_OPEN = Gauge(
    "aside_gateway_db_breaker_open",
    "Workers whose PostgreSQL circuit breaker is open (their misses answered 503).",
    multiprocess_mode="livesum",
)

CACHE_TIER_READS = Counter(
    "aside_gateway_cache_tier_reads_total",
    "Lookups in one cache tier (l1: the worker's memory, l2: Redis) and their outcome (hit, miss).",
    ["route", "tier", "outcome"],
)
L1_ENTRIES = Gauge(
    "aside_gateway_l1_entries",
    "Entries in the L1 tiers of live workers.",
    multiprocess_mode="livesum",
)
L1_BYTES = Gauge(
    "aside_gateway_l1_bytes",
    "Bytes charged to the L1 tiers of live workers (values, keys and a per-entry overhead).",
    multiprocess_mode="livesum",
)
L1_EVICTIONS = Counter(
    "aside_gateway_l1_evictions_total",
    "Entries dropped from L1: capacity (a bound was hit), invalidation (a message), "
    "flush (subscription lost or renewed).",
    ["reason"],
)
L1_INVALIDATIONS = Counter(
    "aside_gateway_l1_invalidations_received_total",
    "Invalidation messages received from the core's channel.",
)
L1_SUBSCRIBED = Gauge(
    "aside_gateway_l1_subscribed",
    "1 when every live worker is subscribed to the invalidation channel (its L1 may serve).",
    multiprocess_mode="livemin",
)
L1_SUBSCRIPTIONS = Counter(
    "aside_gateway_l1_subscriptions_total",
    "Subscriptions to the invalidation channel confirmed by Redis (first ones and renewals).",
)
L1_TRACKING = Gauge(
    "aside_gateway_l1_tracking",
    "1 when every live worker's tracking connection is tracked and subscribed "
    "(the tracking tier's L1 may serve).",
    multiprocess_mode="livemin",
)
L1_TRACKING_SESSIONS = Counter(
    "aside_gateway_l1_tracking_sessions_total",
    "Tracking connections confirmed by Redis (first ones and renewals).",
)
L1_TRACKING_INVALIDATIONS = Counter(
    "aside_gateway_l1_tracking_invalidations_total",
    "Invalidation messages received from Redis's client tracking.",
)
# Fine below 50 ms, where the lag's p99 lives: a quantile is interpolated
# linearly within its bucket, so a (10, 25] ms bucket could not tell 11 ms from 24.
LAG_BUCKETS = (
    0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.0025, 0.003, 0.004, 0.005,
    0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
    0.075, 0.1, 0.25, 0.5, 1.0, 5.0,
)  # fmt: skip
L1_INVALIDATION_LAG = Histogram(
    "aside_gateway_l1_invalidation_lag_seconds",
    "Receive time minus the core's publish time of each invalidation message.",
    buckets=LAG_BUCKETS,
)

# Cached values from 256 B to 4 MiB, a factor 4 apart (tracks run to ~1.1 MB).
VALUE_BUCKETS = (256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
CACHE_VALUE_BYTES = Histogram(
    "aside_gateway_cache_value_bytes",
    "Size of cached values: stored (offered to Redis by a fill, as stored), fetched "
    "(read from Redis on a hit, as stored) and served (the answer's body, decoded).",
    ["route", "op"],
    buckets=VALUE_BUCKETS,
)
CACHE_COMPRESSION_RATIO = Histogram(
    "aside_gateway_cache_compression_ratio",
    "Decoded size / stored size of each value a fill compressed, by codec.",
    ["codec"],
    buckets=(1, 1.5, 2, 3, 4, 6, 8, 12, 16, 32),
)

_request_children: dict[tuple[str, str, str], tuple[Counter, Histogram]] = {}


def observe_request(route: str, method: str, status: int, seconds: float) -> None:
    """Count one answered request; label children are cached to keep this cheap."""
    labels = (route, method, str(status))
    children = _request_children.get(labels)
    if children is None:
        children = (HTTP_REQUESTS.labels(*labels), HTTP_DURATION.labels(*labels))
        _request_children[labels] = children
    children[0].inc()
    children[1].observe(seconds)


def count_refused(route: str, method: str, reason: str, count: int) -> None:
    """Count `count` requests the event loop's door refused: 503 answers of
    their route, shed for `reason`. Not timed: the door answers in
    microseconds, and what such a request waited for was the loop, in its
    socket, where no server clock sees it."""
    HTTP_REQUESTS.labels(route, method, "503").inc(count)
    SHED.labels(reason).inc(count)


def render(multiproc_dir: str | None) -> tuple[bytes, str]:
    """The exposition text: merged over all workers in multiprocess mode."""
    if multiproc_dir:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=multiproc_dir)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def start_sampler(sample: Callable[[], None], interval_s: float = 1.0) -> threading.Event:
    """Run `sample` every interval in a daemon thread; set the returned event to stop."""
    stop = threading.Event()

    def loop() -> None:
        while True:
            try:
                sample()
            except Exception:  # a gauge must never take the worker down
                log.exception("metrics sampler failed")
            if stop.wait(interval_s):
                return

    threading.Thread(target=loop, name="aside-metrics-sampler", daemon=True).start()
    return stop


# A stale answer (STALE) ran no query of its own: a hit, counted again by stale_served.
_OUTCOME_COUNTERS = {
    HIT: CACHE_HITS,
    STALE: CACHE_HITS,
    MISS: CACHE_MISSES,
    BYPASS: CACHE_BYPASS,
}
_outcome_children: dict[tuple[str, str], Counter] = {}


def cache_outcome(route: str, outcome: str, stale_ms: int = 0) -> None:
    """Count a cacheable read by how it was answered: HIT, STALE (its value
    `stale_ms` past its expiry), MISS or BYPASS."""
    child = _outcome_children.get((route, outcome))
    if child is None:
        child = _OUTCOME_COUNTERS[outcome].labels(route)
        _outcome_children[(route, outcome)] = child
    child.inc()
    if outcome == STALE:
        stale_served(route, stale_ms / 1000)


_stale_max: dict[str, float] = {}
_stale_lock = threading.Lock()


def stale_served(route: str, age_s: float) -> None:
    """Count a stale answer and how far past its expiry its value was."""
    CACHE_STALE_SERVED.labels(route).inc()
    CACHE_STALE_AGE.labels(route).observe(age_s)
    with _stale_lock:
        if age_s <= _stale_max.get(route, -1.0):
            return
        _stale_max[route] = age_s
    CACHE_STALE_AGE_MAX.labels(route).set(age_s)


def early_refresh(route: str) -> None:
    CACHE_EARLY_REFRESH.labels(route).inc()


def refresh_behind(route: str, outcome: str) -> None:
    CACHE_REFRESH_BEHIND.labels(route, outcome).inc()


def cache_error(route: str, op: str) -> None:
    CACHE_ERRORS.labels(route, op).inc()


def shed(reason: str) -> None:
    SHED.labels(reason).inc()


def ops_held(path: str) -> None:
    OPS_HELD.labels(path).inc()


def miss_held() -> None:
    MISS_HELD.inc()


def miss_budget_refused(route: str, scope: str) -> None:
    MISS_BUDGET_REFUSED.labels(route, scope).inc()


def redis_error_judged(verdict: str) -> None:
    REDIS_ERRORS_JUDGED.labels(verdict).inc()


def singleflight_shared(route: str) -> None:
    SINGLEFLIGHT_SHARED.labels(route).inc()


_follower_children: dict[tuple[str, str], Counter] = {}


def loop_follower(route: str, outcome: str) -> None:
    """Count a read that waited on the event loop for another's fill: hit|fallback."""
    child = _follower_children.get((route, outcome))
    if child is None:
        child = LOOP_FOLLOWERS.labels(route, outcome)
        _follower_children[(route, outcome)] = child
    child.inc()


_tier_children: dict[tuple[str, str, str], Counter] = {}


def tier_read(route: str, tier: str, outcome: str) -> None:
    """Count one lookup in a tier: tier l1|l2, outcome hit|miss."""
    labels = (route, tier, outcome)
    child = _tier_children.get(labels)
    if child is None:
        child = CACHE_TIER_READS.labels(*labels)
        _tier_children[labels] = child
    child.inc()


def l1_evicted(reason: str, count: int = 1) -> None:
    L1_EVICTIONS.labels(reason).inc(count)


def l1_invalidation_received(lag_s: float | None) -> None:
    L1_INVALIDATIONS.inc()
    if lag_s is not None:
        L1_INVALIDATION_LAG.observe(max(lag_s, 0.0))


_value_children: dict[tuple[str, str], Histogram] = {}


def value_bytes(route: str, op: str, size: int) -> None:
    """One cached value's size: op stored|fetched|served."""
    child = _value_children.get((route, op))
    if child is None:
        child = CACHE_VALUE_BYTES.labels(route, op)
        _value_children[(route, op)] = child
    child.observe(size)


def compression_ratio(codec: str, decoded: int, stored: int) -> None:
    CACHE_COMPRESSION_RATIO.labels(codec).observe(decoded / max(stored, 1))
