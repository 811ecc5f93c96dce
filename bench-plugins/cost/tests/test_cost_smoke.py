"""`aside-bench cost` and the ceiling's bare reference, end to end against the
real stack on the small seed, a few seconds at 20 req/s: a row per variant
with the driver's CPU, the reference's ratio and verdict, and the report
rebuilt from run.json."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from aside_bench.plan.arms import BARE_ARM
from aside_bench_cost import run as cost

Bench = Callable[..., subprocess.CompletedProcess[str]]
RATE = 20


@dataclass(frozen=True)
class Runs:
    cost_id: str
    ceiling_id: str
    reports_dir: Path

    def run_json(self, run_id: str) -> dict:
        return json.loads((self.reports_dir / run_id / "run.json").read_text())


@pytest.fixture(scope="module")
def runs(small_seed: Path, tmp_path_factory: pytest.TempPathFactory, bench: Bench) -> Runs:
    reports_dir = tmp_path_factory.mktemp("reports")
    stamp = time.strftime("%H%M%S")
    found = Runs(f"cost-{stamp}", f"ceiling-ref-{stamp}", reports_dir)
    common = ["--data-dir", str(small_seed), "--reports-dir", str(reports_dir)]
    common += ["--cold-sample", "50"]
    priced = bench(
        "cost", "--run-id", found.cost_id, "--rate", str(RATE), "--duration", "2s",
        "--variants", " ".join(cost.NAMES), "--repeat", "1", *common,
    )  # fmt: skip
    assert priced.returncode == 0, priced.stderr[-3000:] + priced.stdout[-3000:]
    # One rate, held by any working stack (a 1 s p95 limit): each search is
    # that rate and its confirmation; the search itself is unit-tested.
    ceiling = bench(
        "ceiling", "--run-id", found.ceiling_id, "--arms", "cache", "--start", "10",
        "--max-rate", "10", "--step-duration", "2s", "--p95-ms", "1000", "--no-calibrate",
        *common,
    )  # fmt: skip
    assert ceiling.returncode == 0, ceiling.stderr[-3000:] + ceiling.stdout[-3000:]
    return found


def test_every_variant_has_its_cost(runs: Runs) -> None:
    run = runs.run_json(runs.cost_id)
    rows = {row["variant"]: row for row in run["cost"]}
    assert list(rows) == list(cost.NAMES)
    for name, row in rows.items():
        assert row["cpu_ms_per_request"] is not None and row["cpu_ms_per_request"] > 0, name
        assert row["achieved_rps"] >= RATE * 0.7 and row["p95_ms"] is not None, name
    assert rows["reference"]["vs_reference"] == pytest.approx(1.0)
    # The reference loop and the driver both hit the core; the read variant the gateway.
    driver_steps = {s["scenario"]: s["driver_scenario"] for s in run["steps"]}
    assert driver_steps == {"cost-driver": "healthz", "cost-reference": "healthz",
                            "cost-driver-read": "read"}  # fmt: skip
    markdown = (runs.reports_dir / runs.cost_id / "report.md").read_text()
    for variant in cost.VARIANTS:
        assert f"| {variant.name} | {variant.what} | " in markdown


def test_the_ceiling_states_its_reference_and_the_verdict(runs: Runs) -> None:
    run = runs.run_json(runs.ceiling_id)
    assert run["params"]["reference"] is True
    arms = [step["arm"] for step in run["steps"]]
    # The cache arm's search and its reference take turns, step by step.
    assert arms == ["cache", BARE_ARM, "cache", BARE_ARM]
    for step in run["steps"]:
        assert step["driver"]["cpu_s"] > 0 and step["completed"]
        assert step["summary"]["p95"] is not None and step["summary"]["requests"] > 0
        # The machine's ticks around the step: its busy share and the host's steal.
        busy, total, stolen = step["probe"]["start"]["machine_ticks"]
        assert 0 <= stolen <= busy <= total
        assert step["probe"]["end"]["machine_ticks"][1] > total
    markdown = (runs.reports_dir / runs.ceiling_id / "ceiling.md").read_text()
    assert "| machine busy | of it, host steal |" in markdown
    assert f"| cache / {BARE_ARM} (reference) | 1.00 (agrees within 10 %) |" in markdown
    assert f"| {BARE_ARM} (warm) | >= 10 |" in markdown


def test_the_cost_report_rebuilds_from_run_json(runs: Runs, bench: Bench) -> None:
    folder = runs.reports_dir / runs.cost_id
    before = (folder / "report.md").read_text()
    (folder / "report.md").unlink()
    done = bench("report", "--run", runs.cost_id, "--reports-dir", str(runs.reports_dir))
    assert done.returncode == 0, done.stderr
    assert (folder / "report.md").read_text() == before
