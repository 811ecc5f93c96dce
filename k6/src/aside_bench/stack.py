"""The services around a step: is the stack up, is the table seeded, and putting
the cache and the database in the state a step needs."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import redis
import requests

from .config import Settings
from .sources import Influx, Prometheus, SourceError

CONNECT_TIMEOUT_S = 5
# Users the mixed scenario creates are named k6.<run id>.<vu>.<iter>.
BENCH_USERNAME_PATTERN = "k6.%"


class StackError(RuntimeError):
    """The stack is not in a state to bench; the message says what to do."""


@dataclass(frozen=True)
class SeedData:
    meta: dict[str, Any]
    hot: list[str]
    cold: list[str]
    data_dir: Path
    indexed: bool = field(default=False)


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
    if not settings.k6_bin.exists():
        raise StackError(f"k6 not found at {settings.k6_bin}; run `make install`")


def connect(settings: Settings) -> psycopg.Connection:
    try:
        return psycopg.connect(
            settings.database_url, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True
        )
    except psycopg.Error as error:
        raise StackError(f"cannot connect to DATABASE_URL: {str(error).strip()}") from error


def load_seed_list(path: Path, key: str, kind: type) -> list[Any]:
    """A non-empty JSON list the seeder wrote (bare, or under `key` in an object)."""
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise StackError(f"cannot read {path}: {error}; run `make seed`") from error
    if isinstance(value, dict):
        value = value.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, kind) for v in value):
        raise StackError(f"{path} is not a non-empty list of {key}; run `make seed`")
    return value


def email_index_exists(conn: psycopg.Connection) -> bool:
    """True when some index of users leads with the email column."""
    row = conn.execute(
        """
        SELECT EXISTS (
            SELECT 1 FROM pg_index i
            JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
            WHERE i.indrelid = 'users'::regclass AND a.attname = 'email')
        """
    ).fetchone()
    return bool(row and row[0])


def remove_bench_users(conn: psycopg.Connection) -> int:
    """Delete users an interrupted mixed step left behind; returns how many."""
    cursor = conn.execute("DELETE FROM users WHERE username LIKE %s", (BENCH_USERNAME_PATTERN,))
    return cursor.rowcount


def check_seed(settings: Settings, data_dir: Path) -> SeedData:
    """Check that the table matches the seeder's files (row count, email index),
    after removing users an interrupted mixed step left behind."""
    meta_path = data_dir / "seed_meta.json"
    if not meta_path.exists():
        raise StackError(f"{meta_path} not found: the table is not seeded; run `make seed`")
    try:
        meta = json.loads(meta_path.read_text())
        expected_rows = int(meta["rows"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise StackError(
            f"{meta_path} has no row count ({error}); run `make seed` again"
        ) from error
    hot = load_seed_list(data_dir / "hot_emails.json", "emails", str)
    cold = load_seed_list(data_dir / "cold_emails.json", "emails", str)
    with connect(settings) as conn:
        try:
            leftovers = remove_bench_users(conn)
            rows = conn.execute("SELECT count(*) FROM users").fetchone()[0]
            indexed = email_index_exists(conn)
        except psycopg.errors.UndefinedTable as error:
            raise StackError("the users table does not exist; run `make seed`") from error
    if leftovers:
        # Their counts may sit in the cache; the first step prepares it anyway.
        flush_cache(settings)
    if rows != expected_rows:
        raise StackError(
            f"the users table has {rows} rows but {meta_path} says {expected_rows}; "
            "run `make seed` again"
        )
    if bool(meta.get("index", False)) != indexed:
        raise StackError(
            f"{meta_path} says index={meta.get('index')} but the table "
            f"{'has' if indexed else 'has no'} email index; run `make seed` again"
        )
    return SeedData(meta=meta, hot=hot, cold=cold, data_dir=data_dir, indexed=indexed)


def flush_cache(settings: Settings) -> None:
    """Empty the gateway's Redis database (the one REDIS_URL names), nothing else."""
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=10, socket_connect_timeout=5)
    try:
        client.flushdb()
    except redis.RedisError as error:
        raise StackError(f"cannot flush the cache at REDIS_URL: {error}") from error
    finally:
        client.close()


def expires_within(settings: Settings, seconds: float) -> bool:
    """True if some key of the gateway's Redis database expires within `seconds`
    (or the database is empty): a step that long would see its keys lapse."""
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=10, socket_connect_timeout=5)
    try:
        keys = list(client.scan_iter(count=1000))
        if not keys:
            return True
        with client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.pttl(key)
            ttls_ms = [ttl for ttl in pipe.execute() if ttl >= 0]
    except redis.RedisError as error:
        raise StackError(f"cannot read the cache's TTLs at REDIS_URL: {error}") from error
    finally:
        client.close()
    return bool(ttls_ms) and min(ttls_ms) < seconds * 1000


def _read_count(session: requests.Session, gateway_url: str, email: str) -> str:
    response = session.get(
        f"{gateway_url}/api/v1/users/count?email={quote(email, safe='')}", timeout=30
    )
    response.raise_for_status()
    return response.headers.get("X-Cache", "")


def warm_cache(
    settings: Settings, emails: list[str], workers: int = 4, flush: bool = True
) -> dict[str, float]:
    """Flush (unless told not to), then request every email once through the
    gateway so each key is cached, then once more to measure how much of it is
    now served from Redis."""
    if flush:
        flush_cache(settings)
    started = time.monotonic()

    def fill(chunk: list[str]) -> list[str]:
        with requests.Session() as session:
            return [_read_count(session, settings.gateway_url, email) for email in chunk]

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


def check_sources(influx: Influx, prom: Prometheus) -> None:
    try:
        influx.ping()
        prom.instant("up")
    except SourceError as error:
        raise StackError(str(error)) from error
