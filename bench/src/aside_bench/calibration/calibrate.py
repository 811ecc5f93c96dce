"""The machine's calibration: the highest rate the driver holds on two /healthz routes."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import cast

from aside_bench.ceiling.search import Trial, bounds, to_confirm
from aside_bench.plan.steps import Step, pool_for
from aside_bench.records.documents import CalibrationRecord, ProbeFound, TargetSearched
from aside_bench.records.results import StepResult
from aside_bench.records.steprecord import StepRecord
from aside_bench.stack.prepare import StackError, wait_until_quiet
from aside_bench.sweep.collect import collect
from aside_bench.sweep.runner import Runner

# The two servers measured: name -> the Settings attribute of its base URL, what it is.
TARGETS = {
    "core": ("core_url", "the driver + the core's /healthz (the machine's measurement ceiling)"),
    "gateway": ("gateway_url", "the gateway's /healthz (its server, no work)"),
}


@dataclass(frozen=True)
class CalibrationParams:
    probe_s: int = 3
    budget_s: float = 90.0  # both targets together
    start: int = 400
    max_rate: int = 12800
    p95_ms: float = 10.0
    resolution_rel: float = 0.1


def ladder(params: CalibrationParams) -> list[int]:
    """start, 2 x start, 4 x start, ... up to max_rate (max_rate itself last)."""
    rates, rate = [], params.start
    while rate < params.max_rate:
        rates.append(rate)
        rate *= 2
    return [*rates, params.max_rate]


def next_probe(history: list[Trial], params: CalibrationParams) -> int | None:
    """Double until a probe misses, bisect, confirm as the ceiling does; None when done."""
    low, high = bounds(history)
    tried = {rate for rate, _ in history}
    if high is None:  # nothing missed yet; at the ladder's end the figure is a lower bound
        return next((r for r in ladder(params) if r > low and r not in tried), None)
    if high - low > max(1, int(low * params.resolution_rel)):
        middle = (low + high) // 2
        if middle not in tried and middle > 0:
            return middle
    return to_confirm(history)


@dataclass(frozen=True)
class Searched:
    """Where a target's search ended."""

    rate: int
    capped: bool  # nothing missed: the true ceiling is higher
    out_of_time: bool
    missed_at: int | None
    seconds: float


def search(probe: Callable[[int], bool], params: CalibrationParams, budget_s: float) -> Searched:
    """Run `probe(rate) -> held` along the search, within `budget_s`."""
    history: list[Trial] = []
    began = time.monotonic()
    slowest = float(params.probe_s)
    out_of_time = False
    while (rate := next_probe(history, params)) is not None:
        spent = time.monotonic() - began
        if history and spent + slowest > budget_s:
            out_of_time = True
            break
        started = time.monotonic()
        history.append((rate, probe(rate)))
        slowest = max(slowest, time.monotonic() - started)
    low, high = bounds(history)
    return Searched(low, high is None, out_of_time, high, round(time.monotonic() - began, 1))


def _probe_line(target: str, rate: int, result: StepResult | None, held: bool) -> str:
    if result is None or result.latency is None:
        return f"  calibration {target:<7} @ {rate:>5}/s: no answer -> missed"
    gen = result.loadgen
    cpu = "" if gen is None or gen.cpu_cores is None else f", driver {gen.cpu_cores:.2f} cores"
    return (
        f"  calibration {target:<7} @ {rate:>5}/s: p95 {result.latency.p95:.2f} ms, "
        f"drops {result.drop_rate:.1%}{cpu} -> {'held' if held else 'missed'}"
    )


def _probe(
    runner: Runner, target: str, url: str, rate: int, params: CalibrationParams
) -> StepRecord:
    """One driver run of /healthz against `url`; its record, as a step's."""
    pool = pool_for(rate, runner.max_pool)
    step = Step("calibrate", target, "none", rate, params.probe_s)
    record = StepRecord.of(step, pool=pool)
    code = runner.run_load(runner.healthz_run(step, pool, url), record)
    record.completed = code == 0 and not runner.interrupted
    return record


def _target(runner: Runner, target: str, params: CalibrationParams) -> TargetSearched:
    """One target's search, its probes kept as steps are."""
    attribute, what = TARGETS[target]
    url = getattr(runner.settings, attribute)
    probes: list[StepRecord] = []

    def probe(rate: int) -> bool:
        if runner.interrupted:
            raise KeyboardInterrupt
        record = _probe(runner, target, url, rate, params)
        results = collect(runner.prom, [record])
        result = results[0] if results else None
        held = result is not None and result.holds(params.p95_ms)
        print(_probe_line(target, rate, result, held), flush=True)
        record.extra["held"] = held
        if result is not None and result.latency is not None:
            record.extra["p95_ms"] = round(result.latency.p95, 3)
        probes.append(record)
        return held

    outcome = search(probe, params, params.budget_s / len(TARGETS))
    probed = [cast(ProbeFound, one.to_json()) for one in probes]  # a step with held, p95_ms
    return TargetSearched(url=url, what=what, **asdict(outcome), probes=probed)


def calibrate(runner: Runner, params: CalibrationParams) -> CalibrationRecord:
    """Both targets, one after the other, each within half the budget."""
    try:
        wait_until_quiet(runner.settings, runner.options.recover_timeout_s)
    except StackError as error:
        print(f"  warning: {error}; calibrating anyway", flush=True)
    targets = {target: _target(runner, target, params) for target in TARGETS}
    return CalibrationRecord(params=asdict(params), targets=targets)
