"""Turn a run's recorded steps into StepResults: a step that ran without an
output (the read and ceiling scripts' default) from the summary run.json keeps
of it, one that sent its samples from InfluxDB; the cache counters from
Prometheus."""

from __future__ import annotations

from typing import Any

from . import interference
from .plan import Step
from .results import CacheCounts, Latency, StaleCounts, StepResult, increase_across_reset
from .saturation import loadgen_of
from .sources import Influx, Prometheus, Series, quote_literal
from .tierstats import step_cost

GATEWAY_JOB = "gateway"
CACHE_COUNTERS = {
    "hits": "aside_gateway_cache_hits_total",
    "misses": "aside_gateway_cache_misses_total",
    "bypass": "aside_gateway_cache_bypass_total",
}
STEP_TAGS = ("scenario", "arm", "phase", "rate", "repeat")
# Iterations started near a step's end finish within the request timeout plus
# k6's final flush; samples are matched by tags, the window only bounds the scan.
WINDOW_SLACK_MS = 60_000

StepKey = tuple[str, str, str, int, int]  # Step.run_key
# The staleness checker runs as a k6 scenario of its own (so its requests stay
# out of the step's latency and drops): its samples carry the step's arm,
# phase and rate but not the step's scenario tag.
ArmKey = tuple[str, str, int, int]
STALE_TAGS = ("arm", "phase", "rate", "repeat")
# k6's VU gauges carry the test-wide tags only (no scenario): keyed as the checker's.
VU_TAGS = STALE_TAGS


def step_from_record(record: dict[str, Any]) -> Step:
    return Step(
        record["scenario"],
        record["arm"],
        record["phase"],
        int(record["rate"]),
        record["duration_s"],
        repeat=int(record.get("repeat", 1)),
        read_rate=int(record.get("read_rate", 0)),
    )


def _repeat(tags: dict[str, str]) -> int:
    """The repeat tag; samples of runs made before it existed are the first run."""
    return int(tags.get("repeat") or 1)


def _key(tags: dict[str, str]) -> StepKey | None:
    try:
        return (tags["scenario"], tags["arm"], tags["phase"], int(tags["rate"]), _repeat(tags))
    except (KeyError, ValueError):
        return None


def _where(run_id: str, records: list[dict[str, Any]]) -> str:
    start_ms = int(min(r["start"] for r in records) * 1000) - WINDOW_SLACK_MS
    end_ms = int(max(r["end"] for r in records) * 1000) + WINDOW_SLACK_MS
    return f'"run_id" = {quote_literal(run_id)} AND time >= {start_ms}ms AND time <= {end_ms}ms'


def _latency(row: dict[str, Any]) -> Latency:
    return Latency(float(row["p50"]), float(row["p95"]), float(row["p99"]), int(row["n"]))


def _sums(series: list[Series]) -> dict[StepKey, float]:
    sums: dict[StepKey, float] = {}
    for one in series:
        key = _key(one.tags)
        if key is not None and one.values:
            sums[key] = sums.get(key, 0.0) + float(one.rows()[0]["sum"] or 0)
    return sums


def influx_figures(influx: Influx, run_id: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    where = _where(run_id, records)
    # Latency of the answered requests: a shed request's fast 503 or a timeout is
    # not a fast or slow answer, it is a failure, and the drop rate counts it.
    answered = f"{where} AND \"expected_response\" = 'true'"
    group = ", ".join(f'"{tag}"' for tag in STEP_TAGS)
    percentiles = (
        'percentile("value", 50) AS p50, percentile("value", 95) AS p95, '
        'percentile("value", 99) AS p99, count("value") AS n'
    )
    statements = ";".join(
        [
            f'SELECT {percentiles} FROM "http_req_duration" WHERE {answered} GROUP BY {group}',
            f'SELECT {percentiles} FROM "http_req_duration" WHERE {answered} '
            f'GROUP BY {group}, "name"',
            f'SELECT sum("value") FROM "iterations" WHERE {where} GROUP BY {group}',
            f'SELECT sum("value") FROM "dropped_iterations" WHERE {where} GROUP BY {group}',
            f'SELECT sum("value") FROM "failed_iterations" WHERE {where} GROUP BY {group}',
        ]
    )
    overall, by_name, iterations, dropped, failed = influx.query(statements)
    latency: dict[StepKey, Latency] = {}
    for one in overall:
        key = _key(one.tags)
        if key is not None and one.values:
            latency[key] = _latency(one.rows()[0])
    names: dict[StepKey, dict[str, Latency]] = {}
    for one in by_name:
        key = _key(one.tags)
        if key is not None and one.values:
            names.setdefault(key, {})[one.tags.get("name", "")] = _latency(one.rows()[0])
    return {
        "latency": latency,
        "by_name": names,
        "iterations": _sums(iterations),
        "dropped": _sums(dropped),
        "failed": _sums(failed),
    }


def _arm_key(tags: dict[str, str]) -> ArmKey | None:
    try:
        return (tags["arm"], tags["phase"], int(tags["rate"]), _repeat(tags))
    except (KeyError, ValueError):
        return None


def vu_figures(
    influx: Influx, run_id: str, records: list[dict[str, Any]]
) -> dict[ArmKey, dict[str, float]]:
    """Per step: the most VUs busy at once (k6's `vus`) and started (`vus_max`)."""
    where = _where(run_id, records)
    group = ", ".join(f'"{tag}"' for tag in VU_TAGS)
    busy, started = influx.query(
        f'SELECT max("value") FROM "vus" WHERE {where} GROUP BY {group};'
        f'SELECT max("value") FROM "vus_max" WHERE {where} GROUP BY {group}'
    )
    found: dict[ArmKey, dict[str, float]] = {}
    for name, series in (("peak", busy), ("allocated", started)):
        for one in series:
            key = _arm_key(one.tags)
            if key is not None and one.values and one.rows()[0]["max"] is not None:
                found.setdefault(key, {})[name] = float(one.rows()[0]["max"])
    return found


def stale_figures(influx: Influx, run_id: str, records: list[dict[str, Any]]) -> dict:
    """Per (arm, phase, rate): the checker's reads (one stale_reads sample each,
    1 when stale) and its reads that got no usable answer."""
    where = _where(run_id, records)
    group = ", ".join(f'"{tag}"' for tag in STALE_TAGS)
    checked, errors = influx.query(
        f'SELECT sum("value") AS stale, count("value") AS n FROM "stale_reads" '
        f"WHERE {where} GROUP BY {group};"
        f'SELECT sum("value") FROM "stale_check_errors" WHERE {where} GROUP BY {group}'
    )
    found: dict[ArmKey, StaleCounts] = {}
    for one in checked:
        key = _arm_key(one.tags)
        if key is not None and one.values:
            row = one.rows()[0]
            found[key] = StaleCounts(reads=int(row["n"] or 0), stale=int(row["stale"] or 0))
    for one in errors:
        key = _arm_key(one.tags)
        if key is not None and one.values:
            counts = found.setdefault(key, StaleCounts(0, 0))
            counts.errors = int(one.rows()[0]["sum"] or 0)
    return found


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


def compute_beside(step: Step, figures: dict[str, Any]) -> StepResult | None:
    """interference: the compute requests that ran beside a step's reads, from
    the samples of their own k6 scenario; None at compute rate 0 (reads alone)."""
    if step.scenario != interference.SCENARIO or step.rate == 0:
        return None
    beside = Step(
        interference.COMPUTE_SCENARIO,
        step.arm,
        step.phase,
        step.rate,
        step.duration_s,
        repeat=step.repeat,
    )
    key = beside.run_key
    return StepResult(
        step=beside,
        latency=figures["latency"].get(key),
        iterations=int(figures["iterations"].get(key, 0)),
        failed=int(figures["failed"].get(key, 0)),
        dropped=int(figures["dropped"].get(key, 0)),
        cache=None,
    )


def _summary_latency(figures: dict[str, Any]) -> Latency | None:
    """The latency of a summary's figures (the step's, or one kind's); None
    when no request was answered."""
    if figures.get("p95") is None:
        return None
    return Latency(
        float(figures.get("p50") or 0.0),
        float(figures["p95"]),
        float(figures.get("p99") or 0.0),
        int(figures.get("requests") or 0),
    )


def summary_result(record: dict[str, Any], cache: CacheCounts | None) -> StepResult:
    """A step that ran without an output, from its summary (K6Summary.step_figures):
    latency, failures, drops and VUs over the whole step."""
    summary = record.get("summary") or {}
    stale = summary.get("stale")
    by_name = {name: _summary_latency(one) for name, one in (summary.get("by_name") or {}).items()}
    return StepResult(
        step=step_from_record(record),
        latency=_summary_latency(summary),
        iterations=int(summary.get("iterations") or 0),
        failed=int(summary.get("failed") or 0),
        dropped=int(summary.get("dropped") or 0),
        cache=cache,
        by_name={name: latency for name, latency in by_name.items() if latency is not None},
        cost=step_cost(record.get("probe")),
        stale=None if stale is None else StaleCounts(**stale),
        loadgen=loadgen_of(record, summary.get("vus_peak"), summary.get("vus_allocated")),
    )


def _step_cache(prom: Prometheus, record: dict[str, Any]) -> CacheCounts | None:
    if record.get("prom_start") is None or record.get("prom_end") is None:
        return None
    return cache_counts(prom, record["prom_start"], record["prom_end"])


def collect(
    influx: Influx, prom: Prometheus, run_id: str, records: list[dict[str, Any]]
) -> list[StepResult]:
    """Results of the steps that ran to their end (interrupted ones are left out)."""
    done = [r for r in records if r.get("completed")]
    if not done:
        return []
    sent = [r for r in done if "summary" not in r]  # the steps whose samples are in InfluxDB
    figures = influx_figures(influx, run_id, sent) if sent else {}
    mixed = [r for r in sent if r["scenario"] == "mixed"]
    stale = stale_figures(influx, run_id, mixed) if mixed else {}
    vus = vu_figures(influx, run_id, sent) if sent else {}
    results = []
    for record in done:
        cache = _step_cache(prom, record)
        if "summary" in record:
            results.append(summary_result(record, cache))
            continue
        step = step_from_record(record)
        key = step.run_key
        arm_key = (step.arm, step.phase, step.rate, step.repeat)
        results.append(
            StepResult(
                step=step,
                latency=figures["latency"].get(key),
                iterations=int(figures["iterations"].get(key, 0)),
                failed=int(figures["failed"].get(key, 0)),
                dropped=int(figures["dropped"].get(key, 0)),
                cache=cache,
                by_name=figures["by_name"].get(key, {}),
                cost=step_cost(record.get("probe")),
                stale=stale.get(arm_key) if step.scenario == "mixed" else None,
                loadgen=loadgen_of(
                    record, vus.get(arm_key, {}).get("peak"), vus.get(arm_key, {}).get("allocated")
                ),
                compute=compute_beside(step, figures),
            )
        )
    return results
