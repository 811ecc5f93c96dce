"""The `expiry` scenario's run: per rate and arm, keys filled at once, load across the TTL's end."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psycopg
import requests
from aside_bench.load.run import LoadRun, deadline_s, new_driver
from aside_bench.load.summary import Summary
from aside_bench.plan.steps import pool_cap, pool_for
from aside_bench.records.documents import Machine
from aside_bench.stack import gateway_metrics as metrics
from aside_bench.stack.config import Settings
from aside_bench.stack.machine import describe
from aside_bench.stack.prepare import StackError, connect, wait_until_quiet, warm_cache
from aside_bench.stack.seeddata import SeedData
from aside_bench.stack.services import ServiceControl

from aside_bench_expiry import plan as plan

# Threads of the fill, one a key up to this: every miss in flight at once, so the miss
# batcher answers them in a scan or two and every key is stored (and expires) within a second.
FILL_WORKERS = 512
SAMPLE_EVERY_S = 1.0
INDEX = "users_email_expiry_idx"
DB_QUERIES = "aside_gateway_db_queries_total"
# Rows scanned of users, whole or by pages (swr's TID range refreshes: not in seq_scan), its rows.
ROWS_SCANNED = (
    "SELECT s.seq_tup_read, c.reltuples FROM pg_stat_user_tables s"
    " JOIN pg_class c ON c.oid = s.relid WHERE s.relname = 'users'"
)


def read_counters(settings: Settings, conn: psycopg.Connection) -> plan.Reading:
    row = conn.execute(ROWS_SCANNED).fetchone()
    text = metrics.scrape(settings)
    queries = metrics.summed_by_label(text, DB_QUERIES, "query")
    return plan.Reading(
        t=time.time(),
        rows_scanned=int(row[0]) if row else 0,
        table_rows=float(row[1]) if row else 0.0,
        misses=metrics.tier_read_counts(text).get("l2 miss", 0.0),
        stale=sum(metrics.values_named_like(text, "stale_served")),
        early=sum(metrics.values_named_like(text, "early_refresh")),
        stale_age_max=max(metrics.values_named_like(text, "stale_age_max"), default=None),
        count_queries=sum(n for query, n in queries.items() if query.startswith("count")),
    )


class Sampler(threading.Thread):
    """read_counters once a second until stopped (a reading that fails is skipped)."""

    def __init__(self, settings: Settings):
        super().__init__(daemon=True)
        self.settings = settings
        self.readings: list[plan.Reading] = []
        self.halt = threading.Event()

    def run(self) -> None:
        with connect(self.settings) as conn:
            self._read(conn)
            while not self.halt.wait(SAMPLE_EVERY_S):
                self._read(conn)
            self._read(conn)  # the last, after the load

    def _read(self, conn: psycopg.Connection) -> None:
        try:
            self.readings.append(read_counters(self.settings, conn))
        except (StackError, psycopg.Error, requests.RequestException) as error:
            print(f"  warning: a reading failed: {error}", flush=True)

    def stop(self) -> list[plan.Reading]:
        self.halt.set()
        self.join(timeout=30)
        return self.readings


def set_index(settings: Settings, present: bool) -> None:
    """The scenario's own email index, built or dropped (never the seeder's)."""
    create = f"CREATE INDEX IF NOT EXISTS {INDEX} ON users (email)"
    with connect(settings) as conn:
        conn.execute(create if present else f"DROP INDEX IF EXISTS {INDEX}")
        conn.execute("ANALYZE users")


@dataclass
class ExpiryOptions:
    run_id: str
    out_dir: Path
    rates: list[int]
    arms: list[plan.Arm]
    ttl_s: int
    max_pool: int
    timeout_s: int
    recover_timeout_s: float
    hot_share: float
    cold_sample: int
    live: bool = False


class ExpiryRun:
    def __init__(self, settings: Settings, seed: SeedData, options: ExpiryOptions):
        self.settings = settings
        self.seed = seed
        self.options = options
        self.control = ServiceControl(settings)
        self.gateway: dict[str, str] | None = None
        self.results: list[plan.ArmRun] = []
        self.machine = Machine(**describe())

    def _gateway_for(self, arm: plan.Arm) -> None:
        wanted = plan.gateway_env(arm, self.options.ttl_s)
        if wanted and wanted != self.gateway:
            self.control.verify(("gateway",))
            self.control.restart("gateway", wanted)
            self.gateway = wanted

    def _driver(self, arm: plan.Arm, rate: int, seconds: int, index: int) -> LoadRun:
        opts = self.options
        cap = pool_cap(opts.max_pool, metrics.connection_bound(self.settings))
        return LoadRun(
            scenario="read",
            run_id=opts.run_id,
            arm=arm.label,
            phase="expiry",
            rate=rate,
            duration_s=seconds,
            pool=pool_for(rate, cap),
            timeout_s=opts.timeout_s,
            data_dir=self.seed.data_dir,
            extra={
                "CACHE": arm.cache,
                "HOT_SHARE": str(opts.hot_share),
                "COLD_SAMPLE": str(opts.cold_sample),
            },
            summary_path=opts.out_dir / f"summary-{index:03d}.json",
            samples_path=opts.out_dir / f"samples-{index:03d}-{arm.label}-{rate}.jsonl",
            live=opts.live,
        )

    def run_arm(self, arm: plan.Arm, rate: int) -> plan.ArmRun:
        self._gateway_for(arm)
        wait_until_quiet(self.settings, self.options.recover_timeout_s)
        cached = arm.mode is not None
        started = time.time()
        emails = self.seed.read_emails(self.options.cold_sample)
        fill = warm_cache(self.settings, emails, min(len(emails), FILL_WORKERS)) if cached else {}
        lead_s = plan.windows_for(self.options.ttl_s).lead_s
        ttl = self.options.ttl_s if cached else plan.NOCACHE_S + lead_s
        result = plan.ArmRun(arm.label, arm.mode, arm.indexed, rate, started + ttl, fill=fill)
        result.load_s = plan.load_seconds(arm, self.options.ttl_s, time.time() - started)
        run = self._driver(arm, rate, result.load_s, len(self.results) + 1)
        sampler = Sampler(self.settings)
        sampler.start()
        result.load_start = time.time()
        if not cached:  # the reference's windows count from its own start
            result.expiry_at = result.load_start + ttl
        try:
            driver = new_driver(self.settings, run, self.options.out_dir / "load.log")
            code = driver.run_measured(deadline_s(run))
        finally:
            result.readings = sampler.stop()
        if code != 0:
            raise StackError(f"the load driver exited with {code}; see load.log")
        assert run.summary_path is not None and run.samples_path is not None
        summary = Summary.read(run.summary_path)
        result.summary = summary.step_figures("read") or {}
        result.driver_cpu_s = summary.cpu_s
        run.summary_path.unlink(missing_ok=True)
        result.samples = run.samples_path.name
        return result

    def run_all(self) -> None:
        total = len(self.options.rates) * len(self.options.arms)
        try:
            for rate in self.options.rates:
                indexed = False
                for arm in self.options.arms:
                    if arm.indexed != indexed:
                        set_index(self.settings, arm.indexed)
                        indexed = arm.indexed
                    head = f"[{len(self.results) + 1}/{total}] expiry {arm.label:<14} @ {rate}/s"
                    print(f"{head} ...", flush=True)
                    self.results.append(self.run_arm(arm, rate))
                    self.save()
                    print(f"{head}  {_quick(self.results[-1])}", flush=True)
                if indexed:
                    set_index(self.settings, False)
        finally:
            set_index(self.settings, False)
            if self.gateway is not None:
                self.control.restart("gateway", {})

    def save(self) -> None:
        record = {
            "run_id": self.options.run_id,
            "kind": plan.SCENARIO,
            "params": plan.RunParams(
                run_id=self.options.run_id,
                machine=self.machine,
                rates=self.options.rates,
                arms=[a.label for a in self.options.arms],
                ttl_s=self.options.ttl_s,
                windows=asdict(plan.windows_for(self.options.ttl_s)),
                hot_count=len(self.seed.hot),
                cold_sample=self.options.cold_sample,
                hot_share=self.options.hot_share,
            ),
            "arms": [asdict(r) for r in self.results],
        }
        (self.options.out_dir / "run.json").write_text(json.dumps(record, indent=1))


def _quick(result: plan.ArmRun) -> str:
    figures = result.summary
    fill = f"  fill {result.fill['fill_s']} s" if result.fill else ""
    return (
        f"p99 {figures.get('p99')} ms  failed {figures.get('failed')}  "
        f"dropped {figures.get('dropped')}{fill}"
    )
