"""The create-rate search's arithmetic: a step's figures from the load driver's
summary, which rate counts as held, and where the next midpoint goes (pure)."""

from __future__ import annotations

from pathlib import Path

from aside_bench.load.summary import Summary
from aside_bench.stack.config import Settings
from aside_bench.stack.seeddata import SeedData
from aside_bench_create_rate.run import (
    Params,
    StepResult,
    highest_held,
    load_run,
    next_midpoint,
    step_result,
)
from aside_bench_suite.samples import load_tallies


def step(rate: int, p95: float = 20.0, dropped: int = 0, failed: int = 0) -> StepResult:
    return StepResult(rate, rate * 15, rate * 15 - failed, failed, dropped, p95, p95, p95, 0)


def test_a_steps_figures_come_from_the_create_counters() -> None:
    summary = Summary(
        {
            "schema_version": 1,
            "scenarios": {
                "chaos": {
                    "dropped": 12,
                    "by_name": {
                        "create": {
                            "requests": 6000,
                            "latency": {"count": 5990, "p50": 9.0, "p95": 41.5, "p99": 80.0,
                                        "max": 300.0},
                        }
                    },
                    "counters": {"create_2xx": 5990, "create_5xx": 7, "create_error": 3},
                }
            },
        }
    )  # fmt: skip
    result = step_result(400, load_tallies(summary), 0)
    assert (result.requests, result.created, result.failed, result.dropped) == (6000, 5990, 10, 12)
    assert (result.p95_ms, result.p99_ms, result.max_ms) == (41.5, 80.0, 300.0)
    assert not result.held(100)


def test_a_step_is_the_chaos_scenario_with_only_creates(settings: Settings, tmp_path: Path) -> None:
    params = Params("unit", tmp_path, [400], 15, "core", 100.0, 2, 50)
    seed = SeedData(meta={}, hot=["hot@example.com"], cold=[], data_dir=tmp_path)
    run = load_run(params, seed, 400, settings.core_url, tmp_path / "s.json")
    variables = run.variables(settings)
    assert variables["SCENARIO"] == "chaos" and variables["WRITE_SHARE"] == "1"
    assert variables["RATE"] == "400" and variables["POOL"] == "450"
    assert variables["BASE_URL"] == settings.core_url and variables["NO_REUSE"] == "0"
    assert variables["USER_PREFIX"] == "load.unit.r400" and variables["DURATION"] == "15s"
    assert variables["SUMMARY_PATH"] == str(tmp_path / "s.json")


def test_held_needs_no_drop_no_failure_and_the_p95_within_the_limit() -> None:
    assert step(200).held(100)
    assert not step(200, p95=100.5).held(100)
    assert not step(200, dropped=1).held(100)
    assert not step(200, failed=1).held(100)
    assert not step_result(200, {}, 0).held(100)  # the driver wrote no summary
    assert not StepResult(200, 3000, 3000, 0, 0, 10.0, 10.0, 10.0, 99).held(100)


def test_the_highest_rate_held_stops_at_the_first_failure() -> None:
    steps = [step(200), step(400), step(800, p95=250), step(600)]
    assert highest_held(steps, 100) == 600
    assert highest_held([step(200, dropped=5), step(400)], 100) is None
    # A held rate above a failed one does not count: the figure must hold below it too.
    assert highest_held([step(200), step(400, p95=150), step(800)], 100) == 200


def test_midpoints_narrow_the_gap_until_the_resolution() -> None:
    steps = [step(200), step(400), step(800, p95=250)]
    assert next_midpoint(steps, 100, 50) == 600
    steps.append(step(600, dropped=3))
    assert next_midpoint(steps, 100, 50) == 500
    steps.append(step(500))
    assert next_midpoint(steps, 100, 50) == 550
    steps.append(step(550))
    assert next_midpoint(steps, 100, 50) is None  # 550 held, 600 failed: 50 apart
    assert next_midpoint([step(200), step(400)], 100, 50) is None  # nothing failed
    assert next_midpoint([step(200, p95=900)], 100, 50) == 100
