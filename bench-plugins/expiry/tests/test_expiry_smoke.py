"""The expiry scenario end to end against the test stack: a short TTL, tiny
rates, the cache off, plain and swr with the scenario's email index; the
report's sections, the expiry window found in every cached arm, and the index
gone afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from aside_bench.stack import config

RATE = 20
TTL_S = 8
TIMEOUT_S = 300


def test_the_expiry_scenario_reports_each_arm_around_the_expiry(
    small_seed: Path,
    tmp_path: Path,
    bench_environ: dict[str, str],
    settings: config.Settings,
) -> None:
    run_id = f"expiry-smoke-{time.strftime('%H%M%S')}"
    args = ["run", "--scenario", "expiry", "--run-id", run_id, "--rates", str(RATE),
            "--arms", "nocache plain swr+index", "--cache-ttl", str(TTL_S),
            "--cold-sample", "50", "--data-dir", str(small_seed),
            "--reports-dir", str(tmp_path)]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "aside_bench", *args],
        env=bench_environ, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stderr[-3000:]}\n{done.stdout[-3000:]}"
    out = tmp_path / run_id
    report = (out / "report.md").read_text()
    for heading in ("## Answer", "## Windows and seconds", "## How the figures are computed"):
        assert heading in report
    assert "the expiry with plain costs p99" in report
    assert "was not found" not in report
    assert (out / "expiry.png").read_bytes().startswith(b"\x89PNG")
    record = json.loads((out / "run.json").read_text())
    assert [a["label"] for a in record["arms"]] == ["nocache", "plain", "swr+index"]
    for arm in record["arms"][1:]:
        assert arm["fill"]["keys"] == 70 and arm["readings"], arm["label"]
        assert arm["summary"]["failed"] == 0, arm["label"]
    with psycopg.connect(settings.database_url, connect_timeout=5) as conn:
        left = conn.execute("SELECT to_regclass('users_email_expiry_idx')").fetchone()
    assert left == (None,)
