"""A sweep's report (report.md, report.html, charts); its context sections serve every page."""

from __future__ import annotations

from pathlib import Path

from aside_bench.curve.points import RateCurve, run_curves
from aside_bench.curve.simulate import CurveUnavailable
from aside_bench.load import meter
from aside_bench.plan.steps import series_label
from aside_bench.records import calibration
from aside_bench.records.documents import RunParams
from aside_bench.records.goal import GOAL_P95_MS, Goal
from aside_bench.records.prices import Prices
from aside_bench.records.repeats import merge_repeats
from aside_bench.records.results import StepResult
from aside_bench.records.runfile import RunRecord, StepFigures, save_figures
from aside_bench.report.answer import answer
from aside_bench.report.curves import curve_section
from aside_bench.report.decision import cost_table, decide, decision_table, run_prices
from aside_bench.report.distances import by_distance, distance_answer, hop_table, proxy_cost_table
from aside_bench.report.doc import Doc, write_pages
from aside_bench.report.split import split_table
from aside_bench.report.tables import Table, held_table, saturated_steps, sweep_tables
from aside_bench.stack.influxpoints import SPOOL_DIR, InfluxPoints
from aside_bench.stack.machine import summary

GOAL = Goal(GOAL_P95_MS)  # a sweep's step "held" (records/goal.py)


def calibration_rates(run: RunRecord) -> dict[str, int | None]:
    """The calibrated ceilings of the run's machine, by the name a table shows."""
    names = {"machine": "core", "gateway /healthz": "gateway"}
    return {name: calibration.rate_of(run.machine, target) for name, target in names.items()}


def _calibration(doc: Doc, run: RunRecord) -> None:
    """The machine's calibration, stated in every report (or that it was skipped)."""
    found = calibration.Calibration.of(run.machine)
    doc.h(2, "Calibration")
    if found is None:
        doc.p(
            "Not calibrated (CALIBRATE=0): nothing states how fast this machine measures, "
            "so its figures compare with no other machine's.",
            note=True,
        )
        return
    doc.p(
        "Before its steps the run measured the machine: the highest rate the driver held "
        f"(p95 <= {found.p95_ms:g} ms, no drops) against two trivial routes, "
        f"{found.probe_s:g} s per probe. The first is the ceiling of any "
        "measurement on this machine with the driver on it; rates are compared with them below."
    )
    doc.ul([target.line() for target in found.targets.values()])


def run_page(title: str, run: RunRecord, calibration: bool = True) -> Doc:
    """A run's page begun: its title and context (`calibration`: with the machine's)."""
    doc = Doc()
    doc.h(1, title)
    context(doc, run, calibration)
    return doc


def request_mix(params: RunParams) -> str:
    """The reads' keys as the run asked for them."""
    trace = params.get("trace")
    if trace:
        pace = "at each step's rate"
        if trace.get("rate"):
            pace = "at its own gaps, scaled to each step's rate"
        return (
            f"request mix: trace {trace['file']} ({trace['lines']} keys, "
            f"{trace['keys']} distinct), replayed in its order {pace}, "
            "from its start again when a step outlasts it"
        )
    dist = params.get("dist", "hotset")
    if dist == "hotset":
        return (
            f"request mix: {params['hot_share'] * 100:.0f}% of reads ask for one of the "
            f"{params.get('hot_count')} hot emails, the rest for one of the first "
            f"{params.get('cold_sample_used')} cold emails "
            "(a finite sample, so a warm cache holds it)"
        )
    keys = params.get("keys")
    space = f"the first {keys} distinct emails" if keys else "every distinct email"
    popularity = f"Zipf popularity, exponent {params['alpha']:g}" if dist == "zipf" else "uniform"
    return (
        f"request mix: {popularity} over {space} of the table (emails.txt), "
        "ranks laid over the keys by a seeded shuffle; the same seed asks the same keys "
        "in the same order"
    )


def caption(run: RunRecord) -> str:
    return f"Run {run.run_id} on {summary(run.machine)}."


def context(doc: Doc, run: RunRecord, calibration: bool = True) -> None:
    params, seed = run.params, run.seed
    doc.p(f"Machine: {summary(run.machine)}.", note=True)
    items = [
        f"started {run.created}, scenario {params.get('scenario')}, "
        f"{params.get('duration_s')} s per step",
        f"table: {seed.get('rows')} rows, email index: {'yes' if seed.get('index') else 'no'}, "
        f"seed {seed.get('seed')}",
        f"gateway: {run.settings['gateway_url']}",
    ]
    if params.get("scenario") in ("read", "mixed", "ceiling") or params.get("trace"):
        items.append(request_mix(params))
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
    if calibration:
        _calibration(doc, run)
    if run.interrupted:
        doc.p(
            "This run was interrupted: the tables show only the steps that ran to their end.",
            note=True,
        )
    warnings = [
        f"{s.arm} {s.phase} @ {s.rate}/s: {text}"
        for s in run.steps
        for text in (s.warning, s.summary_error)
        if text
    ]
    warnings += influx_notes(run)
    if run.probe_warning:
        warnings.append(run.probe_warning)
    if warnings:
        doc.p("Warnings:", note=True)
        doc.ul(warnings)


def influx_notes(run: RunRecord) -> list[str]:
    """The steps whose InfluxDB points were spooled or lost, each in a line."""
    return [
        f"{s.arm} {s.phase} @ {s.rate}/s: {note} (the run's {SPOOL_DIR}/)"
        for s in run.steps
        if (note := InfluxPoints.of(s.influx).note())
    ]


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
    "PostgreSQL connection per read), coalesce cache=coalesce (uncached too, each count read "
    "in the worker's next batched scan with every count pending, as the cache arm's misses "
    "are; nothing stored), cache sends cache=l2 (Redis), l1 cache=l1 (each "
    "worker's memory only), hybrid cache=hybrid (memory, then Redis), tracking "
    "cache=tracking (memory kept by Redis's client tracking, then Redis)",
    "gateway CPU ms/req: utime + stime (and that of reaped workers) of the gunicorn master and "
    "its workers from /proc/<pid>/stat, read right before the driver starts and right after it "
    "ends, "
    "divided by the increase of aside_gateway_http_requests_total (every route but /metrics) "
    "from the gateway's own /metrics over the same interval",
    "gateway / Redis RSS MiB: VmRSS summed over the process tree right after the step (shared "
    "pages count once per process that touched them)",
    "L1 / L2 hit rate: increase of aside_gateway_cache_tier_reads_total over the step, hits / "
    "(hits + misses) per tier; hybrid's and tracking's L2 lookups are the L1 misses; n/a: the "
    "tier was not used. L1 MiB: aside_gateway_l1_bytes (live workers) at the step's end",
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
    "cost: CPU ms per request of the gateway's, PostgreSQL's and Redis's process trees "
    "(utime + stime from /proc, read right before and after the step) per request served "
    "(the CPU of the requests that failed is charged to those that succeeded); memory: "
    "the gateway's RSS, plus Redis's used_memory for the arms reading "
    "through it (an uncached deployment runs no Redis; PostgreSQL's own memory is the same "
    "in every arm and left out); $ per million requests: the CPU seconds of a million requests "
    "at the vCPU-hour price, plus the memory held for as long as a million requests take at "
    "the rate achieved at the GiB-hour price (ASIDE_PRICE_VCPU_HOUR, ASIDE_PRICE_GIB_HOUR). "
    "The CPU is what the requests used, not the machine's idle cores",
    "the service goal: p95 within the limit and at most 0.1% of the scheduled requests "
    "dropped or failed (records/goal.py, DROP_TOLERANCE); a step's cost per million "
    "requests is a price of that service only where the step held the goal: an arm that "
    "drops most of its load is cheap per request served because it leaves out what the "
    "dropped ones would have cost, so tables mark it (missed: served 208/s of 1,000) and "
    "charts draw it hollow, against the rate served",
    "the answer: the decision table first (at each rate, the series that held the goal, "
    "the cheapest of them with its cost per million requests and its memory at the step's "
    "end, the gateway's RSS and Redis's used_memory, the smallest memory arm that held, and "
    "each series that missed with the highest lower rate it held); then each series against "
    "the goal, the cached arms warm; the break-even is the lowest rate from which a cached "
    "arm costs less per million requests than the uncached one at every higher rate both "
    "held the goal; "
    "the split: of a cached arm's saving against the uncached read (cost, p95, drops), the "
    "part the coalesce arm reaches at the same rate is coalescing's, the rest the hits' "
    "(coalesce worse than uncached: none is coalescing's; better than the cached arm: all), "
    "stated only at rates where all three held the goal; elsewhere the answer names the "
    "arms that missed and what they served",
    "invalidation lag floor (mixed): the same messages' lag at a subscriber that does nothing "
    "else (a process of its own beside the step, aside_bench.sweep.invalidation_lag_floor), "
    "exact quantiles: the "
    "part of the lag that is the machine's (the core's PUBLISH, Redis, waking a process on "
    "shared cores); the workers' lag beyond it is the gateway's",
]


def drawn_curves(
    run: RunRecord, results: list[StepResult], out_dir: Path
) -> tuple[list[RateCurve], str | None]:
    """The run's miss-ratio curves, or none and why (the curve extra not installed)."""
    if not results:
        return [], None
    try:
        return run_curves(run, results, out_dir), None
    except CurveUnavailable as error:
        return [], f"The hit rate against cache size was not drawn: {error}."


def _decisions(
    run: RunRecord, merged: list[StepResult], prices: Prices, curves: list[RateCurve]
) -> list[Table]:
    """The decision table: one, or one per distance the run's arms ran at."""
    if not run.params.get("distances"):
        return [decision_table(decide(merged, GOAL, prices, curves))]
    return [
        decision_table(decide(steps, GOAL, prices, curves, distance=name))
        for name, steps in by_distance(merged).items()
    ]


def write_sweep(run: RunRecord, results: list[StepResult], out_dir: Path) -> list[Table]:
    title = f"Aside bench {run.run_id}"
    merged = merge_repeats(results)
    curves, not_drawn = drawn_curves(run, results, out_dir)
    prices = run_prices(run.params)
    doc = Doc()
    doc.h(1, title)
    if run.params.get("distances"):
        lines = distance_answer(run, merged, prices, GOAL)
    else:
        lines = answer(merged, curves, prices, GOAL, bool(run.seed.get("index")))
    decisions: list[Table] = []
    if lines:
        doc.h(2, "The answer")
        decisions = _decisions(run, merged, prices, curves)
        for table in decisions:
            doc.table(table)
        doc.ul(lines)
    context(doc, run)
    figures = save_figures(results, out_dir)
    costs = cost_table(merged, prices, GOAL)
    tables = sweep_tables(merged) if results else []
    held = held_table(merged, GOAL, calibration_rates(run)) if results else None
    tables += [t for t in (held, costs, split_table(merged, prices, GOAL)) if t is not None]
    doc.results(tables, bool(results))
    saturation_section(doc, results)
    tables += curve_section(doc, curves, out_dir, caption(run))
    at_distances = [t for t in (hop_table(run), proxy_cost_table(merged)) if t is not None]
    if at_distances:
        doc.h(2, "Distances")
        for table in at_distances:
            doc.table(table)
    tables = decisions + tables + at_distances  # in the page's order: the decision on top
    if not_drawn is not None:
        doc.p(not_drawn, note=True)
    drift = machine_drift_line(figures)
    if drift is not None:
        doc.p(drift, note=True)
    doc.h(2, "How the figures are computed")
    doc.ul(DEFINITIONS)
    if results:
        from aside_bench.report import charts  # matplotlib is slow to import: only when drawing

        doc.h(2, "Charts")
        shown = caption(run)
        paths = charts.sweep_charts(merged, out_dir, shown)
        paths.append(charts.served_p95_chart(merged, GOAL, out_dir / "p95_served.png", shown))
        if costs is not None:
            paths.append(charts.cost_chart(merged, prices, GOAL, out_dir / "cost.png", shown))
        for path in paths:
            doc.image(path, path.stem.replace("_", " "))
    write_pages(doc, out_dir / "report.md", out_dir / "report.html", title)
    return tables


def machine_drift_line(figures: list[StepFigures]) -> str | None:
    """The widest drift of the machine's speed between a step's repeats, or None."""
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


def saturation_section(doc: Doc, results: list[StepResult]) -> None:
    lines = saturated_steps(results)
    if lines:
        doc.p("Load generator saturated (the driver was a limit of these steps):", note=True)
        doc.ul(lines)
