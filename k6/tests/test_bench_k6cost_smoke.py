"""`aside-bench k6cost` and the ceiling's bare-script reference, end to end
against the real stack on the small seed, a few seconds at 20 req/s: a row
per variant with k6's CPU, the figures of the steps without an output from
k6's summary and none of their samples in InfluxDB, the reference's ratio and
verdict, and the report rebuilt from run.json and InfluxDB."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from aside_bench import config, k6cost
from aside_bench.plan import BARE_ARM
from aside_bench.sources import Influx, quote_literal

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
    found = Runs(f"k6cost-{stamp}", f"ceiling-ref-{stamp}", reports_dir)
    common = ["--data-dir", str(small_seed), "--reports-dir", str(reports_dir)]
    common += ["--cold-sample", "50"]
    cost = bench(
        "k6cost", "--run-id", found.cost_id, "--rate", str(RATE), "--duration", "2s", *common
    )
    assert cost.returncode == 0, cost.stderr[-3000:] + cost.stdout[-3000:]
    # One rate, held by any working stack (a 1 s p95 limit): each search is
    # that rate and its confirmation; the search itself is unit-tested.
    ceiling = bench(
        "ceiling", "--run-id", found.ceiling_id, "--arms", "cache", "--start", "10",
        "--max-rate", "10", "--step-duration", "2s", "--p95-ms", "1000", "--no-calibrate",
        *common,
    )  # fmt: skip
    assert ceiling.returncode == 0, ceiling.stderr[-3000:] + ceiling.stdout[-3000:]
    return found


def _scenarios_in_influx(settings: config.Settings, run_id: str) -> dict[str, set[str]]:
    """scenario -> arms of the run's http_reqs samples in InfluxDB."""
    influx = Influx(settings.influx_base, settings.influx_db)
    (series,) = influx.query(
        f'SELECT count("value") FROM "http_reqs" WHERE "run_id" = {quote_literal(run_id)} '
        'GROUP BY "scenario", "arm"'
    )
    found: dict[str, set[str]] = {}
    for one in series:
        if one.values and one.values[0][1] > 0:
            found.setdefault(one.tags["scenario"], set()).add(one.tags["arm"])
    return found


def test_every_variant_has_its_k6_cost(runs: Runs) -> None:
    run = runs.run_json(runs.cost_id)
    rows = {row["variant"]: row for row in run["k6cost"]}
    assert list(rows) == list(k6cost.NAMES)
    for name, row in rows.items():
        assert row["k6_cpu_s_per_1000"] is not None and row["k6_cpu_s_per_1000"] > 0, name
        assert row["achieved_rps"] >= RATE * 0.7 and row["p95_ms"] is not None, name
        assert row["gateway_cpu_ms_per_request"] is not None, name
    assert rows["bare"]["vs_bare"] == pytest.approx(1.0)
    markdown = (runs.reports_dir / runs.cost_id / "report.md").read_text()
    for variant in k6cost.VARIANTS:
        assert f"| {variant.name} | {variant.adds} | " in markdown


def test_steps_without_an_output_send_nothing_and_keep_their_summary(
    runs: Runs, settings: config.Settings
) -> None:
    steps = runs.run_json(runs.cost_id)["steps"]
    streamed = {f"k6cost-{v.name}" for v in k6cost.VARIANTS if v.influx}
    for step in steps:
        quiet = step["scenario"] not in streamed
        assert ("summary" in step) is quiet, step["scenario"]
        if quiet:
            assert step["summary"]["p95"] is not None and step["summary"]["iterations"] > 0
    assert set(_scenarios_in_influx(settings, runs.cost_id)) == streamed
    assert streamed == {"k6cost-influxdb", "k6cost-read-influx"}


def test_the_ceiling_states_its_reference_and_the_verdict(
    runs: Runs, settings: config.Settings
) -> None:
    run = runs.run_json(runs.ceiling_id)
    assert run["params"]["reference"] is True
    arms = [step["arm"] for step in run["steps"]]
    # The cache arm's search and its reference take turns, step by step.
    assert arms == ["cache", BARE_ARM, "cache", BARE_ARM]
    for step in run["steps"]:
        assert step["k6"]["cpu_s"] > 0 and step["completed"]
        # By default no step streams its samples: every step's figures are its summary's.
        assert step["summary"]["p95"] is not None and step["summary"]["requests"] > 0
    assert _scenarios_in_influx(settings, runs.ceiling_id) == {}
    markdown = (runs.reports_dir / runs.ceiling_id / "ceiling.md").read_text()
    assert f"| cache / {BARE_ARM} (reference) | 1.00 (agrees within 10 %) |" in markdown
    assert f"| {BARE_ARM} (warm) | >= 10 |" in markdown


def test_the_cost_report_rebuilds_from_run_json_and_influxdb(runs: Runs, bench: Bench) -> None:
    folder = runs.reports_dir / runs.cost_id
    before = (folder / "report.md").read_text()
    (folder / "report.md").unlink()
    done = bench("report", "--run", runs.cost_id, "--reports-dir", str(runs.reports_dir))
    assert done.returncode == 0, done.stderr
    assert (folder / "report.md").read_text() == before
