"""`aside-bench soak`: a long steady load; each process's memory and fds, idempotency_keys' rows."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from aside_bench.load.run import LoadRun, new_driver
from aside_bench.load.summary import Summary, SummaryError
from aside_bench.plan.steps import PlanError, parse_duration
from aside_bench.stack import procs
from aside_bench.stack.config import Settings
from aside_bench.stack.prepare import StackError, connect
from aside_bench.stack.seeddata import SeedData
from aside_bench.stack.services import ServiceControl
from aside_bench_suite.base import SuiteRun, open_run, remove_users, user_prefix
from aside_bench_suite.samples import SCENARIO, load_tallies

from aside_bench_soak import growth
from aside_bench_soak.report import write_report


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
    # "gateway", or "core": the core's API directly (lab profile, no CORE_TOKEN)
    via: str = "gateway"


def load_run(settings: Settings, params: SoakParams, seed: SeedData, summary_path: Path) -> LoadRun:
    return LoadRun(
        scenario=SCENARIO,
        run_id=params.run_id,
        arm="cache",
        phase="soak",
        rate=params.rate,
        duration_s=params.duration_s,
        # Room for 2 s of latency at the rate before an iteration is dropped.
        pool=params.rate * 2 + 10,
        timeout_s=params.timeout_s,
        data_dir=seed.data_dir,
        extra={
            "WRITE_SHARE": str(params.write_share),
            "USER_PREFIX": user_prefix(params.run_id, "soak"),
            "NO_REUSE": "0",
        },
        base_url=target_url(settings, params),
        summary_path=summary_path,
        # Nothing per second or per request: no output of the load grows over the soak.
    )


def target_url(settings: Settings, params: SoakParams) -> str:
    return settings.core_url if params.via == "core" else settings.gateway_url


# The knobs report.json records, as SoakParams names them.
RECORDED_PARAMS = ("rate", "duration_s", "warmup_s", "interval_s", "write_share")
# The core's defaults (contracts/idempotency.json) when its environment sets none.
KEY_SETTINGS = {"CORE_IDEMPOTENCY_TTL": "24h", "CORE_IDEMPOTENCY_PURGE_INTERVAL": "1m"}
# A count(*) of a table the purge keeps small takes ms; one stuck on a lock must not stall sampling.
COUNT_TIMEOUT_MS = 2000


def key_settings_s(core_pid: int) -> tuple[int, int] | None:
    """The core's key TTL and purge interval in s, from its environment (None: unreadable)."""
    ttl, interval = (
        procs.environ_value(core_pid, name) or default for name, default in KEY_SETTINGS.items()
    )
    try:
        return parse_duration(ttl), parse_duration(interval)
    except PlanError:
        return None


class KeyCounter:
    """idempotency_keys' rows, all and older than `overdue_after_s`; reconnects after a failure."""

    def __init__(self, settings: Settings, overdue_after_s: float | None) -> None:
        self.settings = settings
        self.overdue_after_s = overdue_after_s
        self.conn: psycopg.Connection | None = None

    def count(self) -> tuple[int | None, int | None]:
        try:
            if self.conn is None or self.conn.closed:
                self.conn = connect(self.settings)
                timeout = (str(COUNT_TIMEOUT_MS),)
                self.conn.execute("SELECT set_config('statement_timeout', %s, false)", timeout)
            row = self.conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE created_at < now() - "
                "make_interval(secs => %s)) FROM idempotency_keys",
                (self.overdue_after_s or 0,),
            ).fetchone()
        except (StackError, psycopg.Error):
            self.close()
            row = None
        if row is None:
            return None, None
        return int(row[0]), None if self.overdue_after_s is None else int(row[1])

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def take_sample(pids: dict[str, int]) -> dict[str, dict[str, int] | None]:
    ppids = procs.parents()
    trees = {service: procs.sample_tree(pid, ppids) for service, pid in pids.items()}
    return {service: None if t is None else asdict(t) for service, t in trees.items()}


def run_soak(settings: Settings, params: SoakParams, seed: SeedData) -> SuiteRun:
    control = ServiceControl(settings)
    control.verify()
    pids = {service: control.pid(service) for service in procs.SERVICES}
    summary_path = params.out_dir / "load-summary.json"
    log_path = params.out_dir / "load.log"
    driver_run = load_run(settings, params, seed, summary_path)
    what = (
        f"{params.rate} req/s for {params.duration_s} s, a sample every "
        f"{params.interval_s:g} s, warm-up {params.warmup_s:g} s"
    )
    open_run("soak", params.run_id, params.out_dir, what)
    key_settings = key_settings_s(pids["core"])
    lifetime_s = None if key_settings is None else sum(key_settings)
    # A working purge deletes a key within TTL + an interval (+ its own time): after two, overdue.
    overdue_after_s = None if key_settings is None else key_settings[0] + 2 * key_settings[1]
    keys = KeyCounter(settings, overdue_after_s)
    samples: list[growth.SoakSample] = []
    started = time.time()
    load = new_driver(settings, driver_run, log_path).start()
    try:
        next_at = time.monotonic()
        last_print = 0.0
        while load.running:
            samples.append(growth.SoakSample(time.time(), take_sample(pids), *keys.count()))
            elapsed = time.time() - started
            if elapsed - last_print >= 60:
                last_print = elapsed
                print(f"  {elapsed:5.0f} s: {_progress(samples[-1])}", flush=True)
            next_at += params.interval_s
            while load.running and time.monotonic() < next_at:
                time.sleep(min(0.1, max(next_at - time.monotonic(), 0)))
    finally:
        load.stop()
        keys.close()
    removed = remove_users(settings, params.run_id)
    try:
        tallies, summary_error = load_tallies(Summary.read(summary_path)), None
    except SummaryError as error:  # the samples are worth a report all the same
        tallies, summary_error = {}, str(error)
    rows = growth.growth_table_rows(samples, list(pids), params.warmup_s, params.duration_s)
    key_row = growth.key_table_row(
        samples, params.warmup_s, params.duration_s, lifetime_s, params.rate * params.write_share
    )
    key_row.overdue_after_s = overdue_after_s
    run = SuiteRun(
        params.run_id,
        "soak",
        seed.meta,
        created=datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
        params={
            **{name: getattr(params, name) for name in RECORDED_PARAMS},
            "memory_growth_flag": growth.MEMORY_GROWTH_FLAG,
            "key_growth_flag": growth.KEY_GROWTH_FLAG,
            "window_share": growth.WINDOW_SHARE,
            "gateway_url": settings.gateway_url,
            "target_url": target_url(settings, params),
            "pids": pids,
        },
        items=[asdict(row) for row in rows],
        extra={
            "load_exit": load.returncode,
            "load": tallies,
            "removed_users": removed,
            "idempotency_keys": asdict(key_row),
            "flagged": [r.service for r in rows if r.flags]
            + (["idempotency_keys"] if key_row.flags else []),
            "samples": [asdict(sample) for sample in samples],
        },
    )
    write_report(run, params.out_dir)
    if load.returncode != 0:
        raise StackError(f"the load driver exited with {load.returncode}; see {log_path}")
    if summary_error is not None:
        raise StackError(summary_error)
    return run


def _progress(sample: growth.SoakSample) -> str:
    shown = [(s, r) for s in ("gateway", "core", "postgres", "redis") if (r := sample.procs.get(s))]
    parts = [f"{s} {r['rss_kib'] / 1024:.0f} MiB/{r['fds']} fds" for s, r in shown]
    return ", ".join([*parts, f"idempotency_keys {sample.idempotency_keys}"])
