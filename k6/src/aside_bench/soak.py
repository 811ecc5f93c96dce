"""`aside-bench soak`: a steady mixed load for a long while (10 minutes by
default), sampling the memory (VmRSS) and open file descriptors of every process
of the stack, each summed over its process tree (gunicorn master and workers,
the postmaster and its backends), every few seconds.

For each service the report gives the value after the warm-up, the value at the
end, the growth between them and the maximum, and flags memory growth above
MEMORY_GROWTH_FLAG and any growth of descriptors. The warm-up and end values are
medians over a window of samples, so one sample taken while a backend forks
does not decide anything. The load is k6/scripts/chaos.js without faults (reads
by id and by hot email, idempotent creates), reusing connections like a client
would; k6 keeps only its summary (handleSummary), so no output grows during
the run. The users it creates are removed afterwards.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import redis

from . import procs
from .charts import _finish, _log_y, plt
from .config import Settings
from .k6run import K6Run, K6Summary, start_k6
from .machine import describe, summary
from .prepare import StackError
from .report import Doc
from .seeddata import SeedData, remove_run_users, user_prefix
from .services import ServiceControl
from .tables import Table

MEMORY_GROWTH_FLAG = 0.10
# The warm-up and end values are medians over this share of the run (at least
# three samples).
WINDOW_SHARE = 0.05


@dataclass(frozen=True)
class SoakParams:
    run_id: str
    out_dir: Path
    rate: int
    duration_s: int
    warmup_s: float
    interval_s: float
    write_share: float = 0.2
    timeout_s: int = 10


def load_run(settings: Settings, params: SoakParams, seed: SeedData, summary_path: Path) -> K6Run:
    """k6/scripts/chaos.js without faults: connections reused, only the summary kept."""
    return K6Run(
        script="chaos.js",
        run_id=params.run_id,
        scenario="soak",
        arm="cache",
        phase="soak",
        rate=params.rate,
        duration_s=params.duration_s,
        vus=(max(params.rate // 2, 5), params.rate * 2 + 10),
        timeout_s=params.timeout_s,
        data_dir=seed.data_dir,
        extra={
            "WRITE_SHARE": str(params.write_share),
            "USER_PREFIX": user_prefix(params.run_id, "soak"),
            "NO_REUSE": "0",
            "SUMMARY_PATH": str(summary_path),
        },
    )


def take_sample(pids: dict[str, int]) -> dict[str, dict[str, int] | None]:
    ppids = procs.parents()
    reading: dict[str, dict[str, int] | None] = {}
    for service, pid in pids.items():
        tree = procs.sample_tree(pid, ppids)
        reading[service] = None if tree is None else tree.__dict__.copy()
    return reading


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def growth_table_rows(
    samples: list[dict[str, Any]], services: list[str], warmup_s: float, duration_s: float
) -> list[dict[str, Any]]:
    """Per service: warm-up, end and max of RSS and fds, growth and flags (pure)."""
    if not samples:
        return []
    t0 = samples[0]["t"]
    t_end = samples[-1]["t"]
    step = (t_end - t0) / max(len(samples) - 1, 1)
    window = max(3 * step, WINDOW_SHARE * duration_s)
    warm = [s for s in samples if warmup_s <= s["t"] - t0 <= warmup_s + window]
    end = [s for s in samples if s["t"] >= t_end - window]
    after = [s for s in samples if s["t"] - t0 >= warmup_s]
    rows = []
    for service in services:

        def values(chosen: list[dict[str, Any]], field: str, name: str = service) -> list[float]:
            readings = [s["procs"][name] for s in chosen if s["procs"].get(name)]
            return [r[field] for r in readings if field in r]

        rss_warm = _median(values(warm, "rss_kib"))
        rss_end = _median(values(end, "rss_kib"))
        anon_warm = _median(values(warm, "anon_kib"))
        anon_end = _median(values(end, "anon_kib"))
        anon_growth = (
            (anon_end - anon_warm) / anon_warm if anon_warm and anon_end is not None else None
        )
        fds_warm = _median(values(warm, "fds"))
        fds_end = _median(values(end, "fds"))
        sockets_warm = _median(values(warm, "sockets"))
        sockets_end = _median(values(end, "sockets"))
        # Private memory per process: PostgreSQL's tree gains a backend when a pool grows.
        per_warm = _median(_per_process(warm, service))
        per_end = _median(_per_process(end, service))
        per_growth = (per_end - per_warm) / per_warm if per_warm and per_end is not None else None
        growth = (rss_end - rss_warm) / rss_warm if rss_warm and rss_end is not None else None
        fd_growth = fds_end - fds_warm if fds_warm is not None and fds_end is not None else None
        flags = []
        if growth is not None and growth > MEMORY_GROWTH_FLAG:
            flags.append(f"memory +{growth:.0%}")
        if anon_growth is not None and anon_growth > MEMORY_GROWTH_FLAG:
            flags.append(f"private memory +{anon_growth:.0%}")
        if fd_growth is not None and fd_growth > 0:
            flags.append(f"fds +{fd_growth:g}")
        gone = sum(1 for s in samples if s["procs"].get(service) is None)
        if gone:
            flags.append(f"gone in {gone} samples")
        rows.append(
            {
                "service": service,
                "processes_warm": _median(values(warm, "processes")),
                "processes_end": _median(values(end, "processes")),
                "rss_warm_kib": rss_warm,
                "rss_end_kib": rss_end,
                "rss_growth": growth,
                "rss_max_kib": max(values(after, "rss_kib"), default=None),
                "anon_warm_kib": anon_warm,
                "anon_end_kib": anon_end,
                "anon_growth": anon_growth,
                "anon_per_process_growth": per_growth,
                "sockets_warm": sockets_warm,
                "sockets_end": sockets_end,
                "fds_warm": fds_warm,
                "fds_end": fds_end,
                "fds_growth": fd_growth,
                "fds_max": max(values(after, "fds"), default=None),
                "flags": flags,
            }
        )
    return rows


def _per_process(chosen: list[dict[str, Any]], service: str) -> list[float]:
    readings = [s["procs"][service] for s in chosen if s["procs"].get(service)]
    return [r["anon_kib"] / r["processes"] for r in readings if "anon_kib" in r]


def _mib(kib: float | None) -> str:
    return "n/a" if kib is None else f"{kib / 1024:.1f}"


def _fd_growth(row: dict[str, Any]) -> str:
    if row["fds_growth"] is None:
        return "n/a"
    text = f"{row['fds_growth']:+g}"
    warm, end = row.get("sockets_warm"), row.get("sockets_end")
    if row["fds_growth"] and warm is not None and end is not None:
        text += f" ({end - warm:+g} sockets)"
    return text


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:+.1f}%"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g}"


def growth_table(rows: list[dict[str, Any]]) -> Table:
    headers = [
        "process",
        "procs",
        "RSS warm-up MiB",
        "RSS end MiB",
        "RSS growth",
        "RSS max MiB",
        "private (RssAnon) growth",
        "private per process",
        "fds warm-up",
        "fds end",
        "fd growth",
        "fds max",
        "flag",
    ]
    table_rows = []
    for row in rows:
        growth = row["rss_growth"]
        table_rows.append(
            [
                row["service"],
                f"{_num(row['processes_warm'])} -> {_num(row['processes_end'])}",
                _mib(row["rss_warm_kib"]),
                _mib(row["rss_end_kib"]),
                _pct(growth),
                _mib(row["rss_max_kib"]),
                _pct(row.get("anon_growth")),
                _pct(row.get("anon_per_process_growth")),
                _num(row["fds_warm"]),
                _num(row["fds_end"]),
                _fd_growth(row),
                _num(row["fds_max"]),
                ", ".join(row["flags"]) or "-",
            ]
        )
    return Table("Memory and file descriptors per process", headers, table_rows)


def load_table(tallies: dict[str, Any]) -> Table:
    headers = ["kind", "requests", "2xx", "4xx", "5xx", "no answer", "p95 ms", "max ms"]
    rows = []
    for kind in ("count", "user", "create"):
        counts = {cls: tallies.get(f"{kind}_{cls}", 0) for cls in ("2xx", "4xx", "5xx", "error")}
        trend = tallies.get(f"{kind}_ms", {})
        rows.append(
            [
                kind,
                str(sum(counts.values())),
                str(counts["2xx"]),
                str(counts["4xx"]),
                str(counts["5xx"]),
                str(counts["error"]),
                f"{trend.get('p(95)', 0):.1f}",
                f"{trend.get('max', 0):.0f}",
            ]
        )
    return Table("The load (k6's summary)", headers, rows)


def chart(
    samples: list[dict[str, Any]],
    services: list[str],
    warmup_s: float,
    path: Path,
    caption: str,
) -> Path:
    t0 = samples[0]["t"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    for service in services:
        points = [(s["t"] - t0, s["procs"][service]) for s in samples if s["procs"].get(service)]
        if not points:
            continue
        xs = [x for x, _ in points]
        rss = [p["rss_kib"] / 1024 for _, p in points]
        private = [p.get("anon_kib", p["rss_kib"]) / p["processes"] for _, p in points]
        warm = [v for x, v in zip(xs, private, strict=True) if x >= warmup_s]
        # Relative to the median right after the warm-up, like the table's warm-up value.
        base = statistics.median(warm[: max(3, len(warm) // 20)] or private) or 1
        axes[0].plot(xs, rss, label=service)
        axes[1].plot(xs, [100 * v / base for v in private], label=service)
        axes[2].plot(xs, [p["fds"] for _, p in points], label=service)
    titles = (
        "VmRSS summed over the tree, MiB (log scale)",
        "private memory (RssAnon) per process,\n% of its value after the warm-up",
        "open fds summed over the tree",
    )
    for ax, title in zip(axes, titles, strict=True):
        ax.axvline(warmup_s, color="grey", linestyle="--", linewidth=1)
        ax.set_title(title)
        ax.set_xlabel("seconds since the start")
        ax.grid(True, alpha=0.3)
    _log_y(axes[0])
    axes[1].axhline(100 * (1 + MEMORY_GROWTH_FLAG), color="red", linestyle=":", linewidth=1)
    _log_y(axes[2])
    axes[0].legend(fontsize=7)
    fig.suptitle("Soak: memory and file descriptors of every process (dashed: end of warm-up)")
    return _finish(fig, path, caption)


def k6_tallies(summary: K6Summary) -> dict[str, Any]:
    """Requests per kind and status class, their latency trends, and the
    iterations k6 dropped; empty when k6 wrote no summary."""
    if not summary.metrics:
        return {}
    return {
        **summary.counts("chaos_"),
        **summary.values("chaos_", skip=("chaos_req",)),
        "dropped_iterations": summary.dropped_iterations,
    }


def run_soak(settings: Settings, params: SoakParams, seed: SeedData) -> dict[str, Any]:
    control = ServiceControl(settings)
    control.verify()
    pids = {service: control.pid(service) for service in procs.SERVICES}
    params.out_dir.mkdir(parents=True)
    summary_path = params.out_dir / "k6-summary.json"
    log_path = params.out_dir / "k6.log"
    run = load_run(settings, params, seed, summary_path)
    print(
        f"soak {params.run_id}: {params.rate} req/s for {params.duration_s} s, a sample every "
        f"{params.interval_s:g} s, warm-up {params.warmup_s:g} s -> {params.out_dir}/",
        flush=True,
    )
    samples: list[dict[str, Any]] = []
    started = time.time()
    load = start_k6(settings, run, log_path)
    try:
        next_at = time.monotonic()
        last_print = 0.0
        while load.running:
            samples.append({"t": time.time(), "procs": take_sample(pids)})
            elapsed = time.time() - started
            if elapsed - last_print >= 60:
                last_print = elapsed
                print(f"  {elapsed:5.0f} s: {_progress(samples[-1])}", flush=True)
            next_at += params.interval_s
            while load.running and time.monotonic() < next_at:
                time.sleep(min(0.1, max(next_at - time.monotonic(), 0)))
    finally:
        load.stop()
    try:
        removed = remove_run_users(settings, params.run_id)
    except (StackError, psycopg.Error, redis.RedisError) as error:
        removed = None
        print(f"warning: could not remove the soak's users: {error}")
    services = list(pids)
    rows = growth_table_rows(samples, services, params.warmup_s, params.duration_s)
    run = {
        "run_id": params.run_id,
        "kind": "soak",
        "created": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
        "machine": describe(),
        "seed": seed.meta,
        "params": {
            "rate": params.rate,
            "duration_s": params.duration_s,
            "warmup_s": params.warmup_s,
            "interval_s": params.interval_s,
            "write_share": params.write_share,
            "memory_growth_flag": MEMORY_GROWTH_FLAG,
            "window_share": WINDOW_SHARE,
            "gateway_url": settings.gateway_url,
            "pids": pids,
        },
        "k6_exit": load.returncode,
        "k6": k6_tallies(K6Summary.read(summary_path)),
        "removed_users": removed,
        "processes": rows,
        "flagged": [r["service"] for r in rows if r["flags"]],
        "samples": samples,
    }
    write_report(run, params.out_dir)
    if load.returncode != 0:
        raise StackError(f"k6 exited with {load.returncode}; see {log_path}")
    return run


def _progress(sample: dict[str, Any]) -> str:
    parts = []
    for service in ("gateway", "core", "postgres", "redis"):
        reading = sample["procs"].get(service)
        if reading:
            parts.append(f"{service} {reading['rss_kib'] / 1024:.0f} MiB/{reading['fds']} fds")
    return ", ".join(parts)


def write_report(run: dict[str, Any], out_dir: Path) -> list[Table]:
    params = run["params"]
    machine = summary(run["machine"])
    services = [row["service"] for row in run["processes"]]
    tables = [growth_table(run["processes"]), load_table(run["k6"])]
    chart_path = chart(
        run["samples"],
        services,
        params["warmup_s"],
        out_dir / "soak.png",
        f"Soak {run['run_id']} on {machine}.",
    )
    doc = Doc()
    doc.h(1, f"Aside soak {run['run_id']}")
    doc.p(f"Machine: {machine}.", note=True)
    doc.ul(
        [
            f"load: k6 constant arrival rate {params['rate']} req/s for {params['duration_s']} s "
            f"through {params['gateway_url']}: {params['write_share']:.0%} creates with an "
            "Idempotency-Key, the rest cached reads by id and by hot email; connections reused",
            f"sampled every {params['interval_s']:g} s: VmRSS, RssAnon and the number of "
            "open fds of every process of each service's tree (/proc), summed over the tree; "
            "VmRSS counts a shared page once per process that touched it (PostgreSQL's shared "
            "buffers once per backend), RssAnon is the private memory only (where a leak shows)",
            f"warm-up: the first {params['warmup_s']:g} s are left out; the warm-up and end "
            f"values are medians over {params['window_share']:.0%} of the run (at least 3 "
            "samples) right after the warm-up and at the end; max is over everything after "
            "the warm-up",
            f"flagged: growth of VmRSS or of RssAnon above "
            f"{params['memory_growth_flag']:.0%}, any fd growth; "
            f"table: {run['seed'].get('rows')} rows",
        ]
    )
    for table in tables:
        doc.table(table)
    flagged = run["flagged"]
    doc.p(
        "Flagged: " + ", ".join(flagged) if flagged else "Nothing flagged.",
        note=bool(flagged),
    )
    doc.image(chart_path, "RSS and open fds of every process over the run")
    (out_dir / "report.md").write_text(doc.markdown())
    (out_dir / "report.json").write_text(json.dumps(run, indent=2) + "\n")
    print()
    for table in tables:
        print(table.markdown())
    print(doc.blocks[-2][1])
    print(f"report: {out_dir}/report.md")
    return tables
