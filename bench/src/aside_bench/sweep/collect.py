"""Turn a run's recorded steps into StepResults: the load's figures from the
driver's summary run.json keeps of each step, the cache counters from
Prometheus, the gateway's own figures from the probe around the step."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from aside_bench.plan import scenarios
from aside_bench.plan.steps import Step
from aside_bench.records.results import (
    CacheCounts,
    Latency,
    StaleCounts,
    StepResult,
    redis_counts,
)
from aside_bench.records.saturation import loadgen_of
from aside_bench.records.steprecord import StepRecord
from aside_bench.records.tierstats import increase_across_reset, step_cost
from aside_bench.stack.sources import Prometheus

GATEWAY_JOB = "gateway"
CACHE_COUNTERS = {
    "hits": "aside_gateway_cache_hits_total",
    "misses": "aside_gateway_cache_misses_total",
    "bypass": "aside_gateway_cache_bypass_total",
}


def cache_counts(prom: Prometheus, start: float, end: float) -> CacheCounts | None:
    """The gateway's cache counters' increase between two instants; None when
    Prometheus was not scraping the gateway then (no figure rather than a false 0)."""
    if prom.scalar(f'max(up{{job="{GATEWAY_JOB}"}})', end) != 1.0:
        return None
    deltas = {
        kind: increase_across_reset(
            prom.scalar(f"sum({name})", start), prom.scalar(f"sum({name})", end)
        )
        for kind, name in CACHE_COUNTERS.items()
    }
    return CacheCounts(**deltas)


def summary_latency(figures: dict[str, Any] | None) -> Latency | None:
    """The latency of a summary's figures (the step's, one kind's or from the
    due time); None when no request was answered."""
    if not figures or figures.get("p95") is None:
        return None
    return Latency(
        float(figures.get("p50") or 0.0),
        float(figures["p95"]),
        float(figures.get("p99") or 0.0),
        int(figures.get("answered") or 0),
    )


def compute_beside(step: Step, summary: dict[str, Any]) -> StepResult | None:
    """The requests of a scenario's second one that ran beside a step's reads
    (interference's compute), from their own scenario of the summary; None at
    rate 0 (reads alone)."""
    figures = summary.get("compute")
    found = scenarios.scenario_of(step.scenario)
    if found is None or found.beside is None or step.rate == 0 or not figures:
        return None
    beside = replace(step, scenario=found.beside, read_rate=0)
    return _counted(beside, figures, None)


def _counted(
    step: Step, figures: dict[str, Any], cache: CacheCounts | None, **more: Any
) -> StepResult:
    """A step's latency, iterations, failures and drops from the driver's figures."""
    return StepResult(
        step=step,
        latency=summary_latency(figures),
        iterations=int(figures.get("iterations") or 0),
        failed=int(figures.get("failed") or 0),
        dropped=int(figures.get("dropped") or 0),
        cache=cache,
        **more,
    )


def summary_result(record: StepRecord, cache: CacheCounts | None) -> StepResult:
    """A step from its summary (loadrun.Summary.step_figures): latency, failures,
    drops and the driver's pool over the whole step."""
    summary = record.figures
    step = record.step
    stale = summary.get("stale")
    by_name = {name: summary_latency(one) for name, one in (summary.get("by_name") or {}).items()}
    return _counted(
        step,
        summary,
        cache,
        by_name={name: latency for name, latency in by_name.items() if latency is not None},
        cost=step_cost(record.probe),
        stale=None if stale is None else StaleCounts(**stale),
        loadgen=loadgen_of(record, summary.get("inflight_peak")),
        compute=compute_beside(step, summary),
        from_due=summary_latency(summary.get("from_due")),
        redis=redis_counts(record.redis, record.cache_memory),
    )


def _step_cache(prom: Prometheus, record: StepRecord) -> CacheCounts | None:
    if record.prom_start is None or record.prom_end is None:
        return None
    return cache_counts(prom, record.prom_start, record.prom_end)


def collect(prom: Prometheus, records: list[StepRecord]) -> list[StepResult]:
    """Results of the steps that ran to their end (interrupted ones are left out)."""
    return [
        summary_result(record, _step_cache(prom, record)) for record in records if record.completed
    ]
