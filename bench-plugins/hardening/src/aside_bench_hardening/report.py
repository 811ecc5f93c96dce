"""The hardening report: report.md and report.json in reports/hardening-<run id>/, a line each."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from aside_bench.report.tables import Table, fmt_num
from aside_bench_suite.base import ItemRecord, SuiteRun, item_section, save_report, suite_page
from aside_bench_suite.samples import fmt_mib, fmt_s

from aside_bench_hardening.checks import Figures, RssFigures, SocketFigures
from aside_bench_hardening.hostile import HostileRecord


class ExperimentRecord(ItemRecord):
    """An experiment as report.json holds it (run.ExperimentResult's record)."""

    description: str
    events: dict[str, float]
    notes: dict[str, object]
    figures: Mapping[str, Any]  # the experiment's own, read by name where it is known
    windows: dict[str, Figures]


# A worker's VmRSS figures, in the order of the tables' columns.
WORKER_KIB = ("before_kib", "peak_kib", "after_kib")
# The reads' window during each experiment's attack, as the page names it.
DURING = {
    "slow-heads": "during the attack",
    "cold-flood": "during the flood",
    "hostile": "during the hostile client",
}


def _during(experiment: ExperimentRecord) -> str:
    window = experiment["windows"].get("during")
    if not window:
        return "no reads"
    return (
        f"reads {DURING[experiment['name']]} p95 {fmt_num(window['p95_ms'])} ms, "
        f"{window['dropped']} dropped, {window['failed']} failed"
    )


def _rss(experiment: ExperimentRecord) -> RssFigures | None:
    found = experiment["figures"]["rss"]
    return RssFigures(**found) if found else None


def _workers_mib(experiment: ExperimentRecord) -> dict[str, list[str]]:
    """Each worker's VmRSS MiB in WORKER_KIB's order, by pid."""
    rss = _rss(experiment)
    per_worker = rss.per_worker if rss else {}
    return {pid: [fmt_mib(w[k]) for k in WORKER_KIB] for pid, w in per_worker.items()}


def _share(hostile: HostileRecord, unit: str = "") -> str:
    share = hostile.get("cpu_share")
    return "n/a" if share is None else f"{share:.1%}{unit}"


def _listed(counts: Mapping[str, float], spec: str = "", empty: str = "-") -> str:
    return ", ".join(f"{k} {v:{spec}}" for k, v in counts.items()) or empty


def figures_line(experiment: ExperimentRecord) -> str:
    f = experiment["figures"]
    if experiment["name"] == "slow-heads":
        sockets, rss = SocketFigures(**f["sockets"]), _rss(experiment)
        growth = (rss.peak_kib - rss.before_kib) / 1024 if rss else None
        return (
            f"{sockets.opened} sockets: max close {fmt_s(sockets.close_max_s)}, "
            f"{sockets.refused_503} answered 503 at connect; workers' RSS "
            + ("n/a" if growth is None else f"{growth:+.1f} MiB")
            + f"; {_during(experiment)}"
        )
    if experiment["name"] == "hostile":
        h = f["hostile"]
        return (
            f"parts {','.join(h.get('parts', []))}: "
            f"{h['pipelined_answered']} of {h['pipelined_sent']} pipelined answered, "
            f"/readyz {h['readyz']}, forged {h['forged']}; hostile process "
            f"{_share(h, ' of a core')}; {_during(experiment)}"
        )
    flood, settle = f["flood"], f["settle"]
    return (
        f"{flood['sent']} cold emails in {flood['duration_s']:.1f} s: "
        f"{f['queries_before_flood_end']:.0f} database queries during the flood, "
        f"{settle['queries_after'] or 0:.0f} after it, last rise "
        f"{fmt_s(settle['last_rise_after_s'])} after its end; {_during(experiment)}"
    )


def one_line(experiment: ExperimentRecord) -> str:
    if experiment["error"]:
        return f"ERROR: {experiment['error']}"
    failed = [c["name"] for c in experiment["checks"] if not c["ok"]]
    verdict = "PASS" if not failed else "FAIL (" + "; ".join(failed) + ")"
    return f"{verdict}  {figures_line(experiment)}"


def windows_table(experiment: ExperimentRecord) -> Table:
    during = DURING[experiment["name"]]
    rows = [
        [
            during if key == "during" else key,
            f"{w['seconds']:.1f}",
            str(w["reads"]),
            *(fmt_num(w[k]) for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms")),
            *(str(w[k]) for k in ("dropped", "failed", "new_connections")),
        ]
        for key, w in experiment["windows"].items()
    ]
    headers = ["window", "s", "reads", "p50 ms", "p95 ms", "p99 ms", "max ms", "dropped",
               "failed", "new connections"]  # fmt: skip
    return Table(f"{experiment['name']}: the driver's cached reads", headers, rows)


def sockets_table(experiment: ExperimentRecord) -> Table:
    s = SocketFigures(**experiment["figures"]["sockets"])
    held = (s.held_close_min_s, s.held_close_p50_s, s.held_close_p99_s, s.held_close_max_s)
    rows = [
        ["sockets opened", f"{s.opened} of {s.sockets}"],
        ["answered 503 at connect (worker full)", str(s.refused_503)],
        ["held until the server closed them", str(s.held)],
        ["still open at the end of the wait", str(s.still_open)],
        ["closed with a reset", str(s.resets)],
        ["close time, all: p99 / max", f"{fmt_s(s.close_p99_s)} / {fmt_s(s.close_max_s)}"],
        ["close time, held: min / p50 / p99 / max", " / ".join(fmt_s(v) for v in held)],
        ["could not connect", json.dumps(s.connect_errors) if s.connect_errors else "0"],
    ]
    return Table("slow-heads: the slow sockets", ["", "value"], rows)


def rss_table(experiment: ExperimentRecord) -> Table:
    f, rss = experiment["figures"], _rss(experiment)
    rows = [
        [f"worker {pid}", *mib, str(f["peak_fds"].get(pid, "n/a"))]
        for pid, mib in _workers_mib(experiment).items()
    ]
    if rss:
        summed = (rss.before_kib, rss.peak_kib, rss.after_kib)
        rows.append(["all workers", *map(fmt_mib, summed), str(sum(f["peak_fds"].values()))])
    return Table(
        "slow-heads: gateway workers' memory (VmRSS)",
        ["process", "before MiB", "peak MiB", "after MiB", "peak open fds"],
        rows,
    )


def hostile_table(experiment: ExperimentRecord) -> Table:
    h = experiment["figures"]["hostile"]
    rows = [
        ["seconds", f"{h['seconds']:g}"],
        ["parts", ", ".join(h.get("parts", []))],
        ["the hostile process's share of a core", _share(h)],
        ["pipelined /healthz sent, answered",
         f"{h['pipelined_sent']}, {h['pipelined_answered']} "
         f"(on {h['pipelined_connections']} connections)"],
        ["slow heads opened, closed by the gateway",
         f"{h['slow_heads_opened']}, {h['slow_heads_closed_by_server']}"],
        ["/readyz answers by status", _listed(h["readyz"], empty="")],
        ["forged X-Forwarded-For misses by status", _listed(h["forged"], empty="")],
        ["client errors", _listed(h["errors"])],
    ]  # fmt: skip
    workers = _workers_mib(experiment).items()
    rows += [
        [f"worker {pid} VmRSS before, peak, after MiB", ", ".join(mib)] for pid, mib in workers
    ]
    return Table("hostile: what the hostile client got", ["", "value"], rows)


def flood_table(experiment: ExperimentRecord) -> Table:
    f = experiment["figures"]
    flood, settle, counters = f["flood"], f["settle"], f["gateway_counters"]
    rows = [
        ["emails sent", f"{flood['sent']} in {flood['duration_s']:.2f} s"
         + (" (cut at the deadline)" if flood["cut"] else "")],
        ["what the clients got", _listed(flood["outcomes"])],
        ["flood reads a Flask thread took: shed without running, by reason",
         _listed(counters["shed"], ".0f")],
        ["flood reads a Flask thread ran, by answer", _listed(counters["flood_ran"], ".0f")],
        ["count queries during the flood (pg_stat_statements)",
         f"{f['queries_before_flood_end']:.0f}"],
        ["count queries after its end", f"{settle['queries_after'] or 0:.0f}"],
        ["last rise of the query counter after the end", fmt_s(settle["last_rise_after_s"])],
        ["the gateway's own query counter, by query", _listed(counters["db_queries"], ".0f")],
        ["emails read by those queries (batch sizes summed)",
         f"{counters['batched_emails']:.0f}"],
    ]  # fmt: skip
    return Table("cold-flood: the flood and the database", ["", "value"], rows)


def summary_table(run: SuiteRun) -> Table:
    rows = [
        [
            e["name"],
            figures_line(e) if not e["error"] else f"error: {e['error']}",
            "pass" if e["passed"] else "FAIL",
        ]
        for e in cast(list[ExperimentRecord], run.items)
    ]
    return Table("Hardening: every experiment", ["experiment", "figures", "verdict"], rows)


def _context(run: SuiteRun) -> list[str]:
    p, limits = run.params, run.limits
    gateway = p["gateway"]
    return [
        f"load: the load driver at a constant arrival rate of {p['rate']} req/s of cached "
        f"reads (counts of the {p['hot_emails']} hot emails, cache warmed just before) through "
        f"{p['gateway_url']}, a fixed pool of {p['pool']} workers reusing their connections, "
        f"request timeout {p['read_timeout_s']} s; {p['pre_s']:g} s of reads before the attack",
        f"gateway: head deadline {gateway['GATEWAY_HEAD_TIMEOUT_S']} s, at most "
        f"{gateway['GATEWAY_MAX_CONNECTIONS']} connections per worker ({p['workers']} workers)",
        f"slow-heads: {p['sockets']} sockets, each sends a partial request head and never "
        f"finishes it; limits: closed within {limits['close_limit_s']:g} s of its connect, "
        f"workers' summed RSS +{limits['rss_growth_mib']:g} MiB at most, reads during the "
        f"attack p95 <= {limits['read_p95_ms']:g} ms with none dropped or failed",
        f"cold-flood: {p['emails']} distinct emails in no row, {p['concurrency']} clients in "
        f"flight, each giving up after {p['client_timeout_ms']} ms; limits: the count query "
        f"counter stops rising within {limits['settle_s']:g} s of the flood's end, reads during "
        "the flood none dropped or failed",
        f"hostile: one client process for {p.get('hostile_s', 0):g} s, parts "
        f"{','.join(p.get('hostile_parts', []))} (pipeline: one connection pipelining /healthz as "
        "fast as it can while reading the replies; slow: 64 slow heads; forged: misses under a "
        "rotating X-Forwarded-For; readyz: 64 /readyz loops); limits: reads' p95 within "
        f"{p.get('hostile_p95_factor', 0):g}x the quiet one, none dropped or failed, each "
        f"worker's RSS +{p.get('hostile_worker_rss_mib', 0):g} MiB at most",
        f"table: {run.seed.get('rows')} rows, email index: "
        f"{'yes' if run.seed.get('index') else 'no'}; stack under {p['run_dir']}",
    ]


# Each experiment's tables: its reads' windows, then its own.
ITEM_TABLES = {
    "slow-heads": (windows_table, sockets_table, rss_table),
    "cold-flood": (windows_table, flood_table),
    "hostile": (windows_table, hostile_table),
}


def write_report(run: SuiteRun, out_dir: Path) -> list[Table]:
    doc = suite_page("hardening", run)
    doc.ul(_context(run))
    tables = [summary_table(run)]
    doc.table(tables[0])
    for experiment in cast(list[ExperimentRecord], run.items):
        name, error = experiment["name"], experiment["error"]
        own = [] if error else [table(experiment) for table in ITEM_TABLES[name]]
        tables += own
        title = f"{name}: {experiment['description']}"
        load = experiment["notes"].get("load_average_1m")
        note = f"Load average (1 min) when the experiment started: {load}."
        item_section(doc, title, experiment, "experiment", own, [note])
    return save_report(doc, run, out_dir, tables)
