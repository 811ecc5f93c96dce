"""Made-up step results and a run's metadata: reports are built from them
without running any load (the report and browser tests share them)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from aside_bench.compare import machines
from aside_bench.compare import page as comparepage
from aside_bench.compare import steps as compare
from aside_bench.plan.steps import Step
from aside_bench.records.results import CacheCounts, Latency, RedisCounts, StepResult
from aside_bench.records.runfile import RunRecord, StepFigures
from aside_bench.records.steprecord import StepRecord
from aside_bench.records.tierstats import StepCost


def sample_result(
    arm: str, phase: str, rate: int, p95: float, hits: float, by_name: bool = False
) -> StepResult:
    names = {"count": Latency(1, p95, p95, 10), "create": Latency(2, 9, 9, 2)} if by_name else {}
    return StepResult(
        step=Step("read", arm, phase, rate, 30),
        latency=Latency(p50=p95 / 3, p95=p95, p99=p95 * 1.5, count=rate * 30),
        iterations=rate * 30,
        failed=rate,  # 1 s worth of failures
        dropped=0,
        cache=CacheCounts(hits=hits, misses=rate * 30 - hits, bypass=0)
        if arm == "cache"
        else CacheCounts(0, 0, rate * 30),
        by_name=names,
    )


def priced_step(arm: str, phase: str, rate: int, p95: float, cpu_ms: float, dropped: int = 0,
                redis_mib: float | None = None, rss_mib: float = 100) -> StepResult:  # fmt: skip
    """A 10 s read step with a cost to price it: the decision's and the distances' tests."""
    cost = StepCost(
        requests=0, cpu_ms_per_request=cpu_ms, gateway_rss_mib=rss_mib, redis_rss_mib=None,
        l1_hit_rate=None, l2_hit_rate=None, l1_entries=None, l1_mib=None, lag_count=0,
        lag_p50_ms=None, lag_p99_ms=None, lag_max_ms=None, postgres_cpu_ms_per_request=0.0,
        redis_cpu_ms_per_request=0.0,
    )  # fmt: skip
    redis = None if redis_mib is None else RedisCounts(1000, int(redis_mib * 2**20), 0, 0)
    return StepResult(
        step=Step("read", arm, phase, rate, 10),
        latency=Latency(p95 / 2, p95, p95 * 2, rate * 10 - dropped),
        iterations=rate * 10 - dropped,
        failed=0,
        dropped=dropped,
        cache=CacheCounts(0, 0, rate * 10),
        cost=cost,
        redis=redis,
    )


RESULTS = [
    sample_result("nocache", "none", 30, 80.0, 0),
    sample_result("cache", "warm", 30, 4.0, 880),
    sample_result("nocache", "none", 100, 900.0, 0),
    sample_result("cache", "warm", 100, 5.0, 2950),
]


def step_record(**fields: object) -> StepRecord:
    """A step of run.json: the warm cache arm at 30/s for 30 s, with `fields`."""
    step = {"scenario": "read", "arm": "cache", "phase": "warm", "rate": 30, "duration_s": 30}
    return StepRecord.from_json({**step, **fields})


def sample_run() -> RunRecord:
    return RunRecord.from_json({
        "run_id": "unit-1",
        "kind": "run",
        "created": "2026-01-01T00:00:00+00:00",
        "params": {"scenario": "read", "duration_s": 30, "hot_share": 0.9, "hot_count": 100,
                   "cold_sample_used": 200, "write_share": 0.1},
        "machine": {"nproc": 2, "cpu": "Test CPU", "memory_gib": 24.0, "kernel": "6.1",
                    "note": "the load driver shares the 2 cores with the services"},
        "seed": {"rows": 1000000, "index": False, "seed": 42},
        "settings": {"gateway_url": "http://gateway"},
        "steps": [],
    })  # fmt: skip


# ---- two runs compared (compare.html) ------------------------------------------------
SAME = machines.Scale(1000, 1000, normalised=False)


def step_cost(cpu_ms: float) -> StepCost:
    return StepCost(requests=3000, cpu_ms_per_request=cpu_ms, gateway_rss_mib=60.0,
                    redis_rss_mib=None, l1_hit_rate=None, l2_hit_rate=None, l1_entries=None,
                    l1_mib=None, lag_count=0, lag_p50_ms=None, lag_p99_ms=None,
                    lag_max_ms=None, postgres_cpu_ms_per_request=cpu_ms)  # fmt: skip


def compare_sides(slower: float) -> comparepage.Sides:
    """A: the report's sample results, none failed; B: the same with the cache
    arm's p95 `slower` times A's and its CPU twice A's."""
    held = [replace(r, failed=0) for r in RESULTS]
    a = [replace(r, cost=step_cost(0.5)) for r in held]
    b = [
        replace(r, cost=step_cost(1.0), latency=replace(r.latency, p95=r.latency.p95 * slower))
        if r.step.arm == "cache" and r.latency is not None
        else replace(r, cost=step_cost(0.5))
        for r in held
    ]
    return comparepage.Sides(replace(sample_run(), run_id="a"), replace(sample_run(), run_id="b"),
                             a, b)  # fmt: skip


def compare_rows(sides: comparepage.Sides) -> list[compare.Row]:
    figures = [[StepFigures.of(r) for r in results] for results in (sides.results_a,
                                                                     sides.results_b)]  # fmt: skip
    return compare.compare(figures[0], figures[1], SAME)


def compare_page(out_dir: Path, slower: float = 3.0) -> Path:
    sides = compare_sides(slower)
    return comparepage.write_page(sides, compare_rows(sides), SAME, 0.2, out_dir)
