"""Fixtures of the bench's tests and its plug-ins' (bench/tests, bench-plugins/*/tests).

Unit tests need nothing running. The integration tests use the stack named by
GATEWAY_URL, INFLUXDB_URL, PROMETHEUS_URL, DATABASE_URL and REDIS_URL (infra/test.sh
exports the test stack's; unset, the lab defaults of infra/env.sh apply). The
smoke bench reseeds the database at DATABASE_URL with a small table, so it
refuses to touch one that holds more than SMOKE_MAX_EXISTING_ROWS rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from aside_bench.stack import config
from psycopg.conninfo import make_conninfo
from selenium.webdriver.remote.webdriver import WebDriver

# --import-mode=importlib does not put test folders on sys.path (report_samples,
# bench_helpers): the bench's, for its tests and the plug-ins'.
sys.path.insert(0, str(Path(__file__).parent / "bench" / "tests"))
import browser
from bench_helpers import (
    COMMAND_TIMEOUT_S,
    REPO_ROOT,
    SMOKE_RATES,
    SMOKE_ROWS,
    SMOKE_STEP_S,
    TEST_DATABASE,
    bench_env,
    guard_database,
    run_bench,
)


@pytest.fixture(scope="session")
def bench() -> Callable[..., subprocess.CompletedProcess[str]]:
    """run_bench for tests (test modules cannot import conftest under importlib mode)."""
    return run_bench


@pytest.fixture(scope="session")
def bench_environ() -> dict[str, str]:
    """The environment aside-bench runs with in these tests."""
    return bench_env()


@pytest.fixture(scope="session")
def settings() -> config.Settings:
    return config.load(bench_env())


@pytest.fixture(scope="session")
def own_db_url(settings: config.Settings) -> Iterator[str]:
    """A database of this suite's own (aside_test_bench) with the contract schema."""
    admin_url = make_conninfo(settings.database_url, dbname="postgres")
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {TEST_DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {TEST_DATABASE}")
    url = make_conninfo(settings.database_url, dbname=TEST_DATABASE)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute((REPO_ROOT / "contracts" / "schema.sql").read_text())
    yield url
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {TEST_DATABASE} WITH (FORCE)")


@dataclass(frozen=True)
class SmokeRun:
    run_id: str
    mixed_run_id: str
    reports_dir: Path
    data_dir: Path
    started: float
    finished: float
    outputs: dict[str, subprocess.CompletedProcess[str]]

    def run_json(self, run_id: str) -> dict[str, Any]:
        return json.loads((self.reports_dir / run_id / "run.json").read_text())


def _seed_small_table(data_dir: Path) -> None:
    """The smoke table: SMOKE_ROWS rows, seed 7, 20 hot emails; its key files in data_dir."""
    seeded = subprocess.run(
        [sys.executable, "-m", "aside_seed", "--rows", str(SMOKE_ROWS), "--seed", "7",
         "--hot-emails", "20", "--hot-ratio", "0.5", "--sample-size", "200", "--reset",
         "--data-dir", str(data_dir)],
        env=bench_env(),
        capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert seeded.returncode == 0, f"aside-seed failed: {seeded.stderr[-2000:]}"


@pytest.fixture(scope="session")
def small_seed(settings: config.Settings, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The smoke bench's small table (20,000 rows, seed 7), seeded afresh for the
    fault suite and the soak, whatever ran before; returns the seeder's data dir."""
    guard_database(settings)
    data_dir = tmp_path_factory.mktemp("small-seed")
    _seed_small_table(data_dir)
    return data_dir


@pytest.fixture(scope="session")
def smoke_run(settings: config.Settings, tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
    """Seed a small table, then a short sweep (both arms, two rates, warm cache)
    and one short mixed step starting cold: the whole pipeline, end to end."""
    guard_database(settings)
    data_dir = tmp_path_factory.mktemp("key-data")
    reports_dir = tmp_path_factory.mktemp("reports")
    _seed_small_table(data_dir)
    stamp = time.strftime("%H%M%S")
    run_id, mixed_run_id = f"smoke-{stamp}", f"smoke-mixed-{stamp}"
    rates = " ".join(map(str, SMOKE_RATES))
    common = ["--data-dir", str(data_dir), "--reports-dir", str(reports_dir)]
    common += ["--duration", f"{SMOKE_STEP_S}s", "--cold-sample", "50", "--no-calibrate"]
    sweep = ["--run-id", run_id, "--rates", rates, "--arms", "nocache cache", "--warm", "warm"]
    mixed = ["--run-id", mixed_run_id, "--scenario", "mixed", "--rates", "10", "--arms", "cache"]
    # Enough writes that a 3 s step surely has some: half the requests, so a third
    # of the iterations ((2/3)^30: one run in 190,000 has none).
    mixed += ["--warm", "cold", "--write-share", "0.5"]
    started = time.time()
    outputs = {
        run_id: run_bench("run", *sweep, *common),
        mixed_run_id: run_bench("run", *mixed, *common),
    }
    finished = time.time()
    for name, done in outputs.items():
        assert done.returncode == 0, f"{name}: {done.stderr[-3000:]}\n{done.stdout[-3000:]}"
    return SmokeRun(run_id, mixed_run_id, reports_dir, data_dir, started, finished, outputs)


@pytest.fixture(scope="module")
def driver() -> Iterator[WebDriver]:
    """Headless Chromium for the pages' browser checks; skipped where none is
    installed, unless this run installed one (ASIDE_REQUIRE_BROWSER=1)."""
    try:
        browser.find_browser()
    except browser.BrowserError as error:
        if os.environ.get("ASIDE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"the browser was installed for this run: {error}")
        pytest.skip(str(error))
    with browser.chromium() as opened:
        yield opened
