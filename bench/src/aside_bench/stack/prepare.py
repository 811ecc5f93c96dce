"""The services a bench loads, made ready for a step: are they up, a connection
to PostgreSQL, the cache flushed, warmed or checked for keys about to expire, and
a wait until the last step's backlog has drained. The seeded table is checked in
stack/seeddata.py; stopping and restarting services is stack/services.py's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from urllib.parse import quote

import psycopg
import redis
import requests
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
        problem = _probe(url)
        if problem is not None:
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
    """A client of the gateway's Redis, closed after use; a Redis error in the
    block is a StackError saying what it was `doing`."""
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
    """True if some key of the gateway's Redis database expires within `seconds`
    (or the database is empty): a step that long would see its keys lapse."""
    with redis_client(settings, "read the cache's TTLs") as client:
        keys = redisclient.keys(client)
        if not keys:
            return True
        with client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.pttl(key)
            ttls_ms = [ttl for ttl in pipe.execute() if ttl >= 0]
    return bool(ttls_ms) and min(ttls_ms) < seconds * 1000


# A warm-up read the gateway's door refuses (503, Retry-After: 1, while its
# limit grows back on a busy machine) is asked again after that second, twice
# at most; a 503 after that fails the warm-up as any other error does.
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
    """Flush (unless told not to), then request every email once through the
    gateway so each key is cached, then once more to measure how much of it is
    now served from Redis. The L1 tier is warmed by sweep/warmtiers.py."""
    if flush:
        flush_cache(settings)
    started = time.monotonic()

    def fill(chunk: list[str]) -> list[str]:
        with gateway_session() as session:
            return [_read_count(session, settings.gateway_url, email, mode) for email in chunk]

    # Contiguous chunks keep the caller's order within each worker.
    size = -(-len(emails) // workers)
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
    """Client queries on the users table still running in this database. Only
    those: the exporters' own short queries on pg_stat_* views do not count."""
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


def wait_until_quiet(settings: Settings, deadline_s: float, healthz_fast_s: float = 0.05) -> float:
    """Wait until PostgreSQL runs no client query here and /healthz answers fast
    (three times running), so a step does not inherit the backlog of the last.
    Returns the seconds waited; raises StackError past the deadline."""
    started = time.monotonic()
    fast_in_a_row = 0
    with connect(settings) as conn:
        while True:
            if active_queries(conn) == 0 and healthz_seconds(settings) < healthz_fast_s:
                fast_in_a_row += 1
                if fast_in_a_row >= 3:
                    return time.monotonic() - started
            else:
                fast_in_a_row = 0
            if time.monotonic() - started > deadline_s:
                raise StackError(
                    f"the stack is still busy {deadline_s:.0f}s after the last step "
                    "(queries running or /healthz slow)"
                )
            time.sleep(0.2)
