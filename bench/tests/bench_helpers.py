"""What the bench's tests and the plug-ins' share beside their fixtures (the
repository's conftest.py): the bench as a process, its environment, the
guard that keeps the smoke bench off a real table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from aside_bench.stack import config

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_DATABASE = "aside_test_bench"
SMOKE_ROWS = 20_000
SMOKE_MAX_EXISTING_ROWS = 100_000
SMOKE_RATES = (5, 10)
SMOKE_STEP_S = 3
COMMAND_TIMEOUT_S = 120


def bench_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "ASIDE_ROOT": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
    for name, value in config.DEFAULTS.items():
        env.setdefault(name, value)
    env.update(extra)
    return env


def run_bench(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """aside-bench as the user runs it: a real process, its exit code and stderr."""
    return subprocess.run(
        [sys.executable, "-m", "aside_bench", *args],
        env=bench_env(**env),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def guard_database(settings: config.Settings) -> None:
    with psycopg.connect(settings.database_url, connect_timeout=5) as conn:
        exists = conn.execute("SELECT to_regclass('users') IS NOT NULL").fetchone()[0]
        rows = conn.execute("SELECT count(*) FROM users").fetchone()[0] if exists else 0
    if rows > SMOKE_MAX_EXISTING_ROWS:
        pytest.fail(
            f"DATABASE_URL holds {rows} users; the smoke bench reseeds it with {SMOKE_ROWS}. "
            "Point DATABASE_URL at a test stack (make test does)."
        )
