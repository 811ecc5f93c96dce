"""The fault suite's report.md and report.json in reports/chaos-<run id>/, and its tables."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from aside_bench.report.tables import Table
from aside_bench_suite.base import ItemRecord, SuiteRun, item_section, save_report, suite_page
from aside_bench_suite.samples import READS, KindTally, fmt_s

from aside_bench_chaos.checks import CORE_DOWN_MAX_MS, DB_DOWN_MAX_MS, RECOVER_S, REPLACE_S
from aside_bench_chaos.verify import CheckFigures


class CaseRecord(ItemRecord):  # a case as report.json holds it (cases.CaseResult's record)
    description: str
    events: dict[str, float]
    notes: dict[str, object]
    requests: dict[str, KindTally]
    figures: Mapping[str, Any]  # the case's own; read by name, each where it is known
    writes: CheckFigures
    reads: CheckFigures


def one_line(case: CaseRecord) -> str:
    if case["error"]:
        return f"ERROR: {case['error']}"
    failed = [c["name"] for c in case["checks"] if not c["ok"]]
    verdict = "passed" if not failed else "FAILED: " + "; ".join(failed)
    return f"{_recovery(case)}  {verdict}"


def _recovery(case: CaseRecord) -> str:
    f = case["figures"]
    name = case["name"]
    if name == "redis":
        return (
            f"first HIT {fmt_s(f.get('first_hit_after_ready_s'))}, hit ratio back "
            f"{fmt_s(f.get('hit_ratio_back_after_ready_s'))} after Redis ready"
        )
    if "steady_p95_again_after_s" in f:  # a gray failure
        return (
            f"read p99 {f.get('read_p99_during_fault_ms')} ms over the fault, steady p95 "
            f"again {fmt_s(f.get('steady_p95_again_after_s'))} after it healed; "
            f"CPU: driver {_cores(f.get('driver_cpu_cores'))}, "
            f"proxy {_cores(f.get('proxy_cpu_cores'))}"
        )
    if name == "core":
        return f"first 2xx write {fmt_s(f.get('first_2xx_write_after_ready_s'))} after core ready"
    if name.startswith("cluster-"):
        return (
            f"reads from the new owner {fmt_s(f.get('served_by_new_owner_after_s'))}, "
            f"event {fmt_s(f.get('event_s'))}"
        )
    if name == "postgres":
        return (
            f"first write {fmt_s(f.get('first_2xx_write_after_ready_s'))}, first miss "
            f"{fmt_s(f.get('first_miss_after_ready_s'))} after PostgreSQL ready"
        )
    return f"worker replaced in {fmt_s(f.get('worker_replaced_after_s'))}"


def _cores(value: object) -> str:
    return f"{value:.2f} of a core" if isinstance(value, int | float) else "-"


def status_table(case: CaseRecord) -> Table:
    kinds = case["requests"]
    statuses = sorted(
        {s for k in kinds.values() for s in k["statuses"]}, key=lambda s: (s == "no answer", s)
    )
    headers = ["kind", "requests", *statuses, "max ms", "p99 ms", "error codes"]
    rows = []
    for kind, k in kinds.items():
        codes = ", ".join(f"{code} {n}" for code, n in k["codes"].items()) or "-"
        counts = (str(k["statuses"].get(s, 0)) for s in statuses)
        times = f"{k['max_ms']:.0f}", f"{k['p99_ms']:.0f}"
        rows.append([kind, str(k["requests"]), *counts, *times, codes])
    return Table(f"{case['name']}: requests by status", headers, rows)


def _timeline(case: CaseRecord) -> str:
    events = case["events"]
    start = events.get("load_start")
    if start is None:
        return ""
    parts = [
        f"{name} +{events[name] - start:.2f} s"
        for name in ("fault", "stopped", "replaced", "restore", "ready", "restored", "load_end")
        if name in events
    ]
    return "timeline from the first request: " + ", ".join(parts)


def summary_table(run: SuiteRun) -> Table:
    headers = ["case", "requests", "non-2xx / no answer", "max read ms", "recovery",
               "writes checked", "reads checked", "verdict"]  # fmt: skip
    rows = []
    for case in cast(list[CaseRecord], run.items):
        kinds, w = case["requests"], case["writes"]
        total = sum(k["requests"] for k in kinds.values())
        statuses = [(status, n) for k in kinds.values() for status, n in k["statuses"].items()]
        failed = sum(n for status, n in statuses if not status.startswith("2"))
        max_read = max((kinds[k]["max_ms"] for k in READS if k in kinds), default=0)
        unacked, retried = w.get("committed_not_acknowledged", 0), w.get("retried", 0)
        writes = (
            f"{w.get('writes', 0)} ({unacked} committed unacked, {retried} retried)" if w else "-"
        )
        recovery = _recovery(case) if not case["error"] else "-"
        verdict = "pass" if case["passed"] else "FAIL"
        reads = str(case["reads"].get("reads", "-"))
        rows.append([case["name"], str(total), str(failed), f"{max_read:.0f}", recovery, writes,
                     reads, verdict])  # fmt: skip
    return Table("Chaos: every case", headers, rows)


def write_report(run: SuiteRun, out_dir: Path) -> list[Table]:
    params = run.params
    doc = suite_page("chaos", run)
    setup = [
        f"load: the load driver at a constant arrival rate of {params['rate']} req/s "
        f"through the gateway {params['gateway_url']}: {params['write_share']:.0%} creates "
        f"with an Idempotency-Key, the rest cached reads ({params['user_share']:.0%} by id of "
        f"{params['id_sample']} seeded ids, the others counts of the "
        f"{params['hot_emails']} hot emails); request timeout {params['timeout_s']} s; "
        "a new connection per request",
        f"each case: {params['pre_s']:g} s of load, the fault, {params['down_s']:g} s "
        f"down, the restart, then about {params['post_s']:g} s more load",
        f"table: {run.seed.get('rows')} rows; stack under {params['run_dir']}",
    ]
    doc.ul(setup)
    tables = [summary_table(run)]
    doc.table(tables[0])
    for case in cast(list[CaseRecord], run.items):
        own = [status_table(case)] if case["requests"] else []
        tables += own
        title = f"{case['name']}: {case['description']}"
        item_section(doc, title, case, "case", own, [_timeline(case)] if case["events"] else [])
    doc.h(2, "What each case asserts")
    doc.ul(ASSERTIONS)
    return save_report(doc, run, out_dir, tables)


ASSERTIONS = [
    "every case: no read takes more than half the 3 s request timeout; every 2xx body is right "
    "and every error a JSON error body; the load driver drops no iteration; every request gets "
    "an answer (but in the worker case); every acknowledged write is in PostgreSQL once with "
    "its id, every other write is retried with its Idempotency-Key (a replay exactly when it "
    "had committed), after which every write exists once and has its key; every hot email's "
    "count and every user involved, read twice through the gateway, equal PostgreSQL",
    "redis: reads answer only 200 (served from PostgreSQL as X-Cache: BYPASS while Redis is "
    "down) or 503 with Retry-After; writes succeed; the first HIT and a hit ratio of 80% of the "
    "one before the fault, among re-reads (reads of a key already read since Redis came back), "
    f"come within {RECOVER_S:g} s of Redis answering, without a gateway restart",
    f"core: reads all 200; writes sent while it is down answer 503 core_unavailable within "
    f"{CORE_DOWN_MAX_MS} ms (one in flight at the kill: 504 write_outcome_unknown); every "
    "write after it answers again succeeds",
    "postgres: cached reads (by id) all 200, but after a Redis error in the gateway (its "
    "breaker then sends reads to PostgreSQL) fast 503s with Retry-After, counted; failed "
    f"misses and writes are 503/504 JSON within "
    f"{DB_DOWN_MAX_MS} ms; the first successful write and miss come within {RECOVER_S:g} s "
    "of PostgreSQL accepting connections, and nothing fails after that",
    f"worker: gunicorn replaces it within {REPLACE_S:g} s; only requests in flight on it at "
    "the kill go unanswered; the increase of aside_gateway_http_requests_total per route and "
    "status equals the driver's answered requests, plus at most the unanswered ones the killed "
    "worker had already counted",
]
