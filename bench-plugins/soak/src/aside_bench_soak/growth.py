"""The soak's figures (pure): each service's and idempotency_keys' warm-up against end, flags."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Self

from aside_bench.report.tables import Table, fmt_num
from aside_bench_suite.samples import LoadTallies, fmt_mib

MEMORY_GROWTH_FLAG = 0.10
# idempotency_keys' growth allowed once the warm-up covers a key's life: a purge per create, flat.
KEY_GROWTH_FLAG = 0.10
# The warm-up and end values are medians over this share of the run (three samples at least).
WINDOW_SHARE = 0.05


class _Record:
    @classmethod
    def of(cls, row: Mapping[str, object]) -> Self:
        """The record as report.json holds it (an older one's missing figures as defaults)."""
        return cls(**{f.name: row[f.name] for f in fields(cls) if f.name in row})  # type: ignore[arg-type]


@dataclass(frozen=True)
class SoakSample(_Record):
    """A sample's instant, /proc's figures per service (None: gone), idempotency_keys' rows."""

    t: float
    procs: dict[str, dict[str, float] | None]
    idempotency_keys: int | None = None
    idempotency_keys_overdue: int | None = None


@dataclass
class ProcessGrowth(_Record):
    """A service's memory and descriptors, warm-up against end: report.json's "processes"."""

    service: str
    processes_warm: float | None = None
    processes_end: float | None = None
    rss_warm_kib: float | None = None
    rss_end_kib: float | None = None
    rss_growth: float | None = None
    rss_max_kib: float | None = None
    anon_warm_kib: float | None = None
    anon_end_kib: float | None = None
    anon_growth: float | None = None
    anon_per_process_growth: float | None = None
    sockets_warm: float | None = None
    sockets_end: float | None = None
    fds_warm: float | None = None
    fds_end: float | None = None
    fds_growth: float | None = None
    fds_max: float | None = None
    flags: list[str] = field(default_factory=list)


@dataclass
class KeyGrowth(_Record):
    """idempotency_keys' rows, warm-up against end: report.json's "idempotency_keys"."""

    lifetime_s: float | None
    create_rate: float
    expected_rows: float | None = None
    missed_samples: int = 0
    judged: bool = True
    warm: float | None = None
    end: float | None = None
    growth: float | None = None
    min: float | None = None
    max: float | None = None
    overdue_max: int | None = None
    overdue_after_s: float | None = None
    flags: list[str] = field(default_factory=list)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _ratio(warm: float | None, end: float | None) -> float | None:
    return (end - warm) / warm if warm and end is not None else None


def growth_table_rows(
    samples: list[SoakSample], services: list[str], warmup_s: float, duration_s: float
) -> list[ProcessGrowth]:
    if not samples:
        return []
    warm, end, after = _windows(samples, warmup_s, duration_s)
    rows = []
    for service in services:

        def values(chosen: list[SoakSample], field: str, name: str = service) -> list[float]:
            return [r[field] for s in chosen if (r := s.procs.get(name)) and field in r]

        def warm_end(field: str) -> tuple[float | None, float | None]:
            return _median(values(warm, field)), _median(values(end, field))

        row = ProcessGrowth(service)
        row.processes_warm, row.processes_end = warm_end("processes")
        row.rss_warm_kib, row.rss_end_kib = warm_end("rss_kib")
        row.anon_warm_kib, row.anon_end_kib = warm_end("anon_kib")
        row.sockets_warm, row.sockets_end = warm_end("sockets")
        row.fds_warm, row.fds_end = warm_end("fds")
        row.rss_max_kib = max(values(after, "rss_kib"), default=None)
        row.fds_max = max(values(after, "fds"), default=None)
        row.rss_growth = _ratio(row.rss_warm_kib, row.rss_end_kib)
        row.anon_growth = _ratio(row.anon_warm_kib, row.anon_end_kib)
        # Private memory per process: PostgreSQL's tree gains a backend when a pool grows.
        row.anon_per_process_growth = _ratio(
            _median(_per_process(warm, service)), _median(_per_process(end, service))
        )
        if row.fds_warm is not None and row.fds_end is not None:
            row.fds_growth = row.fds_end - row.fds_warm
        for what, growth in (("memory", row.rss_growth), ("private memory", row.anon_growth)):
            if growth is not None and growth > MEMORY_GROWTH_FLAG:
                row.flags.append(f"{what} +{growth:.0%}")
        if row.fds_growth is not None and row.fds_growth > 0:
            row.flags.append(f"fds +{row.fds_growth:g}")
        gone = sum(1 for s in samples if s.procs.get(service) is None)
        if gone:
            row.flags.append(f"gone in {gone} samples")
        rows.append(row)
    return rows


def _windows(
    samples: list[SoakSample], warmup_s: float, duration_s: float, at_least_s: float = 0
) -> tuple[list[SoakSample], list[SoakSample], list[SoakSample]]:
    """Samples right after the warm-up, at the end (WINDOW_SHARE of the run, three samples and
    at_least_s at least, half the rest at most), and all after the warm-up."""
    t0, t_end = samples[0].t, samples[-1].t
    step = (t_end - t0) / max(len(samples) - 1, 1)
    window = max(3 * step, WINDOW_SHARE * duration_s)
    window = max(window, min(at_least_s, (t_end - t0 - warmup_s) / 2))
    warm = [s for s in samples if warmup_s <= s.t - t0 <= warmup_s + window]
    end = [s for s in samples if s.t >= t_end - window]
    after = [s for s in samples if s.t - t0 >= warmup_s]
    return warm, end, after


def key_table_row(
    samples: list[SoakSample],
    warmup_s: float,
    duration_s: float,
    lifetime_s: float | None,
    create_rate: float,
) -> KeyGrowth:
    """Medians over a key's lifetime each, so the purge's sawtooth averages out; growth judged
    once the warm-up covers it (before, the table fills by design); an overdue key always."""
    row = KeyGrowth(
        lifetime_s,
        create_rate,
        expected_rows=None if lifetime_s is None else create_rate * lifetime_s,
        missed_samples=sum(1 for s in samples if s.idempotency_keys is None),
        judged=lifetime_s is None or warmup_s >= lifetime_s,
    )
    if not samples:
        return row
    warm, end, after = _windows(samples, warmup_s, duration_s, lifetime_s or 0)

    def known(chosen: list[SoakSample], overdue: bool = False) -> list[int]:
        counts = (s.idempotency_keys_overdue if overdue else s.idempotency_keys for s in chosen)
        return [n for n in counts if n is not None]

    row.warm, row.end = _median(known(warm)), _median(known(end))
    row.min, row.max = min(known(after), default=None), max(known(after), default=None)
    if row.warm is not None and row.end is not None:
        # One row more than none is not growth worth a ratio.
        row.growth = (row.end - row.warm) / max(row.warm, 1)
    row.overdue_max = max(known(after, overdue=True), default=None)
    if row.judged and row.growth is not None and row.growth > KEY_GROWTH_FLAG:
        row.flags.append(f"idempotency_keys +{row.growth:.0%}")
    if row.overdue_max:
        row.flags.append(f"{row.overdue_max} keys overdue")
    if row.missed_samples:
        row.flags.append(f"count failed in {row.missed_samples} samples")
    return row


def key_table(row: KeyGrowth) -> Table:
    headers = ["rows after warm-up", "rows at the end", "growth", "min .. max after warm-up",
               "key lifetime s (TTL + purge interval)", "expected rows (creates/s x lifetime)",
               "overdue keys, max", "flag"]  # fmt: skip
    flag = ", ".join(row.flags) or "-"
    if not row.judged:
        why = f"the warm-up is shorter than the key lifetime ({row.lifetime_s:g} s)"
        flag = f"growth not judged: {why}" + (f"; {flag}" if row.flags else "")
    lifetime = _num(row.lifetime_s, missing="unknown")
    cells = [_num(row.warm), _num(row.end), _pct(row.growth), f"{_num(row.min)} .. {_num(row.max)}"]
    cells += [lifetime, fmt_num(row.expected_rows, 0), _num(row.overdue_max), flag]
    return Table("Rows of idempotency_keys (the core's stored keys)", headers, [cells])


def key_counts_over_time(
    samples: list[SoakSample], points: int = 12
) -> list[tuple[int, int | None]]:
    if not samples:
        return []
    t0 = samples[0].t
    chosen = samples[:: max(len(samples) // points, 1)]
    if chosen[-1] is not samples[-1]:
        chosen.append(samples[-1])
    return [(round(s.t - t0), s.idempotency_keys) for s in chosen]


def _per_process(chosen: list[SoakSample], service: str) -> list[float]:
    readings = [r for s in chosen if (r := s.procs.get(service))]
    return [r["anon_kib"] / r["processes"] for r in readings if "anon_kib" in r]


def _fd_growth(row: ProcessGrowth) -> str:
    if row.fds_growth is None:
        return "n/a"
    text = f"{row.fds_growth:+g}"
    warm, end = row.sockets_warm, row.sockets_end
    if row.fds_growth and warm is not None and end is not None:
        text += f" ({end - warm:+g} sockets)"
    return text


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:+.1f}%"


def _num(value: float | None, missing: str = "n/a") -> str:
    return missing if value is None else f"{value:g}"


def growth_table(rows: list[ProcessGrowth]) -> Table:
    headers = ["process", "procs", "RSS warm-up MiB", "RSS end MiB", "RSS growth", "RSS max MiB",
               "private (RssAnon) growth", "private per process", "fds warm-up", "fds end",
               "fd growth", "fds max", "flag"]  # fmt: skip
    table_rows = [
        [row.service, f"{_num(row.processes_warm)} -> {_num(row.processes_end)}",
         fmt_mib(row.rss_warm_kib), fmt_mib(row.rss_end_kib), _pct(row.rss_growth),
         fmt_mib(row.rss_max_kib), _pct(row.anon_growth), _pct(row.anon_per_process_growth),
         _num(row.fds_warm), _num(row.fds_end), _fd_growth(row), _num(row.fds_max),
         ", ".join(row.flags) or "-"]
        for row in rows
    ]  # fmt: skip
    return Table("Memory and file descriptors per process", headers, table_rows)


def load_table(tallies: LoadTallies) -> Table:
    """The load as soak.load_tallies gives it."""
    headers = ["kind", "requests", "2xx", "4xx", "5xx", "no answer", "p95 ms", "max ms"]
    rows = []
    for kind in ("count", "user", "create"):
        counts = [tallies.get(f"{kind}_{cls}", 0) for cls in ("2xx", "4xx", "5xx", "error")]
        latency = tallies.get(f"{kind}_ms") or {}
        p95, top = fmt_num(latency.get("p95")), fmt_num(latency.get("max"), 0)
        rows.append([kind, str(sum(counts)), *map(str, counts), p95, top])
    return Table("The load (the driver's summary)", headers, rows)
