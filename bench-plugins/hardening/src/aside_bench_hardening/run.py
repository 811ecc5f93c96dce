"""`aside-bench hardening`: each attack beside the driver's cached reads (docs/bench/suites.md)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar, TypedDict, cast
from urllib.parse import urlsplit

from aside_bench.load.run import LoadRun, deadline_s, new_driver
from aside_bench.stack import procs
from aside_bench.stack.config import Settings
from aside_bench.stack.prepare import StackError, connect, wait_until_quiet, warm_cache
from aside_bench.stack.seeddata import SeedData
from aside_bench.stack.services import ServiceControl
from aside_bench_suite import base as suite
from aside_bench_suite.samples import first_request

from aside_bench_hardening import checks as hc
from aside_bench_hardening import load as reads
from aside_bench_hardening import probes as fp
from aside_bench_hardening.attacks import cold_flood, slow_heads
from aside_bench_hardening.hostile import PARTS as HOSTILE_PARTS
from aside_bench_hardening.hostile import HostileRecord
from aside_bench_hardening.report import one_line, write_report

DESCRIPTIONS = {
    "slow-heads": "sockets that send part of a request head and never finish it",
    "cold-flood": "distinct cold emails from impatient concurrent clients",
    "hostile": "one client process pipelining, holding slow heads, forging "
    "X-Forwarded-For and looping on /readyz at once",
}
EXPERIMENTS = tuple(DESCRIPTIONS)


@dataclass(frozen=True)
class HardeningParams:
    """The run's knobs, grouped by the experiment they steer."""

    run_id: str
    out_dir: Path
    experiments: tuple[str, ...]
    # The reads beside every experiment, and the seconds of them around each attack.
    rate: int = 500
    pre_s: float = 5.0
    post_s: float = 5.0
    # Slow heads, and the limits of their verdicts.
    sockets: int = 2000
    read_p95_ms: float = hc.Limits.read_p95_ms
    rss_growth_mib: float = hc.Limits.rss_growth_mib
    # The cold flood (its deadline: flood_deadline_s).
    emails: int = 20000
    concurrency: int = 200
    client_timeout_ms: int = 50
    # The hostile client: its parts (hostile.py PARTS); the reads' p95 at most this
    # times the quiet one, each worker's RSS at most this over its own before.
    hostile_s: float = 15.0
    hostile_parts: tuple[str, ...] = HOSTILE_PARTS
    hostile_p95_factor: float = 2.0
    hostile_worker_rss_mib: float = 32.0

    @property
    def pool(self) -> int:
        """The driver's workers, fixed for the whole load: room for 200 ms of latency."""
        return max(10, self.rate // 5)

    @property
    def flood_deadline_s(self) -> float:
        """No flood request starts after this: 6x the flood if every client waited its timeout."""
        ideal = self.emails * self.client_timeout_ms / 1000 / self.concurrency
        return max(10.0, 6 * ideal)  # and at least 10 s


class ParamsRecord(TypedDict):
    """report.json's params: the knobs and what they came to on this stack."""

    experiments: Sequence[str]
    rate: int
    pool: int
    pre_s: float
    post_s: float
    sockets: int
    emails: int
    concurrency: int
    client_timeout_ms: int
    flood_deadline_s: float
    hostile_s: float
    hostile_parts: Sequence[str]
    hostile_p95_factor: float
    hostile_worker_rss_mib: float
    read_timeout_s: int
    hot_emails: int
    gateway_url: str
    run_dir: str
    gateway: dict[str, int | str]
    workers: int


@dataclass
class ExperimentResult(suite.SuiteResult):
    figures: dict[str, object] = field(default_factory=dict)  # the experiment's own, by name
    windows: dict[str, hc.Figures] = field(default_factory=dict)  # the reads by window

    descriptions: ClassVar[dict[str, str]] = DESCRIPTIONS


@dataclass
class Bench:
    settings: Settings
    params: HardeningParams
    seed: SeedData
    control: ServiceControl
    limits: hc.Limits
    gateway: dict[str, int | str]  # gateway_settings


# The gateway's settings the verdicts depend on; unset, its defaults (gateway/README.md).
GATEWAY_DEFAULTS = {
    "GATEWAY_HEAD_TIMEOUT_S": 5,
    "GATEWAY_MAX_CONNECTIONS": 1000,
    "CACHE_TTL_SECONDS": 60,
}
# Budgeted into the load's duration for opening the sockets.
OPEN_BUDGET_S = 3.0
# Sockets are waited for past the close limit: a late close is measured, not cut off.
SOCKET_WAIT_EXTRA_S = 10.0
# The query counter after the flood: read until still for QUIET_S, at most SETTLE_DEADLINE_S.
QUIET_S = 2.0
SETTLE_DEADLINE_S = 30.0
# The hostile client's process is given this long past its own duration.
HOSTILE_EXTRA_S = 30.0
# How long the driver's first request, and a quiet stack before the reads, are waited for.
FIRST_SAMPLE_DEADLINE_S = 60.0
QUIET_DEADLINE_S = 120.0


def parse_experiments(text: str | None) -> tuple[str, ...]:
    return suite.parse_names(text, EXPERIMENTS, "experiment")


def gateway_settings(pid: int) -> dict[str, int | str]:
    """GATEWAY_DEFAULTS' values in the gateway master's environment, and where each came from."""
    found: dict[str, int | str] = {}
    for name, default in GATEWAY_DEFAULTS.items():
        text = procs.environ_value(pid, name)
        try:
            found[name] = int(text) if text else default
        except ValueError:
            raise StackError(f"the gateway's {name}={text!r} is not a whole number") from None
        found[f"{name}_from"] = "environment" if text else "default"
    return found


def gateway_address(settings: Settings) -> tuple[str, int]:
    parts = urlsplit(settings.gateway_url)
    return parts.hostname or "127.0.0.1", parts.port or 80


@contextmanager
def reads_beside(
    bench: Bench, result: ExperimentResult, seconds: float, production: bool = False
) -> Iterator[LoadRun]:
    """The driver's reads for `seconds` (the cache TTL must outlast them) on a quiet stack and a
    fresh cache; the attack once pre_s of them have; the driver waited for even on an error."""
    params, settings, duration = bench.params, bench.settings, math.ceil(seconds)
    reads.check_ttl(int(bench.gateway["CACHE_TTL_SECONDS"]), duration)
    name, data_dir = result.name, bench.seed.data_dir
    samples = params.out_dir / f"load-{name}.jsonl"
    run = reads.load_run(
        params.run_id, name, params.rate, params.pool, duration, data_dir, samples, production
    )
    bench.control.verify()
    wait_until_quiet(settings, QUIET_DEADLINE_S)
    result.notes["warm"] = warm_cache(settings, bench.seed.hot, mode="" if production else "l2")
    result.notes["load_average_1m"] = round(os.getloadavg()[0], 2)
    load = new_driver(settings, run, params.out_dir / "load.log").start()
    result.events["load_start"] = float(first_request(load, samples, FIRST_SAMPLE_DEADLINE_S)["t"])
    try:
        suite.sleep_until(result.events["load_start"] + params.pre_s)
        yield run
    finally:
        code = load.wait(deadline_s(run))
        result.events["load_end"] = time.time()
        if code != 0:
            raise StackError(f"the load driver exited with {code}; see {load.log_path}")


def run_slow_heads(bench: Bench) -> ExperimentResult:
    result = ExperimentResult("slow-heads")
    params, limits, events = bench.params, bench.limits, result.events
    seconds = params.pre_s + OPEN_BUDGET_S + limits.close_limit_s + params.post_s
    workers = result.notes["workers"] = bench.control.gateway_workers()
    with fp.RssSampler(workers) as sampler, reads_beside(bench, result, seconds) as run:
        events["attack_start"] = time.time()
        wait_s = limits.close_limit_s + SOCKET_WAIT_EXTRA_S
        records = slow_heads(gateway_address(bench.settings), params.sockets, wait_s)
        closes = [r.closed_at for r in records if r.closed_at is not None]
        opened = sum(r.opened_at is not None for r in records)
        events["attack_end"] = max(closes) if closes and len(closes) == opened else time.time()
    after = result.notes["workers_after"] = bench.control.gateway_workers()
    sockets = hc.socket_figures(records, limits.head_deadline_s)
    rss = hc.rss_figures(sampler.samples, events["attack_start"], events["attack_end"])
    result.figures = {
        "sockets": asdict(sockets),
        "rss": asdict(rss) if rss else {},
        "peak_fds": sampler.peak_fds(),
        "close_s": [r.as_dict() for r in records],
    }
    result.windows = reads.read_windows(run, reads.windows_around(events, "attack"))
    during = result.windows["during"]
    result.checks = [
        hc.close_check(sockets, limits),
        hc.rss_check(rss, after == workers, limits),
        hc.reads_check(during, "during the attack", limits.read_p95_ms),
        hc.reuse_check(during),
    ]
    return result


def run_cold_flood(bench: Bench) -> ExperimentResult:
    result = ExperimentResult("cold-flood")
    params, events, settings = bench.params, result.events, bench.settings
    seconds = params.pre_s + params.flood_deadline_s + params.post_s
    emails = fp.flood_emails(params.run_id, params.emails)
    count_url = f"{settings.gateway_url}/api/v1/users/count"
    with connect(settings) as conn:
        result.notes["flood_emails_in_table"] = fp.emails_in_table(conn, params.run_id)
        with reads_beside(bench, result, seconds) as run:
            calls_before = fp.count_query_calls(conn)
            counters_before = fp.gateway_counters(settings)
            events["flood_start"] = time.time()
            timeout_s = params.client_timeout_ms / 1000
            flood = cold_flood(
                count_url, emails, params.concurrency, timeout_s, params.flood_deadline_s
            )
            events["flood_end"] = flood.ended
            readings = fp.poll_until_still(
                lambda: fp.count_query_calls(conn), QUIET_S, SETTLE_DEADLINE_S
            )
            counters = fp.counter_increase(counters_before, fp.gateway_counters(settings))
    settle = hc.settle_figures(readings, events["flood_end"], QUIET_S)
    result.figures = {
        "flood": asdict(flood),
        "queries_before_flood_end": readings[0][1] - calls_before,
        "settle": settle,
        "gateway_counters": counters,
        "readings": [[round(t - events["flood_end"], 3), v] for t, v in readings],
    }
    result.windows = reads.read_windows(run, reads.windows_around(events, "flood"))
    result.checks = [
        hc.settle_check(settle, bench.limits),
        hc.reads_check(result.windows["during"], "during the flood"),
    ]
    if result.notes["flood_emails_in_table"]:
        in_rows = hc.Check("the flood's emails are in no row", False, "some are in the table")
        result.checks.append(in_rows)
    return result


def hostile_client(settings: Settings, seconds: float, parts: tuple[str, ...]) -> HostileRecord:
    """The hostile client in a process of its own (hostile.py), running `parts`."""
    host, port = gateway_address(settings)
    module = "aside_bench_hardening.hostile"
    done = subprocess.run(
        [sys.executable, "-m", module, host, str(port), str(seconds), ",".join(parts)],
        capture_output=True,
        text=True,
        timeout=seconds + HOSTILE_EXTRA_S,
        check=False,
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise StackError(f"the hostile client exited with {done.returncode}: {done.stderr[-500:]}")
    return cast(HostileRecord, json.loads(done.stdout.strip().splitlines()[-1]))


def run_hostile(bench: Bench) -> ExperimentResult:
    result = ExperimentResult("hostile")
    params, events = bench.params, result.events
    seconds = params.pre_s + params.hostile_s + params.post_s
    workers = result.notes["workers"] = bench.control.gateway_workers()
    # Unset, the gateway runs in production (gateway/README.md).
    profile = procs.environ_value(bench.control.pid("gateway"), "ASIDE_PROFILE") or "production"
    result.notes["profile"] = profile
    production = profile == "production"
    with fp.RssSampler(workers) as sampler, reads_beside(bench, result, seconds, production) as run:
        events["attack_start"] = time.time()
        hostile = hostile_client(bench.settings, params.hostile_s, params.hostile_parts)
        events["attack_end"] = time.time()
    kept = bench.control.gateway_workers() == workers
    rss = hc.rss_figures(sampler.samples, events["attack_start"], events["attack_end"])
    result.figures = {"hostile": hostile, "rss": asdict(rss) if rss else {}}
    result.windows = reads.read_windows(run, reads.windows_around(events, "attack"))
    before, during = result.windows["before"], result.windows["during"]
    quiet_p95 = before.get("p95_ms")
    limit = params.hostile_p95_factor * quiet_p95 if quiet_p95 else None
    what = f"during the hostile client (quiet p95 x{params.hostile_p95_factor:g})"
    result.checks = [
        hc.reads_check(before, "before the hostile client"),
        hc.reads_check(during, what, limit),
        hc.worker_rss_check(rss, kept, params.hostile_worker_rss_mib),
    ]
    if "pipeline" in params.hostile_parts:
        answered, sent = hostile["pipelined_answered"], hostile["pipelined_sent"]
        what = f"{answered} of {sent} sent"
        result.checks.append(hc.Check("the pipelined requests were answered", answered > 0, what))
    return result


RUNNERS = {"slow-heads": run_slow_heads, "cold-flood": run_cold_flood, "hostile": run_hostile}


def run_hardening(settings: Settings, params: HardeningParams, seed: SeedData) -> suite.SuiteRun:
    control = ServiceControl(settings)
    control.verify()
    gateway = gateway_settings(control.pid("gateway"))
    limits = hc.Limits(
        head_deadline_s=gateway["GATEWAY_HEAD_TIMEOUT_S"],
        rss_growth_mib=params.rss_growth_mib,
        read_p95_ms=params.read_p95_ms,
    )
    bench = Bench(settings, params, seed, control, limits, gateway)
    record = dict(params_record(bench))
    run = suite.SuiteRun(params.run_id, "hardening", seed.meta, record, limits.record())
    what = f"{' '.join(params.experiments)} under {params.rate} cached reads/s"
    suite.open_run("hardening", params.run_id, params.out_dir, what)
    suite.run_items(
        run,
        params.experiments,
        lambda name: RUNNERS[name](bench),
        lambda name, error: ExperimentResult(name, error=error),
        DESCRIPTIONS,
    )
    write_report(run, params.out_dir)
    for experiment in run.items:
        print(f"{experiment['name']}: {one_line(experiment)}", flush=True)
    return run


def params_record(bench: Bench) -> ParamsRecord:
    """The knobs ParamsRecord names, then what they came to on this stack."""
    params, control = bench.params, bench.control
    names = [name for name in ParamsRecord.__annotations__ if hasattr(params, name)]
    stack = {
        "read_timeout_s": reads.READ_TIMEOUT_S,
        "hot_emails": len(bench.seed.hot),
        "gateway_url": bench.settings.gateway_url,
        "run_dir": str(control.stack.run_dir),
        "gateway": bench.gateway,
        "workers": len(control.gateway_workers()),
    }
    return cast(ParamsRecord, {name: getattr(params, name) for name in names} | stack)
