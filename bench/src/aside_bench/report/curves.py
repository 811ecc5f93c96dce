"""The report's miss-ratio section: measured Redis hit rates against the simulated policies."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aside_bench.curve.points import MeasuredPoint, RateCurve
from aside_bench.report.doc import Doc
from aside_bench.report.tables import Column, Table, column_table, fmt_pct

MIB = 1024 * 1024


def _mib(value: int | None, none: str = "stack's own") -> str:
    return none if value is None else f"{value / MIB:.2f}"


# A measured point this close to the simulated LRU at its size needs no cause.
EXPLAINED_GAP_POINTS = 3.0


def gap_points(point: MeasuredPoint) -> float | None:
    """Measured hit rate minus the simulated LRU's at the same keys, in points."""
    lru = point.simulated.get("LRU")
    return None if lru is None else (point.hit_rate - lru) * 100


def gap_cause(point: MeasuredPoint) -> str:
    """Why a measured point lies off the simulated LRU, each cause counted."""
    gap = gap_points(point)
    if gap is None:
        return "held no key: nothing to simulate"
    if round(abs(gap), 1) <= EXPLAINED_GAP_POINTS:  # as the table shows it
        return f"within {EXPLAINED_GAP_POINTS:g} points"
    causes = []
    if point.maxmemory and point.clients_memory and point.clients_memory * 2 > point.maxmemory:
        causes.append(
            f"its clients' buffers took {point.clients_memory / MIB:.2f} of its "
            f"{point.maxmemory / MIB:.2f} MiB, so keys were evicted as they were written"
        )
    if point.evicted:
        causes.append(
            f"{point.evicted:,} evicted by Redis's sampled LRU (the oldest of a few keys "
            "sampled, not the exact LRU)"
        )
    if point.expired:
        causes.append(f"{point.expired:,} expired by TTL (the simulation keeps every key)")
    if point.failed:
        causes.append(f"{point.failed:,} requests failed (in the stream, maybe never cached)")
    if not causes:
        return "no counted cause: no eviction, expiry or failure"
    return "; ".join(causes)


def _simulated_at(point: MeasuredPoint) -> str:
    if point.simulated_keys is None:
        return "n/a"
    if point.never_full:
        return f"{point.simulated_keys:,} (never full: every key)"
    return f"{point.simulated_keys:,}"


def _gap(point: MeasuredPoint) -> str:
    gap = gap_points(point)
    return "n/a" if gap is None else f"{gap:+.1f}"


def _simulated(policy: str) -> Callable[[MeasuredPoint], str]:
    return lambda point: fmt_pct(point.simulated.get(policy))


MEASURED_COLUMNS: tuple[Column[MeasuredPoint], ...] = (
    ("arm", lambda point: point.arm),
    ("maxmemory MiB", lambda point: _mib(point.maxmemory)),
    ("keys held (median)", lambda point: f"{point.keys:,}"),
    ("used MiB at the end", lambda point: _mib(point.used_memory)),
    ("clients' MiB", lambda point: _mib(point.clients_memory, "n/a")),
    ("evicted", lambda point: f"{point.evicted:,}"),
    ("expired", lambda point: f"{point.expired:,}"),
    ("failed", lambda point: f"{point.failed:,}"),
    ("simulated at keys", _simulated_at),
    ("measured hit", lambda point: fmt_pct(point.hit_rate)),
    ("LRU", _simulated("LRU")),
    ("gap (points)", _gap),
    *((policy, _simulated(policy)) for policy in ("LFU", "S3-FIFO", "SIEVE", "Belady")),
    ("cause of a gap", gap_cause),
)


EXPLANATION = (
    "Each warm step's exact key stream (its cold step's requests first, which only fill "
    "the cache, then its own; the requests the driver dropped never left it and are not "
    "in it) replayed through libCacheSim's caches of the size the cache held: as many "
    "keys as Redis held during the step (the median of a count a second; its clients' "
    "buffers share maxmemory with the keys, so a small bound holds fewer keys under more "
    "connections), or, when Redis evicted nothing over the two steps, every key the stream "
    "asked for (a cache that never filled held each key it was sent). Every measured arm "
    "is a point, one that held few keys too. A point more than "
    f"{EXPLAINED_GAP_POINTS:g} points off the simulated LRU names its measured causes, "
    "each counted over the two steps: Redis's allkeys-lru evicts the least recently used "
    "of a few sampled keys (maxmemory-samples, 5 by default), not the exact LRU; a key "
    "that expired by TTL (cold and warm steps shorter than the TTL expire none) is a miss "
    "the simulation does not have; a failed request is in the stream but may never have "
    "been cached. Belady evicts the key asked for furthest in the future, the bound no "
    "policy reaches."
)


def curve_section(doc: Doc, curves: list[RateCurve], out_dir: Path, caption: str) -> list[Table]:
    title = "Redis hit rate against the simulated policies at the keys it held, {}/s"
    tables = [column_table(title.format(c.rate), MEASURED_COLUMNS, c.measured) for c in curves]
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
