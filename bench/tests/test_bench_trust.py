"""Unit tests of what makes the figures comparable: repeats in interleaved
order, their median and spread, the driver's saturation rule, the ceiling's
confirmations, the calibration search, and `compare`'s flags and refusals."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
from aside_bench.calibration import calibrate
from aside_bench.ceiling.search import (
    SearchParams,
    ceiling_of,
    interleave,
    limit_of,
    next_trial,
    verdicts,
)
from aside_bench.compare import machines
from aside_bench.compare import steps as compare
from aside_bench.load import meter
from aside_bench.load.run import DriverProcess
from aside_bench.plan.steps import PlanError, Step, build_steps, repeat_steps
from aside_bench.records import calibration, runfile
from aside_bench.records.repeats import RepeatedResult, merge, merge_repeats, spread
from aside_bench.records.results import CacheCounts, Latency, StepResult
from aside_bench.records.runfile import RunRecord, StepFigures
from aside_bench.records.saturation import LoadGen, cpu_limit_cores
from aside_bench.report import sweep as report
from aside_bench.report.tables import series_table
from aside_bench.stack.prepare import StackError


# ---- repeats: order -------------------------------------------------------------------
def test_repeats_interleave_within_each_rate() -> None:
    steps = repeat_steps(build_steps("read", [30, 100], ["nocache", "cache"], "warm", 10), 2)
    assert [(s.rate, s.arm, s.repeat) for s in steps] == [
        (30, "nocache", 1), (30, "cache", 1), (30, "nocache", 2), (30, "cache", 2),
        (100, "nocache", 1), (100, "cache", 1), (100, "nocache", 2), (100, "cache", 2),
    ]  # fmt: skip


def test_one_repeat_is_the_plan_itself_and_none_is_refused() -> None:
    steps = build_steps("read", [30], ["cache"], "both", 10)
    assert repeat_steps(steps, 1) == steps
    with pytest.raises(PlanError, match="repeat"):
        repeat_steps(steps, 0)


# ---- repeats: median and spread -------------------------------------------------------
def _result(p95: float, repeat: int = 1, dropped: int = 0, rate: int = 100) -> StepResult:
    return StepResult(
        step=Step("read", "cache", "warm", rate, 10, repeat=repeat),
        latency=Latency(p95 / 2, p95, p95 * 2, rate * 10),
        iterations=rate * 10,
        failed=0,
        dropped=dropped,
        cache=CacheCounts(hits=90, misses=10, bypass=0),
    )


def test_spread_is_median_min_and_max_of_what_was_measured() -> None:
    found = spread([3.0, None, 9.0, 4.0])
    assert found is not None
    assert (found.median, found.low, found.high, found.runs, found.width) == (4.0, 3.0, 9.0, 3, 6)
    assert spread([None]) is None


def test_repeats_merge_into_medians_that_keep_their_runs() -> None:
    runs = [_result(4.0, 1), _result(9.0, 2, dropped=50), _result(5.0, 3)]
    merged = merge(runs)
    assert isinstance(merged, RepeatedResult)
    assert merged.latency is not None and merged.latency.p95 == 5.0
    assert merged.step.repeat == 1 and merged.runs == runs
    assert merged.drop_rate == 0.0  # the median run dropped nothing
    assert merged.figure("drops").high == pytest.approx(0.05)
    # A step run once stays as it is.
    assert merge([runs[0]]) is runs[0]


def test_the_table_shows_the_median_and_the_spread() -> None:
    merged = merge_repeats([_result(4.0, 1), _result(6.0, 2), _result(30.0, 1, rate=200)])
    table = series_table(merged, "cache", "warm")
    assert [row[0] for row in table.rows] == ["100", "200"]
    assert table.rows[0][2] == "5.00 (4.00-6.00)"  # p95 of two runs
    assert table.rows[1][2] == "30.0"  # run once: no spread
    assert table.rows[0][4] == "100.0"  # equal in both runs: no spread shown


# ---- saturation -----------------------------------------------------------------------
def _gen(cpu_s: float | None = 1.0, peak: int | None = 10, cap: int = 100, budget: int = 100):
    return LoadGen(
        cpu_s=cpu_s, duration_s=10, cpu_limit_cores=0.8, pool=cap, pool_budget=budget,
        inflight_peak=peak,
    )  # fmt: skip


def test_the_driver_above_its_cpu_share_saturates_the_step() -> None:
    assert cpu_limit_cores(2) == 0.8
    assert not _gen(cpu_s=8.0).saturated  # 0.8 cores: at the limit, not above
    hot = _gen(cpu_s=9.0)
    assert hot.saturated and hot.reasons == ["driver used 0.90 cores > 0.8"]
    assert not _gen(cpu_s=None).saturated  # not read: no verdict


def test_a_full_pool_is_the_drivers_limit_only_below_the_latency_budget() -> None:
    # Every worker busy at the budget (rate x 1 s): the stack was a second behind.
    assert not _gen(peak=100, cap=100, budget=100).saturated
    # Every worker busy while --max-pool held the pool below the budget: the driver's limit.
    capped = _gen(peak=1000, cap=1000, budget=2000)
    assert capped.saturated and "pool ran out" in capped.reasons[0]
    assert not _gen(peak=999, cap=1000, budget=2000).saturated


def test_a_saturated_miss_is_a_limit_and_a_saturated_pass_still_holds() -> None:
    slow = _result(30.0)
    assert slow.verdict(10) == "missed"
    slow.loadgen = _gen(cpu_s=9.0)
    assert slow.verdict(10) == "limit"
    fast = _result(3.0)
    fast.loadgen = _gen(cpu_s=9.0)
    assert fast.verdict(10) == "held"


# ---- the ceiling's confirmations ------------------------------------------------------
def _search(truth, params: SearchParams) -> list[tuple[int, bool]]:
    history: list[tuple[int, bool]] = []
    while (rate := next_trial(history, params)) is not None:
        history.append((rate, truth(rate, history)))
        assert len(history) < 50, "the search must end"
    return history


def test_the_final_held_and_missed_rates_run_twice() -> None:
    params = SearchParams(start=200, ladder_step=400, max_rate=8000)
    history = _search(lambda rate, _h: rate <= 1000, params)
    ceiling, capped = ceiling_of(history)
    missed = min(rate for rate, held in history if not held)
    assert [rate for rate, _ in history].count(ceiling) == 2
    assert [rate for rate, _ in history].count(missed) == 2
    assert history[-2:] == [(ceiling, True), (missed, False)]
    assert not capped


def test_a_confirmation_that_misses_moves_the_ceiling_down() -> None:
    params = SearchParams(start=200, ladder_step=400, max_rate=8000)
    # The second try of any rate above 900 misses: a lucky first pass.
    lucky = lambda rate, h: rate <= 900 or (rate <= 1000 and (rate, True) not in h)  # noqa: E731
    history = _search(lucky, params)
    ceiling, _ = ceiling_of(history)
    assert ceiling <= 900
    assert [r for r, _ in history].count(ceiling) == 2


def test_a_limit_is_reported_instead_of_the_servers_ceiling() -> None:
    outcomes = [(200, "held"), (400, "held"), (800, "limit"), (800, "limit")]
    assert limit_of(outcomes) == 800
    assert limit_of([(200, "held"), (400, "missed"), (400, "limit")]) is None
    assert limit_of([(200, "held"), (400, "held")]) is None


# ---- the calibration search -----------------------------------------------------------
def test_calibration_doubles_then_bisects_to_ten_percent() -> None:
    params = calibrate.CalibrationParams(start=400, max_rate=12800)
    assert calibrate.ladder(params) == [400, 800, 1600, 3200, 6400, 12800]
    tried: list[int] = []
    found = calibrate.search(lambda rate: tried.append(rate) or rate <= 2500, params, 60)
    assert tried[:4] == [400, 800, 1600, 3200]
    assert not found.capped and not found.out_of_time
    assert 2500 * 0.9 <= found.rate <= 2500 and (found.missed_at or 0) > 2500


def test_a_calibration_confirms_its_final_rates_and_a_slow_probe_is_outvoted() -> None:
    params = calibrate.CalibrationParams(start=400, max_rate=12800)
    tries: dict[int, int] = {}

    def noisy(rate: int) -> bool:  # 3000/s holds, but its second probe is slow
        tries[rate] = tries.get(rate, 0) + 1
        return rate <= 3000 and not (rate == 3000 and tries[rate] == 2)

    found = calibrate.search(noisy, params, 600)
    assert found.rate == 3000 and tries[3000] == 3
    assert all(count >= 2 for rate, count in tries.items() if rate == found.missed_at)


def test_calibration_stops_within_its_time() -> None:
    params = calibrate.CalibrationParams(start=100, max_rate=12800, probe_s=0)

    def slow(rate: int) -> bool:
        time.sleep(0.05)
        return True

    found = calibrate.search(slow, params, 0.12)
    assert found.out_of_time and found.capped and found.rate in (100, 200)


def test_a_calibration_reads_as_typed_records() -> None:
    machine = {"calibration": {
        "params": {"probe_s": 3, "p95_ms": 10.0},
        "targets": {"core": {"what": "the core", "rate": 1600, "out_of_time": True,
                             "missed_at": 3200, "probes": [
                                 {"rate": 400, "held": True, "p95_ms": 0.5},
                                 {"rate": 800, "held": True, "p95_ms": 0.7},
                                 {"rate": 3200, "held": False, "p95_ms": 40.0}]}}}}  # fmt: skip
    found = calibration.Calibration.of(machine)
    assert found is not None and (found.probe_s, found.p95_ms) == (3.0, 10.0)
    core = found.targets["core"]
    assert (core.rate, core.capped, core.missed_at) == (1600, False, 3200)
    assert core.base_latency() == (800, 0.6)  # the probes that held, lowest rates first
    assert core.line() == "the core: 1600 req/s (the time allowed ran out below 3200 req/s)"
    assert calibration.Calibration.of({}) is None


def test_a_capped_calibration_is_stated_as_a_lower_bound() -> None:
    machine = {"calibration": {"targets": {"core": {"rate": 20, "capped": True}}}}
    assert calibration.rate_of(machine) == 20 and calibration.rate_of({}) is None
    assert ">= 20 req/s" in calibration.describe(machine)[0]


# ---- compare --------------------------------------------------------------------------
def _figures(
    p95s: list[float],
    drops: float = 0.0,
    rate: int = 100,
    arm: str = "cache",
    cores: float | None = None,
) -> list[StepFigures]:
    return [
        StepFigures("read", arm, "warm", rate, repeat=i + 1, p50=1.0, p95=p95, p99=p95 * 2,
                    achieved=100.0, drops=drops, hit=0.99, driver_cpu_cores=cores)
        for i, p95 in enumerate(p95s)
    ]  # fmt: skip


KEY = ("read", "cache", "warm", 100)


SAME = machines.Scale(1000, 1000, normalised=False)


def test_a_change_within_the_measured_spread_is_not_flagged() -> None:
    (row,) = compare.compare(_figures([4.0, 6.0]), _figures([5.5, 6.5]), SAME)
    p95 = row.changes["p95"]
    assert (p95.delta, p95.noise, p95.basis, p95.flag) == (1.0, 2.0, "spread", "")
    assert row.flags == []


def test_a_change_beyond_the_measured_spread_is_flagged_with_its_direction() -> None:
    (row,) = compare.compare(_figures([4.0, 4.5]), _figures([9.0, 10.0]), SAME)
    assert row.changes["p95"].flag == "worse"
    (row,) = compare.compare(_figures([9.0, 10.0]), _figures([4.0, 4.5]), SAME)
    assert row.changes["p95"].flag == "better"
    assert "p95 better" in row.flags


def test_the_noise_is_pooled_over_the_rates_of_a_series() -> None:
    # At 100/s the repeats agree within 2 %, at 500/s they spread by 40 %:
    # the series' noise is 40 % of A's value at every rate of it.
    a = _figures([5.0, 5.1]) + _figures([4.0, 6.0], rate=500)
    b = _figures([6.0, 6.1]) + _figures([5.0, 5.0], rate=500)
    low, high = compare.compare(a, b, SAME)
    assert low.key[3] == 100 and low.changes["p95"].flag == ""
    assert low.changes["p95"].noise == pytest.approx(0.4 * 5.05)
    # Without the wide step, the same change at 100/s is beyond the noise.
    (alone,) = compare.compare(_figures([5.0, 5.1]), _figures([6.0, 6.1]), SAME)
    assert alone.changes["p95"].flag == "worse"
    assert high.changes["p95"].flag == ""


def test_series_do_not_share_their_noise() -> None:
    a = _figures([5.0, 5.1]) + _figures([4.0, 6.0], arm="nocache")
    b = _figures([6.0, 6.1]) + _figures([4.0, 6.0], arm="nocache")
    cache, _ = compare.compare(a, b, SAME)
    assert cache.key[1] == "cache" and cache.changes["p95"].flag == "worse"


def test_runs_without_repeats_use_the_stated_tolerance() -> None:
    (row,) = compare.compare(_figures([10.0]), _figures([11.9]), SAME, tolerance=0.2)
    assert row.changes["p95"].basis == "tolerance" and row.changes["p95"].flag == ""
    (row,) = compare.compare(_figures([10.0]), _figures([12.1]), SAME, tolerance=0.2)
    assert row.changes["p95"].flag == "worse"
    # Shares move by points: 3 points more drops is past the 2 allowed.
    (row,) = compare.compare(_figures([10.0]), _figures([10.0], drops=0.03), SAME)
    assert row.changes["drops"].flag == "worse"
    assert row.changes["hit"].flag == ""  # unchanged


def test_latencies_of_a_step_past_capacity_in_both_runs_are_not_judged() -> None:
    # A cold step that dropped in both runs: its p95 measures the fill, not the service.
    (row,) = compare.compare(_figures([980.0, 990.0], drops=0.005),
                             _figures([400.0, 405.0], drops=0.0001), SAME)  # fmt: skip
    assert row.changes["p95"].basis == compare.PAST_CAPACITY and row.flags == []
    assert "not judged" in compare.cell("p95", row.changes["p95"])
    # Its drops are non-zero in both: alike; its achieved rate is judged.
    past_a = [replace(one, achieved=30.0) for one in _figures([980.0, 990.0], drops=0.70)]
    past_b = [replace(one, drops=0.62, achieved=38.0) for one in _figures([400.0, 405.0])]
    (row,) = compare.compare(past_a, past_b, SAME)
    assert row.changes["drops"].basis == compare.PAST_CAPACITY
    assert row.flags == ["achieved better"]
    # Past capacity in one run only: the latency is judged as any other.
    (row,) = compare.compare(_figures([4.0, 4.5]), _figures([9.0, 10.0], drops=0.001), SAME)
    assert row.changes["p95"].flag == "worse"


def test_only_common_steps_are_compared() -> None:
    other = [replace(one, rate=300) for one in _figures([4.0])]
    assert compare.compare(_figures([4.0]), other, SAME) == []


def _run(run_id: str, rate: int | None) -> RunRecord:
    targets = {} if rate is None else {"core": {"rate": rate}, "gateway": {"rate": rate // 2}}
    calibration = {"targets": targets} if rate is not None else None
    machine = {"nproc": 2, "cpu": "x", "calibration": calibration}
    return RunRecord(run_id, "run", "2026-01-01T00:00:00+00:00", {}, machine, {}, {})


def test_machines_calibrated_too_far_apart_are_refused() -> None:
    with pytest.raises(machines.CompareError, match=r"1\.30x, more than 1\.25x"):
        machines.machine_scale(_run("a", 1000), _run("b", 1300), normalise=False)
    with pytest.raises(machines.CompareError, match=r"1\.30x"):
        machines.machine_scale(_run("a", 1300), _run("b", 1000), normalise=False)
    scale = machines.machine_scale(_run("a", 1000), _run("b", 1200), normalise=False)
    assert scale.ratio == 1.2 and scale.apply("p95", 5.0, KEY) == 5.0  # as measured


def test_normalising_puts_b_on_as_machine() -> None:
    # Runs without the driver's CPU per step: by their calibrations, latencies only.
    scale = machines.machine_scale(_run("a", 1000), _run("b", 2000), normalise=True)
    assert scale.apply("p95", 3.0, KEY) == 6.0
    assert scale.apply("achieved", 100.0, KEY) == 100.0
    assert scale.apply("drops", 0.1, KEY) == 0.1


def test_an_uncalibrated_run_is_refused_unless_told() -> None:
    with pytest.raises(machines.CompareError, match="run b has neither the driver's CPU per step"):
        machines.machine_scale(_run("a", 1000), _run("b", None), normalise=False)
    scale = machines.machine_scale(_run("a", 1000), _run("b", None), False, ignore=True)
    assert scale.ratio is None
    with pytest.raises(machines.CompareError, match="--normalise needs"):
        machines.machine_scale(_run("a", 1000), _run("b", None), True, ignore=True)


def test_a_calibration_that_moved_is_compared_as_measured_when_told() -> None:
    with pytest.raises(machines.CompareError, match="--ignore-calibration"):
        machines.machine_scale(_run("a", 4400), _run("b", 3200), normalise=False)
    scale = machines.machine_scale(_run("a", 4400), _run("b", 3200), False, ignore=True)
    assert scale.apply("p95", 5.0, KEY) == 5.0 and scale.apply("achieved", 100.0, KEY) == 100.0


def test_the_drivers_cpu_per_request_is_each_steps_machine_meter() -> None:
    # 0.2 cores for 100 req/s in A, 0.25 in B: B's machine ran 0.8x as fast.
    a = _figures([4.0, 4.0], cores=0.2) + _figures([4.0], rate=500, cores=1.0)
    b = _figures([4.0, 4.0], cores=0.25) + _figures([4.0], rate=500, cores=0.5)
    speeds = meter.step_speeds(a, b)
    assert speeds[KEY] == pytest.approx(0.8)
    assert speeds[("read", "cache", "warm", 500)] == pytest.approx(2.0)
    # A step that dropped iterations spent the driver's CPU on requests it never made:
    # no meter there; nor where the driver's CPU was not read.
    dropping = _figures([4.0], drops=0.05, cores=0.2)
    assert meter.step_speeds(a, dropping) == {}
    assert meter.step_speeds(a, _figures([4.0, 4.0])) == {}


def test_the_widest_drift_between_repeats_is_named_in_the_report() -> None:
    # cache (warm) at 100/s: the driver spent 0.92 and then 1.27 ms per request.
    steady = _figures([4.0, 4.0], rate=500, cores=0.3 * 5)
    drifting = [replace(one, driver_cpu_cores=cores) for one, cores in
                zip(_figures([4.0, 4.0]), (0.092, 0.127), strict=True)]  # fmt: skip
    drift = meter.widest_drift(steady + drifting)
    assert drift is not None and drift.key == KEY
    assert drift.ratio == pytest.approx(0.127 / 0.092)
    line = report.machine_drift_line(steady + drifting)
    assert line is not None
    assert "moved by 38% between the repeats of cache (warm) at 100/s (0.92 and 1.27 ms)" in line
    # Nothing repeated, or no step that held its rate: nothing to say.
    assert report.machine_drift_line(drifting[:1]) is None
    assert meter.widest_drift(_figures([4.0, 4.0], drops=0.5, cores=0.1)) is None


def test_the_steps_meter_judges_the_machines_before_the_calibration() -> None:
    # The knees read 1.56x apart, the steps themselves 1.1x: compared.
    scale = machines.machine_scale(_run("a", 3600), _run("b", 5600), False, steps={KEY: 1.1})
    assert scale.judged_by == "steps" and scale.ratio == pytest.approx(1.1)
    assert scale.calibration_ratio == pytest.approx(5600 / 3600)
    # The steps 1.4x apart: refused, whatever the calibrations say.
    with pytest.raises(machines.CompareError, match=r"the driver's CPU per request.*1\.40x, more"):
        machines.machine_scale(_run("a", 1000), _run("b", 1000), False, steps={KEY: 1.4})
    told = machines.machine_scale(_run("a", 1000), _run("b", 1000), True, steps={KEY: 1.4})
    assert told.apply("p95", 2.0, KEY) == pytest.approx(2.8)
    # Uncalibrated runs with the meter need no --ignore-calibration.
    assert machines.machine_scale(_run("a", None), _run("b", None), False, steps={KEY: 1.0})


def _p50s(values: list[float], cores: float) -> list[dict]:
    """Repeats whose latencies are all proportional to their p50 `values`."""
    return [replace(one, p50=p50, p95=4 * p50, p99=8 * p50) for one, p50 in zip(
            _figures([4.0] * len(values), cores=cores), values, strict=True)]  # fmt: skip


def test_a_slower_machine_is_not_flagged_and_a_slower_service_is() -> None:
    a = _p50s([1.0, 1.02], cores=0.2)
    slower_machine = _p50s([1.25, 1.27], cores=0.25)  # the driver paid 1.25x too
    slower_service = _p50s([1.25, 1.27], cores=0.2)  # the same machine, the service slower
    worse = ["p50 worse", "p95 worse", "p99 worse"]
    for b, flagged in ((slower_machine, []), (slower_service, worse)):
        scale = machines.machine_scale(_run("a", 1000), _run("b", 1000), False,
                                      steps=meter.step_speeds(a, b))  # fmt: skip
        (row,) = compare.compare(a, b, scale)
        assert row.flags == flagged
    # Judged as measured, the slower machine reads as a slower service.
    scale = machines.machine_scale(
        _run("a", 1000), _run("b", 1000), False,
        steps=meter.step_speeds(a, slower_machine), as_measured=True,
    )  # fmt: skip
    (row,) = compare.compare(a, slower_machine, scale)
    assert row.flags == worse and row.speed is None


def test_a_flag_on_a_step_whose_machine_moved_says_so(tmp_path: Path) -> None:
    a = _p50s([1.0, 1.02], cores=0.2)
    b = _p50s([2.0, 2.02], cores=0.25)  # 1.6x A's once on A's machine, which ran 0.8x
    scale = machines.machine_scale(_run("a", 1000), _run("b", 1000), False,
                                  steps=meter.step_speeds(a, b))  # fmt: skip
    (row,) = compare.compare(a, b, scale)
    assert row.machine_moved
    assert row.verdict() == "p50 worse, p95 worse, p99 worse (B's machine 0.80x here)"
    text = compare.write(_run("a", 1000), _run("b", 1000), [row], scale, 0.2, tmp_path)
    assert "1 of the 1 flagged steps ran on a machine more than 10% off A's" in text
    # Within 10 %: the flags alone.
    near = compare.Row(row.key, row.changes, speed=0.95)
    assert not near.machine_moved and near.verdict() == "p50 worse, p95 worse, p99 worse"


def test_a_baseline_of_several_runs_pools_their_repeats(tmp_path: Path) -> None:
    runs = [_run("r1", 1000), _run("r2", 3000), _run("r3", 2000)]
    side = compare.baseline(runs)
    assert side.run_id == "r1+r2+r3" and side.runs == ["r1", "r2", "r3"]
    assert calibration.rate_of(side.machine) == 2000  # the median run's machine
    assert compare.baseline(runs[:1]) is runs[0]
    # Each run alone agreed within 2 %, the two 25 % apart: pooled, that is the noise.
    first, second = _figures([4.0, 4.1]), _figures([5.0, 5.1])
    b = _figures([5.0, 5.05])
    (alone,) = compare.compare(first, b, SAME)
    (pooled,) = compare.compare(first + second, b, SAME)
    assert alone.flags == ["p95 worse", "p99 worse"] and pooled.flags == []
    text = compare.write(side, _run("b", 2000), [pooled], SAME, 0.2, tmp_path)
    assert "A: a baseline of 3 runs, r1, r2, r3, their repeats pooled" in text
    assert json.loads((tmp_path / "compare.json").read_text())["a"] == ["r1", "r2", "r3"]


def test_the_table_shows_each_steps_speed(tmp_path: Path) -> None:
    a = _p50s([1.0, 1.02], cores=0.2) + _figures([4.0], rate=500, drops=0.5, cores=0.2)
    b = _p50s([1.25, 1.27], cores=0.25) + _figures([4.0], rate=500, drops=0.5, cores=0.2)
    scale = machines.machine_scale(_run("a", 1000), _run("b", 1000), False,
                                  steps=meter.step_speeds(a, b))  # fmt: skip
    text = compare.write(_run("a", 1000), _run("b", 1000), compare.compare(a, b, scale),
                         scale, 0.2, tmp_path)  # fmt: skip
    assert "B's speed" in text and "on A's machine" in text
    assert "| read | cache (warm) | 100 | 0.80x |" in text
    assert "| read | cache (warm) | 500 | n/a |" in text
    assert "ran 0.80x as fast as A's, within the 1.25x allowed" in text
    saved = json.loads((tmp_path / "compare.json").read_text())
    assert saved["judged_by"] == "steps" and saved["steps"][0]["speed"] == pytest.approx(0.8)


def test_compare_writes_its_table(tmp_path: Path) -> None:
    rows = compare.compare(_figures([4.0, 4.5]), _figures([9.0, 10.0]), SAME)
    text = compare.write(_run("a", 1000), _run("b", 1000), rows, SAME, 0.2, tmp_path)
    assert "| read | cache (warm) | 100 |" in text and "**worse**" in text
    assert (tmp_path / "compare.md").read_text() == text
    assert '"flag": "worse"' in (tmp_path / "compare.json").read_text()


def test_results_json_round_trips_the_figures(tmp_path: Path) -> None:
    runfile.save_figures([_result(4.0, 2)], tmp_path)
    (one,) = runfile.load_figures(tmp_path)
    assert (one.repeat, one.p95, one.saturated) == (2, 4.0, False)
    assert runfile.load_figures(tmp_path / "none") is None


# ---- the driver: its CPU and its end -----------------------------------------------------
def test_the_drivers_cpu_time_is_read_as_it_exits(tmp_path: Path) -> None:
    busy = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"
    process = DriverProcess(["sh", "-c", busy], tmp_path / "load.log", {})
    assert process.run_measured(60) == 0
    assert process.cpu_seconds is not None and process.cpu_seconds > 0.05
    idle = DriverProcess(["sleep", "0.3"], tmp_path / "load.log", {})
    idle.run_measured(60)
    assert idle.cpu_seconds is not None and idle.cpu_seconds < 0.05


def test_a_driver_past_its_deadline_is_an_error(tmp_path: Path) -> None:
    process = DriverProcess(["sleep", "30"], tmp_path / "load.log", {})
    with pytest.raises(StackError, match="did not finish within 0 s"):
        process.run_measured(0.3)
    assert not process.running


def test_a_split_confirmation_is_decided_by_a_third_try() -> None:
    params = SearchParams(start=200, ladder_step=400, max_rate=8000)

    # 1200 holds, but its second try is one slow step: the third decides.
    def noisy(rate: int, history: list[tuple[int, bool]]) -> bool:
        return rate <= 1200 and not (
            rate == 1200 and len([r for r, _ in history if r == rate]) == 1
        )

    history = _search(noisy, params)
    assert [held for rate, held in history if rate == 1200] == [True, False, True]
    assert ceiling_of(history) == (1200, False)


def test_a_rate_that_misses_twice_of_three_does_not_hold() -> None:
    history = [(800, True), (800, False), (800, False), (400, True), (400, True)]
    assert verdicts(history) == {800: False, 400: True}
    assert ceiling_of(history) == (400, False)


def test_searches_run_side_by_side_take_turns() -> None:
    params = SearchParams(start=200, ladder_step=400, max_rate=2000)
    ran: list[tuple[str, int]] = []

    def run(name: str, rate: int, history: list) -> bool:
        ran.append((name, rate))
        return rate <= (1000 if name == "a" else 700)

    found = interleave(["a", "b"], params, run)
    # Turn by turn while both search: a's first step, then b's, then a's second...
    assert [name for name, _ in ran[:6]] == ["a", "b", "a", "b", "a", "b"]
    assert ceiling_of(found["a"]) == (1000, False) and ceiling_of(found["b"]) == (700, False)
    # Each search is the one it would be alone.
    alone = interleave(["b"], params, run)
    assert alone["b"] == found["b"]


def test_an_interrupted_step_stops_every_search() -> None:
    params = SearchParams(start=200, ladder_step=400, max_rate=2000)
    calls = []

    def run(name: str, rate: int, history: list) -> bool | None:
        calls.append(name)
        return None if len(calls) == 3 else True

    found = interleave(["a", "b"], params, run)
    assert calls == ["a", "b", "a"] and len(found["a"]) == 1 and len(found["b"]) == 1


def _probed(run_id: str, probes: list[tuple[int, float | None, bool]]) -> RunRecord:
    run = _run(run_id, 3200)
    run.machine["calibration"]["targets"]["core"]["probes"] = [
        {"rate": rate, "p95_ms": p95, "held": held} for rate, p95, held in probes
    ]
    return run


def test_the_base_latency_is_the_median_of_the_lowest_probes_that_held() -> None:
    probes = [(800, 0.48, True), (400, 1.13, True), (3200, 5.0, True), (1600, 0.52, True)]
    run = _probed("a", [*probes, (6400, 40.0, False)])
    # 400, 800 and 1600/s: one slow probe (1.13 ms) does not move it.
    assert calibration.base_latency(run.machine) == (1600, 0.52)
    assert calibration.base_latency(_probed("b", [(400, 0.55, True)]).machine) == (400, 0.55)
    assert calibration.base_latency(_probed("b", [(400, 12.0, False)]).machine) is None
    assert calibration.base_latency(_run("c", None).machine) is None


def test_compare_warns_when_the_machines_base_latency_moved() -> None:
    a = _probed("a", [(400, 0.55, True)])
    b = _probed("b", [(400, 0.41, True)])
    line = machines.base_latency_line(a, b)
    assert line is not None and "0.75x" in line and "25% faster" in line
    steady = machines.base_latency_line(a, _probed("c", [(400, 0.57, True)]))
    assert steady is not None and "1.04x" in steady and "faster" not in steady
    assert machines.base_latency_line(a, _run("d", 3200)) is None
    rows = compare.compare(_figures([4.0]), _figures([4.0]), SAME)
    assert any("25% faster" in line for line in compare.header_lines(a, b, SAME, 0.2, rows))
