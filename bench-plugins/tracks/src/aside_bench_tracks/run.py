"""The `tracks` scenario's work beside the sweep: the seeded tracks checked, a warm step's
fill, and the report's bytes on the wire, Redis' memory, CPU per request, p95 by size."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests
from aside_bench.plan.steps import Step
from aside_bench.records.results import StepResult
from aside_bench.records.runfile import RunRecord
from aside_bench.records.steprecord import StepRecord
from aside_bench.report import sweep as report
from aside_bench.report.tables import (
    MISSING,
    Table,
    fmt_ms,
    fmt_num,
    series_of,
    series_order,
    step_cells,
)
from aside_bench.stack.config import Settings
from aside_bench.stack.prepare import StackError, connect, flush_cache
from aside_bench.stack.sources import Prometheus, SourceError

from aside_bench_tracks import plan as trackplan

TRACKS_FILE = "tracks.json"
REDIS_MEMORY = "max(redis_memory_used_bytes)"
WARM_WORKERS = 4


# The tracks as run.json's params hold them: how many, their bytes, how many per size class.
TracksSummary = dict[str, int | dict[str, int]]


def load_tracks(data_dir: Path) -> list[dict[str, int]]:
    try:
        tracks = json.loads((data_dir / TRACKS_FILE).read_text())["tracks"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise StackError(
            f"cannot read {data_dir / TRACKS_FILE} ({error}); run `make seed`"
        ) from None
    if not tracks:
        raise StackError(f"{data_dir / TRACKS_FILE} lists no track; `make seed` with TRACKS > 0")
    return tracks


def check_tracks(settings: Settings, data_dir: Path) -> TracksSummary:
    """The tracks table matches the seeder's file; a summary for run.json."""
    tracks = load_tracks(data_dir)
    with connect(settings) as conn:
        row = conn.execute("SELECT count(*) FROM tracks").fetchone()
    if row is None or row[0] != len(tracks):
        raise StackError(
            f"the tracks table has {row[0] if row else 0} rows but {TRACKS_FILE} lists "
            f"{len(tracks)}; run `make seed` again"
        )
    classes = [0] * len(trackplan.SIZE_LABELS)
    for track in tracks:
        classes[trackplan.size_class(track["bytes"])] += 1
    return {
        "count": len(tracks),
        "bytes": sum(t["bytes"] for t in tracks),
        "per_size_class": dict(zip(trackplan.SIZE_LABELS, classes, strict=True)),
    }


def warm_tracks(settings: Settings, data_dir: Path, step: Step) -> dict[str, int | float | str]:
    """Flush, read every track with the arm's parameters, then again for the share of hits."""
    flush_cache(settings)
    ids = [t["id"] for t in load_tracks(data_dir)]
    query = trackplan.query(step.arm)
    tracks = f"{settings.gateway_url}/api/v1/tracks"

    def read(chunk: list[int]) -> list[str]:
        with requests.Session() as session:
            answers = (session.get(f"{tracks}/{i}?{query}", timeout=60) for i in chunk)
            return [answer.headers.get("X-Cache", "") for answer in answers]

    chunks = [ids[i::WARM_WORKERS] for i in range(WARM_WORKERS)]
    try:
        with ThreadPoolExecutor(WARM_WORKERS) as pool:
            list(pool.map(read, chunks))
            answers = [a for chunk in pool.map(read, chunks) for a in chunk]
    except requests.RequestException as error:
        raise StackError(f"warming the tracks through the gateway failed: {error}") from error
    share = round(answers.count("HIT") / len(answers), 4)
    return {
        "keys": len(ids),
        "hit_share_after": share,
        "prep": f"tracks warmed: {share:.0%} hits on a re-read",
    }


# ---- the report's extra figures ------------------------------------------------------


def _key(record: StepRecord) -> tuple[str, str, int]:
    return (record.arm, record.phase, int(record.rate))


def wire_bytes(records: list[StepRecord]) -> dict[tuple, float]:
    """Bytes the driver received per step (answers' heads and bodies), by (arm, phase, rate)."""
    received = ((r, r.figures.get("bytes_received")) for r in records if r.completed)
    return {_key(r): float(bytes_) for r, bytes_ in received if bytes_ is not None}


def redis_memory(prom: Prometheus, records: list[StepRecord]) -> dict[tuple, float | None]:
    """Redis' used memory (redis-exporter) right after each step, by (arm, phase, rate)."""
    ended = (r for r in records if r.completed and r.prom_end)
    return {_key(r): prom.scalar(REDIS_MEMORY, r.prom_end) for r in ended}


def tracks_table(
    results: list[StepResult], wire: dict[tuple, float], memory: dict[tuple, float | None]
) -> Table:
    headers = ["series", "target /s", "p50 ms", "p95 ms", "p99 ms", "achieved /s", "drop rate",
               "hit rate", "MB/s on the wire", "Redis MiB", "gateway CPU ms/req"]  # fmt: skip
    rows = []
    for arm, phase in series_order(results):
        for result in series_of(results, arm, phase):
            key = (arm, phase, result.step.rate)
            cost = result.cost
            received, used = wire.get(key), memory.get(key)
            rows.append(
                [
                    result.step.label,
                    str(result.step.rate),
                    *step_cells(result),
                    fmt_num(
                        None if received is None else received / result.step.duration_s / 1e6, 2
                    ),
                    MISSING if used is None else f"{used / 2**20:.1f}",
                    fmt_num(cost.cpu_ms_per_request if cost else None, 2),
                ]
            )
    return Table("tracks: every step", headers, rows)


def size_table(results: list[StepResult]) -> Table:
    """p95 by the size class of the track read, per step."""
    headers = ["series", "target /s"] + [f"p95 ms {label}" for label in trackplan.SIZE_LABELS]
    rows = []
    for result in results:
        by_class = {trackplan.class_of_name(name): lat for name, lat in result.by_name.items()}
        cells = [
            fmt_ms(by_class[i].p95) if i in by_class else MISSING
            for i in range(len(trackplan.SIZE_LABELS))
        ]
        rows.append([result.step.label, str(result.step.rate), *cells])
    return Table("tracks: p95 by value size (the whole track's JSON)", headers, rows)


DEFINITIONS = [
    "arms: nocache reads PostgreSQL every time (cache=off); cache stores every track as it "
    "is (large=raw, what the slow app did); cache-compressed stores tracks above "
    "CACHE_LARGE_VALUE_BYTES as zstd (or CACHE_CODEC) frames; cache-simplified answers and "
    "stores large tracks simplified at CACHE_SIMPLIFY_TOLERANCE; cache-skip stores a "
    "too-large marker instead, so large tracks are read from PostgreSQL",
    "MB/s on the wire: the bytes the driver received over the step / its duration (the "
    "answers' heads and bodies)",
    "Redis MiB: redis_memory_used_bytes (redis-exporter) at the first scrape after the step",
    "p95 by value size: the reads of the tracks of each size class (the request's name "
    "in the driver's summary, `track N`)",
]


def writer(settings: Settings) -> Callable[[RunRecord, list[StepResult], Path], list[Table]]:
    """The report of a tracks run: the sweep's, then the tracks' figures and chart."""

    def write(run: RunRecord, results: list[StepResult], out_dir: Path) -> list[Table]:
        tables = report.write_sweep(run, results, out_dir)
        if not results:
            return tables
        try:
            wire = wire_bytes(run.steps)
            memory = redis_memory(Prometheus(settings.prometheus_url), run.steps)
        except SourceError as error:
            print(f"aside-bench: tracks figures unavailable: {error}")
            wire, memory = {}, {}
        extra = [tracks_table(results, wire, memory), size_table(results)]
        from aside_bench_tracks.chart import p95_by_size_chart  # matplotlib only when drawing

        chart = p95_by_size_chart(results, out_dir / "p95_by_size.png", report.caption(run))
        lines = ["", "## Tracks", "", *(t.markdown() for t in extra)]
        lines += ["### How the tracks figures are computed", ""]
        lines += [f"- {d}" for d in DEFINITIONS] + ["", f"![p95 by value size]({chart.name})", ""]
        with (out_dir / "report.md").open("a") as md:
            md.write("\n".join(lines))
        return tables + extra

    return write
