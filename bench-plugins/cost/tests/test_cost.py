"""Unit tests of the driver's cost variants and the ceiling's bare reference:
the driver run of each variant, the bare step's figures from its summary, the
reference's ratio and verdict, and the tables they make."""

from __future__ import annotations

from pathlib import Path

import pytest
from aside_bench.ceiling.report import ceiling_tables, reference_of
from aside_bench.ceiling.search import Reference, ceiling_of, reruns_of
from aside_bench.cli import app as cli
from aside_bench.load.run import step_run
from aside_bench.plan.arms import BARE_ARM
from aside_bench.plan.shape import LoadShape
from aside_bench.plan.steps import Step
from aside_bench.records.results import Latency, StepResult
from aside_bench.records.saturation import LoadGen
from aside_bench.records.steprecord import StepRecord
from aside_bench.records.tierstats import step_cost
from aside_bench.stack import config
from aside_bench.sweep.collect import summary_result
from aside_bench_cost import run as cost

SETTINGS = config.load({})


def test_the_default_variants_are_the_driver_and_its_yardstick_taking_turns() -> None:
    variants = cost.parse_variants(None)
    assert [v.name for v in variants] == ["driver", "reference"]
    steps = cost.plan(variants, 2000, 20, 2)
    assert [(s.scenario, s.repeat) for s in steps] == [
        ("cost-driver", 1),
        ("cost-reference", 1),
        ("cost-driver", 2),
        ("cost-reference", 2),
    ]
    assert {(s.arm, s.phase, s.rate) for s in steps} == {("healthz", "none", 2000)}
    with pytest.raises(cost.VariantError, match="'nope'"):
        cost.parse_variants("driver nope")
    assert cost.variant_of("cost-driver-read").target == "gateway"
    assert cost.variant_of("ceiling") is None


def test_the_cost_command_parses_its_defaults() -> None:
    args = cli.build_parser().parse_args(["cost"])
    assert (args.rate, args.duration, args.repeat) == (2000, "20s", 2)


def test_the_ceilings_reference_step_runs_the_bare_scenario() -> None:
    step = Step("ceiling", BARE_ARM, "warm", 800, 12)
    run = step_run(step, "unit", LoadShape(), 800, Path("data"))
    found = run.variables(SETTINGS)
    assert (found["SCENARIO"], found["ARM"], found["CACHE"]) == ("bare", BARE_ARM, "l2")
    assert cli.build_parser().parse_args(["ceiling"]).reference is True
    assert cli.build_parser().parse_args(["ceiling", "--no-reference"]).reference is False


def test_a_bare_steps_figures_and_its_load_generator() -> None:
    summary = {
        "p50": 0.8, "p95": 2.5, "p99": 7.0, "max": 9.0, "answered": 9988, "requests": 9990,
        "iterations": 9990, "failed": 2, "dropped": 10, "pool": 1000, "inflight_peak": 14,
    }  # fmt: skip
    record = StepRecord.from_json({
        "scenario": "ceiling", "arm": BARE_ARM, "phase": "warm", "rate": 1000,
        "duration_s": 10, "pool": 1000, "summary": summary,
        "driver": {"cpu_s": 3.0, "cpu_limit_cores": 0.8},
    })  # fmt: skip
    result = summary_result(record, None)
    assert result.latency == Latency(0.8, 2.5, 7.0, 9988)
    assert result.drop_rate == pytest.approx(12 / 10_000)
    assert result.loadgen is not None and result.loadgen.inflight_peak == 14
    assert result.loadgen.cpu_cores == pytest.approx(0.3)
    assert result.verdict(10.0) == "missed"  # dropped and failed requests: not held


@pytest.mark.parametrize(
    ("ceiling", "reference", "ratio", "agrees"),
    [(900, 1000, 0.9, True), (880, 1000, 0.88, False), (1100, 1000, 1.1, True),
     (1000, 1000, 1.0, True), (1200, 1000, 1.2, False), (500, 0, None, False)],
)  # fmt: skip
def test_the_reference_agrees_within_ten_percent(
    ceiling: int, reference: int, ratio: float | None, agrees: bool
) -> None:
    found = Reference(ceiling, reference)
    assert found.ratio == (None if ratio is None else pytest.approx(ratio))
    assert found.agrees is agrees
    assert found.verdict == ("agrees within 10 %" if agrees else "does not agree within 10 %")


def _result(
    scenario: str,
    arm: str,
    rate: int,
    p95: float,
    cpu_s: float = 1.0,
    repeat: int = 1,
    steal: float | None = None,
) -> StepResult:
    gen = LoadGen(cpu_s, 10, 0.8, rate, rate, None)
    probe = None
    if steal is not None:  # the machine's ticks (busy, total, steal) around the step
        probe = {
            "start": {"requests": 0, "machine_ticks": [0, 0, 0]},
            "end": {"requests": rate * 10, "machine_ticks": [1000, 2000, round(steal * 2000)]},
        }
    return StepResult(
        step=Step(scenario, arm, "warm", rate, 10, repeat=repeat),
        latency=Latency(1.0, p95, p95, rate * 10),
        iterations=rate * 10,
        failed=0,
        dropped=0,
        cache=None,
        loadgen=gen,
        cost=step_cost(probe),
    )


def test_the_ceiling_report_states_both_ceilings_and_their_ratio() -> None:
    results = [
        _result("ceiling", "cache", 800, 4.0),
        _result("ceiling", "cache", 1200, 30.0),
        _result("ceiling", BARE_ARM, 800, 3.0),
        _result("ceiling", BARE_ARM, 1200, 5.0),
        _result("ceiling", BARE_ARM, 1600, 40.0),
    ]
    tables, found = ceiling_tables(results, 10.0)
    rows = {row[0]: row[1] for row in tables[0].rows}
    assert rows["cache (warm)"] == "800" and rows[f"{BARE_ARM} (warm)"] == "1200"
    assert rows[f"cache / {BARE_ARM} (reference)"] == "0.67 (does not agree within 10 %)"
    assert found.reference is not None and not found.reference.agrees
    assert found.reference.ratio == pytest.approx(800 / 1200)
    assert reference_of({"cache": found.arms["cache"]}) is None


def test_a_miss_while_the_host_stole_the_cores_is_run_again_twice_at_most() -> None:
    steps = [(800, True, False), (1200, False, True), (1200, False, True), (1200, False, True)]
    steps += [(1000, False, True), (1000, True, True), (1100, False, False)]
    assert reruns_of(steps) == [False, True, True, False, True, False, False]
    # The report counts only what the search counted: 1200 missed on its third run
    # (two noisy reruns before it), 1000 held on its second.
    results = [
        _result("ceiling", "cache", rate, 30.0 if not held else 4.0, steal=0.12 if noisy else 0.01)
        for rate, held, noisy in steps
    ]
    assert [r.noisy for r in results] == [noisy for _, _, noisy in steps]
    tables, found = ceiling_tables(results, 10.0)
    assert found.arms["cache"].ceiling == 1000
    verdicts = [row[6] for row in tables[1].rows]
    again = "missed, host noisy: run again"
    assert verdicts == ["held", again, again, "missed", again, "held", "missed"]
    steal = tables[1].headers.index("of it, host steal")
    assert tables[1].rows[1][steal] == "12.0%" and tables[1].rows[0][steal] == "1.0%"
    # Without the reruns the first noisy miss at 1000 would have set the ceiling at 800.
    quiet = [(rate, held) for rate, held, _ in steps]
    assert ceiling_of(quiet) == (800, False)


def test_the_cost_table_prices_each_variant_against_the_reference() -> None:
    results = [
        _result("cost-driver", "healthz", 2000, 2.0, cpu_s=1.6, repeat=1),
        _result("cost-reference", "healthz", 2000, 3.0, cpu_s=3.0, repeat=1),
        _result("cost-driver", "healthz", 2000, 2.0, cpu_s=2.0, repeat=2),
        _result("cost-reference", "healthz", 2000, 3.0, cpu_s=3.2, repeat=2),
    ]
    rows = cost.figures(results)
    assert [row.variant for row in rows] == ["driver", "reference"]
    # CPU s / (2,000/s x 10 s) x 1,000: ms per request, the median of the rounds.
    assert rows[0].rounds == pytest.approx([0.08, 0.1])
    assert rows[0].cpu_ms_per_request == pytest.approx(0.09)
    assert rows[1].cpu_ms_per_request == pytest.approx(0.155)
    assert rows[0].vs_reference == pytest.approx(0.09 / 0.155)
    table = cost.cost_table(rows, 2000)
    assert table.rows[0][2:5] == ["0.090", "0.080 / 0.100", "0.58x"]
    assert table.rows[1][4] == "1.00x" and table.rows[0][-1] == "0.0%"
