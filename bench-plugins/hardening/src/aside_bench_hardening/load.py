"""The cached reads beside a hardening experiment, and their figures per window."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from aside_bench.load.run import LoadRun
from aside_bench.load.samples import SamplesError, compress, number, sample_lines
from aside_bench.records.tierstats import nearest_rank
from aside_bench.stack.prepare import StackError

from aside_bench_hardening.checks import Figures

READ_TIMEOUT_S = 10
# The first second of reads opens the driver's connections: left out of `before`.
WARMUP_S = 1.0
# A window's latency quantiles (nearest rank over its answered reads).
QUANTILES = {"p50_ms": 50, "p95_ms": 95, "p99_ms": 99}

# One window of the load: [start, end), epoch seconds.
Window = tuple[float, float]


def load_run(
    run_id: str,
    phase: str,
    rate: int,
    pool: int,
    duration_s: int,
    data_dir: Path,
    samples_path: Path,
    production: bool = False,
) -> LoadRun:
    """The `read` scenario through L2 on hot emails, the pool's connections opened before the first
    read (CONNS: the reuse check); production refuses ?cache=: chaos, no writes nor id reads."""
    # Every read a hot email (COLD_SAMPLE only keeps the cold list small).
    extra = {"HOT_SHARE": "1", "COLD_SAMPLE": "1", "CONNS": str(pool)}
    if production:
        extra |= {"WRITE_SHARE": "0", "USER_SHARE": "0", "USER_PREFIX": run_id, "ID_SAMPLE": "0"}
    else:
        extra["CACHE"] = "l2"
    return LoadRun(
        scenario="chaos" if production else "read",
        run_id=run_id,
        arm="cache",
        phase=phase,
        rate=rate,
        duration_s=duration_s,
        pool=pool,
        timeout_s=READ_TIMEOUT_S,
        data_dir=data_dir,
        extra=extra,
        samples_path=samples_path,
    )


def check_ttl(ttl_s: int, duration_s: int) -> None:
    """Hot keys must outlive the load: one expiring mid-experiment would be a miss of its own."""
    if duration_s + 10 >= ttl_s:
        raise StackError(
            f"the experiment's load ({duration_s} s) would outlive the cache TTL ({ttl_s} s); "
            "use a shorter --pre/--post or fewer --emails"
        )


def windows_around(events: dict[str, float], what: str) -> dict[str, Window]:
    start, end = events[f"{what}_start"], events[f"{what}_end"]
    return {
        "before": (events["load_start"] + WARMUP_S, start),
        "during": (start, end),
        "after": (end, events["load_end"]),
    }


def sample_windows(
    lines: Iterable[str], source: str, windows: dict[str, Window]
) -> dict[str, Figures]:
    """Per window [start, end) of sending instants: read latency, drops, failures, new conns."""
    answered: dict[str, list[float]] = {name: [] for name in windows}
    counts = {name: {"dropped": 0, "failed": 0, "new_connections": 0} for name in windows}
    for where, line in sample_lines(lines, source):
        sent = number(line, "t", where)
        name = next((n for n, (lo, hi) in windows.items() if lo <= sent < hi), None)
        if name is None:
            continue
        if line.get("dropped"):
            counts[name]["dropped"] += 1
            continue
        ok = line.get("ok")
        if not isinstance(ok, bool):
            raise SamplesError(f"{where}: 'ok' is {ok!r}, not true or false")
        if ok:
            answered[name].append(number(line, "ms", where))
        else:
            counts[name]["failed"] += 1
        if line.get("new_conn") is True:
            counts[name]["new_connections"] += 1
    return {
        name: {
            "start": start,
            "end": end,
            "seconds": round(end - start, 3),
            "reads": len(answered[name]),
            **{key: nearest_rank(answered[name], q) for key, q in QUANTILES.items()},
            "max_ms": max(answered[name], default=None),
            **counts[name],
        }
        for name, (start, end) in windows.items()
    }


def read_windows(run: LoadRun, windows: dict[str, Window]) -> dict[str, Figures]:
    """The reads' figures per window, from the samples file, which is then gzipped."""
    assert run.samples_path is not None
    with run.samples_path.open() as handle:
        found = sample_windows(handle, run.samples_path.name, windows)
    compress(run.samples_path)
    return found
