"""Every environment variable the gateway reads, read here and nowhere else.

`load_settings(os.environ)` returns a frozen `Settings` or raises `ConfigError`
whose message is one line naming the variable at fault. gunicorn.conf.py calls
it in the master, so a bad value stops the server before any worker starts;
front/asgi.py calls it again in each worker. How one variable is parsed and
checked is config/variables.py's; a field declared here with `int_var(NAME,
default, low, high)` (or `choice_var`, `flag_var`...) has its variable's name,
default and bounds written once.
(prometheus-client also reads PROMETHEUS_MULTIPROC_DIR itself when it is
imported; we read it here too so it is validated and documented with the rest.)
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from aside_gateway.config.variables import (
    ConfigError,
    choice,
    choice_var,
    decimal_var,
    flag,
    flag_var,
    int_var,
    integer,
    one_line,
    read_declared,
    setting,
    switch_var,
    token,
    url,
)
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
    LEASE_FAILURE_MS,
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

_BIND_RE = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]*):(\d{1,5})$")

DEFAULT_METRICS_BIND = "127.0.0.1:28009"
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# On every answer of the lab profile: the pid of the worker that answered, so
# the tests can tell the workers apart (a production answer names none).
WORKER_HEADER = "X-Aside-Worker"
# Production's miss budget a second per worker (route, client); the lab's is off
# so the bench is never throttled (docs/decisions/064-*.md).
MISS_BUDGET_DEFAULTS = {"production": (500, 50), "lab": (0, 0)}
# Production's pace of /healthz, /readyz and /metrics a second per client and
# worker; the lab's is off (door/ops_pace.py, docs/decisions/076-*.md).
OPS_CLIENT_PER_S_DEFAULTS = {"production": 20, "lab": 0}

__all__ = ["ConfigError", "Settings", "load_settings", "split_host_port"]


def _tolerance(env: Mapping[str, str], name: str, default: str) -> str:
    raw = (env.get(name) or "").strip() or default
    try:
        return tolerance.canonical(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}: {str(exc).replace('simplify', 'the tolerance')}") from None


# Each field read from one variable is declared with `setting(reader, NAME,
# default, bounds...)`: its name, default and bounds are written here only. The
# fields without are read by load_settings (their default depends on another).
@dataclass(frozen=True)
class Settings:
    database_url: str
    redis_url: str
    core_url: str
    profile: str = choice_var("ASIDE_PROFILE", "production", PROFILES)
    redis_mode: str = REDIS_STANDALONE
    redis_sentinel_master: str | None = None
    cache_ttl_seconds: int = int_var("CACHE_TTL_SECONDS", TTL_SECONDS_DEFAULT, 1, 86400)
    bind: str = "127.0.0.1:28000"
    workers: int = int_var("GATEWAY_WORKERS", 2, 1, 64)
    threads: int = int_var("GATEWAY_THREADS", 64, 1, 256)
    db_pool_min: int = int_var("DB_POOL_MIN", 2, 0, 256)
    db_pool_max: int = int_var("DB_POOL_MAX", 16, 1, 256)
    db_pool_timeout_ms: int = int_var("DB_POOL_TIMEOUT_MS", 1000, 10, 60000)
    db_connect_timeout_s: int = int_var("DB_CONNECT_TIMEOUT_S", 2, 1, 60)
    db_statement_timeout_ms: int = int_var("DB_STATEMENT_TIMEOUT_MS", 5000, 10, 600000)
    # After a read found PostgreSQL down or silent: misses answer 503 at once this long.
    db_breaker_ms: int = int_var("DB_BREAKER_MS", 1000, 0, 60000)
    # A lease holder whose database read failed leaves this mark: waiters answer 503 at once.
    cache_lease_failure_mark_ms: int = int_var(
        "CACHE_LEASE_FAILURE_MARK_MS", LEASE_FAILURE_MS, 0, 60000
    )
    redis_pool_max: int = int_var("REDIS_POOL_MAX", 64, 1, 1024)
    redis_timeout_ms: int = int_var("REDIS_TIMEOUT_MS", 200, 10, 10000)
    redis_connect_timeout_ms: int = int_var("REDIS_CONNECT_TIMEOUT_MS", 200, 10, 10000)
    redis_breaker_ms: int = int_var("REDIS_BREAKER_MS", 1000, 0, 60000)
    # The event loop's GET (backends/redis_reads.py) and its connections per worker.
    redis_reads: str = choice_var("REDIS_READS", REDIS_READS_LEAN, REDIS_READS)
    redis_read_connections: int = int_var("REDIS_READ_CONNECTIONS", 2, 1, 64)
    # TCP keepalive and user timeout on the loop's Redis connections (backends/redis_reads.py).
    redis_keepalive_idle_s: int = int_var("REDIS_KEEPALIVE_IDLE_S", 5, 1, 3600)
    redis_keepalive_interval_s: int = int_var("REDIS_KEEPALIVE_INTERVAL_S", 2, 1, 3600)
    redis_keepalive_count: int = int_var("REDIS_KEEPALIVE_COUNT", 3, 1, 100)
    redis_tcp_user_timeout_ms: int = int_var("REDIS_TCP_USER_TIMEOUT_MS", 10000, 0, 3600000)
    core_connect_timeout_ms: int = int_var("CORE_CONNECT_TIMEOUT_MS", 500, 10, 60000)
    # Outlasts the core's worst case for a write (contracts/timeouts.json).
    core_timeout_ms: int = int_var("CORE_TIMEOUT_MS", 6000, 10, 600000)
    python_compute_max_complexity: int = int_var("PYTHON_COMPUTE_MAX_COMPLEXITY", 20, 1, 1000)
    python_compute_max_pbkdf2_iterations: int = int_var(
        "PYTHON_COMPUTE_MAX_PBKDF2_ITERATIONS", 600_000, 1, 1_000_000
    )
    python_compute_max_bcrypt_cost: int = int_var("PYTHON_COMPUTE_MAX_BCRYPT_COST", 12, 4, 12)
    python_compute_max_concurrency: int = int_var("PYTHON_COMPUTE_MAX_CONCURRENCY", 1, 1, 256)
    python_compute_queue_wait_ms: int = int_var("PYTHON_COMPUTE_QUEUE_WAIT_MS", 1000, 0, 60000)
    lab_max_concurrent_bypass: int = int_var("LAB_MAX_CONCURRENT_BYPASS", 8, 1, 1024)
    test_hooks: bool = flag_var("ASIDE_TEST_HOOKS", False)
    cache_coherence: str = choice_var("ASIDE_CACHE_COHERENCE", "lease", COHERENCE_MODES)
    prometheus_multiproc_dir: str | None = None
    # Kept out of repr so a logged Settings never shows the secret.
    write_token: str | None = field(default=None, repr=False)
    # Sent to the core on every forwarded request (Authorization: Bearer).
    core_token: str | None = field(default=None, repr=False)
    metrics_bind: str = DEFAULT_METRICS_BIND
    miss_batch_max: int = int_var("MISS_BATCH_MAX", 500, 1, 10000)
    miss_batches_in_flight: int = int_var("MISS_BATCHES_IN_FLIGHT", 1, 1, 16)
    miss_batch_duty_percent: int = int_var("MISS_BATCH_DUTY_PERCENT", 25, 1, 100)
    cache_strategy: str = choice_var("CACHE_STRATEGY", DEFAULT_STRATEGY, STRATEGIES)
    cache_l1_ttl_seconds: int = int_var("CACHE_L1_TTL_SECONDS", L1_TTL_SECONDS_DEFAULT, 1, 86400)
    cache_l1_max_entries: int = int_var("CACHE_L1_MAX_ENTRIES", 10000, 1, 10_000_000)
    cache_l1_max_bytes: int = int_var("CACHE_L1_MAX_BYTES", 16 * 1024 * 1024, 4096, 2**36)
    # Lab switch: off lets the L1 serve without invalidation messages (TTL only).
    cache_l1_invalidation: bool = switch_var("CACHE_L1_INVALIDATION", True)
    # Where each worker follows the invalidation channel (tiers/invalidations.py).
    cache_l1_subscriber: str = "loop"
    # Lab switch: off keeps the tracking tier's subscription but sends no
    # CLIENT TRACKING, so Redis reports nothing to it (tiers/tracking.py).
    cache_l1_tracking: bool = switch_var("CACHE_L1_TRACKING", True)
    # Who forwards user writes to the core: the event loop or a Flask thread (front/loop_writes.py).
    writes: str = choice_var("GATEWAY_WRITES", "loop", WRITE_PATHS)
    # CPython's GIL switch interval in each worker (sys.setswitchinterval).
    switch_interval_us: int = int_var("GATEWAY_SWITCH_INTERVAL_US", 5000, 100, 100_000)
    # The cyclic garbage collector in each worker (front/collector.py).
    gc_freeze: bool = flag_var("GATEWAY_GC_FREEZE", True)
    gc_gen0: int = int_var("GATEWAY_GC_GEN0", 50000, 100, 10_000_000)
    # Slow and idle clients (front/worker.py), per connection and per worker.
    head_timeout_s: int = int_var("GATEWAY_HEAD_TIMEOUT_S", 5, 1, 300)
    body_timeout_s: int = int_var("GATEWAY_BODY_TIMEOUT_S", 15, 1, 3600)
    keepalive_s: int = int_var("GATEWAY_KEEPALIVE_S", 30, 1, 3600)
    max_connections: int = int_var("GATEWAY_MAX_CONNECTIONS", 1000, 1, 1_000_000)
    # Work behind the event loop (door/admission.py, misses/coalesce.py).
    queue_timeout_ms: int = int_var("GATEWAY_QUEUE_TIMEOUT_MS", 2000, 10, 600000)
    miss_batch_max_pending: int = int_var("MISS_BATCH_MAX_PENDING", 5000, 1, 1_000_000)
    # The event loop's door (door/loop_admission.py) and its lateness (door/lateness.py).
    admission: str = choice_var("GATEWAY_ADMISSION", "aimd", ADMISSION_MODES)
    admission_min_in_flight: int = int_var("GATEWAY_ADMISSION_MIN_INFLIGHT", 16, 1, 1_000_000)
    admission_max_in_flight: int = int_var("GATEWAY_ADMISSION_MAX_INFLIGHT", 512, 1, 1_000_000)
    admission_late_ms: int = int_var("GATEWAY_ADMISSION_LATE_MS", 5, 1, 10000)
    admission_busy_pct: int = int_var("GATEWAY_ADMISSION_BUSY_PCT", 50, 0, 100)
    loop_late_ms: int = int_var("GATEWAY_LOOP_LATE_MS", 20, 1, 10000)
    # Reads from PostgreSQL while Redis is skipped or failing, at once (door/fallback.py).
    cache_fallback_max_concurrency: int = int_var("CACHE_FALLBACK_MAX_CONCURRENCY", 8, 1, 1024)
    # TCP keepalive and user timeout on PostgreSQL connections (misses/db.py).
    db_keepalives_idle_s: int = int_var("DB_KEEPALIVES_IDLE_S", 5, 1, 3600)
    db_keepalives_interval_s: int = int_var("DB_KEEPALIVES_INTERVAL_S", 2, 1, 3600)
    db_keepalives_count: int = int_var("DB_KEEPALIVES_COUNT", 3, 1, 100)
    db_tcp_user_timeout_ms: int = int_var("DB_TCP_USER_TIMEOUT_MS", 10000, 0, 3600000)
    # Large cached values (tracks; tiers/largevalues.py): above the threshold the
    # policy decides what is stored; the codec is compress's.
    cache_large_value_bytes: int = int_var(
        "CACHE_LARGE_VALUE_BYTES", LARGE_THRESHOLD_BYTES_DEFAULT, 256, 2**30
    )
    cache_large_values: str = choice_var("CACHE_LARGE_VALUES", DEFAULT_POLICY, POLICIES)
    cache_codec: str = choice_var("CACHE_CODEC", DEFAULT_CODEC, CODECS)
    cache_simplify_tolerance: str = setting(
        _tolerance, "CACHE_SIMPLIFY_TOLERANCE", SIMPLIFY_TOLERANCE_DEFAULT
    )
    # How a cached value's end is handled (tiers/expiry.py, cache.json `expiry`).
    cache_expiry: str = choice_var("CACHE_EXPIRY", DEFAULT_EXPIRY, EXPIRY_MODES)
    cache_expiry_jitter: float = decimal_var("CACHE_EXPIRY_JITTER", EXPIRY_JITTER_DEFAULT, 0.0, 0.9)
    cache_expiry_early_beta: float = decimal_var(
        "CACHE_EXPIRY_EARLY_BETA", EXPIRY_EARLY_BETA_DEFAULT, 0.0, 100.0
    )
    cache_expiry_stale_max_seconds: int = int_var(
        "CACHE_EXPIRY_STALE_MAX_SECONDS", EXPIRY_STALE_MAX_SECONDS_DEFAULT, 1, 3600
    )
    # How long swr's refreshes gather before their batch (front/refresh_behind.py),
    # and the share of a core their pass over `users` may take without the
    # email index (misses/db.py `counts_paced`).
    cache_expiry_refresh_gather_ms: int = int_var("CACHE_EXPIRY_REFRESH_GATHER_MS", 1000, 0, 5000)
    cache_expiry_refresh_duty_percent: int = int_var(
        "CACHE_EXPIRY_REFRESH_DUTY_PERCENT", 50, 1, 100
    )
    # Misses a second per worker that may reach PostgreSQL or the core
    # (door/miss_budget.py): per route, per client of a route; 0 is off.
    miss_budget_route_per_s: int = 0
    miss_budget_client_per_s: int = 0
    # The operational routes' pace per client (door/ops_pace.py): a second, 0 off; burst.
    ops_client_per_s: int = 0
    ops_client_burst: int = int_var("GATEWAY_OPS_CLIENT_BURST", 20, 1, 10**6)
    # Proxies whose X-Forwarded-For names the client (addresses or CIDR blocks).
    trusted_proxies: tuple[Network, ...] = ()
    # An IPv6 client is keyed by its prefix of this length (door/miss_budget.py).
    client_ipv6_prefix: int = int_var("GATEWAY_CLIENT_IPV6_PREFIX", 64, 16, 128)
    # How long /readyz's verdict is shared by every caller (web/app.py); 0: checked each call.
    ready_cache_ms: int = int_var("GATEWAY_READY_CACHE_MS", 1000, 0, 60000)
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


def _redis_url(env: Mapping[str, str]) -> str:
    value = url(env, "REDIS_URL", ("redis", "rediss", "unix"))
    path = urlsplit(value).path.strip("/")
    if urlsplit(value).scheme != "unix" and path and not path.isdigit():
        raise ConfigError(f"REDIS_URL database must be a number, got {one_line(path)}")
    return value


def _l1_subscriber(env: Mapping[str, str], redis_mode: str) -> str:
    """CACHE_L1_SUBSCRIBER: `loop` by default, `thread` on a Redis Cluster, where
    only the threaded subscriber is tested (redis-py's asyncio cluster PubSub
    never confirmed the subscription on the test cluster)."""
    cluster = redis_mode == REDIS_CLUSTER
    subscriber = choice(env, "CACHE_L1_SUBSCRIBER", "thread" if cluster else "loop", L1_SUBSCRIBERS)
    if cluster and subscriber == "loop":
        raise ConfigError("CACHE_L1_SUBSCRIBER must be thread when REDIS_MODE=cluster")
    return subscriber


def _redis_mode(env: Mapping[str, str], redis_url: str) -> tuple[str, str | None]:
    """REDIS_MODE and, for sentinel, REDIS_SENTINEL_MASTER; checked against REDIS_URL."""
    mode = choice(env, "REDIS_MODE", REDIS_STANDALONE, REDIS_MODES)
    parts = urlsplit(redis_url)
    if mode != REDIS_STANDALONE and parts.scheme == "unix":
        raise ConfigError(f"REDIS_URL must be a redis:// or rediss:// URL when REDIS_MODE={mode}")
    if mode == REDIS_CLUSTER and parts.path.strip("/") not in ("", "0"):
        raise ConfigError("REDIS_URL must name database 0 when REDIS_MODE=cluster")
    master = (env.get("REDIS_SENTINEL_MASTER") or "").strip() or None
    if mode == REDIS_SENTINEL and master is None:
        raise ConfigError("REDIS_SENTINEL_MASTER is required when REDIS_MODE=sentinel")
    return mode, master


def _bind(env: Mapping[str, str], name: str, default: str, unix: bool) -> str:
    """GATEWAY_BIND (HOST:PORT or unix:PATH) or METRICS_BIND (HOST:PORT)."""
    value = (env.get(name) or default).strip()
    if unix and value.startswith("unix:") and len(value) > 5:
        return value
    match = _BIND_RE.match(value)
    if not match or not 1 <= int(match.group(1)) <= 65535:
        shape = "HOST:PORT or unix:PATH" if unix else "HOST:PORT"
        raise ConfigError(f"{name} must be {shape}, got {one_line(value)}")
    return value


def split_host_port(bind: str) -> tuple[str, int]:
    """("127.0.0.1", 28009) from "127.0.0.1:28009"; IPv6 hosts lose their brackets,
    an empty host ("":28009) means every interface."""
    host, _, port = bind.rpartition(":")
    return host.strip("[]"), int(port)


def _trusted_proxies(env: Mapping[str, str]) -> tuple[Network, ...]:
    """GATEWAY_TRUSTED_PROXIES: addresses or CIDR blocks, separated by commas or spaces."""
    networks = []
    for part in (env.get("GATEWAY_TRUSTED_PROXIES") or "").replace(",", " ").split():
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ConfigError(
                f"GATEWAY_TRUSTED_PROXIES: {one_line(part)} is not an IP address or CIDR block"
            ) from None
    return tuple(networks)


def _by_profile(env: Mapping[str, str], profile: str) -> dict[str, object]:
    """The variables whose default is the profile's: the miss budget, the ops pace, the email
    index (required in production; 0 there is allowed, for a table an operator
    knows to be small, and logged at start by web/app.py). The tokens too, read
    by load_settings once the other variables are checked."""
    route, client = MISS_BUDGET_DEFAULTS[profile]
    production = profile == "production"
    return {
        "miss_budget_route_per_s": integer(env, "GATEWAY_MISS_BUDGET_ROUTE_PER_S", route, 0, 10**6),
        "miss_budget_client_per_s": integer(
            env, "GATEWAY_MISS_BUDGET_CLIENT_PER_S", client, 0, 10**6
        ),
        "ops_client_per_s": integer(
            env, "GATEWAY_OPS_CLIENT_PER_S", OPS_CLIENT_PER_S_DEFAULTS[profile], 0, 10**6
        ),
        "require_email_index": flag(env, "GATEWAY_REQUIRE_EMAIL_INDEX", production),
    }


def _check(settings: Settings) -> None:
    """The rules between variables: lab-only switches, bounds in order."""
    lab_only = {
        "ASIDE_TEST_HOOKS=1": settings.test_hooks,
        "CACHE_L1_INVALIDATION=off": not settings.cache_l1_invalidation,
        "CACHE_L1_TRACKING=off": not settings.cache_l1_tracking,
    }
    for switch, on in lab_only.items():
        if on and not settings.is_lab:
            raise ConfigError(f"{switch} is refused unless ASIDE_PROFILE=lab")
    if settings.cache_coherence != "lease" and not settings.test_hooks:
        raise ConfigError("ASIDE_CACHE_COHERENCE=naive needs ASIDE_TEST_HOOKS=1 (lab only)")
    in_order = (
        ("DB_POOL_MIN", settings.db_pool_min, "DB_POOL_MAX", settings.db_pool_max),
        (
            "GATEWAY_ADMISSION_MIN_INFLIGHT",
            settings.admission_min_in_flight,
            "GATEWAY_ADMISSION_MAX_INFLIGHT",
            settings.admission_max_in_flight,
        ),
    )
    for low_name, low, high_name, high in in_order:
        if low > high:
            raise ConfigError(f"{low_name} ({low}) must not exceed {high_name} ({high})")
    if settings.cache_strategy == STRATEGY_TRACKING and settings.redis_mode == REDIS_CLUSTER:
        # `tracking` needs one tracking connection per Redis server, which a
        # cluster's changing set of nodes does not give (tiers/tracking.py).
        raise ConfigError("CACHE_STRATEGY=tracking is refused when REDIS_MODE=cluster")


def load_settings(env: Mapping[str, str]) -> Settings:
    """Read and check every variable; raise ConfigError naming the first bad one."""
    declared = read_declared(Settings, env)
    redis_url = _redis_url(env)
    redis_mode, sentinel_master = _redis_mode(env, redis_url)
    settings = Settings(
        **declared,
        **_by_profile(env, declared["profile"]),
        database_url=url(env, "DATABASE_URL", ("postgresql", "postgres")),
        redis_url=redis_url,
        core_url=url(env, "CORE_URL", ("http", "https")).rstrip("/"),
        redis_mode=redis_mode,
        redis_sentinel_master=sentinel_master,
        bind=_bind(env, "GATEWAY_BIND", "127.0.0.1:28000", unix=True),
        metrics_bind=_bind(env, "METRICS_BIND", DEFAULT_METRICS_BIND, unix=False),
        prometheus_multiproc_dir=(env.get("PROMETHEUS_MULTIPROC_DIR") or "").strip() or None,
        cache_l1_subscriber=_l1_subscriber(env, redis_mode),
        trusted_proxies=_trusted_proxies(env),
    )
    _check(settings)
    tokens = {"write_token": "WRITE_TOKEN", "core_token": "CORE_TOKEN"}
    return replace(
        settings, **{f: token(env, name, settings.profile) for f, name in tokens.items()}
    )
