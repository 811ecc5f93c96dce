"""Every environment variable the gateway reads, read here and nowhere else.

`load_settings(os.environ)` returns a frozen `Settings` or raises `ConfigError`
whose message is one line naming the variable at fault. gunicorn.conf.py calls
it in the master, so a bad value stops the server before any worker starts;
front/asgi.py calls it again in each worker.
(prometheus-client also reads PROMETHEUS_MULTIPROC_DIR itself when it is
imported; we read it here too so it is validated and documented with the rest.)
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from aside_gateway.contracts import tolerance
from aside_gateway.contracts.cache_keys import (
    CODECS,
    DEFAULT_CODEC,
    DEFAULT_EXPIRY,
    DEFAULT_POLICY,
    DEFAULT_STRATEGY,
    EXPIRY_EARLY_BETA_DEFAULT,
    EXPIRY_JITTER_DEFAULT,
    EXPIRY_MODES,
    EXPIRY_STALE_MAX_SECONDS_DEFAULT,
    L1_TTL_SECONDS_DEFAULT,
    LARGE_THRESHOLD_BYTES_DEFAULT,
    POLICIES,
    SIMPLIFY_TOLERANCE_DEFAULT,
    STRATEGIES,
    STRATEGY_TRACKING,
    TTL_SECONDS_DEFAULT,
)

PROFILES = ("lab", "production")
COHERENCE_MODES = ("lease", "naive")
L1_SUBSCRIBERS = ("loop", "thread")
WRITE_PATHS = ("loop", "flask")
# The event loop's door (door/loop_admission.py).
ADMISSION_MODES = ("aimd", "pie", "off")
# What REDIS_URL names (REDIS_MODE): the server, a Redis Cluster's seed node,
# or a Sentinel that knows the master (backends/redis_clients.py makes the clients).
REDIS_STANDALONE = "standalone"
REDIS_CLUSTER = "cluster"
REDIS_SENTINEL = "sentinel"
REDIS_MODES = (REDIS_STANDALONE, REDIS_CLUSTER, REDIS_SENTINEL)
# The event loop's GET (REDIS_READS, backends/redis_reads.py): batched on the
# worker's own connections, or redis-py's asyncio client (a cluster always).
REDIS_READS_LEAN = "lean"
REDIS_READS_CLIENT = "client"
REDIS_READS = (REDIS_READS_LEAN, REDIS_READS_CLIENT)

_INT_RE = re.compile(r"^-?[0-9]{1,12}$")
_DECIMAL_RE = re.compile(r"^[0-9]{1,6}(?:\.[0-9]{1,6})?$")
_BIND_RE = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]*):(\d{1,5})$")
# A bearer token as it can travel in a header: visible ASCII, no spaces.
_TOKEN_RE = re.compile(r"^[\x21-\x7e]{16,512}$")

DEFAULT_METRICS_BIND = "127.0.0.1:28009"
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# On every answer of the lab profile: the pid of the worker that answered, so
# the tests can tell the workers apart (a production answer names none).
WORKER_HEADER = "X-Aside-Worker"


class ConfigError(ValueError):
    """A missing or wrong environment variable; the message is one line."""


@dataclass(frozen=True)
class Settings:
    database_url: str
    redis_url: str
    core_url: str
    profile: str = "production"
    redis_mode: str = REDIS_STANDALONE
    redis_sentinel_master: str | None = None
    cache_ttl_seconds: int = TTL_SECONDS_DEFAULT
    bind: str = "127.0.0.1:28000"
    workers: int = 2
    threads: int = 64
    db_pool_min: int = 2
    db_pool_max: int = 16
    db_pool_timeout_ms: int = 1000
    db_connect_timeout_s: int = 2
    db_statement_timeout_ms: int = 5000
    redis_pool_max: int = 64
    redis_timeout_ms: int = 200
    redis_connect_timeout_ms: int = 200
    redis_breaker_ms: int = 1000
    # The event loop's GET (backends/redis_reads.py) and its connections per worker.
    redis_reads: str = REDIS_READS_LEAN
    redis_read_connections: int = 2
    core_connect_timeout_ms: int = 500
    # Outlasts the core's worst case for a write (contracts/timeouts.json).
    core_timeout_ms: int = 6000
    python_compute_max_complexity: int = 20
    python_compute_max_pbkdf2_iterations: int = 600_000
    python_compute_max_bcrypt_cost: int = 12
    python_compute_max_concurrency: int = 1
    python_compute_queue_wait_ms: int = 1000
    lab_max_concurrent_bypass: int = 8
    test_hooks: bool = False
    cache_coherence: str = "lease"
    prometheus_multiproc_dir: str | None = None
    # Kept out of repr so a logged Settings never shows the secret.
    write_token: str | None = field(default=None, repr=False)
    # Sent to the core on every forwarded request (Authorization: Bearer).
    core_token: str | None = field(default=None, repr=False)
    metrics_bind: str = DEFAULT_METRICS_BIND
    miss_batch_max: int = 500
    miss_batches_in_flight: int = 1
    miss_batch_duty_percent: int = 25
    cache_strategy: str = DEFAULT_STRATEGY
    cache_l1_ttl_seconds: int = L1_TTL_SECONDS_DEFAULT
    cache_l1_max_entries: int = 10000
    cache_l1_max_bytes: int = 16 * 1024 * 1024
    # Lab switch: off lets the L1 serve without invalidation messages (TTL only).
    cache_l1_invalidation: bool = True
    # Where each worker follows the invalidation channel (tiers/invalidations.py).
    cache_l1_subscriber: str = "loop"
    # Lab switch: off keeps the tracking tier's subscription but sends no
    # CLIENT TRACKING, so Redis reports nothing to it (tiers/tracking.py).
    cache_l1_tracking: bool = True
    # Who forwards user writes to the core: the event loop or a Flask thread (front/loop_writes.py).
    writes: str = "loop"
    # CPython's GIL switch interval in each worker (sys.setswitchinterval).
    switch_interval_us: int = 5000
    # The cyclic garbage collector in each worker (front/collector.py).
    gc_freeze: bool = True
    gc_gen0: int = 50000
    # Slow and idle clients (front/worker.py), per connection and per worker.
    head_timeout_s: int = 5
    body_timeout_s: int = 15
    keepalive_s: int = 30
    max_connections: int = 1000
    # Work behind the event loop (door/admission.py, misses/coalesce.py).
    queue_timeout_ms: int = 2000
    miss_batch_max_pending: int = 5000
    # The event loop's door (door/loop_admission.py) and its lateness (door/lateness.py).
    admission: str = "aimd"
    admission_min_in_flight: int = 16
    admission_max_in_flight: int = 512
    admission_late_ms: int = 5
    admission_busy_pct: int = 50
    loop_late_ms: int = 20
    # Reads from PostgreSQL while Redis is skipped or failing, at once (door/fallback.py).
    cache_fallback_max_concurrency: int = 8
    # TCP keepalive and user timeout on PostgreSQL connections (misses/db.py).
    db_keepalives_idle_s: int = 5
    db_keepalives_interval_s: int = 2
    db_keepalives_count: int = 3
    db_tcp_user_timeout_ms: int = 10000
    # Large cached values (tracks; tiers/largevalues.py): above the threshold the
    # policy decides what is stored; the codec is compress's.
    cache_large_value_bytes: int = LARGE_THRESHOLD_BYTES_DEFAULT
    cache_large_values: str = DEFAULT_POLICY
    cache_codec: str = DEFAULT_CODEC
    cache_simplify_tolerance: str = SIMPLIFY_TOLERANCE_DEFAULT
    # How a cached value's end is handled (tiers/expiry.py, cache.json `expiry`).
    cache_expiry: str = DEFAULT_EXPIRY
    cache_expiry_jitter: float = EXPIRY_JITTER_DEFAULT
    cache_expiry_early_beta: float = EXPIRY_EARLY_BETA_DEFAULT
    cache_expiry_stale_max_seconds: int = EXPIRY_STALE_MAX_SECONDS_DEFAULT
    # Misses a second per worker that may reach PostgreSQL or the core
    # (door/miss_budget.py): per route, per client of a route; 0 is off.
    miss_budget_route_per_s: int = 0
    miss_budget_client_per_s: int = 0
    # Proxies whose X-Forwarded-For names the client (addresses or CIDR blocks).
    trusted_proxies: tuple[Network, ...] = ()
    # /readyz answers 503 while the users table has no index on email.
    require_email_index: bool = False

    @property
    def is_lab(self) -> bool:
        return self.profile == "lab"

    @property
    def worker_header(self) -> tuple[str, str] | None:
        """The lab's answer header naming the worker process that answered (its
        pid, read when called: after the fork); None in production."""
        return (WORKER_HEADER, str(os.getpid())) if self.is_lab else None

    @property
    def l1_subscribes(self) -> bool:
        """Whether workers follow the invalidation channel: whenever the L1 tier may
        serve (a strategy using it, or the lab's per-request choice) and the lab
        switch has not turned invalidation off."""
        may_use_l1 = self.cache_strategy in ("l1", "hybrid") or self.is_lab
        return may_use_l1 and self.cache_l1_invalidation

    @property
    def l1_tracks(self) -> bool:
        """Whether workers keep a tracking connection (tiers/tracking.py): whenever the
        tracking tier may serve (configured, or the lab's per-request choice),
        except on a Redis Cluster, where the tier is refused as the configured
        strategy and serves nothing from L1 when chosen per request."""
        may_track = self.cache_strategy == STRATEGY_TRACKING or self.is_lab
        return may_track and self.redis_mode != REDIS_CLUSTER

    @property
    def metrics_on_app(self) -> bool:
        """Lab: the app answers /metrics. Production: only METRICS_BIND does."""
        return self.is_lab


def _one_line(value: str, limit: int = 60) -> str:
    shown = value if len(value) <= limit else value[:limit] + "..."
    return repr(shown)


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "")
    if not value.strip():
        raise ConfigError(f"{name} is required but not set")
    return value.strip()


def _int(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    text = raw.strip()
    if not _INT_RE.match(text):
        raise ConfigError(f"{name} must be an integer from {low} to {high}, got {_one_line(raw)}")
    value = int(text)
    if not low <= value <= high:
        raise ConfigError(f"{name} must be an integer from {low} to {high}, got {value}")
    return value


def _choice(env: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip()
    if value not in choices:
        raise ConfigError(f"{name} must be one of {'|'.join(choices)}, got {_one_line(raw)}")
    return value


def _decimal(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    """A plain decimal number (e.g. 0.1), from `low` to `high` inclusive."""
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    text = raw.strip()
    if not _DECIMAL_RE.match(text) or not low <= float(text) <= high:
        raise ConfigError(f"{name} must be a number from {low} to {high}, got {_one_line(raw)}")
    return float(text)


def _flag(env: Mapping[str, str], name: str) -> bool:
    return _choice(env, name, "0", ("0", "1")) == "1"


def _url(env: Mapping[str, str], name: str, schemes: tuple[str, ...]) -> str:
    value = _required(env, name)
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ConfigError(f"{name} is not a valid URL: {exc}") from None
    if parts.scheme not in schemes:
        raise ConfigError(f"{name} must be a {'/'.join(s + '://' for s in schemes)} URL")
    if parts.scheme != "unix" and not parts.hostname:
        raise ConfigError(f"{name} has no host")
    return value


def _redis_url(env: Mapping[str, str]) -> str:
    value = _url(env, "REDIS_URL", ("redis", "rediss", "unix"))
    path = urlsplit(value).path.strip("/")
    if urlsplit(value).scheme != "unix" and path and not path.isdigit():
        raise ConfigError(f"REDIS_URL database must be a number, got {_one_line(path)}")
    return value


def _l1_subscriber(env: Mapping[str, str], redis_mode: str) -> str:
    """CACHE_L1_SUBSCRIBER: `loop` by default, `thread` on a Redis Cluster, where
    only the threaded subscriber is tested (redis-py's asyncio cluster PubSub
    never confirmed the subscription on the test cluster)."""
    cluster = redis_mode == REDIS_CLUSTER
    subscriber = _choice(
        env, "CACHE_L1_SUBSCRIBER", "thread" if cluster else "loop", L1_SUBSCRIBERS
    )
    if cluster and subscriber == "loop":
        raise ConfigError("CACHE_L1_SUBSCRIBER must be thread when REDIS_MODE=cluster")
    return subscriber


def _cache_strategy(env: Mapping[str, str], redis_mode: str) -> str:
    """CACHE_STRATEGY; `tracking` needs one tracking connection per Redis server,
    which a cluster's changing set of nodes does not give (tiers/tracking.py)."""
    strategy = _choice(env, "CACHE_STRATEGY", DEFAULT_STRATEGY, STRATEGIES)
    if strategy == STRATEGY_TRACKING and redis_mode == REDIS_CLUSTER:
        raise ConfigError("CACHE_STRATEGY=tracking is refused when REDIS_MODE=cluster")
    return strategy


def _redis_mode(env: Mapping[str, str], url: str) -> tuple[str, str | None]:
    """REDIS_MODE and, for sentinel, REDIS_SENTINEL_MASTER; checked against REDIS_URL."""
    mode = _choice(env, "REDIS_MODE", REDIS_STANDALONE, REDIS_MODES)
    parts = urlsplit(url)
    if mode != REDIS_STANDALONE and parts.scheme == "unix":
        raise ConfigError(f"REDIS_URL must be a redis:// or rediss:// URL when REDIS_MODE={mode}")
    if mode == REDIS_CLUSTER and parts.path.strip("/") not in ("", "0"):
        raise ConfigError("REDIS_URL must name database 0 when REDIS_MODE=cluster")
    master = (env.get("REDIS_SENTINEL_MASTER") or "").strip() or None
    if mode == REDIS_SENTINEL and master is None:
        raise ConfigError("REDIS_SENTINEL_MASTER is required when REDIS_MODE=sentinel")
    return mode, master


def _bind(env: Mapping[str, str]) -> str:
    value = (env.get("GATEWAY_BIND") or "127.0.0.1:28000").strip()
    if value.startswith("unix:") and len(value) > 5:
        return value
    match = _BIND_RE.match(value)
    if not match or not 1 <= int(match.group(1)) <= 65535:
        raise ConfigError(f"GATEWAY_BIND must be HOST:PORT or unix:PATH, got {_one_line(value)}")
    return value


def _metrics_bind(env: Mapping[str, str]) -> str:
    value = (env.get("METRICS_BIND") or DEFAULT_METRICS_BIND).strip()
    match = _BIND_RE.match(value)
    if not match or not 1 <= int(match.group(1)) <= 65535:
        raise ConfigError(f"METRICS_BIND must be HOST:PORT, got {_one_line(value)}")
    return value


def split_host_port(bind: str) -> tuple[str, int]:
    """("127.0.0.1", 28009) from "127.0.0.1:28009"; IPv6 hosts lose their brackets,
    an empty host ("":28009) means every interface."""
    host, _, port = bind.rpartition(":")
    return host.strip("[]"), int(port)


def _token(env: Mapping[str, str], name: str, profile: str) -> str | None:
    """A bearer token: required in production, checked whenever set."""
    # The value is a secret: no message below may show it.
    value = env.get(name, "").strip()
    if not value:
        if profile == "production":
            raise ConfigError(f"{name} is required when ASIDE_PROFILE=production")
        return None
    if not _TOKEN_RE.match(value):
        raise ConfigError(
            f"{name} must be 16 to 512 visible ASCII characters (no spaces); value not shown"
        )
    return value


def _tolerance(env: Mapping[str, str], name: str, default: str) -> str:
    raw = (env.get(name) or "").strip() or default
    try:
        return tolerance.canonical(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}: {str(exc).replace('simplify', 'the tolerance')}") from None


# Production's miss budget a second per worker (route, client); the lab's is off
# so the bench is never throttled (docs/decisions/064-*.md).
MISS_BUDGET_DEFAULTS = {"production": (500, 50), "lab": (0, 0)}


def _trusted_proxies(env: Mapping[str, str]) -> tuple[Network, ...]:
    """GATEWAY_TRUSTED_PROXIES: addresses or CIDR blocks, separated by commas or spaces."""
    networks = []
    for part in (env.get("GATEWAY_TRUSTED_PROXIES") or "").replace(",", " ").split():
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ConfigError(
                f"GATEWAY_TRUSTED_PROXIES: {_one_line(part)} is not an IP address or CIDR block"
            ) from None
    return tuple(networks)


def _miss_budget(env: Mapping[str, str], profile: str) -> dict[str, int]:
    route, client = MISS_BUDGET_DEFAULTS[profile]
    return {
        "miss_budget_route_per_s": _int(env, "GATEWAY_MISS_BUDGET_ROUTE_PER_S", route, 0, 10**6),
        "miss_budget_client_per_s": _int(env, "GATEWAY_MISS_BUDGET_CLIENT_PER_S", client, 0, 10**6),
    }


def _require_email_index(env: Mapping[str, str], profile: str) -> bool:
    """GATEWAY_REQUIRE_EMAIL_INDEX: 1 by default in production, 0 in the lab (whose
    table is unindexed on purpose). 0 in production is allowed, for a table an
    operator knows to be small, and logged at start (web/app.py)."""
    default = "1" if profile == "production" else "0"
    return _choice(env, "GATEWAY_REQUIRE_EMAIL_INDEX", default, ("0", "1")) == "1"


def load_settings(env: Mapping[str, str]) -> Settings:
    """Read and check every variable; raise ConfigError naming the first bad one."""
    profile = _choice(env, "ASIDE_PROFILE", "production", PROFILES)
    test_hooks = _flag(env, "ASIDE_TEST_HOOKS")
    if test_hooks and profile != "lab":
        raise ConfigError("ASIDE_TEST_HOOKS=1 is refused unless ASIDE_PROFILE=lab")
    coherence = _choice(env, "ASIDE_CACHE_COHERENCE", "lease", COHERENCE_MODES)
    if coherence != "lease" and not test_hooks:
        raise ConfigError("ASIDE_CACHE_COHERENCE=naive needs ASIDE_TEST_HOOKS=1 (lab only)")
    db_pool_min = _int(env, "DB_POOL_MIN", 2, 0, 256)
    db_pool_max = _int(env, "DB_POOL_MAX", 16, 1, 256)
    if db_pool_min > db_pool_max:
        raise ConfigError(
            f"DB_POOL_MIN ({db_pool_min}) must not exceed DB_POOL_MAX ({db_pool_max})"
        )
    multiproc_dir = (env.get("PROMETHEUS_MULTIPROC_DIR") or "").strip() or None
    l1_invalidation = _choice(env, "CACHE_L1_INVALIDATION", "on", ("on", "off")) == "on"
    if not l1_invalidation and profile != "lab":
        raise ConfigError("CACHE_L1_INVALIDATION=off is refused unless ASIDE_PROFILE=lab")
    l1_tracking = _choice(env, "CACHE_L1_TRACKING", "on", ("on", "off")) == "on"
    if not l1_tracking and profile != "lab":
        raise ConfigError("CACHE_L1_TRACKING=off is refused unless ASIDE_PROFILE=lab")
    admission_min = _int(env, "GATEWAY_ADMISSION_MIN_INFLIGHT", 16, 1, 1_000_000)
    admission_max = _int(env, "GATEWAY_ADMISSION_MAX_INFLIGHT", 512, 1, 1_000_000)
    if admission_min > admission_max:
        raise ConfigError(
            f"GATEWAY_ADMISSION_MIN_INFLIGHT ({admission_min}) must not exceed "
            f"GATEWAY_ADMISSION_MAX_INFLIGHT ({admission_max})"
        )
    database_url = _url(env, "DATABASE_URL", ("postgresql", "postgres"))
    redis_url = _redis_url(env)
    redis_mode, sentinel_master = _redis_mode(env, redis_url)
    return Settings(
        **_miss_budget(env, profile),
        trusted_proxies=_trusted_proxies(env),
        require_email_index=_require_email_index(env, profile),
        database_url=database_url,
        redis_url=redis_url,
        core_url=_url(env, "CORE_URL", ("http", "https")).rstrip("/"),
        profile=profile,
        redis_mode=redis_mode,
        redis_sentinel_master=sentinel_master,
        cache_ttl_seconds=_int(env, "CACHE_TTL_SECONDS", TTL_SECONDS_DEFAULT, 1, 86400),
        bind=_bind(env),
        workers=_int(env, "GATEWAY_WORKERS", 2, 1, 64),
        threads=_int(env, "GATEWAY_THREADS", 64, 1, 256),
        db_pool_min=db_pool_min,
        db_pool_max=db_pool_max,
        db_pool_timeout_ms=_int(env, "DB_POOL_TIMEOUT_MS", 1000, 10, 60000),
        db_connect_timeout_s=_int(env, "DB_CONNECT_TIMEOUT_S", 2, 1, 60),
        db_statement_timeout_ms=_int(env, "DB_STATEMENT_TIMEOUT_MS", 5000, 10, 600000),
        redis_pool_max=_int(env, "REDIS_POOL_MAX", 64, 1, 1024),
        redis_timeout_ms=_int(env, "REDIS_TIMEOUT_MS", 200, 10, 10000),
        redis_connect_timeout_ms=_int(env, "REDIS_CONNECT_TIMEOUT_MS", 200, 10, 10000),
        redis_breaker_ms=_int(env, "REDIS_BREAKER_MS", 1000, 0, 60000),
        redis_reads=_choice(env, "REDIS_READS", REDIS_READS_LEAN, REDIS_READS),
        redis_read_connections=_int(env, "REDIS_READ_CONNECTIONS", 2, 1, 64),
        core_connect_timeout_ms=_int(env, "CORE_CONNECT_TIMEOUT_MS", 500, 10, 60000),
        core_timeout_ms=_int(env, "CORE_TIMEOUT_MS", 6000, 10, 600000),
        python_compute_max_complexity=_int(env, "PYTHON_COMPUTE_MAX_COMPLEXITY", 20, 1, 1000),
        python_compute_max_pbkdf2_iterations=_int(
            env, "PYTHON_COMPUTE_MAX_PBKDF2_ITERATIONS", 600_000, 1, 1_000_000
        ),
        python_compute_max_bcrypt_cost=_int(env, "PYTHON_COMPUTE_MAX_BCRYPT_COST", 12, 4, 12),
        python_compute_max_concurrency=_int(env, "PYTHON_COMPUTE_MAX_CONCURRENCY", 1, 1, 256),
        python_compute_queue_wait_ms=_int(env, "PYTHON_COMPUTE_QUEUE_WAIT_MS", 1000, 0, 60000),
        lab_max_concurrent_bypass=_int(env, "LAB_MAX_CONCURRENT_BYPASS", 8, 1, 1024),
        test_hooks=test_hooks,
        cache_coherence=coherence,
        prometheus_multiproc_dir=multiproc_dir,
        write_token=_token(env, "WRITE_TOKEN", profile),
        core_token=_token(env, "CORE_TOKEN", profile),
        metrics_bind=_metrics_bind(env),
        miss_batch_max=_int(env, "MISS_BATCH_MAX", 500, 1, 10000),
        miss_batches_in_flight=_int(env, "MISS_BATCHES_IN_FLIGHT", 1, 1, 16),
        miss_batch_duty_percent=_int(env, "MISS_BATCH_DUTY_PERCENT", 25, 1, 100),
        cache_strategy=_cache_strategy(env, redis_mode),
        cache_l1_ttl_seconds=_int(env, "CACHE_L1_TTL_SECONDS", L1_TTL_SECONDS_DEFAULT, 1, 86400),
        cache_l1_max_entries=_int(env, "CACHE_L1_MAX_ENTRIES", 10000, 1, 10_000_000),
        cache_l1_max_bytes=_int(env, "CACHE_L1_MAX_BYTES", 16 * 1024 * 1024, 4096, 2**36),
        cache_l1_invalidation=l1_invalidation,
        cache_l1_subscriber=_l1_subscriber(env, redis_mode),
        cache_l1_tracking=l1_tracking,
        writes=_choice(env, "GATEWAY_WRITES", "loop", WRITE_PATHS),
        switch_interval_us=_int(env, "GATEWAY_SWITCH_INTERVAL_US", 5000, 100, 100_000),
        gc_freeze=_choice(env, "GATEWAY_GC_FREEZE", "1", ("0", "1")) == "1",
        gc_gen0=_int(env, "GATEWAY_GC_GEN0", 50000, 100, 10_000_000),
        head_timeout_s=_int(env, "GATEWAY_HEAD_TIMEOUT_S", 5, 1, 300),
        body_timeout_s=_int(env, "GATEWAY_BODY_TIMEOUT_S", 15, 1, 3600),
        keepalive_s=_int(env, "GATEWAY_KEEPALIVE_S", 30, 1, 3600),
        max_connections=_int(env, "GATEWAY_MAX_CONNECTIONS", 1000, 1, 1_000_000),
        queue_timeout_ms=_int(env, "GATEWAY_QUEUE_TIMEOUT_MS", 2000, 10, 600000),
        miss_batch_max_pending=_int(env, "MISS_BATCH_MAX_PENDING", 5000, 1, 1_000_000),
        admission=_choice(env, "GATEWAY_ADMISSION", "aimd", ADMISSION_MODES),
        admission_min_in_flight=admission_min,
        admission_max_in_flight=admission_max,
        admission_late_ms=_int(env, "GATEWAY_ADMISSION_LATE_MS", 5, 1, 10000),
        admission_busy_pct=_int(env, "GATEWAY_ADMISSION_BUSY_PCT", 50, 0, 100),
        loop_late_ms=_int(env, "GATEWAY_LOOP_LATE_MS", 20, 1, 10000),
        cache_fallback_max_concurrency=_int(env, "CACHE_FALLBACK_MAX_CONCURRENCY", 8, 1, 1024),
        db_keepalives_idle_s=_int(env, "DB_KEEPALIVES_IDLE_S", 5, 1, 3600),
        db_keepalives_interval_s=_int(env, "DB_KEEPALIVES_INTERVAL_S", 2, 1, 3600),
        db_keepalives_count=_int(env, "DB_KEEPALIVES_COUNT", 3, 1, 100),
        db_tcp_user_timeout_ms=_int(env, "DB_TCP_USER_TIMEOUT_MS", 10000, 0, 3600000),
        cache_large_value_bytes=_int(
            env, "CACHE_LARGE_VALUE_BYTES", LARGE_THRESHOLD_BYTES_DEFAULT, 256, 2**30
        ),
        cache_large_values=_choice(env, "CACHE_LARGE_VALUES", DEFAULT_POLICY, POLICIES),
        cache_codec=_choice(env, "CACHE_CODEC", DEFAULT_CODEC, CODECS),
        cache_simplify_tolerance=_tolerance(
            env, "CACHE_SIMPLIFY_TOLERANCE", SIMPLIFY_TOLERANCE_DEFAULT
        ),
        cache_expiry=_choice(env, "CACHE_EXPIRY", DEFAULT_EXPIRY, EXPIRY_MODES),
        cache_expiry_jitter=_decimal(env, "CACHE_EXPIRY_JITTER", EXPIRY_JITTER_DEFAULT, 0.0, 0.9),
        cache_expiry_early_beta=_decimal(
            env, "CACHE_EXPIRY_EARLY_BETA", EXPIRY_EARLY_BETA_DEFAULT, 0.0, 100.0
        ),
        cache_expiry_stale_max_seconds=_int(
            env, "CACHE_EXPIRY_STALE_MAX_SECONDS", EXPIRY_STALE_MAX_SECONDS_DEFAULT, 1, 3600
        ),
    )
