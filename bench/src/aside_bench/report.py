"""Write a run's report: report.md, a self-contained report.html, PNG charts,
and for a ceiling run ceiling.md. Everything comes from StepResults, which come
from the driver's summaries kept in run.json and from Prometheus; run.json
holds what is needed to rebuild them. The sweep's and the ceiling's pages
share their context, definitions and figures here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import calibrate, meter
from .ceiling import Reference, ceiling_of, limit_of
from .doc import Doc, write_pages
from .machine import summary
from .plan import BARE_ARM, TIERED_ARMS, series_label
from .repeats import merge_repeats
from .results import StepResult
from .tables import (
    LOADGEN_HEADERS,
    Table,
    cost_columns,
    fmt_ms,
    fmt_pct,
    fmt_rps,
    has_loadgen,
    held_table,
    loadgen_cells,
    saturated_steps,
    series_order,
    sweep_tables,
)

# The p95 limit a sweep's step is judged "held" by, as the ceiling's default.
HELD_P95_MS = 10.0
FIGURES_FILE = "results.json"


def calibration_rates(run: dict[str, Any]) -> dict[str, int | None]:
    """The calibrated ceilings of the run's machine, by the name a table shows."""
    machine = run.get("machine", {})
    return {
        "machine": calibrate.rate_of(machine, "core"),
        "gateway /healthz": calibrate.rate_of(machine, "gateway"),
    }


def _calibration(doc: Doc, run: dict[str, Any]) -> None:
    """The machine's calibration, stated in every report (or that it was skipped)."""
    lines = calibrate.describe(run.get("machine", {}))
    doc.h(2, "Calibration")
    if not lines:
        doc.p(
            "Not calibrated (CALIBRATE=0): nothing states how fast this machine measures, "
            "so its figures compare with no other machine's.",
            note=True,
        )
        return
    found = run["machine"]["calibration"]
    doc.p(
        "Before its steps the run measured the machine: the highest rate the driver held "
        f"(p95 <= {found['params']['p95_ms']:g} ms, no drops) against two trivial routes, "
        f"{found['params']['probe_s']} s per probe. The first is the ceiling of any "
        "measurement on this machine with the driver on it; rates are compared with them below."
    )
    doc.ul(lines)


def caption(run: dict[str, Any]) -> str:
    return f"Run {run['run_id']} on {summary(run['machine'])}."


def context(doc: Doc, run: dict[str, Any]) -> None:
    params, seed = run["params"], run.get("seed", {})
    doc.p(f"Machine: {summary(run['machine'])}.", note=True)
    items = [
        f"started {run['created']}, scenario {params.get('scenario')}, "
        f"{params.get('duration_s')} s per step",
        f"table: {seed.get('rows')} rows, email index: {'yes' if seed.get('index') else 'no'}, "
        f"seed {seed.get('seed')}",
        f"gateway: {run['settings']['gateway_url']}",
    ]
    if params.get("scenario") in ("read", "mixed", "ceiling"):
        items.append(
            f"request mix: {params['hot_share'] * 100:.0f}% of reads ask for one of the "
            f"{params.get('hot_count')} hot emails, the rest for one of the first "
            f"{params.get('cold_sample_used')} cold emails "
            "(a finite sample, so a warm cache holds it)"
        )
    if params.get("scenario") == "mixed":
        items.append(
            f"writes: {params['write_share'] * 100:.0f}% of iterations create a user with a "
            "hot email and delete it again (two requests, one iteration)"
        )
        if params.get("stale_per_min"):
            items.append(
                f"staleness checker: {params['stale_per_min']} checks a minute beside the "
                "load (create, change the email, delete a user of its own, each followed "
                f"by {params.get('stale_reads_after')} reads per key over fresh connections)"
            )
    if params.get("scenario") == "compute":
        items.append(f"compute: complexity {params.get('complexity')}, engine = arm (go | python)")
    if params.get("repeat", 1) > 1:
        items.append(
            f"repeats: each step ran {params['repeat']} times, interleaved within each rate "
            "(A B A B); a figure is the median of the runs, (min-max) after it"
        )
    limit = params.get("driver_cpu_limit_cores")
    if limit is not None:
        share = params.get("driver_cpu_share", 0)
        items.append(
            f"load generator saturated above {limit:g} cores of the driver's CPU "
            f"({share * 100:.0f}% of the machine's cores) or when its pool "
            "ran out below the 1 s latency budget; the driver shares the cores with the stack"
        )
    doc.ul(items)
    if params.get("scenario") != "cost":  # it measures the driver itself at one rate
        _calibration(doc, run)
    if run.get("interrupted"):
        doc.p(
            "This run was interrupted: the tables show only the steps that ran to their end.",
            note=True,
        )
    warnings = [
        f"{s['arm']} {s['phase']} @ {s['rate']}/s: {s['warning']}"
        for s in run["steps"]
        if s.get("warning")
    ]
    warnings += [
        f"{s['arm']} {s['phase']} @ {s['rate']}/s: {s['summary_error']}"
        for s in run["steps"]
        if s.get("summary_error")
    ]
    if run.get("probe_warning"):
        warnings.append(run["probe_warning"])
    if warnings:
        doc.p("Warnings:", note=True)
        doc.ul(warnings)


DEFINITIONS = [
    "latency p50/p95/p99: from the instant each request was sent to its answer, over the "
    "step's answered requests (the expected status) for the whole step (the driver's "
    "summary, HdrHistogram); from due: the same from each request's scheduled instant, "
    "so a request the driver or a full pool held back counts its wait (coordinated omission "
    "shown, not hidden); "
    "failed ones (a shed request's fast 503, a timeout) are in the drop rate instead; "
    "for the mixed scenario reads and writes together (see the table by request kind)",
    "achieved: successful iterations (requests) per second of the step's duration",
    "drop rate: (dropped + failed iterations) / (target rate x duration); an iteration is "
    "dropped when every worker of the driver's pool is busy when it falls due (pool = rate x "
    "1 s: the stack is more than about a second behind) or when it could not start within "
    "100 ms of its due time; it fails on a bad status, a bad body or the timeout",
    "cache hit rate: increase of the gateway's aside_gateway_cache_hits_total over the step "
    "divided by the increase of hits + misses + bypass (Prometheus, read at the step's start "
    "and after the first scrape past its end); the uncached arms bypass the cache and so show 0",
    "arms: nocache and index send cache=off, nopool cache=nopool (uncached too, over a new "
    "PostgreSQL connection per read), cache sends cache=l2 (Redis), l1 cache=l1 (each "
    "worker's memory only), hybrid cache=hybrid (memory, then Redis)",
    "gateway CPU ms/req: utime + stime (and that of reaped workers) of the gunicorn master and "
    "its workers from /proc/<pid>/stat, read right before the driver starts and right after it "
    "ends, "
    "divided by the increase of aside_gateway_http_requests_total (every route but /metrics) "
    "from the gateway's own /metrics over the same interval",
    "gateway / Redis RSS MiB: VmRSS summed over the process tree right after the step (shared "
    "pages count once per process that touched them)",
    "L1 / L2 hit rate: increase of aside_gateway_cache_tier_reads_total over the step, hits / "
    "(hits + misses) per tier; hybrid's L2 lookups are the L1 misses; n/a: the tier was not "
    "used. L1 MiB: aside_gateway_l1_bytes (live workers) at the step's end",
    "stale reads (mixed): reads by the staleness checker, over a fresh connection (so any "
    "worker), right after a write's 2xx, that did not show that write; no answer: such reads "
    "without a usable answer, not counted as stale",
    "driver CPU cores: utime + stime of the driver's process from its start to its exit "
    "(/proc/<pid>/stat, read as it exits), divided by the step's duration; it shares the "
    "machine's cores with the stack; in flight/pool: the most requests in flight at once "
    "against the step's pool of workers",
    "load generator saturated: the driver used more CPU than the limit stated above, or "
    "every worker was busy while --max-pool held the pool below rate x 1 s; such a step "
    "measures the driver as much as the stack, and the ceiling search calls its miss a "
    "measurement limit",
    "invalidation lag: receive time minus the core's publish time of each invalidation "
    "message, per worker (aside_gateway_l1_invalidation_lag_seconds); p50/p99 interpolated "
    "in the buckets' increase over the step as histogram_quantile does, max is the top of the "
    "highest bucket that gained a sample",
    "invalidation lag floor (mixed): the same messages' lag at a subscriber that does nothing "
    "else (a process of its own beside the step, aside_bench.lagfloor), exact quantiles: the "
    "part of the lag that is the machine's (the core's PUBLISH, Redis, waking a process on "
    "shared cores); the workers' lag beyond it is the gateway's",
]


def write_sweep(run: dict[str, Any], results: list[StepResult], out_dir: Path) -> list[Table]:
    title = f"Aside bench {run['run_id']}"
    doc = Doc()
    doc.h(1, title)
    context(doc, run)
    figures = save_figures(results, out_dir)
    merged = merge_repeats(results)
    tables = sweep_tables(merged) if results else []
    if not results:
        doc.p("No step ran to its end, so there is nothing to tabulate.", note=True)
    doc.h(2, "Results")
    for table in tables:
        doc.table(table)
    held = held_table(merged, HELD_P95_MS, calibration_rates(run)) if results else None
    if held is not None:
        tables.append(held)
        doc.table(held)
    _saturation(doc, results)
    drift = machine_drift_line(figures)
    if drift is not None:
        doc.p(drift, note=True)
    doc.h(2, "How the figures are computed")
    doc.ul(DEFINITIONS)
    if results:
        from . import charts  # matplotlib is slow to import: only when drawing

        doc.h(2, "Charts")
        for path in charts.sweep_charts(merged, out_dir, caption(run)):
            doc.image(path, path.stem.replace("_", " "))
    write_pages(doc, out_dir / "report.md", out_dir / "report.html", title)
    return tables


def machine_drift_line(figures: list[dict[str, Any]]) -> str | None:
    """How far the machine's speed moved between the repeats of one step, the
    widest of the run; None without a repeated step that held its rate."""
    drift = meter.widest_drift(figures)
    if drift is None:
        return None
    _, arm, phase, rate = drift.key
    return (
        "The machine during the run: the driver's own CPU per request (the same scenario at "
        f"the same rate) moved by {drift.ratio - 1:.0%} between the repeats of "
        f"{series_label(arm, phase)} at {rate}/s ({drift.low * 1e3:.2f} and "
        f"{drift.high * 1e3:.2f} ms), the widest of any step: the cores ran that much slower "
        "in one round than in another, so a latency that moved about as much between "
        "repeats moved with the machine. `make compare` puts another run on this one's "
        "machine step by step by the same meter."
    )


def _saturation(doc: Doc, results: list[StepResult]) -> None:
    lines = saturated_steps(results)
    if lines:
        doc.p("Load generator saturated (the driver was a limit of these steps):", note=True)
        doc.ul(lines)


def _ceiling_cell(ceiling: int, capped: bool, measurement_limit: int | None) -> str:
    if measurement_limit is not None:
        return f">= {ceiling} (measurement limit at {measurement_limit})"
    return (">= " if capped else "") + str(ceiling)


def ceiling_tables(
    results: list[StepResult],
    p95_limit_ms: float,
    calibration: dict[str, int | None] | None = None,
) -> tuple[list[Table], dict[str, Any]]:
    summary_rows, found = [], {}
    trials_rows = []
    costs = cost_columns(results)
    loadgen = has_loadgen(results)
    known = {name: rate for name, rate in (calibration or {}).items() if rate}
    for arm, phase in series_order(results):
        series = [r for r in results if (r.step.arm, r.step.phase) == (arm, phase)]
        outcomes = [(r.step.rate, r.verdict(p95_limit_ms)) for r in series]
        ceiling, capped = ceiling_of([(rate, v == "held") for rate, v in outcomes])
        limit = limit_of(outcomes)
        found[arm] = {"ceiling": ceiling, "capped": capped, "measurement_limit": limit}
        summary_rows.append(
            [
                series_label(arm, phase),
                _ceiling_cell(ceiling, capped, limit),
                *(f"{ceiling / rate:.2f}" for rate in known.values()),
            ]
        )
        for r in series:
            trials_rows.append(
                [
                    series_label(arm, phase),
                    str(r.step.rate) + (f" (run {r.step.repeat})" if r.step.repeat > 1 else ""),
                    fmt_ms(r.latency.p95 if r.latency else None),
                    fmt_ms(r.latency.p99 if r.latency else None),
                    fmt_rps(r.achieved_rps),
                    fmt_pct(r.drop_rate),
                    r.verdict(p95_limit_ms),
                    *(column.cell(r) for column in costs),
                    *(loadgen_cells(r) if loadgen else []),
                ]
            )
    if "healthz" in found and found["healthz"]["ceiling"] > 0:
        for arm in TIERED_ARMS:
            if arm not in found:
                continue
            ratio = found[arm]["ceiling"] / found["healthz"]["ceiling"]
            # "ratio" stays the cache arm's, as run.json consumers read it.
            found["ratio" if arm == "cache" else f"ratio_{arm}"] = ratio
            summary_rows.append([f"{arm} / healthz", f"{ratio:.2f}", *([""] * len(known))])
    reference = reference_of(found)
    if reference is not None:
        found["reference"] = {"ratio": reference.ratio, "agrees": reference.agrees}
        summary_rows.append(
            [f"cache / {BARE_ARM} (reference)", reference_cell(reference), *([""] * len(known))]
        )
    tables = [
        Table(
            f"highest rate held at p95 <= {p95_limit_ms:g} ms with no drops (requests/s)",
            ["arm", "ceiling /s"] + [f"/ {name} calibration" for name in known],
            summary_rows,
        ),
        Table(
            "every step, in the order run",
            ["arm", "target /s", "p95 ms", "p99 ms", "achieved /s", "drop rate", "verdict"]
            + [column.header for column in costs]
            + (LOADGEN_HEADERS if loadgen else []),
            trials_rows,
        ),
    ]
    return tables, found


def reference_of(found: dict[str, Any]) -> Reference | None:
    """The cache arm's ceiling against the bare scenario's, when both were searched."""
    if "cache" not in found or BARE_ARM not in found:
        return None
    return Reference(found["cache"]["ceiling"], found[BARE_ARM]["ceiling"])


def reference_cell(reference: Reference) -> str:
    if reference.ratio is None:
        return f"none: the reference held no rate ({reference.verdict})"
    return f"{reference.ratio:.2f} ({reference.verdict})"


REFERENCE_TEXT = (
    f"The reference ({BARE_ARM}) is the cache arm's search again, the same warm cache and "
    "the same requests, sent by the driver's `bare` scenario: no check of the body or the "
    "headers, only the status. Its ceiling is what the stack holds when the driver spends "
    "the least it can per request; the cache arm's ceiling within 10 % of it means the "
    "driver's checks did not set the ceiling, a lower ratio means they did."
)


def _reference(doc: Doc, found: dict[str, Any]) -> None:
    reference = reference_of(found)
    if reference is None:
        return
    doc.h(2, "Reference: the bare scenario")
    doc.p(REFERENCE_TEXT)
    doc.p(
        f"cache {_ceiling_cell(**found['cache'])} req/s, {BARE_ARM} "
        f"{_ceiling_cell(**found[BARE_ARM])} req/s: ratio {reference_cell(reference)}.",
        note=not reference.agrees,
    )


def write_ceiling(run: dict[str, Any], results: list[StepResult], out_dir: Path) -> list[Table]:
    limit = float(run["params"]["p95_limit_ms"])
    title = f"Aside ceiling {run['run_id']}"
    doc = Doc()
    doc.h(1, title)
    context(doc, run)
    doc.p(
        "The cache arms read counts with a warm cache (the read mix): cache through Redis, l1 "
        "from each worker's memory, hybrid memory then Redis; the healthz arm asks a trivial "
        "route of the same gunicorn. A ratio says how much of the server's own ceiling that "
        "cached read path keeps. Each arm's final held and missed rates ran twice: a rate "
        "holds only if both runs held. A step that missed while the driver itself was saturated is "
        "a measurement limit, not the server's ceiling."
    )
    save_figures(results, out_dir)
    tables, found = ceiling_tables(results, limit, calibration_rates(run))
    for table in tables:
        doc.table(table)
    _reference(doc, found)
    _saturation(doc, results)
    if results:
        from . import charts

        chart = charts.ceiling_chart(
            results,
            out_dir / "ceiling.png",
            limit,
            "ceiling search: p95 by target rate",
            caption(run),
        )
        doc.image(chart, "ceiling")
    write_pages(doc, out_dir / "ceiling.md", out_dir / "report.html", title)
    return tables


def step_figures(result: StepResult) -> dict[str, Any]:
    """One run of a step as results.json keeps it (what `compare` reads)."""
    step, latency, gen = result.step, result.latency, result.loadgen
    return {
        "scenario": step.scenario,
        "arm": step.arm,
        "phase": step.phase,
        "rate": step.rate,
        "repeat": step.repeat,
        "duration_s": step.duration_s,
        "p50": None if latency is None else latency.p50,
        "p95": None if latency is None else latency.p95,
        "p99": None if latency is None else latency.p99,
        "achieved": result.achieved_rps,
        "drops": result.drop_rate,
        "hit": result.hit_rate,
        "driver_cpu_cores": None if gen is None else gen.cpu_cores,
        "p95_from_due": None if result.from_due is None else result.from_due.p95,
        "saturated": result.saturated,
    }


def save_figures(results: list[StepResult], out_dir: Path) -> list[dict[str, Any]]:
    """Every step's figures into results.json; the figures."""
    figures = [step_figures(result) for result in results]
    (out_dir / FIGURES_FILE).write_text(json.dumps(figures, indent=1) + "\n")
    return figures


def load_figures(out_dir: Path) -> list[dict[str, Any]] | None:
    """The figures a report wrote; None when it wrote none (older runs)."""
    try:
        found = json.loads((out_dir / FIGURES_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return found if isinstance(found, list) else None


# run.json's shape: 2 since the load driver's figures (the driver's CPU and
# pool, a summary per step); a run without the field is of shape 1.
RUN_SCHEMA = 2


class RunSchemaError(ValueError):
    """A run.json of a shape this bench does not read; the message names both."""


def load_run(out_dir: Path) -> dict[str, Any]:
    """A run's run.json; RunSchemaError when its shape is not this bench's,
    OSError or ValueError when it cannot be read."""
    path = out_dir / "run.json"
    run = json.loads(path.read_text())
    found = run.get("schema_version", 1) if isinstance(run, dict) else None
    if found != RUN_SCHEMA:
        raise RunSchemaError(
            f"{path}: run.json schema version {found}, this bench reads version {RUN_SCHEMA}"
        )
    return run


def save_run(run: dict[str, Any], out_dir: Path) -> None:
    path = out_dir / "run.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(run, indent=2) + "\n")
    tmp.replace(path)
