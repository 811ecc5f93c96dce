"""A step sent by several drivers (the Helm chart's Indexed Job), merged from InfluxDB: each
writes a `load_step` point with its counts and latencies as HdrHistograms, which add up
exactly (per-second percentiles would not), and its start, to flag a ramped rate."""

from __future__ import annotations

from dataclasses import dataclass

from aside_bench.report.tables import MISSING, Table, fmt_ms, fmt_pct, fmt_rps
from aside_bench.stack.sources import Influx, quote_literal
from hdrh.histogram import HdrHistogram

MEASUREMENT = "load_step"
STEP_TAGS = ("scenario", "arm", "phase", "rate", "repeat")
COUNTS = ("due", "started", "dropped", "failed", "iterations", "requests")
US_PER_MS = 1000.0
# The most a step's shards may begin apart unflagged: the per-second points' resolution
# (shards given one START_AT begin within milliseconds of it).
START_SPREAD_MS = 1000.0
# A `load_step` point as InfluxDB answers it: tags and fields by name (None: no such column).
StepPoint = dict[str, str | float | None]


@dataclass(frozen=True)
class MergedStep:
    """One scenario of one step, every shard's figures together."""

    key: tuple[str, ...]  # STEP_TAGS' values
    shards: int
    target: float  # requests per second, the shards' sum
    counts: dict[str, int]
    p50: float | None  # ms, answered requests, exact over every shard's
    p95: float | None
    p99: float | None
    p95_from_due: float | None
    missing: tuple[int, ...] = ()  # shard indexes the step was sent with but not found
    # The latest shard's start less the earliest's (ms); None: unknown (no started_ms).
    start_spread_ms: float | None = None
    spread_bound_ms: float = START_SPREAD_MS

    @property
    def spread_too_wide(self) -> bool:
        return self.start_spread_ms is not None and self.start_spread_ms > self.spread_bound_ms

    @property
    def drop_rate(self) -> float | None:
        due = self.counts["due"]
        return (self.counts["dropped"] + self.counts["failed"]) / due if due else None


class ShardsError(ValueError):
    """The points cannot be merged; the message says why."""


def _decoded(encoded: str, what: str) -> HdrHistogram:
    try:
        return HdrHistogram.decode(encoded)
    except Exception as error:  # the library raises bare exceptions on bad input
        raise ShardsError(f"a {what} histogram could not be read: {error}") from None


def _summed(shards: list[StepPoint], column: str, what: str) -> HdrHistogram:
    """Every shard's histogram of `column` added into the first's."""
    first, *rest = (_decoded(str(shard[column]), what) for shard in shards)
    for one in rest:
        first.add(one)
    return first


def _quantile(histogram: HdrHistogram, percentile: float) -> float | None:
    if histogram.get_total_count() == 0:
        return None
    return histogram.get_value_at_percentile(percentile) / US_PER_MS


def _missing(key: tuple[str, ...], shards: list[StepPoint], partial: bool) -> tuple[int, ...]:
    """The shards a step was sent with that sent no point (ShardsError unless `partial`)."""
    present = [int(s.get("shard") or 0) for s in shards]
    label = f"{key[0]} {key[1]} {key[2]} @ {key[3]}/s" + (f" run {key[4]}" if key[4] else "")
    if len(set(present)) < len(present):
        raise ShardsError(f"{label}: a shard sent its step point twice ({sorted(present)})")
    expected = max(int(s.get("shards") or 0) for s in shards)
    missing = tuple(sorted(set(range(expected)) - set(present)))
    if missing and not partial:
        raise ShardsError(
            f"{label}: {len(present)} of its {expected} shards sent a step point; missing "
            f"shard {', '.join(map(str, missing))} (--partial merges what there is, flagged)"
        )
    return missing


def _start_spread(shards: list[StepPoint]) -> float | None:
    starts = [shard.get("started_ms") for shard in shards]
    if any(start is None for start in starts):
        return None
    values = [float(start) for start in starts if start is not None]
    return max(values) - min(values)


def merge(
    points: list[StepPoint], partial: bool = False, spread_bound_ms: float = START_SPREAD_MS
) -> list[MergedStep]:
    """Every step's shards merged (a missing one refused unless `partial`), its start spread
    held against `spread_bound_ms`."""
    groups: dict[tuple[str, ...], list[StepPoint]] = {}
    for point in points:
        key = tuple(str(point.get(tag) or "") for tag in STEP_TAGS)
        groups.setdefault(key, []).append(point)
    merged = []
    for key, shards in groups.items():
        latency = _summed(shards, "hdr", "latency")
        from_due = _summed(shards, "hdr_from_due", "from-due")
        merged.append(
            MergedStep(
                key=key,
                shards=len(shards),
                target=sum(float(s.get("target") or 0) for s in shards),
                counts={name: sum(int(s.get(name) or 0) for s in shards) for name in COUNTS},
                p50=_quantile(latency, 50),
                p95=_quantile(latency, 95),
                p99=_quantile(latency, 99),
                p95_from_due=_quantile(from_due, 95),
                missing=_missing(key, shards, partial),
                start_spread_ms=_start_spread(shards),
                spread_bound_ms=spread_bound_ms,
            )
        )
    return sorted(
        merged, key=lambda m: (m.key[0], m.key[1], m.key[2], int(m.key[3] or 0), m.key[4])
    )


def read_points(influx: Influx, run_id: str) -> list[StepPoint]:
    """Every `load_step` point of a run, tags and fields as one dict each."""
    (series,) = influx.query(
        f'SELECT * FROM "{MEASUREMENT}" WHERE "run_id" = {quote_literal(run_id)}'
    )
    return [row for one in series for row in one.rows()]


HEADERS = [
    "scenario", "arm", "phase", "target /s", "shards", "due", "dropped", "failed",
    "drop rate", "p50 ms", "p95 ms", "p99 ms", "p95 from due ms", "start spread",
]  # fmt: skip


def spread_cell(step: MergedStep) -> str:
    """The shards' start spread, and SPREAD past its bound."""
    if step.start_spread_ms is None:
        return MISSING
    cell = f"{step.start_spread_ms:.0f} ms"
    if step.spread_too_wide:
        cell += f", SPREAD: over {step.spread_bound_ms:.0f} ms"
    return cell


def shards_table(run_id: str, merged: list[MergedStep]) -> Table:
    rows = []
    for step in merged:
        scenario, arm, phase, _rate, repeat = step.key
        rate = fmt_rps(step.target) + (f" (run {repeat})" if repeat not in ("", "1") else "")
        drop = step.drop_rate
        count = str(step.shards)
        if step.missing:
            count += f" of {step.shards + len(step.missing)}, PARTIAL: missing " + ",".join(
                map(str, step.missing)
            )
        rows.append(
            [
                scenario, arm, phase, rate, count, str(step.counts["due"]),
                str(step.counts["dropped"]), str(step.counts["failed"]),
                MISSING if drop is None else fmt_pct(drop), fmt_ms(step.p50), fmt_ms(step.p95),
                fmt_ms(step.p99), fmt_ms(step.p95_from_due), spread_cell(step),
            ]
        )  # fmt: skip
    return Table(f"run {run_id}: every step, its shards merged", HEADERS, rows)
