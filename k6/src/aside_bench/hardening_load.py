"""k6's cached reads under a hardening experiment: the run (k6/scripts/read.js
on the hot emails, every sample to InfluxDB), its start on a warm and quiet
stack, its first request, and its figures in the windows before, during and
after the attack, read back from InfluxDB."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from .config import Settings
from .k6run import K6_ENV, K6Process, K6Run, start_k6
from .prepare import StackError, wait_until_quiet, warm_cache
from .seeddata import SeedData
from .sources import Influx, quote_literal
from .suite import SuiteResult

if TYPE_CHECKING:
    from .hardening import Bench, HardeningParams

READ_TIMEOUT_S = 10
FIRST_SAMPLE_DEADLINE_S = 60.0
# How often the wait for the load's first sample asks InfluxDB.
INFLUX_POLL_S = 0.2
QUIET_DEADLINE_S = 120.0
# The first second of reads opens k6's connections: left out of `before`.
WARMUP_S = 1.0


def load_run(
    settings: Settings, params: HardeningParams, seed: SeedData, phase: str, duration_s: int
) -> K6Run:
    """k6/scripts/read.js on the hot emails, every sample to InfluxDB."""
    return K6Run(
        script="read.js",
        run_id=params.run_id,
        scenario="hardening",
        arm="cache",
        phase=phase,
        rate=params.rate,
        duration_s=duration_s,
        vus=(params.vus, params.vus),
        timeout_s=READ_TIMEOUT_S,
        data_dir=seed.data_dir,
        extra={"HOT_SHARE": "1", "COLD_SAMPLE": "1"},
        out=f"influxdb={settings.influx_url}",
        console_summary=False,
        env=K6_ENV,
    )


def where_phase(run_id: str, phase: str) -> str:
    return f'"run_id" = {quote_literal(run_id)} AND "phase" = {quote_literal(phase)}'


def first_sample_at(influx: Influx, where: str, load: K6Process, deadline_s: float) -> float:
    """Epoch time of the load's first request, once InfluxDB has it."""
    query = f'SELECT first("value") FROM "http_req_duration" WHERE {where}'

    def probe() -> float | None:
        series = influx.query(query)[0]
        return series[0].values[0][0] / 1000 if series and series[0].values else None

    return load.first_sample(probe, "InfluxDB", deadline_s, INFLUX_POLL_S)


def read_windows(
    influx: Influx, where: str, windows: dict[str, tuple[float, float]]
) -> dict[str, dict[str, Any]]:
    """Per window [start, end) (epoch s): answered reads and their latency,
    iterations k6 dropped, failed iterations (a bad status or a timeout) and
    connections k6 opened (a request with connecting time > 0)."""
    statements = []
    for start, end in windows.values():
        span = f"{where} AND time >= {int(start * 1000)}ms AND time < {int(end * 1000)}ms"
        statements += [
            'SELECT percentile("value", 50), percentile("value", 95), percentile("value", 99), '
            'max("value"), count("value") FROM "http_req_duration" '
            f"WHERE {span} AND \"expected_response\" = 'true'",
            f'SELECT sum("value") FROM "dropped_iterations" WHERE {span}',
            f'SELECT sum("value") FROM "failed_iterations" WHERE {span}',
            f'SELECT count("value") FROM "http_req_connecting" WHERE {span} AND "value" > 0',
        ]
    results = influx.query(";".join(statements))
    found = {}
    for index, (name, (start, end)) in enumerate(windows.items()):
        latency, dropped, failed, connecting = results[4 * index : 4 * index + 4]
        row = latency[0].values[0] if latency and latency[0].values else [None] * 6
        found[name] = {
            "start": start,
            "end": end,
            "seconds": round(end - start, 3),
            "reads": int(row[5] or 0),
            "p50_ms": row[1],
            "p95_ms": row[2],
            "p99_ms": row[3],
            "max_ms": row[4],
            "dropped": _first_value(dropped),
            "failed": _first_value(failed),
            "new_connections": _first_value(connecting),
        }
    return found


def _first_value(series: list[Any]) -> int:
    if not series or not series[0].values:
        return 0
    return int(series[0].values[0][1] or 0)


def start_load(bench: Bench, result: SuiteResult, duration_s: int) -> K6Process:
    """The cache warmed afresh (each hot key then outlives the experiment), the
    stack quiet, then k6 started; notes its first request as `load_start`."""
    bench.control.verify()
    wait_until_quiet(bench.settings, QUIET_DEADLINE_S)
    result.notes["warm"] = warm_cache(bench.settings, bench.seed.hot)
    result.notes["load_average_1m"] = round(os.getloadavg()[0], 2)
    run = load_run(bench.settings, bench.params, bench.seed, result.name, duration_s)
    load = start_k6(bench.settings, run, bench.params.out_dir / "k6.log")
    where = where_phase(bench.params.run_id, result.name)
    deadline_s = FIRST_SAMPLE_DEADLINE_S
    result.events["load_start"] = first_sample_at(bench.influx, where, load, deadline_s)
    return load


def end_load(load: K6Process, duration_s: int, result: SuiteResult) -> None:
    code = load.wait(duration_s + READ_TIMEOUT_S + 60)
    result.events["load_end"] = time.time()
    if code != 0:
        raise StackError(f"k6 exited with {code}; see {load.log_path}")


def check_ttl(bench: Bench, duration_s: int) -> None:
    """Hot keys filled just before the load must outlive it: a key expiring
    mid-experiment would be a miss, and a query, of its own."""
    ttl = bench.gateway["CACHE_TTL_SECONDS"]
    if duration_s + 10 >= ttl:
        raise StackError(
            f"the experiment's load ({duration_s} s) would outlive the cache TTL ({ttl} s); "
            "use a shorter --pre/--post or fewer --emails"
        )


def windows_around(events: dict[str, float], what: str) -> dict[str, tuple[float, float]]:
    """The load cut at `what`'s start and end (events `<what>_start`, `<what>_end`)."""
    start, end = events[f"{what}_start"], events[f"{what}_end"]
    return {
        "before": (events["load_start"] + WARMUP_S, start),
        "during": (start, end),
        "after": (end, events["load_end"]),
    }
