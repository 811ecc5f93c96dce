"""A run's miss-ratio curves: per rate, the warm Redis arms' key stream replayed over cache
sizes, each arm's measured hit rate set at the keys its Redis held (docs/decisions/044)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aside_bench.curve.simulate import POLICIES, CurvePoint, Stream, capacities, curve, policies_at
from aside_bench.plan.arms import base_arm
from aside_bench.plan.steps import arm_bound
from aside_bench.records.keytrace import KeyTraceError, read_key_trace
from aside_bench.records.results import StepResult
from aside_bench.records.runfile import RunRecord
from aside_bench.records.steprecord import StepRecord

# The arms whose hit rate is Redis's alone: the cache arm and its memory arms.
REDIS_ARMS = ("cache",)


@dataclass(frozen=True)
class MeasuredPoint:
    """A warm step: the keys Redis held (median), its memory, its hit rate, the policies at
    its size; evicted, expired and failed count over the whole simulated stream."""

    arm: str
    maxmemory: int | None
    keys: int
    used_memory: int
    evicted: int
    hit_rate: float
    clients_memory: int | None
    simulated: dict[str, float]
    expired: int = 0
    failed: int = 0
    simulated_keys: int | None = None  # the keys held, or all (never full)

    @property
    def never_full(self) -> bool:
        """Redis evicted nothing over the stream: it held every key it was asked for."""
        return self.evicted == 0


@dataclass(frozen=True)
class RateCurve:
    rate: int
    requests: int  # measured requests of the stream the curve replays
    warmup: int  # requests before them that only filled the cache
    distinct: int  # distinct keys in the whole stream
    points: list[CurvePoint]
    measured: list[MeasuredPoint]

    def policy_points(self, policy: str) -> list[CurvePoint]:
        return [point for point in self.points if point.policy == policy]


Progress = Callable[[str], None]


def _trace_keys(record: StepRecord, out_dir: Path) -> list[str] | None:
    """A step's key trace; None when it kept none."""
    path = out_dir / record.key_trace if record.key_trace else None
    return read_key_trace(path) if path is not None and path.exists() else None


def step_stream(steps: list[StepRecord], index: int, out_dir: Path) -> Stream | None:
    """A warm step's stream: its cold step's keys as the warm-up, then its own."""
    keys = _trace_keys(steps[index], out_dir)
    if keys is None or not steps[index].skip or index == 0:
        return Stream(keys) if keys else None
    warm = _trace_keys(steps[index - 1], out_dir)
    return Stream(warm + keys, warmup=len(warm)) if warm is not None and keys else None


# A step's run as its results are keyed (Step.run_key).
RunKey = tuple[str, str, str, int, int]


def _cold_before(run: RunRecord, index: int, by_key: dict[RunKey, StepResult]) -> StepResult | None:
    """The cold step whose stream the warm step at `index` went on with, if it did."""
    if not run.steps[index].skip or index == 0:
        return None
    return by_key.get(run.steps[index - 1].step.run_key)


def _stream_counts(warm: StepResult, cold: StepResult | None) -> tuple[int, int, int]:
    """Evicted, expired and failed over the warm step and the cold step before it."""
    steps = [warm] if cold is None else [cold, warm]
    evicted = sum(s.redis.evicted for s in steps if s.redis is not None)
    expired = sum(s.redis.expired for s in steps if s.redis is not None)
    return evicted, expired, sum(s.failed for s in steps)


# A warm step: its index in run.steps, its result and the cold step it went on from.
WarmStep = tuple[int, StepResult, StepResult | None]


def _redis_steps(run: RunRecord, by_key: dict[RunKey, StepResult]) -> list[WarmStep]:
    """The completed warm steps of Redis arms."""
    found = []
    for index, record in enumerate(run.steps):
        arm = record.arm
        if record.phase != "warm" or base_arm(arm) not in REDIS_ARMS:
            continue
        bound = arm_bound(arm)
        if bound is not None and bound.kind != "memory":
            continue  # a TTL's expiries are not on a curve of sizes
        result = by_key.get(record.step.run_key)
        if result is not None and result.redis is not None and result.hit_rate is not None:
            found.append((index, result, _cold_before(run, index, by_key)))
    return found


def run_curves(
    run: RunRecord, results: list[StepResult], out_dir: Path, progress: Progress = print
) -> list[RateCurve]:
    """A curve per rate that has Redis arms with key traces; none otherwise."""
    by_key = {r.step.run_key: r for r in results}
    by_rate: dict[int, list[WarmStep]] = {}
    for index, result, cold in _redis_steps(run, by_key):
        by_rate.setdefault(result.step.rate, []).append((index, result, cold))
    curves = []
    for rate, steps in sorted(by_rate.items()):
        try:
            made = _rate_curve(run, rate, steps, out_dir, progress)
        except KeyTraceError as error:
            progress(f"miss-ratio curve at {rate}/s left out: {error}")
            continue
        if made is not None:
            curves.append(made)
    return curves


def _rate_curve(
    run: RunRecord, rate: int, steps: list[WarmStep], out_dir: Path, progress: Progress
) -> RateCurve | None:
    measured = []
    reference: Stream | None = None
    for index, result, cold in steps:
        stream = step_stream(run.steps, index, out_dir)
        if stream is None:
            continue
        reference = reference or stream
        measured.append(measured_point(stream, result, cold))
    if reference is None:
        return None
    distinct = len(set(reference.keys))
    sizes = capacities(distinct, [point.simulated_keys or point.keys for point in measured])
    progress(
        f"miss-ratio curve at {rate}/s: {len(reference.keys)} requests, {distinct} keys, "
        f"{len(sizes)} sizes x 5 policies"
    )
    points = curve(reference, sizes)
    return RateCurve(rate, reference.measured, reference.warmup, distinct, points, measured)


def measured_point(stream: Stream, warm: StepResult, cold: StepResult | None) -> MeasuredPoint:
    """A warm step's point, simulated at the keys held (never full: every key)."""
    redis = warm.redis
    assert redis is not None and warm.hit_rate is not None
    # What it held over the step (its median), else at its end.
    held = redis.keys if redis.keys_held is None else redis.keys_held
    evicted, expired, failed = _stream_counts(warm, cold)
    size = len(set(stream.keys)) if evicted == 0 else held
    if size < 1:
        # No key held (its clients' buffers took the bound): no hit, whatever the policy.
        at_size = dict.fromkeys(POLICIES, 0.0)
    else:
        # Below S3-FIFO's least, the other policies still run.
        policies = policies_at(size)
        at_size = {point.policy: point.hit_ratio for point in curve(stream, [size], policies)}
    return MeasuredPoint(
        arm=warm.step.arm,
        maxmemory=redis.maxmemory,
        keys=held,
        used_memory=redis.used_memory,
        evicted=evicted,
        hit_rate=warm.hit_rate,
        clients_memory=redis.clients_memory,
        simulated=at_size,
        expired=expired,
        failed=failed,
        simulated_keys=size,
    )
