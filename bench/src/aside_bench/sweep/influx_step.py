"""One InfluxDB point per step (measurement `bench_step`): what a reader
compares in InfluxDB and the dashboards, cache off against on, without
opening the report. Written as each step ends; a point that cannot be written
is spooled (stack/influxpoints.py), never a failed step."""

from __future__ import annotations

from aside_bench.records.results import StepResult
from aside_bench.records.steprecord import StepRecord

MEASUREMENT = "bench_step"


def _escape_tag(value: str) -> str:
    """A tag key or value in line protocol: commas, spaces and equals escaped."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace(" ", "\\ ").replace("=", "\\=")


def line(measurement: str, tags: dict[str, str], fields: dict[str, float | None], ms: int) -> str:
    """One point in line protocol (millisecond precision); fields without a
    value are left out (InfluxDB has no null), tags without one too."""
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
