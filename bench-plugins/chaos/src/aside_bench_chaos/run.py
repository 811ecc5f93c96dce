"""`aside-bench chaos`: each case one fault under load, then its samples and PostgreSQL checked."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from urllib.parse import urlsplit

from aside_bench.load.run import LoadRun
from aside_bench.load.samples import compress
from aside_bench.load.summary import Summary
from aside_bench.stack import procs
from aside_bench.stack.config import Settings
from aside_bench.stack.gateway_metrics import cache_error_counts, request_counts, scrape
from aside_bench.stack.prepare import StackError, wait_until_quiet
from aside_bench.stack.seeddata import SeedData, load_seed_list
from aside_bench.stack.services import ServiceControl
from aside_bench.stack.toxiproxy import Proxies, Toxiproxy, proxied_urls, restored
from aside_bench_suite import base as suite
from aside_bench_suite.base import SuiteRun
from aside_bench_suite.samples import by_kind, read_samples

from aside_bench_chaos import cases, cluster, gray
from aside_bench_chaos import checks as cc
from aside_bench_chaos.cases import KILLS, SHORT, ChaosParams
from aside_bench_chaos.faults import Faults, under_load
from aside_bench_chaos.report import one_line, write_report
from aside_bench_chaos.verify import check_reads, check_writes, prewarm

__all__ = ["KILLS", "SHORT", "ChaosParams", "load_run", "parse_cases", "run_case", "run_chaos"]
QUIET_DEADLINE_S = 60.0


def parse_cases(text: str | None) -> tuple[str, ...]:
    """Named cases; none or "all": the four kills; "gray": the gray failures."""
    if text and text.strip() == "gray":
        return tuple(gray.GRAY_CASES)
    if not text or text.strip() == "all":
        return KILLS
    return suite.parse_names(text, cases.CASES, "case")


# ---- the load -------------------------------------------------------------------------
def load_run(
    params: ChaosParams, seed: SeedData, case: str, samples: Path, summary: Path
) -> LoadRun:
    """The driver's `chaos` scenario for one case, each request on a new connection
    (NO_REUSE): one a killed process was serving fails as itself, and none inherits it."""
    grayed = gray.GRAY_CASES.get(case)
    timeout_s = grayed.driver_timeout_s if grayed else params.timeout_s
    return LoadRun(
        scenario="chaos",
        run_id=params.run_id,
        arm="cache",
        phase=case,
        rate=params.rate,
        duration_s=params.timing.load_duration_s(case),
        # In flight at once: rate x latency; a fault may hold requests up to the timeout.
        pool=params.rate * (timeout_s + 1),
        timeout_s=timeout_s,
        data_dir=seed.data_dir,
        extra={
            "WRITE_SHARE": str(params.write_share),
            "USER_SHARE": str(params.user_share),
            "ID_SAMPLE": str(params.id_sample),
            "USER_PREFIX": suite.user_prefix(params.run_id, case),
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
    api: Toxiproxy | None = None,
) -> cases.CaseResult:
    if case in cases.CLUSTER_CASES:
        try:
            return cluster.run_cluster_case(settings, seed, control, params, case)
        finally:
            # The services back on the stack's own Redis, and the cluster as made, for the next.
            for service in ("core", "gateway"):
                control.restart(service, {})
            cluster.fresh_cluster(control)
    result, grayed = cases.CaseResult(case), gray.GRAY_CASES.get(case)
    ids = load_seed_list(seed.data_dir / "user_ids.json", "ids", int)[: params.id_sample]
    control.ensure_up()
    control.verify()
    wait_until_quiet(settings, QUIET_DEADLINE_S)
    result.notes["hit_share_after_prewarm"] = round(prewarm(settings, seed.hot, ids), 3)
    metrics_before = scrape(settings)
    samples_path = params.out_dir / f"load-{case}.jsonl"
    summary_path = params.out_dir / f"load-{case}-summary.json"
    run = load_run(params, seed, case, samples_path, summary_path)
    cpu = gray.CpuMeter.start(control.pid("toxiproxy")) if grayed else None
    faults, events = Faults(settings, control, api), result.events
    # A broken restore is reported once the load has run its course.
    with under_load(settings, run, params.out_dir / "load.log", events) as driver:
        suite.sleep_until(events["load_start"] + params.timing.pre_s)
        faults.inject(case, events, result.notes)
        suite.sleep_until(events["fault"] + params.timing.fault_s(case))
        faults.restore(case, events, result.notes)
    samples, dropped = read_samples(samples_path)
    compress(samples_path)
    if "ready" in events:
        result.notes["post_window_s"] = round(events["load_end"] - events["ready"], 1)
    result.requests = by_kind(samples)
    metrics_after = scrape(settings)
    errors = suite.increase(cache_error_counts(metrics_before), cache_error_counts(metrics_after))
    result.notes["gateway_cache_errors"] = errors
    tallies = result.notes["driver_summary"] = Summary.read(summary_path).counters("chaos")
    if case == "worker":
        loaded = cc.loaded_route_increase(
            request_counts(metrics_before), request_counts(metrics_after)
        )
        checks, worker = cc.worker_checks(samples, events, loaded)
        worker["loaded_route_increase"] = {" ".join(k): v for k, v in sorted(loaded.items())}
        result.figures = worker
    elif case == "postgres":
        redis_errors = sum(n for op, n in errors.items() if op != "breaker_open")
        checks, result.figures = cc.postgres_checks(samples, events, redis_errors)
    elif grayed:
        checks, found = gray.gray_checks(grayed, samples, events)
        result.figures = {**found, **(cpu.shares(driver.cpu_seconds) if cpu else {})}
    else:
        evaluate = {"redis": cc.redis_checks, "core": cc.core_checks}
        checks, result.figures = evaluate[case](samples, events)
    tallied = sum(tallies.values()) if tallies else None
    read_max_ms = grayed.read_max_ms if grayed else cc.READ_MAX_MS
    result.checks = cc.common_checks(samples, dropped, case == "worker", tallied, read_max_ms)
    prefix = suite.user_prefix(params.run_id, case)
    writes_check, result.writes, written_ids = check_writes(settings, samples, prefix)
    reads_check, result.reads = check_reads(settings, seed.hot, sorted(set(ids) | set(written_ids)))
    result.checks += [*checks, writes_check, reads_check]
    return result


# ---- the run -------------------------------------------------------------------------------
def run_chaos(settings: Settings, params: ChaosParams, seed: SeedData) -> SuiteRun:
    control = ServiceControl(settings)
    control.verify()
    _direct_again(settings, control)
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
    suite.open_run("chaos", params.run_id, params.out_dir, what)
    # The kills on the services' direct URLs, then the gray failures through the proxies.
    grays = tuple(case for case in params.cases if case in gray.GRAY_CASES)
    kills = tuple(case for case in params.cases if case not in grays)

    def run_cases(names: tuple[str, ...], api: Toxiproxy | None = None) -> None:
        suite.run_items(
            run,
            names,
            lambda case: run_case(settings, params, seed, control, case, api),
            lambda case, error: cases.CaseResult(case, error=error),
            cases.DESCRIPTIONS,
            lambda result: one_line(result.as_dict()),
            # After a failed case the next runs only on a stack that came back.
            go_on=lambda result: result.error is None or _restore_all(control),
        )

    try:
        if kills:
            run_cases(kills)
        if grays:
            with _through_proxies(settings, control, run) as api:
                run_cases(grays, api)
    finally:
        _restore_all(control)
        run.extra["removed_users"] = suite.remove_users(settings, params.run_id)
        run.passed = run.all_passed()
        write_report(run, params.out_dir)
    return run


def _direct_again(settings: Settings, control: ServiceControl) -> None:
    """No toxic and the services direct, whatever a killed run (no `finally`) left."""
    proxies = Proxies.from_env()
    Toxiproxy(proxies).clear()
    through = set(proxies.ports.values())
    routed = [
        service
        for service in ("gateway", "core")
        if urlsplit(procs.environ_value(control.pid(service), "REDIS_URL") or "").port in through
    ]
    if routed:
        print(f"aside-bench: {' and '.join(routed)} ran through the proxies: restarting direct")
        control.route(None)


@contextmanager
def _through_proxies(
    settings: Settings, control: ServiceControl, run: SuiteRun
) -> Iterator[Toxiproxy]:
    """The gateway and the core through the proxies; afterwards no toxic and both direct again."""
    proxies = Proxies.from_env()
    urls = proxied_urls(proxies, settings.database_url, settings.redis_url, control.stack.core_url)
    with restored(Toxiproxy(proxies)) as api:
        api.require_hops()
        run.extra["routed_through"] = proxies.ports
        try:
            control.route(urls)
            yield api
        finally:
            control.route(None)


def _restore_all(control: ServiceControl) -> bool:
    try:
        control.ensure_up()
        return True
    except StackError as error:
        print(f"aside-bench: the stack did not come back: {error}", file=sys.stderr)
        return False
