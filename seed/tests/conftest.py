"""Fixtures for the seeder's tests: a database of its own (aside_test_seed) on
the server of DATABASE_URL, key files in a temporary folder, and the seeder run
as a real process so exit codes and stderr are the user's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

DEFAULT_DATABASE_URL = "postgresql://aside@127.0.0.1:25432/aside"
DEFAULT_REDIS_URL = "redis://127.0.0.1:26379/0"
TEST_DATABASE = "aside_test_seed"
# The seeder flushes the cache of REDIS_URL: this suite's is DB 3 on that server
# (the gateway's suite owns DB 1, the core's DB 2).
TEST_REDIS_DB = 3
REPO_ROOT = Path(__file__).resolve().parents[2]
SEED_TIMEOUT_S = 120
DEFAULT_TEST_TRACKS = 20


class SeedRun:
    """Runs aside-seed against the test database, key files into data_dir."""

    def __init__(self, url: str, data_dir: Path) -> None:
        self.url = url
        self.data_dir = data_dir
        self.redis_url = redis_test_url()

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ASIDE_SEED_")}
        env.update(
            DATABASE_URL=self.url,
            REDIS_URL=self.redis_url,
            ASIDE_DATA_DIR=str(self.data_dir),
            ASIDE_ROOT=str(REPO_ROOT),
            PYTHONUNBUFFERED="1",
            ASIDE_PROFILE="lab",  # the failure hooks the tests use are the lab's only
        )
        env.update(extra)
        return env

    def command(self, *args: str) -> list[str]:
        # A few tracks unless a test asks for more: test_tracks.py covers them,
        # and 2,000 would add seconds to every other seed.
        tracks = () if "--tracks" in args else ("--tracks", str(DEFAULT_TEST_TRACKS))
        return [sys.executable, "-m", "aside_seed", *args, *tracks]

    def __call__(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args),
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=SEED_TIMEOUT_S,
            check=False,
        )

    def ok(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        done = self(*args, **env)
        assert done.returncode == 0, done.stderr
        return done

    def read(self, name: str) -> Any:
        return json.loads((self.data_dir / name).read_text())


@pytest.fixture(scope="session")
def server_url() -> str:
    return os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL


@pytest.fixture(scope="session")
def redis_url() -> str:
    return redis_test_url()


@pytest.fixture(scope="session")
def test_db_url(server_url: str) -> Iterator[str]:
    admin_url = make_conninfo(server_url, dbname="postgres")
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {TEST_DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {TEST_DATABASE}")
    yield make_conninfo(server_url, dbname=TEST_DATABASE)
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {TEST_DATABASE} WITH (FORCE)")


@pytest.fixture
def db(test_db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(test_db_url, autocommit=True, connect_timeout=5) as conn:
        yield conn


@pytest.fixture
def seed(test_db_url: str, tmp_path: Path) -> SeedRun:
    return SeedRun(test_db_url, tmp_path / "keydata")


@pytest.fixture(scope="session")
def contract() -> dict[str, Any]:
    return json.loads((REPO_ROOT / "contracts" / "validation.json").read_text())


@pytest.fixture(scope="session")
def hash_table() -> Callable[[psycopg.Connection], str]:
    return table_hash


@pytest.fixture(scope="session")
def wait_for() -> Callable[[Callable[[], bool], float, str], None]:
    return wait_until


def redis_test_url() -> str:
    base = urlsplit(os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL)
    return urlunsplit((base.scheme, base.netloc, f"/{TEST_REDIS_DB}", "", ""))


def table_hash(conn: psycopg.Connection) -> str:
    """One digest of every row, ordered by id (created_at as UTC epoch microseconds)."""
    row = conn.execute(
        """
        SELECT md5(string_agg(
            concat_ws(',', id, username, email,
                      (extract(epoch FROM created_at) * 1000000)::bigint),
            E'\\n' ORDER BY id))
        FROM users
        """
    ).fetchone()
    assert row is not None
    return row[0]


def wait_until(check: Callable[[], bool], deadline_s: float, what: str) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")
