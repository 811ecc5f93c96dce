"""The report's miss-ratio section: the measured Redis hit rate of each arm
against the simulated policies at the keys it held (a table), and the curves
with the measured points on them (a chart per rate)."""

from __future__ import annotations

from pathlib import Path

from aside_bench.curve.points import MeasuredPoint, RateCurve
from aside_bench.report.doc import Doc
from aside_bench.report.tables import Table, fmt_pct

MIB = 1024 * 1024


def _mib(value: int | None) -> str:
    return "stack's own" if value is None else f"{value / MIB:.2f}"


def gap_points(point: MeasuredPoint) -> float | None:
    """Measured hit rate minus the simulated LRU's at the same keys, in points."""
    lru = point.simulated.get("LRU")
    return None if lru is None else (point.hit_rate - lru) * 100


def measured_table(curve: RateCurve) -> Table:
    rows = []
    for point in curve.measured:
        gap = gap_points(point)
        rows.append(
            [
                point.arm,
                _mib(point.maxmemory),
                f"{point.keys:,}",
                f"{point.used_memory / MIB:.2f}",
                "n/a" if point.clients_memory is None else f"{point.clients_memory / MIB:.2f}",
                f"{point.evicted:,}",
                fmt_pct(point.hit_rate),
                fmt_pct(point.simulated.get("LRU")),
                "n/a" if gap is None else f"{gap:+.1f}",
                fmt_pct(point.simulated.get("LFU")),
                fmt_pct(point.simulated.get("S3-FIFO")),
                fmt_pct(point.simulated.get("SIEVE")),
                fmt_pct(point.simulated.get("Belady")),
            ]
        )
    return Table(
        f"Redis hit rate against the simulated policies at the keys it held, {curve.rate}/s",
        [
            "arm",
            "maxmemory MiB",
            "keys held (median)",
            "used MiB at the end",
            "clients' MiB",
            "evicted",
            "measured hit",
            "LRU",
            "gap (points)",
            "LFU",
            "S3-FIFO",
            "SIEVE",
            "Belady",
        ],
        rows,
    )


EXPLANATION = (
    "Each warm step's exact key stream (its cold step's requests first, which only fill "
    "the cache, then its own) replayed through libCacheSim's caches of as many keys as "
    "Redis held during the step (the median of a count a second; its clients' buffers "
    "share maxmemory with the keys, so a small bound holds fewer keys under more "
    "connections). Redis's allkeys-lru evicts the least recently used of a few sampled "
    "keys (maxmemory-samples, 5 by default), not the exact LRU, and counts a hit per "
    "request while the gateway's single-flight lets concurrent misses of one key share a "
    "fill: both move the measured point off the simulated LRU. Belady evicts the key "
    "asked for furthest in the future, the bound no policy reaches."
)


def curve_section(doc: Doc, curves: list[RateCurve], out_dir: Path, caption: str) -> list[Table]:
    tables = [measured_table(curve) for curve in curves]
    if not curves:
        return tables
    from aside_bench.report import charts  # matplotlib is slow to import: only when drawing

    doc.h(2, "Hit rate against cache size")
    doc.p(EXPLANATION)
    for curve, table in zip(curves, tables, strict=True):
        doc.table(table)
        path = charts.curve_chart(curve, out_dir / f"hit_rate_curve_{curve.rate}.png", caption)
        doc.image(path, f"hit rate against cache size at {curve.rate}/s")
    return tables
