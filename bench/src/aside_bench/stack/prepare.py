"""The services a bench loads made ready for a step; Redis's bound and figures."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import quote

import psycopg
import redis
import requests
from redis.cluster import RedisCluster
from requests.adapters import HTTPAdapter, Retry

from aside_bench.stack import redisclient
from aside_bench.stack.config import Settings

CONNECT_TIMEOUT_S = 5


class StackError(RuntimeError):
    """The stack is not in a state to bench; the message says what to do."""


def _probe(url: str) -> str | None:
    """None when the URL answers 2xx within 3 s, else why not."""
    try:
        response = requests.get(url, timeout=3)
    except requests.RequestException as error:
        return type(error).__name__
    return None if response.ok else f"HTTP {response.status_code}"


def check_stack(settings: Settings) -> None:
    probes = [
        ("gateway", f"{settings.gateway_url}/readyz"),
        ("InfluxDB", f"{settings.influx_base}/ping"),
        ("Prometheus", f"{settings.prometheus_url}/-/ready"),
    ]
    for name, url in probes:
        if (problem := _probe(url)) is not None:
            raise StackError(
                f"{name} is not ready at {url} ({problem}); start the stack with `make up`"
            )
    if not settings.driver_bin.exists():
        raise StackError(f"the load driver is not at {settings.driver_bin}; run `make install`")


def connect(settings: Settings) -> psycopg.Connection:
    try:
        return psycopg.connect(
            settings.database_url, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True
        )
    except psycopg.Error as error:
        raise StackError(f"cannot connect to DATABASE_URL: {str(error).strip()}") from error


@contextmanager
def redis_client(settings: Settings, doing: str) -> Iterator[redisclient.Client]:
    """A client of the gateway's Redis, closed after use; a Redis error is a StackError."""
    client = redisclient.connect(settings)
    try:
        yield client
    except redis.RedisError as error:
        raise StackError(f"cannot {doing} at REDIS_URL: {error}") from error
    finally:
        client.close()


def flush_cache(settings: Settings) -> None:
    """Empty the gateway's Redis database (the one REDIS_URL names), nothing else."""
    with redis_client(settings, "flush the cache") as client:
        redisclient.flush(client)


def expires_within(settings: Settings, seconds: float) -> bool:
    """Whether some key expires within `seconds` (or there is none)."""
    with redis_client(settings, "read the cache's TTLs") as client:
        keys = redisclient.keys(client)
        if not keys:
            return True
        with client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.pttl(key)
            ttls_ms = [ttl for ttl in pipe.execute() if ttl >= 0]
    return bool(ttls_ms) and min(ttls_ms) < seconds * 1000


# A warm-up read the door refuses (503, Retry-After: 1) is asked again, twice at most.
DOOR_RETRY = Retry(
    total=2,
    connect=0,
    read=0,
    status_forcelist=(503,),
    allowed_methods=frozenset({"GET"}),
    respect_retry_after_header=True,
    raise_on_status=False,
)


def gateway_session() -> requests.Session:
    """A session for the bench's own reads through the gateway (warm-ups)."""
    session = requests.Session()
    session.mount("http://", HTTPAdapter(max_retries=DOOR_RETRY))
    return session


def count_url(gateway_url: str, email: str, mode: str) -> str:
    """The count's URL; mode "" asks for the gateway's own cache (production's only choice)."""
    url = f"{gateway_url}/api/v1/users/count?email={quote(email, safe='')}"
    return f"{url}&cache={mode}" if mode else url


def _read_count(session: requests.Session, gateway_url: str, email: str, mode: str) -> str:
    response = session.get(count_url(gateway_url, email, mode), timeout=30)
    response.raise_for_status()
    return response.headers.get("X-Cache", "")


def warm_cache(
    settings: Settings, emails: list[str], workers: int = 4, flush: bool = True, mode: str = "l2"
) -> dict[str, float]:
    """Flush (unless told not to), read every email through the gateway, then measure a re-read."""
    if flush:
        flush_cache(settings)
    started = time.monotonic()

    def fill(chunk: list[str]) -> list[str]:
        with gateway_session() as session:
            return [_read_count(session, settings.gateway_url, email, mode) for email in chunk]

    size = -(-len(emails) // workers)  # contiguous chunks: the caller's order in each
    chunks = [emails[i : i + size] for i in range(0, len(emails), size)]
    try:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(fill, chunks))
        filled_s = time.monotonic() - started
        with ThreadPoolExecutor(workers) as pool:
            answers = [a for chunk in pool.map(fill, chunks) for a in chunk]
    except requests.RequestException as error:
        raise StackError(f"warming the cache through the gateway failed: {error}") from error
    return {
        "keys": len(emails),
        "fill_s": round(filled_s, 2),
        "hit_share_after": round(answers.count("HIT") / max(len(answers), 1), 4),
    }


def active_queries(conn: psycopg.Connection) -> int:
    """Client queries on the users table still running (not the exporters')."""
    row = conn.execute(
        r"""
        SELECT count(*) FROM pg_stat_activity
        WHERE datname = current_database() AND state = 'active'
          AND backend_type = 'client backend' AND pid <> pg_backend_pid()
          AND query ~* '\musers\M'
        """
    ).fetchone()
    return int(row[0]) if row else 0


def healthz_seconds(settings: Settings) -> float:
    started = time.monotonic()
    try:
        requests.get(f"{settings.gateway_url}/healthz", timeout=5).raise_for_status()
    except requests.RequestException:
        return float("inf")
    return time.monotonic() - started


def wait_for(
    check: Callable[[], object],
    deadline_s: float,
    interval_s: float = 0.05,
    not_ready: tuple[type[Exception], ...] = (Exception,),
) -> float | None:
    """Poll `check()` until true; the epoch time it first was, or None at the deadline.
    A `not_ready` error counts as not yet (a probe of a service coming up); others raise."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            if check():
                return time.time()
        except not_ready:
            pass
        if time.monotonic() >= end:
            return None
        time.sleep(interval_s)


def wait_until_quiet(settings: Settings, deadline_s: float, healthz_fast_s: float = 0.05) -> float:
    """Wait until no client query runs and /healthz is fast three times; the seconds waited."""
    started = time.monotonic()
    quiet_in_a_row = 0

    def quiet_thrice() -> bool:
        nonlocal quiet_in_a_row
        quiet = active_queries(conn) == 0 and healthz_seconds(settings) < healthz_fast_s
        quiet_in_a_row = quiet_in_a_row + 1 if quiet else 0
        return quiet_in_a_row >= 3

    with connect(settings) as conn:
        if wait_for(quiet_thrice, deadline_s, interval_s=0.2, not_ready=()) is None:
            raise StackError(
                f"the stack is still busy {deadline_s:.0f}s after the last step "
                "(queries running or /healthz slow)"
            )
    return time.monotonic() - started


@dataclass(frozen=True)
class MemoryBound:
    """Redis's maxmemory (bytes, 0: none) and maxmemory-policy."""

    maxmemory: int
    policy: str


@dataclass(frozen=True)
class RedisReading:
    """INFO figures summed over the primaries at one instant."""

    keys: int
    used_memory: int
    evicted_keys: int
    expired_keys: int
    clients_memory: int = 0  # mem_clients_normal: within maxmemory too


def _nodes(client: redisclient.Client) -> list[redis.Redis]:
    if isinstance(client, RedisCluster):
        return [client.get_redis_connection(node) for node in client.get_primaries()]
    return [client]


def read_bound(settings: Settings) -> MemoryBound:
    """The bound of the first primary (the stack gives every primary the same)."""
    with redis_client(settings, "read Redis's maxmemory") as client:
        found = _nodes(client)[0].config_get("maxmemory*")
    return MemoryBound(int(found["maxmemory"]), str(found["maxmemory-policy"]))


def apply_bound(settings: Settings, bound: MemoryBound) -> None:
    """Give every primary this maxmemory and policy (CONFIG SET, not persisted)."""
    with redis_client(settings, "set Redis's maxmemory") as client:
        for node in _nodes(client):
            node.config_set("maxmemory-policy", bound.policy)
            node.config_set("maxmemory", str(bound.maxmemory))


def redis_reading(settings: Settings) -> RedisReading:
    """Keys, used memory and the eviction and expiry counters, over every primary."""
    with redis_client(settings, "read Redis's INFO") as client:
        totals = [0, 0, 0, 0, 0]
        for node in _nodes(client):
            info = node.info()
            totals[0] += int(node.dbsize())
            totals[1] += int(info["used_memory"])
            totals[2] += int(info["evicted_keys"])
            totals[3] += int(info["expired_keys"])
            totals[4] += int(info.get("mem_clients_normal", 0))
    return RedisReading(*totals)


class KeyCounter:
    """DBSIZE every `period_s` while a step runs, in a thread of its own."""

    def __init__(self, settings: Settings, period_s: float = 1.0, timeout_s: float = 2.0):
        self.settings = settings
        self.period_s = period_s
        self.timeout_s = timeout_s
        self.counts: list[int] = []
        self.problem: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="redis-key-counter", daemon=True)

    def start(self) -> KeyCounter:
        self._thread.start()
        return self

    def stop(self) -> list[int]:
        self._stop.set()
        self._thread.join(timeout=self.timeout_s + self.period_s)
        return list(self.counts)

    def _run(self) -> None:
        client = redisclient.connect(self.settings, socket_timeout=self.timeout_s)
        try:
            while not self._stop.wait(self.period_s):
                self.counts.append(sum(int(node.dbsize()) for node in _nodes(client)))
        except redis.RedisError as error:
            self.problem = f"cannot count Redis's keys: {error}"
        finally:
            client.close()
