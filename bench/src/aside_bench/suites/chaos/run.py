"""`aside-bench chaos`: each case one fault (redis, core, postgres, worker) under the
driver's `chaos` scenario, the service restored, then the samples and PostgreSQL
checked (docs/bench/suites.md, "Chaos")."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from aside_bench.load.run import LoadRun, deadline_s, start_driver
from aside_bench.load.samples import compress
from aside_bench.load.summary import Summary
from aside_bench.stack.config import Settings
from aside_bench.stack.gateway_metrics import cache_errors, request_counters
from aside_bench.stack.prepare import StackError, wait_until_quiet
from aside_bench.stack.seeddata import SeedData, load_seed_list, user_prefix
from aside_bench.stack.services import ServiceControl
from aside_bench.suites.base import (
    SuiteResult,
    SuiteRun,
    increase,
    open_run,
    parse_names,
    remove_users,
    run_items,
    sleep_until,
)
from aside_bench.suites.chaos import checks as cc
from aside_bench.suites.chaos import cluster
from aside_bench.suites.chaos.faults import Faults
from aside_bench.suites.chaos.report import one_line, write_report
from aside_bench.suites.chaos.verify import check_reads, check_writes, prewarm
from aside_bench.suites.samples import by_kind, read_samples

CASES = ("redis", "core", "postgres", "worker")
# The cluster cases run only when named: they need the stack's Redis Cluster.
NAMED_CASES = (*CASES, *cluster.CASES)
DESCRIPTIONS = {
    "redis": "Redis killed (SIGKILL) and restarted",
    "core": "the core killed (SIGKILL) and restarted",
    "postgres": "PostgreSQL stopped (fast shutdown) and restarted",
    "worker": "one gunicorn worker killed (SIGKILL)",
    **cluster.DESCRIPTIONS,
}
# Seconds infra/stack.sh takes to bring each service back, budgeted into the load's duration.
RESTORE_BUDGET_S = {"redis": 1.0, "core": 1.0, "postgres": 2.0, "worker": 0.0}
LOAD_START_DEADLINE_S = 60.0
QUIET_DEADLINE_S = 60.0


@dataclass(frozen=True)
class Timing:
    pre_s: float  # load before the fault
    down_s: float  # from the fault to the restart
    post_s: float  # load after the service is back

    def load_duration_s(self, case: str) -> int:
        return int(self.pre_s + self.down_s + RESTORE_BUDGET_S[case] + self.post_s + 0.999)


FULL = Timing(pre_s=8, down_s=6, post_s=12)
SHORT = Timing(pre_s=3, down_s=2, post_s=5)


@dataclass(frozen=True)
class ChaosParams:
    run_id: str
    out_dir: Path
    cases: tuple[str, ...]
    rate: int
    timing: Timing
    write_share: float = 0.2
    user_share: float = 0.5
    id_sample: int = 50

    @property
    def timeout_s(self) -> int:
        return cc.REQUEST_TIMEOUT_S


@dataclass
class CaseResult(SuiteResult):
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)  # by kind
    figures: dict[str, Any] = field(default_factory=dict)
    writes: dict[str, Any] = field(default_factory=dict)
    reads: dict[str, Any] = field(default_factory=dict)

    descriptions: ClassVar[dict[str, str]] = DESCRIPTIONS


def parse_cases(text: str | None) -> tuple[str, ...]:
    if not text or text.strip() == "all":
        return CASES
    return parse_names(text, NAMED_CASES, "case")


# ---- the load -------------------------------------------------------------------------
def load_run(
    params: ChaosParams, seed: SeedData, case: str, samples: Path, summary: Path
) -> LoadRun:
    """The driver's `chaos` scenario for one case: every request on a new
    connection, each a line of `samples`, the tallies in `summary`.

    A new connection per request (NO_REUSE): a request on a connection a killed
    process was serving then fails as itself, and no later request inherits the
    broken connection."""
    rate = params.rate
    return LoadRun(
        scenario="chaos",
        run_id=params.run_id,
        arm="cache",
        phase=case,
        rate=rate,
        duration_s=params.timing.load_duration_s(case),
        # In flight at once: rate x latency; a fault may hold requests up to the timeout.
        pool=rate * (params.timeout_s + 1),
        timeout_s=params.timeout_s,
        data_dir=seed.data_dir,
        extra={
            "WRITE_SHARE": str(params.write_share),
            "USER_SHARE": str(params.user_share),
            "ID_SAMPLE": str(params.id_sample),
            "USER_PREFIX": user_prefix(params.run_id, case),
            "NO_REUSE": "1",
        },
        summary_path=summary,
        samples_path=samples,
        # The verdicts come from the samples file; nothing reads per-second points.
    )


# ---- one case ---------------------------------------------------------------------------------
def run_case(
    settings: Settings,
    params: ChaosParams,
    seed: SeedData,
    control: ServiceControl,
    case: str,
) -> CaseResult:
    result = CaseResult(case)
    if case in cluster.CASES:
        try:
            cluster.run_cluster_case(
                settings, seed, control, case, params.run_id, params.rate, params.out_dir, result
            )
        finally:
            # The services back on the stack's own Redis, and the cluster as
            # it was made, for the next case.
            for service in ("core", "gateway"):
                control.restart(service, {})
            cluster.fresh_cluster(control)
        return result
    faults = Faults(settings, control)
    ids = load_seed_list(seed.data_dir / "user_ids.json", "ids", int)[: params.id_sample]
    control.ensure_up()
    control.verify()
    wait_until_quiet(settings, QUIET_DEADLINE_S)
    result.notes["hit_share_after_prewarm"] = round(prewarm(settings, seed.hot, ids), 3)
    counters_before = request_counters(settings) if case == "worker" else {}
    errors_before = cache_errors(settings)
    samples_path = params.out_dir / f"load-{case}.jsonl"
    summary_path = params.out_dir / f"load-{case}-summary.json"
    log_path = params.out_dir / "load.log"
    run = load_run(params, seed, case, samples_path, summary_path)
    load = start_driver(settings, run, log_path)
    first = load.first_request(samples_path, LOAD_START_DEADLINE_S)
    events = result.events
    events["load_start"] = float(first["t"])
    try:
        sleep_until(events["load_start"] + params.timing.pre_s)
        faults.inject(case, events, result.notes)
        sleep_until(events["fault"] + params.timing.down_s)
        faults.restore(case, events, result.notes)
    finally:
        # The load runs its course whatever happened; a broken restore is reported below.
        code = load.wait(deadline_s(run))
        events["load_end"] = time.time()
    if code != 0:
        raise StackError(f"the load driver exited with {code} in case {case}; see {log_path}")
    samples, dropped = read_samples(samples_path)
    compress(samples_path)
    if "ready" in events:
        result.notes["post_window_s"] = round(events["load_end"] - events["ready"], 1)
    result.requests = by_kind(samples)
    errors = increase(errors_before, cache_errors(settings))
    result.notes["gateway_cache_errors"] = errors
    redis_errors = sum(n for op, n in errors.items() if op != "breaker_open")
    result.notes["driver_summary"] = Summary.read(summary_path).counters("chaos")
    if case == "worker":
        loaded = cc.loaded_route_increase(counters_before, request_counters(settings))
        checks, figures = cc.worker_checks(samples, events, loaded)
        figures["loaded_route_increase"] = {" ".join(k): v for k, v in sorted(loaded.items())}
    elif case == "postgres":
        checks, figures = cc.postgres_checks(samples, events, redis_errors)
    else:
        evaluate = {"redis": cc.redis_checks, "core": cc.core_checks}
        checks, figures = evaluate[case](samples, events)
    result.figures = figures
    tallies = result.notes["driver_summary"]
    tallied = sum(tallies.values()) if tallies else None
    result.checks = cc.common_checks(samples, dropped, case == "worker", tallied) + checks
    writes_check, result.writes = check_writes(settings, samples, user_prefix(params.run_id, case))
    written_ids = result.writes.pop("ids")
    reads_check, result.reads = check_reads(settings, seed.hot, sorted(set(ids) | set(written_ids)))
    result.checks += [writes_check, reads_check]
    return result


# ---- the run -------------------------------------------------------------------------------
def run_chaos(settings: Settings, params: ChaosParams, seed: SeedData) -> SuiteRun:
    control = ServiceControl(settings)
    control.verify()
    run = SuiteRun(
        params.run_id,
        "chaos",
        seed.meta,
        params={
            "cases": list(params.cases),
            "rate": params.rate,
            **asdict(params.timing),
            "timeout_s": params.timeout_s,
            "write_share": params.write_share,
            "user_share": params.user_share,
            "id_sample": params.id_sample,
            "hot_emails": len(seed.hot),
            "gateway_url": settings.gateway_url,
            "run_dir": str(control.stack.run_dir),
        },
        limits=cc.LIMITS,
    )
    what = f"{' '.join(params.cases)} at {params.rate} req/s"
    open_run("chaos", params.run_id, params.out_dir, what)
    try:
        run_items(
            run,
            params.cases,
            lambda case: run_case(settings, params, seed, control, case),
            lambda case, error: CaseResult(case, error=error),
            DESCRIPTIONS,
            one_line,
            # After a failed case the next runs only on a stack that came back.
            go_on=lambda result: result.error is None or _restore_all(control),
        )
    finally:
        _restore_all(control)
        run.extra["removed_users"] = remove_users(settings, params.run_id)
        run.passed = run.all_passed()
        write_report(run, params.out_dir)
    return run


def _restore_all(control: ServiceControl) -> bool:
    try:
        control.ensure_up()
        return True
    except StackError as error:
        print(f"aside-bench: the stack did not come back: {error}", file=sys.stderr)
        return False
