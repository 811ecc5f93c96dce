"""A run's miss-ratio curves: for each rate, the key stream its Redis-tier arms
were sent (a warm step's, after the cold step that warmed it) replayed through
every policy over a range of cache sizes, and each arm's measured hit rate set
at the size its Redis held.

A Redis bound is given in bytes; what the curve needs is the keys it held, read
from Redis once a second during the step (the median, records.results.RedisCounts):
a full bounded cache holds about (maxmemory - what its clients use) / bytes-per-key keys."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aside_bench.curve.simulate import MIN_CAPACITY, CurvePoint, Stream, capacities, curve
from aside_bench.plan.steps import arm_bound, base_arm
from aside_bench.records.keytrace import KeyTraceError, read_key_trace
from aside_bench.records.results import StepResult
from aside_bench.records.runfile import RunRecord

# The arms whose hit rate is Redis's alone: the cache arm and its memory arms.
REDIS_ARMS = ("cache",)
# Where run.json keeps a step's key trace (a file in the run's folder).
TRACE_FIELD = "key_trace"


@dataclass(frozen=True)
class MeasuredPoint:
    """One arm's warm step: the keys Redis held (the median over the step), its memory, the hit
    rate the gateway counted, and the simulated policies at exactly that size."""

    arm: str
    maxmemory: int | None
    keys: int
    used_memory: int
    evicted: int
    hit_rate: float
    clients_memory: int | None
    simulated: dict[str, float]


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


def trace_path(record: dict[str, Any], out_dir: Path) -> Path | None:
    name = record.get(TRACE_FIELD)
    return None if not name else out_dir / name


def step_stream(steps: list[dict[str, Any]], index: int, out_dir: Path) -> Stream | None:
    """A warm step's stream: its cold step's keys (when it continued that step's
    stream, record["skip"]) as the warm-up, then its own; None without traces."""
    record = steps[index]
    own = trace_path(record, out_dir)
    if own is None or not own.exists():
        return None
    keys = read_key_trace(own)
    if not record.get("skip") or index == 0:
        return Stream(keys) if keys else None
    before = trace_path(steps[index - 1], out_dir)
    if before is None or not before.exists():
        return None
    warm = read_key_trace(before)
    return Stream(warm + keys, warmup=len(warm)) if keys else None


def _redis_steps(run: RunRecord, results: list[StepResult]) -> list[tuple[int, StepResult]]:
    """(index in run.steps, result) of the completed warm steps of Redis arms."""
    by_key = {r.step.run_key: r for r in results}
    found = []
    for index, record in enumerate(run.steps):
        arm = record.get("arm", "")
        if record.get("phase") != "warm" or base_arm(arm) not in REDIS_ARMS:
            continue
        bound = arm_bound(arm)
        if bound is not None and bound.kind != "memory":
            continue  # a TTL's expiries are not on a curve of sizes
        key = (
            record["scenario"],
            record["arm"],
            "warm",
            int(record["rate"]),
            int(record.get("repeat", 1)),
        )
        result = by_key.get(key)
        if result is not None and result.redis is not None and result.hit_rate is not None:
            found.append((index, result))
    return found


def run_curves(
    run: RunRecord, results: list[StepResult], out_dir: Path, progress: Progress = print
) -> list[RateCurve]:
    """A curve per rate that has Redis arms with key traces; none otherwise."""
    by_rate: dict[int, list[tuple[int, StepResult]]] = {}
    for index, result in _redis_steps(run, results):
        by_rate.setdefault(result.step.rate, []).append((index, result))
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
    run: RunRecord,
    rate: int,
    steps: list[tuple[int, StepResult]],
    out_dir: Path,
    progress: Progress,
) -> RateCurve | None:
    measured = []
    reference: Stream | None = None
    for index, result in steps:
        stream = step_stream(run.steps, index, out_dir)
        if stream is None:
            continue
        reference = reference or stream
        redis = result.redis
        assert redis is not None and result.hit_rate is not None
        # What it held over the step (its median), else at its end.
        held = redis.keys if redis.keys_held is None else redis.keys_held
        # Fewer keys than the smallest cache simulated: its clients' buffers took
        # the bound, and no simulated size stands for it.
        at_size = (
            {point.policy: point.hit_ratio for point in curve(stream, [held])}
            if held >= MIN_CAPACITY
            else {}
        )
        measured.append(
            MeasuredPoint(
                arm=result.step.arm,
                maxmemory=redis.maxmemory,
                keys=held,
                used_memory=redis.used_memory,
                evicted=redis.evicted,
                hit_rate=result.hit_rate,
                clients_memory=redis.clients_memory,
                simulated=at_size,
            )
        )
    if reference is None:
        return None
    distinct = len(set(reference.keys))
    sizes = capacities(distinct, [point.keys for point in measured])
    progress(
        f"miss-ratio curve at {rate}/s: {len(reference.keys)} requests, {distinct} keys, "
        f"{len(sizes)} sizes x 5 policies"
    )
    return RateCurve(
        rate=rate,
        requests=reference.measured,
        warmup=reference.warmup,
        distinct=distinct,
        points=curve(reference, sizes),
        measured=measured,
    )
