"""A run's recorded steps as StepResults: the driver's summary, Prometheus, the probes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from aside_bench.plan import scenarios
from aside_bench.plan.steps import Step
from aside_bench.records import results
from aside_bench.records.documents import LatencyFigures, StepSummary
from aside_bench.records.results import StepResult
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


def cache_counts(prom: Prometheus, start: float, end: float) -> results.CacheCounts | None:
    """The cache counters' increase; None when Prometheus was not scraping the gateway."""
    if prom.scalar(f'max(up{{job="{GATEWAY_JOB}"}})', end) != 1.0:
        return None
    deltas = {
        kind: increase_across_reset(
            prom.scalar(f"sum({name})", start), prom.scalar(f"sum({name})", end)
        )
        for kind, name in CACHE_COUNTERS.items()
    }
    return results.CacheCounts(**deltas)


def summary_latency(figures: LatencyFigures | None) -> results.Latency | None:
    """The latency of a summary's figures; None when no request was answered."""
    if not figures or figures.get("p95") is None:
        return None
    return results.Latency(
        float(figures.get("p50") or 0.0),
        float(figures["p95"]),
        float(figures.get("p99") or 0.0),
        int(figures.get("answered") or 0),
    )


def compute_beside(step: Step, summary: StepSummary) -> StepResult | None:
    """The requests of a scenario's second one beside a step's reads; None at rate 0."""
    figures = summary.get("compute")
    found = scenarios.scenario_of(step.scenario)
    if found is None or found.beside is None or step.rate == 0 or not figures:
        return None
    beside = replace(step, scenario=found.beside, read_rate=0)
    return _counted(beside, figures, None)


def _counted(
    step: Step, figures: StepSummary, cache: results.CacheCounts | None, **more: Any
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


def summary_result(record: StepRecord, cache: results.CacheCounts | None) -> StepResult:
    """A step's result from its record."""
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
        stale=None if stale is None else results.StaleCounts(**stale),
        loadgen=loadgen_of(record, summary.get("inflight_peak")),
        compute=compute_beside(step, summary),
        from_due=summary_latency(summary.get("from_due")),
        redis=results.redis_counts(record.redis, record.cache_memory),
    )


def _step_cache(prom: Prometheus, record: StepRecord) -> results.CacheCounts | None:
    if record.prom_start is None or record.prom_end is None:
        return None
    return cache_counts(prom, record.prom_start, record.prom_end)


def collect(prom: Prometheus, records: list[StepRecord]) -> list[StepResult]:
    """Results of the steps that ran to their end (interrupted ones are left out)."""
    return [
        summary_result(record, _step_cache(prom, record)) for record in records if record.completed
    ]


MEASUREMENT = "bench_step"


def _escape_tag(value: str) -> str:
    """A tag key or value in line protocol: commas, spaces and equals escaped."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace(" ", "\\ ").replace("=", "\\=")


def line(measurement: str, tags: dict[str, str], fields: dict[str, float | None], ms: int) -> str:
    """One point in line protocol (ms precision); tags and fields without a value left out."""
    tag_text = "".join(
        f",{_escape_tag(k)}={_escape_tag(v)}" for k, v in sorted(tags.items()) if v != ""
    )
    field_text = ",".join(
        f"{_escape_tag(k)}={float(v)!r}" for k, v in fields.items() if v is not None
    )
    if not field_text:
        raise ValueError("a point needs at least one field")
    return f"{_escape_tag(measurement)}{tag_text} {field_text} {ms}"


def step_fields(result: StepResult, record: StepRecord) -> dict[str, float | None]:
    """The step's figures, as the report shows them."""
    latency, due, cost, gen = result.latency, result.from_due, result.cost, result.loadgen
    summary = record.figures
    requests = summary.get("requests") or 0
    return {
        "target": float(result.step.rate),
        "achieved": result.achieved_rps,
        "p50": None if latency is None else latency.p50,
        "p95": None if latency is None else latency.p95,
        "p99": None if latency is None else latency.p99,
        "max": summary.get("max"),
        "p95_from_due": None if due is None else due.p95,
        "dropped": float(result.dropped),
        "drop_rate": result.drop_rate if result.step.scheduled > 0 else None,
        "failed": float(result.failed),
        "error_rate": result.failed / result.iterations if result.iterations else None,
        "hit_rate": result.hit_rate,
        "l1_hit_rate": None if cost is None else cost.l1_hit_rate,
        "gateway_cpu_ms": None if cost is None else cost.cpu_ms_per_request,
        "gateway_rss_mb": None if cost is None else cost.gateway_rss_mib,
        "redis_rss_mb": None if cost is None else cost.redis_rss_mib,
        "machine_busy": None if cost is None else cost.machine_busy,
        "host_steal": None if cost is None else cost.host_steal,
        "driver_cpu_cores": None if gen is None else gen.cpu_cores,
        "driver_cpu_ms": None if gen is None else gen.cpu_ms_per_request(requests),
    }


def step_line(run_id: str, result: StepResult, record: StepRecord) -> str:
    step = result.step
    tags = {
        "run_id": run_id,
        "scenario": step.scenario,
        "arm": step.arm,
        "phase": step.phase,
        "rate": str(step.rate),
        "repeat": str(step.repeat),
    }
    return line(MEASUREMENT, tags, step_fields(result, record), int((record.end or 0.0) * 1000))
