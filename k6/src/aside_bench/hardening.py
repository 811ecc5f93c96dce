"""`aside-bench hardening`: the gateway's defences against slow clients and
against work nobody waits for, measured at full size while k6 drives cached
reads (hot emails only, at a constant rate, over connections k6 opened before
the attack: a fixed pool of VUs, each keeping its connection).

* slow-heads -- a few seconds into the reads, the bench opens N sockets to the
  gateway, each sending part of a request head and never finishing it. For
  each socket: when the server closed it, and whether it answered 503 at once
  (the worker that took it already held GATEWAY_MAX_CONNECTIONS). Besides: the
  gateway workers' RSS before, at the peak and after (from /proc), and the
  reads' latency and drops before, during and after the attack.
* cold-flood -- emails that are in no row (each a full scan if run), sent by a
  bounded number of concurrent clients that give up after a few tens of ms.
  Counted: the gateway's count queries as PostgreSQL saw them
  (pg_stat_statements), polled after the flood until they stop rising, and the
  reads' latency and drops meanwhile.

The reads' figures come from k6's samples in InfluxDB, cut into windows by
their timestamps. The figures and verdicts are hardening_checks.py's, the
report hardening_report.py's, the attacks attacks.py's.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import psycopg
import redis
import requests

from . import gateway_metrics, procs
from . import hardening_checks as hc
from .attacks import cold_flood, slow_heads
from .config import Settings
from .hardening_report import one_line, write_report
from .k6run import K6_ENV, K6Process, K6Run, start_k6
from .prepare import StackError, connect, wait_until_quiet, warm_cache
from .seeddata import SeedData
from .services import ServiceControl
from .sources import Influx, SourceError, quote_literal
from .suite import SuiteResult, parse_names, run_header, sleep_until

EXPERIMENTS = ("slow-heads", "cold-flood")
DESCRIPTIONS = {
    "slow-heads": "sockets that send part of a request head and never finish it",
    "cold-flood": "distinct cold emails from impatient concurrent clients",
}
# The gateway's own settings the verdicts depend on, read from its environment;
# unset there, the gateway runs with its defaults (gateway/README.md).
GATEWAY_DEFAULTS = {
    "GATEWAY_HEAD_TIMEOUT_S": 5,
    "GATEWAY_MAX_CONNECTIONS": 1000,
    "CACHE_TTL_SECONDS": 60,
}
READ_TIMEOUT_S = 10
FIRST_SAMPLE_DEADLINE_S = 60.0
# How often the wait for the load's first sample asks InfluxDB.
INFLUX_POLL_S = 0.2
QUIET_DEADLINE_S = 120.0
# The first second of reads opens k6's connections: left out of `before`.
WARMUP_S = 1.0
# Budgeted into k6's duration for opening the sockets.
OPEN_BUDGET_S = 3.0
# Sockets are waited for this long past the close limit, so a late close is
# measured rather than cut off at the limit.
SOCKET_WAIT_EXTRA_S = 10.0
RSS_INTERVAL_S = 0.1
# The query counter after the flood: read this often, until it has not risen
# for QUIET_S, for at most SETTLE_DEADLINE_S.
POLL_S = 0.05
QUIET_S = 2.0
SETTLE_DEADLINE_S = 30.0
# pg_stat_statements' normalised text of the gateway's count queries (db.py):
# one email, and a batch of them.
GATEWAY_COUNT_QUERIES = (
    "SELECT count(*) FROM users WHERE email = $1",
    "SELECT email, count(*) FROM users WHERE email = ANY($1) GROUP BY email",
)
FLOOD_DOMAIN = "hardening.invalid"
COUNT_ROUTE = "/api/v1/users/count"


@dataclass(frozen=True)
class HardeningParams:
    run_id: str
    out_dir: Path
    experiments: tuple[str, ...]
    rate: int = 500
    pre_s: float = 5.0
    post_s: float = 5.0
    sockets: int = 2000
    emails: int = 20000
    concurrency: int = 200
    client_timeout_ms: int = 50
    flood_budget_s: float | None = None
    read_p95_ms: float = 10.0
    rss_growth_mib: float = 64.0

    @property
    def vus(self) -> int:
        """k6's fixed pool: room for 200 ms of latency at the rate. No VU is
        added later, as a new VU would open a new connection mid-attack."""
        return max(10, self.rate // 5)

    @property
    def flood_deadline_s(self) -> float:
        """No flood request starts after this: six times what the flood takes
        if every client waits its whole timeout, and at least 10 s."""
        if self.flood_budget_s is not None:
            return self.flood_budget_s
        ideal = self.emails * self.client_timeout_ms / 1000 / self.concurrency
        return max(10.0, 6 * ideal)


@dataclass
class ExperimentResult(SuiteResult):
    figures: dict[str, Any] = field(default_factory=dict)
    windows: dict[str, Any] = field(default_factory=dict)

    descriptions: ClassVar[dict[str, str]] = DESCRIPTIONS

    def fields(self) -> dict[str, Any]:
        return {"figures": self.figures, "windows": self.windows}


@dataclass
class Bench:
    """What every experiment works with."""

    settings: Settings
    params: HardeningParams
    seed: SeedData
    control: ServiceControl
    influx: Influx
    limits: hc.Limits
    gateway: dict[str, Any]


def parse_experiments(text: str | None) -> tuple[str, ...]:
    return parse_names(text, EXPERIMENTS, "experiment")


def gateway_settings(pid: int) -> dict[str, Any]:
    """The gateway's settings the verdicts depend on, from its master's
    environment, and where each came from."""
    found: dict[str, Any] = {}
    for name, default in GATEWAY_DEFAULTS.items():
        text = procs.environ_value(pid, name)
        try:
            found[name] = int(text) if text else default
        except ValueError:
            raise StackError(f"the gateway's {name}={text!r} is not a whole number") from None
        found[f"{name}_from"] = "environment" if text else "default"
    return found


# ---- the load ---------------------------------------------------------------------------
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


def _where(run_id: str, phase: str) -> str:
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


def _start_load(bench: Bench, result: ExperimentResult, duration_s: int) -> K6Process:
    """The cache warmed afresh (each hot key then outlives the experiment), the
    stack quiet, then k6 started; notes its first request as `load_start`."""
    bench.control.verify()
    wait_until_quiet(bench.settings, QUIET_DEADLINE_S)
    result.notes["warm"] = warm_cache(bench.settings, bench.seed.hot)
    result.notes["load_average_1m"] = round(os.getloadavg()[0], 2)
    run = load_run(bench.settings, bench.params, bench.seed, result.name, duration_s)
    load = start_k6(bench.settings, run, bench.params.out_dir / "k6.log")
    where = _where(bench.params.run_id, result.name)
    deadline_s = FIRST_SAMPLE_DEADLINE_S
    result.events["load_start"] = first_sample_at(bench.influx, where, load, deadline_s)
    return load


def _end_load(load: K6Process, duration_s: int, result: ExperimentResult) -> None:
    code = load.wait(duration_s + READ_TIMEOUT_S + 60)
    result.events["load_end"] = time.time()
    if code != 0:
        raise StackError(f"k6 exited with {code}; see {load.log_path}")


def _check_ttl(bench: Bench, duration_s: int) -> None:
    """Hot keys filled just before the load must outlive it: a key expiring
    mid-experiment would be a miss, and a query, of its own."""
    ttl = bench.gateway["CACHE_TTL_SECONDS"]
    if duration_s + 10 >= ttl:
        raise StackError(
            f"the experiment's load ({duration_s} s) would outlive the cache TTL ({ttl} s); "
            "use a shorter --pre/--post or fewer --emails"
        )


# ---- slow heads -------------------------------------------------------------------------
class RssSampler:
    """VmRSS and open descriptors of the gateway's workers, every RSS_INTERVAL_S,
    in a thread of its own."""

    def __init__(self, pids: list[int]):
        self.pids = pids
        self.samples: list[hc.RssSample] = []
        self.fds: list[tuple[float, dict[int, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while True:
            now = time.time()
            rss = {pid: procs.rss_kib(pid) for pid in self.pids}
            fds = {pid: procs.fd_count(pid) for pid in self.pids}
            self.samples.append((now, {p: v for p, v in rss.items() if v is not None}))
            self.fds.append((now, {p: v for p, v in fds.items() if v is not None}))
            if self._stop.wait(RSS_INTERVAL_S):
                return

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def peak_fds(self) -> dict[str, int]:
        return {str(pid): max((s[1].get(pid, 0) for s in self.fds), default=0) for pid in self.pids}


def gateway_address(settings: Settings) -> tuple[str, int]:
    parts = urlsplit(settings.gateway_url)
    return parts.hostname or "127.0.0.1", parts.port or 80


def run_slow_heads(bench: Bench) -> ExperimentResult:
    result = ExperimentResult("slow-heads")
    params, limits, events = bench.params, bench.limits, result.events
    duration = math.ceil(params.pre_s + OPEN_BUDGET_S + limits.close_limit_s + params.post_s)
    _check_ttl(bench, duration)
    workers = bench.control.gateway_workers()
    result.notes["workers"] = workers
    with RssSampler(workers) as sampler:
        load = _start_load(bench, result, duration)
        try:
            sleep_until(events["load_start"] + params.pre_s)
            events["attack_start"] = time.time()
            wait_s = limits.close_limit_s + SOCKET_WAIT_EXTRA_S
            records = slow_heads(gateway_address(bench.settings), params.sockets, wait_s)
            closes = [r.closed_at for r in records if r.closed_at is not None]
            opened = [r for r in records if r.opened_at is not None]
            everything_closed = closes and len(closes) == len(opened)
            events["attack_end"] = max(closes) if everything_closed else time.time()
        finally:
            _end_load(load, duration, result)
    kept = bench.control.gateway_workers() == workers
    result.notes["workers_after"] = bench.control.gateway_workers()
    sockets = hc.socket_figures(records, limits.head_deadline_s)
    rss = hc.rss_figures(sampler.samples, events["attack_start"], events["attack_end"])
    result.figures = {
        "sockets": sockets,
        "rss": rss,
        "peak_fds": sampler.peak_fds(),
        "close_s": [r.as_dict() for r in records],
    }
    result.windows = read_windows(
        bench.influx, _where(params.run_id, result.name), _windows(events, "attack")
    )
    during = result.windows["during"]
    result.checks = [
        hc.close_check(sockets, limits),
        hc.rss_check(rss, kept, limits),
        hc.reads_check(during, "during the attack", limits.read_p95_ms),
        hc.reuse_check(during),
    ]
    return result


def _windows(events: dict[str, float], what: str) -> dict[str, tuple[float, float]]:
    start, end = events[f"{what}_start"], events[f"{what}_end"]
    return {
        "before": (events["load_start"] + WARMUP_S, start),
        "during": (start, end),
        "after": (end, events["load_end"]),
    }


# ---- cold flood -------------------------------------------------------------------------
def flood_emails(run_id: str, count: int) -> list[str]:
    """`count` distinct emails that no seeded row has (the seeder's domains are
    real-looking ones; .invalid is reserved)."""
    return [f"flood-{run_id}-{i}@{FLOOD_DOMAIN}" for i in range(count)]


def emails_in_table(conn: psycopg.Connection, run_id: str) -> int:
    # count(1), not count(*): a statement parsed like the gateway's would share
    # its pg_stat_statements entry.
    pattern = f"flood-{run_id}-".replace("\\", "\\\\").replace("_", r"\_") + "%"
    row = conn.execute("SELECT count(1) FROM users WHERE email LIKE %s", (pattern,)).fetchone()
    return int(row[0]) if row else 0


def count_query_calls(conn: psycopg.Connection) -> int:
    """Executions of the gateway's count queries in this database, as PostgreSQL
    counted them (a batch of emails is one)."""
    row = conn.execute(
        "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s "
        "JOIN pg_database d ON d.oid = s.dbid "
        "WHERE d.datname = current_database() AND s.query = ANY(%s)",
        (list(GATEWAY_COUNT_QUERIES),),
    ).fetchone()
    return int(row[0]) if row else 0


def poll_until_still(
    read: Callable[[], float], quiet_s: float, deadline_s: float, interval_s: float = POLL_S
) -> list[hc.Reading]:
    """Read a counter every `interval_s` until it has not risen for `quiet_s`, or
    for at most `deadline_s`; every reading, the first taken at once."""
    readings: list[hc.Reading] = []
    end = time.monotonic() + deadline_s
    while True:
        readings.append((time.time(), float(read())))
        if hc.still_for(readings, quiet_s) or time.monotonic() >= end:
            return readings
        time.sleep(interval_s)  # the polling pace


def gateway_counters(settings: Settings) -> dict[str, Any]:
    """The gateway's own counters the flood moves, summed over its workers."""
    text = gateway_metrics.scrape(settings)

    def by(name: str, label: str) -> dict[str, float]:
        return gateway_metrics.summed_by(text, name, lambda labels: labels.get(label, ""))

    return {
        "db_queries": by("aside_gateway_db_queries_total", "query"),
        "shed": by("aside_gateway_shed_total", "reason"),
        "batched_emails": gateway_metrics.unlabelled_value(
            text, "aside_gateway_miss_batch_size_sum"
        ),
        "count_answers": {
            status: n
            for (route, _, status), n in gateway_metrics.request_counts(text).items()
            if route == COUNT_ROUTE
        },
        "count_hits": by("aside_gateway_cache_hits_total", "route").get(COUNT_ROUTE, 0.0),
    }


def counter_increase(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What the flood added to each of gateway_counters' figures, and the flood's
    reads a Flask thread ran, by answer: every count answered but the hits (the
    k6 reads are all hits; shed reads are not counted as requests)."""
    found: dict[str, Any] = {}
    for name in ("db_queries", "shed", "count_answers"):
        keys = set(before[name]) | set(after[name])
        found[name] = {k: after[name].get(k, 0) - before[name].get(k, 0) for k in sorted(keys)}
    for name in ("batched_emails", "count_hits"):
        found[name] = (after[name] or 0) - (before[name] or 0)
    ran = dict(found["count_answers"])
    ran["200"] = ran.get("200", 0) - found["count_hits"]
    found["flood_ran"] = {status: n for status, n in ran.items() if n}
    return found


def run_cold_flood(bench: Bench) -> ExperimentResult:
    result = ExperimentResult("cold-flood")
    params, events, settings = bench.params, result.events, bench.settings
    duration = math.ceil(params.pre_s + params.flood_deadline_s + params.post_s)
    _check_ttl(bench, duration)
    emails = flood_emails(params.run_id, params.emails)
    count_url = f"{settings.gateway_url}/api/v1/users/count"
    with connect(settings) as conn:
        result.notes["flood_emails_in_table"] = emails_in_table(conn, params.run_id)
        load = _start_load(bench, result, duration)
        try:
            sleep_until(events["load_start"] + params.pre_s)
            calls_before = count_query_calls(conn)
            counters_before = gateway_counters(settings)
            events["flood_start"] = time.time()
            flood = cold_flood(
                count_url,
                emails,
                params.concurrency,
                params.client_timeout_ms / 1000,
                params.flood_deadline_s,
            )
            events["flood_end"] = flood.ended
            readings = poll_until_still(lambda: count_query_calls(conn), QUIET_S, SETTLE_DEADLINE_S)
            counters = counter_increase(counters_before, gateway_counters(settings))
        finally:
            _end_load(load, duration, result)
    settle = hc.settle_figures(readings, events["flood_end"], QUIET_S)
    result.figures = {
        "flood": flood.as_dict(),
        "queries_before_flood_end": readings[0][1] - calls_before,
        "settle": settle,
        "gateway_counters": counters,
        "readings": [[round(t - events["flood_end"], 3), v] for t, v in readings],
    }
    result.windows = read_windows(
        bench.influx, _where(params.run_id, result.name), _windows(events, "flood")
    )
    result.checks = [
        hc.settle_check(settle, bench.limits),
        hc.reads_check(result.windows["during"], "during the flood"),
    ]
    if result.notes["flood_emails_in_table"]:
        result.checks.append(
            hc.Check("the flood's emails are in no row", False, "some are in the table")
        )
    return result


RUNNERS: dict[str, Callable[[Bench], ExperimentResult]] = {
    "slow-heads": run_slow_heads,
    "cold-flood": run_cold_flood,
}


# ---- the run ----------------------------------------------------------------------------
def run_hardening(settings: Settings, params: HardeningParams, seed: SeedData) -> dict[str, Any]:
    control = ServiceControl(settings)
    control.verify()
    gateway = gateway_settings(control.pid("gateway"))
    limits = hc.Limits(
        head_deadline_s=gateway["GATEWAY_HEAD_TIMEOUT_S"],
        rss_growth_mib=params.rss_growth_mib,
        read_p95_ms=params.read_p95_ms,
    )
    influx = Influx(settings.influx_base, settings.influx_db)
    bench = Bench(settings, params, seed, control, influx, limits, gateway)
    params.out_dir.mkdir(parents=True)
    run: dict[str, Any] = {
        **run_header(params.run_id, "hardening", seed.meta),
        "params": _params_record(params, settings, control, gateway, len(seed.hot)),
        "limits": {
            "head_deadline_s": limits.head_deadline_s,
            "close_limit_s": limits.close_limit_s,
            "rss_growth_mib": limits.rss_growth_mib,
            "read_p95_ms": limits.read_p95_ms,
            "settle_s": limits.settle_s,
        },
        "experiments": [],
    }
    print(
        f"hardening {params.run_id}: {' '.join(params.experiments)} under {params.rate} cached "
        f"reads/s -> {params.out_dir}/",
        flush=True,
    )
    for name in params.experiments:
        print(f"[{name}] {DESCRIPTIONS[name]} ...", flush=True)
        try:
            result = RUNNERS[name](bench)
        except (
            StackError,
            SourceError,
            psycopg.Error,
            redis.RedisError,
            requests.RequestException,
        ) as error:
            result = ExperimentResult(name, error=str(error))
        run["experiments"].append(result.as_dict())
    run["passed"] = all(e["passed"] for e in run["experiments"])
    write_report(run, params.out_dir)
    for experiment in run["experiments"]:
        print(f"{experiment['name']}: {one_line(experiment)}", flush=True)
    return run


def _params_record(
    params: HardeningParams,
    settings: Settings,
    control: ServiceControl,
    gateway: dict[str, Any],
    hot_emails: int,
) -> dict[str, Any]:
    return {
        "experiments": list(params.experiments),
        "rate": params.rate,
        "vus": params.vus,
        "pre_s": params.pre_s,
        "post_s": params.post_s,
        "sockets": params.sockets,
        "emails": params.emails,
        "concurrency": params.concurrency,
        "client_timeout_ms": params.client_timeout_ms,
        "flood_deadline_s": params.flood_deadline_s,
        "read_timeout_s": READ_TIMEOUT_S,
        "hot_emails": hot_emails,
        "gateway_url": settings.gateway_url,
        "run_dir": str(control.stack.run_dir),
        "gateway": gateway,
        "workers": len(control.gateway_workers()),
    }
