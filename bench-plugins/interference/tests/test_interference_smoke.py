"""The interference scenario and the nopool arm end to end against the real
stack: a few seconds of each at tiny rates on the smoke bench's small table,
then what reached InfluxDB, what the gateway counted and what the report says.
Sends load: run it under `flock /tmp/aside-load.lock`, as every load run."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest
from aside_bench.records.steprecord import StepRecord
from aside_bench.stack import config
from aside_bench.stack.sources import Influx, Prometheus, quote_literal
from aside_bench.sweep.collect import collect
from aside_bench_interference.plan import COMPUTE_SCENARIO, SCENARIO

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ARMS = ("go-pbkdf2", "python-bcrypt")
READ_RATE = 20
STEP_S = 3


@dataclass(frozen=True)
class Runs:
    reports_dir: Path
    interference_id: str
    nopool_id: str
    outputs: dict[str, CompletedProcess[str]]

    def run_json(self, run_id: str) -> dict[str, Any]:
        return json.loads((self.reports_dir / run_id / "run.json").read_text())


@pytest.fixture(scope="module")
def runs(
    small_seed: Path,
    bench: Callable[..., CompletedProcess[str]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Runs:
    reports_dir = tmp_path_factory.mktemp("interference-reports")
    stamp = time.strftime("%H%M%S")
    interference_id, nopool_id = f"smoke-interference-{stamp}", f"smoke-nopool-{stamp}"
    common = ["--data-dir", str(small_seed), "--reports-dir", str(reports_dir),
              "--duration", f"{STEP_S}s", "--cold-sample", "50", "--no-calibrate"]  # fmt: skip
    # Cheap work, so the tiny rates finish inside the short steps.
    interference_args = ["--scenario", SCENARIO, "--rates", "0 2", "--arms", " ".join(ARMS),
                         "--read-rate", str(READ_RATE), "--pbkdf2-iterations", "20000",
                         "--bcrypt-cost", "6"]  # fmt: skip
    nopool_args = ["--rates", "5", "--arms", "nocache nopool"]
    outputs = {
        interference_id: bench("run", "--run-id", interference_id, *interference_args, *common),
        nopool_id: bench("run", "--run-id", nopool_id, *nopool_args, *common),
    }
    for name, done in outputs.items():
        assert done.returncode == 0, f"{name}: {done.stderr[-3000:]}\n{done.stdout[-3000:]}"
    return Runs(reports_dir, interference_id, nopool_id, outputs)


def _results(runs: Runs, run_id: str, settings: config.Settings):
    prom = Prometheus(settings.prometheus_url)
    return collect(prom, [StepRecord.from_json(step) for step in runs.run_json(run_id)["steps"]])


def test_reads_ran_at_their_rate_beside_compute_answered_right(runs, settings) -> None:
    results = _results(runs, runs.interference_id, settings)
    assert sorted((r.step.arm, r.step.rate) for r in results) == sorted(
        (arm, rate) for arm in ARMS for rate in (0, 2)
    )
    for result in results:
        assert result.step.read_rate == READ_RATE and result.step.phase == "warm"
        assert result.latency is not None and result.latency.count > 0
        # The reads are the step's: warm cache hits, scheduled at the read rate.
        assert result.step.scheduled == READ_RATE * STEP_S
        assert result.hit_rate is not None and result.hit_rate > 0.5, result
        assert result.drop_rate < 0.2, result
        beside = result.compute
        if result.step.rate == 0:
            assert beside is None
            continue
        # Every compute answer was checked against the key or format the bench expected.
        assert beside is not None and beside.step.scenario == COMPUTE_SCENARIO
        assert beside.iterations >= 2 * STEP_S and beside.failed == 0, beside
        assert beside.latency is not None and beside.latency.count == beside.iterations


def test_compute_points_carry_the_step_tags_and_none_at_rate_zero(runs, settings) -> None:
    # The driver's points a second, per scenario and request name.
    influx = Influx(settings.influx_base, settings.influx_db)
    run = quote_literal(runs.interference_id)
    (series,) = influx.query(
        f'SELECT sum("count") FROM "load_second" WHERE "run_id" = {run} AND "name" != \'all\' '
        'GROUP BY "scenario", "arm", "phase", "rate", "name"'
    )
    found = {(s.tags["scenario"], s.tags["arm"], s.tags["rate"], s.tags["name"])
             for s in series if s.values and s.values[0][1] > 0}  # fmt: skip
    expected = {(SCENARIO, arm, rate, "count") for arm in ARMS for rate in ("0", "2")}
    expected |= {(COMPUTE_SCENARIO, arm, "2", "compute") for arm in ARMS}
    assert found == expected


def test_the_report_tables_every_step_and_draws_the_chart(runs) -> None:
    folder = runs.reports_dir / runs.interference_id
    markdown = (folder / "report.md").read_text()
    assert "reads p99 latency by compute rate" in markdown
    assert "cached reads beside compute, by arm and compute rate" in markdown
    rows = [line for line in markdown.splitlines() if line.startswith("| go-") or
            line.startswith("| python-")]  # fmt: skip
    assert len(rows) == 4
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert "n/a" not in cells and all(cells), row
        assert (cells[-3:] == ["0.0", "-", "-"]) == (cells[1] == "0"), row
    assert (folder / "interference.png").read_bytes().startswith(PNG_MAGIC)
    assert (folder / "report.html").read_text().count("data:image/png;base64,") == 1
    printed = runs.outputs[runs.interference_id].stdout
    progress = re.findall(r"@\s+2/s .* compute [0-9.]+/s p95 [0-9.]+ ms", printed)
    assert len(progress) == len(ARMS), printed


def test_the_report_rebuilds_from_the_stored_data(runs, bench) -> None:
    folder = runs.reports_dir / runs.interference_id
    before = (folder / "report.md").read_text()
    (folder / "report.md").unlink()
    done = bench("report", "--run", runs.interference_id, "--reports-dir", str(runs.reports_dir))
    assert done.returncode == 0, done.stderr
    assert (folder / "report.md").read_text() == before


def test_the_nopool_arm_reads_uncached_like_nocache(runs, settings) -> None:
    results = {r.step.arm: r for r in _results(runs, runs.nopool_id, settings)}
    assert set(results) == {"nocache", "nopool"}
    for result in results.values():
        # Counted by the gateway as bypasses: no hit, every read went to PostgreSQL.
        assert result.cache is not None and result.cache.hits == 0
        assert result.cache.bypass >= result.step.scheduled * 0.9
        assert result.failed == 0 and result.drop_rate < 0.2, result
    markdown = (runs.reports_dir / runs.nopool_id / "report.md").read_text()
    assert "nopool p95 ms" in markdown


def test_the_compute_scenario_checks_every_answer_on_both_engines(
    small_seed: Path, bench: Callable[..., CompletedProcess[str]], tmp_path: Path
) -> None:
    # The driver's `compute` scenario: the checksum of each engine checked against
    # the closed form of contracts/compute.json (a wrong answer fails the iteration).
    run_id = f"smoke-compute-{time.strftime('%H%M%S')}"
    done = bench(
        "run", "--run-id", run_id, "--scenario", "compute", "--rates", "2", "--arms", "go python",
        "--complexity", "1", "--duration", f"{STEP_S}s", "--no-calibrate",
        "--data-dir", str(small_seed), "--reports-dir", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stderr[-3000:]}\n{done.stdout[-3000:]}"
    steps = json.loads((tmp_path / run_id / "run.json").read_text())["steps"]
    assert [s["arm"] for s in steps] == ["go", "python"]
    for step in steps:
        summary = step["summary"]
        assert step["driver_scenario"] == "compute"
        assert summary["iterations"] >= 2 * STEP_S - 1 and summary["failed"] == 0, summary
        assert summary["p95"] is not None and summary["dropped"] == 0, summary
