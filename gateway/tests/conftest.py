"""Fixtures for the gateway suite: a real PostgreSQL database, Redis DB 1, gunicorn
gateways with two workers, and the real core binary, each started on a free
port and always stopped.

Service URLs come from DATABASE_URL / REDIS_URL (infra/test.sh exports the test
stack's), defaulting to infra/env.sh's dev stack. The suite owns the database
`aside_test_gateway` and Redis DB 1 and never touches anything else.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

sys.path.insert(0, str(Path(__file__).parent))

from gateway_helpers import (
    CONTRACTS,
    CORE_TOKEN,
    REPO,
    TEST_DB,
    TEST_REDIS_DB,
    VENV_BIN,
    WRITE_TOKEN,
    Proc,
    free_port,
    start_process,
    stop_all,
    unique_username,
    wait_ready,
    wait_until,
    with_path,
)

# ---- session services ----------------------------------------------------------


@pytest.fixture(scope="session")
def database_url() -> str:
    base = os.environ.get("DATABASE_URL") or "postgresql://aside@127.0.0.1:25432/aside"
    admin = with_path(base, "/postgres")
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEST_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {TEST_DB}")
    url = with_path(base, f"/{TEST_DB}")
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute((CONTRACTS / "schema.sql").read_text())
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return url


@pytest.fixture(scope="session")
def db(database_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn


@pytest.fixture(scope="session")
def redis_url() -> str:
    base = os.environ.get("REDIS_URL") or "redis://127.0.0.1:26379/0"
    url = with_path(base, f"/{TEST_REDIS_DB}")
    redis.Redis.from_url(url, socket_timeout=5).flushdb()
    return url


@pytest.fixture(scope="session")
def rdb(redis_url: str) -> Iterator[redis.Redis]:
    # socket_timeout above the gateway's 10 s hold, for BLPOP on its test keys.
    client = redis.Redis.from_url(redis_url, socket_timeout=15)
    yield client
    client.close()


@pytest.fixture(scope="session")
def core_binary() -> Path:
    path = Path(os.environ.get("ASIDE_BIN_DIR") or REPO / "bin") / "aside-core"
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing; build it with infra/install.sh core")
    return path


@pytest.fixture(scope="session")
def launch_core(
    core_binary: Path, database_url: str, redis_url: str, tmp_path_factory
) -> Iterator[Callable[..., Proc]]:
    """Start an aside-core on a free port against the suite's DB and Redis DB;
    keyword arguments override its environment. Stopped at the session's end:
    for the session's own cores; a module starts its own with `start_core`."""
    started: list[Proc] = []

    def start(**overrides: str) -> Proc:
        port = free_port()
        env = {
            **os.environ,
            "CORE_LISTEN_ADDR": f"127.0.0.1:{port}",
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "ASIDE_PROFILE": "lab",
            **overrides,
        }
        log = tmp_path_factory.mktemp("core") / "core.log"
        proc = start_process("aside-core", [str(core_binary)], env, log, f"http://127.0.0.1:{port}")
        started.append(proc)
        wait_ready(proc, "/readyz")
        return proc

    yield start
    stop_all(started, signal.SIGTERM)


@pytest.fixture(scope="module")
def start_core(launch_core: Callable[..., Proc]) -> Iterator[Callable[..., Proc]]:
    """`launch_core` for one module: its cores stop when the module ends."""
    with stopped_at_end(launch_core, signal.SIGTERM) as start:
        yield start


@pytest.fixture(scope="session")
def default_core(launch_core: Callable[..., Proc]) -> Proc:
    return launch_core()


@pytest.fixture(scope="session")
def core(default_core: Proc) -> Proc:
    """The core the gateways forward to; a module may redefine it (test_cluster.py)."""
    return default_core


@pytest.fixture(scope="session")
def launch_gateway(
    database_url: str, redis_url: str, default_core: Proc, tmp_path_factory
) -> Iterator[Callable[..., Proc]]:
    """Start a gunicorn gateway; keyword arguments override its environment.
    Stopped at the session's end: for the session's own gateways; a module
    starts its own with `start_gateway`."""
    started: list[Proc] = []

    def start(ready_path: str = "/readyz", **overrides: str) -> Proc:
        port = free_port()
        tmp = tmp_path_factory.mktemp("gateway")
        env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        env.update(
            DATABASE_URL=database_url,
            REDIS_URL=redis_url,
            CORE_URL=default_core.url,
            GATEWAY_BIND=f"127.0.0.1:{port}",
            GATEWAY_WORKERS="2",
            GATEWAY_THREADS="16",
            ASIDE_PROFILE="lab",
            ASIDE_TEST_HOOKS="1",
            CACHE_TTL_SECONDS="60",
            PROMETHEUS_MULTIPROC_DIR=str(tmp / "prometheus-multiproc"),
            # The suite's table is the lab's, unindexed on purpose; test_production.py
            # checks that a production gateway requires the index by default.
            GATEWAY_REQUIRE_EMAIL_INDEX="0",
        )
        env.update(overrides)
        cmd = [
            str(VENV_BIN / "gunicorn"),
            "--config",
            str(REPO / "gateway" / "gunicorn.conf.py"),
            "aside_gateway.front.asgi:app",
        ]
        proc = start_process("gateway", cmd, env, tmp / "gunicorn.log", f"http://127.0.0.1:{port}")
        proc.extra["multiproc_dir"] = Path(env["PROMETHEUS_MULTIPROC_DIR"])
        started.append(proc)
        wait_ready(proc, ready_path)
        return proc

    yield start
    stop_all(started)


@contextlib.contextmanager
def stopped_at_end(
    launch: Callable[..., Proc], sig: int = signal.SIGINT
) -> Iterator[Callable[..., Proc]]:
    """`launch`, remembering what it started, which is stopped on leaving. An
    idle gateway worker still runs its timers (a few % of a core): dozens left
    running until the session's end would slow every later suite."""
    started: list[Proc] = []

    def start(*args: Any, **overrides: str) -> Proc:
        proc = launch(*args, **overrides)
        started.append(proc)
        return proc

    yield start
    stop_all(started, sig)


@pytest.fixture(scope="module")
def start_gateway(launch_gateway: Callable[..., Proc]) -> Iterator[Callable[..., Proc]]:
    """`launch_gateway` for one module: its gateways stop when the module ends."""
    with stopped_at_end(launch_gateway) as start:
        yield start


@pytest.fixture(scope="session")
def gateway(launch_gateway: Callable[..., Proc]) -> Proc:
    """The main gateway: lab profile, test hooks on, lease coherence, two workers."""
    return launch_gateway()


@pytest.fixture(scope="session")
def naive_gateway(launch_gateway: Callable[..., Proc]) -> Proc:
    """Lab-only naive coherence (plain SET on fill), to show the race test can fail."""
    return launch_gateway(ASIDE_CACHE_COHERENCE="naive", GATEWAY_WORKERS="1")


@pytest.fixture(scope="session")
def production_core(launch_core: Callable[..., Proc]) -> Proc:
    """A production core of its own behind the production gateway, so tests can tell
    what reached it: writes need CORE_TOKEN, /metrics is on its own port."""
    metrics_port = free_port()
    proc = launch_core(
        ASIDE_PROFILE="production",
        CORE_TOKEN=CORE_TOKEN,
        CORE_METRICS_ADDR=f"127.0.0.1:{metrics_port}",
    )
    proc.extra["metrics_base"] = f"http://127.0.0.1:{metrics_port}"
    return proc


@pytest.fixture(scope="session")
def production_gateway(launch_gateway: Callable[..., Proc], production_core: Proc) -> Proc:
    """ASIDE_PROFILE=production: write token, metrics on METRICS_BIND only, no lab switches."""
    metrics_port = free_port()
    proc = launch_gateway(
        ASIDE_PROFILE="production",
        ASIDE_TEST_HOOKS="0",
        GATEWAY_WORKERS="2",
        CORE_URL=production_core.url,
        WRITE_TOKEN=WRITE_TOKEN,
        CORE_TOKEN=CORE_TOKEN,
        METRICS_BIND=f"127.0.0.1:{metrics_port}",
    )
    proc.extra["metrics_url"] = f"http://127.0.0.1:{metrics_port}/metrics"
    return proc


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen]]:
    """Our own throwaway redis-server (never the shared one), startable again on its port."""
    port = free_port()
    procs: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        popen = subprocess.Popen(
            [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind",
             "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        procs.append(popen)
        client = redis.Redis(port=port, socket_timeout=0.5, socket_connect_timeout=0.5)

        def pong() -> bool:
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

        wait_until(pong, 10, f"redis-server on port {port}")
        return popen

    start.port = port  # type: ignore[attr-defined]
    yield start
    for popen in procs:
        if popen.poll() is None:
            popen.terminate()
            popen.wait(timeout=10)


# ---- data helpers ----------------------------------------------------------------


@pytest.fixture(scope="session")
def insert_user(db: psycopg.Connection) -> Callable[..., int]:
    """Insert a row directly (read tests need data; the gateway itself never writes)."""

    def insert(email: str, username: str | None = None) -> int:
        row = db.execute(
            "INSERT INTO users (username, email) VALUES (%s, %s) RETURNING id",
            (username or unique_username(), email),
        ).fetchone()
        return int(row[0])

    return insert


@pytest.fixture(scope="session")
def db_count(db: psycopg.Connection) -> Callable[[str], int]:
    # pg_stat_statements keys its entries by parse tree, not by text, and keeps
    # the text of the first statement of a tree: count(1) parses unlike the
    # gateway's count(*), so this count never takes over the gateway's entry
    # (an alias such as `AS n` would not keep them apart).
    def count(email: str) -> int:
        sql = "SELECT count(1) FROM users WHERE email = %s"
        return int(db.execute(sql, (email,)).fetchone()[0])

    return count


@pytest.fixture(scope="session")
def query_calls(db: psycopg.Connection) -> Callable[[str], int]:
    """How many times PostgreSQL ran `query` (normalised text) in the test database."""

    def calls(query: str) -> int:
        row = db.execute(
            "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s AND s.query = %s",
            (TEST_DB, query),
        ).fetchone()
        return int(row[0])

    return calls
