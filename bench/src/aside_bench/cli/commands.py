"""What each aside-bench command does once its arguments are parsed: check them,
check the stack and the seed, then run the sweep, the ceiling search or the
driver's cost, or rebuild a report, compare two runs or take a report's
screenshot. The suites (chaos, soak, hardening) are in cli/suites.py.

The commands that run steps through the runner and those that read their runs
back share its argument checks, the runner's set-up and the choice of a run's
report writer."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from aside_bench.ceiling import report as ceiling_report
from aside_bench.ceiling.search import SearchParams, Trial, interleave, run_again, tries_at
from aside_bench.load import meter
from aside_bench.load.run import LoadShape
from aside_bench.plan import interference
from aside_bench.plan import tracks as trackplan
from aside_bench.plan.steps import (
    BARE_ARM,
    CEILING_ARMS,
    DEFAULT_ARMS,
    DEFAULT_RATES,
    TIERED_ARMS,
    ZERO_RATE_SCENARIOS,
    Step,
    bounded_arms,
    build_steps,
    parse_arms,
    parse_duration,
    parse_rates,
    repeat_steps,
    resolve_arms,
    scenario_arms,
)
from aside_bench.records import calibration, keytrace, runfile
from aside_bench.records.results import StepResult
from aside_bench.records.runfile import RunRecord
from aside_bench.records.saturation import cpu_limit_cores
from aside_bench.report import interference as interference_report
from aside_bench.report import shards
from aside_bench.report import sweep as report
from aside_bench.report.tables import fmt_pct
from aside_bench.stack import config
from aside_bench.stack.prepare import StackError, check_stack
from aside_bench.stack.seeddata import SeedData, check_seed
from aside_bench.stack.sources import Influx, Prometheus, SourceError
from aside_bench.sweep import tracks
from aside_bench.sweep.collect import collect
from aside_bench.sweep.runner import EXIT_INTERRUPTED, Options, Runner, StepFailed, finish, new_run
from aside_bench.trust import calibrate, compare, comparepage, cost, machines

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")


class UsageError(Exception):
    """Bad command-line input: reported on one line, exit status 2."""


def new_run_id(args: argparse.Namespace, label: str) -> str:
    run_id = args.run_id or time.strftime("%Y%m%d-%H%M%S") + (f"-{label}" if label else "")
    if not RUN_ID.match(run_id):
        raise UsageError(f"--run-id must be 1-40 letters, digits, '-' or '_', got {run_id!r}")
    return run_id


def new_out_dir(settings: config.Settings, args: argparse.Namespace, folder: str) -> Path:
    """reports/<folder>, which must not exist yet."""
    out_dir = (args.reports_dir or settings.default_reports_dir) / folder
    if out_dir.exists():
        raise UsageError(f"{out_dir} exists already; choose another --run-id")
    return out_dir


def checked_seed(settings: config.Settings, args: argparse.Namespace) -> SeedData:
    """The stack is up and its table is the seeded one, or StackError says why."""
    check_stack(settings)
    return check_seed(settings, args.data_dir or settings.default_data_dir)


def _trace(args: argparse.Namespace) -> tuple[Path | None, float | None]:
    """The key trace to replay (--trace) and, when timed, its requests a second."""
    path = args.trace
    if path is None:
        return None, None
    if args.dist != "hotset":
        raise UsageError(
            f"--trace and --dist {args.dist} are exclusive: a trace asks for its own keys"
        )
    return path, keytrace.timed_rate(keytrace.check_replayable(path))


def _shape(args: argparse.Namespace) -> LoadShape:
    trace, trace_rate = _trace(args)
    return LoadShape(
        hot_share=args.hot_share,
        cold_sample=args.cold_sample,
        dist=args.dist,
        alpha=args.alpha,
        keys=args.keys,
        trace=trace,
        trace_rate=trace_rate,
        write_share=args.write_share,
        complexity=args.complexity,
        timeout_s=args.timeout,
        stale_per_min=args.stale_per_min,
        stale_reads_after=args.stale_reads_after,
        read_rate=args.read_rate,
        pbkdf2_iterations=args.pbkdf2_iterations,
        bcrypt_cost=args.bcrypt_cost,
    )


def plan_sweep(args: argparse.Namespace, seed_indexed: bool | None) -> list[Step]:
    """The steps of a sweep; seed_indexed None checks the parameters only."""
    scenario = args.scenario
    lowest = 0 if scenario in ZERO_RATE_SCENARIOS else 1
    rates = parse_rates(args.rates, lowest) if args.rates else list(DEFAULT_RATES[scenario])
    arms = (
        parse_arms(args.arms, scenario_arms(scenario))
        if args.arms
        else list(DEFAULT_ARMS[scenario])
    )
    if args.dist != "hotset" and scenario not in ("read", "ceiling"):
        raise UsageError(f"--dist {args.dist} is for the read scenario, not {scenario}")
    if args.trace is not None and scenario not in (
        "read",
        "ceiling",
        interference.SCENARIO,
    ):
        raise UsageError(f"--trace is for the read and interference scenarios, not {scenario}")
    arms = _bounded(args, scenario, arms)
    if scenario in ("read", "mixed") and seed_indexed is not None:
        arms = resolve_arms(arms, seed_indexed)
    read_rate = 0
    if scenario == interference.SCENARIO:
        read_rate = args.read_rate
        try:
            interference.check_work(args.pbkdf2_iterations, args.bcrypt_cost)
        except interference.InterferenceError as error:
            raise UsageError(str(error)) from None
    duration = parse_duration(args.duration)
    steps = build_steps(scenario, rates, arms, args.warm, duration, read_rate)
    return repeat_steps(steps, args.repeat)


def _bounded(args: argparse.Namespace, scenario: str, arms: list[str]) -> list[str]:
    """The arms with their bounds: --cache-memory, --l1-entries, --cache-ttl."""
    given = {
        "memory": ("--cache-memory", args.cache_memory),
        "entries": ("--l1-entries", args.l1_entries),
        "ttl": ("--cache-ttl", args.cache_ttl),
    }
    asked = {kind: text.replace(",", " ").split() for kind, (_, text) in given.items()}
    for kind, texts in asked.items():
        if texts and scenario != "read":
            raise UsageError(f"{given[kind][0]} is for the read scenario, not {scenario}")
    if asked["memory"] and asked["ttl"]:
        raise UsageError("--cache-memory and --cache-ttl both bound the cache arm: give one")
    for kind, texts in asked.items():
        arms = bounded_arms(arms, kind, texts)
    return arms


def _params(args: argparse.Namespace, seed: Any, shape: LoadShape, **extra: Any) -> dict[str, Any]:
    return {
        "hot_share": shape.hot_share,
        "hot_count": len(seed.hot),
        "cold_sample": shape.cold_sample,
        "cold_sample_used": min(shape.cold_sample, len(seed.cold)),
        "dist": shape.dist,
        "alpha": shape.alpha,
        "keys": shape.keys,
        **_trace_params(shape),
        "write_share": shape.write_share,
        "complexity": shape.complexity,
        "timeout_s": shape.timeout_s,
        "stale_per_min": shape.stale_per_min,
        "stale_reads_after": shape.stale_reads_after,
        "max_pool": args.max_pool,
        "data_dir": str(seed.data_dir),
        **extra,
    }


def _trace_params(shape: LoadShape) -> dict[str, Any]:
    """run.json's account of the replayed trace: its file, lines and distinct keys."""
    if shape.trace is None:
        return {}
    keys = keytrace.read_key_trace(shape.trace)
    found = {"file": shape.trace.name, "path": str(shape.trace.resolve()), "lines": len(keys)}
    return {"trace": {**found, "keys": len(set(keys)), "rate": shape.trace_rate}}


def cmd_run(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = new_run_id(args, args.scenario)
    out_dir = new_out_dir(settings, args, run_id)
    # Parameters first: a typo is reported before anything is touched.
    plan_sweep(args, seed_indexed=None)
    _calibration_params(args)
    shape = _shape(args)
    seed = checked_seed(settings, args)
    steps = plan_sweep(args, seed.indexed)
    params = _params(
        args,
        seed,
        shape,
        scenario=args.scenario,
        duration_s=steps[0].duration_s,
        warm=args.warm,
        rates=sorted({s.rate for s in steps}),
        arms=list(dict.fromkeys(s.arm for s in steps)),
        repeat=args.repeat,
        cache_policy=args.cache_policy,
        **(interference_report.run_params(shape) if steps[0].read_rate else {}),
    )
    if args.scenario == trackplan.SCENARIO:
        params["tracks"] = tracks.check_tracks(settings, seed.data_dir)
    writer = _sweep_writer(args.scenario, settings)
    runner = _new_runner("sweep", run_id, out_dir, args, settings, seed, shape, params)
    print(f"run {run_id}: {len(steps)} steps of {steps[0].duration_s}s -> {out_dir}/", flush=True)

    def body() -> None:
        _calibrate(runner, args)
        if not runner.interrupted:
            runner.run_steps(steps)

    return _drive(runner, body, writer)


def _calibration_params(args: argparse.Namespace) -> calibrate.CalibrationParams:
    return calibrate.CalibrationParams(
        probe_s=parse_duration(args.calibration_probe),
        budget_s=float(args.calibration_budget),
        start=args.calibration_start,
        max_rate=max(args.calibration_max_rate, args.calibration_start),
    )


def _calibrate(runner: Runner, args: argparse.Namespace) -> None:
    """The machine's calibration into run.json's "machine", printed; nothing
    when --no-calibrate (CALIBRATE=0)."""
    if not args.calibrate:
        print("calibration: skipped (--no-calibrate)", flush=True)
        return
    params = _calibration_params(args)
    print(f"calibration: {params.probe_s}s probes, at most {params.budget_s:.0f}s", flush=True)
    runner.run.machine["calibration"] = calibrate.calibrate(runner, params)
    runfile.save_run(runner.run, runner.options.out_dir)
    for line in calibration.describe(runner.run.machine):
        print(f"calibration: {line}", flush=True)


def _sweep_writer(scenario: str | None, settings: config.Settings) -> Any:
    """The report of a sweep: the interference and tracks scenarios have their own."""
    if scenario == interference.SCENARIO:
        return interference_report.write_interference
    if scenario == trackplan.SCENARIO:
        return tracks.writer(settings)
    return report.write_sweep


def _new_runner(
    kind: str,
    run_id: str,
    out_dir: Path,
    args: argparse.Namespace,
    settings: config.Settings,
    seed: SeedData,
    shape: LoadShape,
    params: dict[str, Any],
) -> Runner:
    """Create the run's folder and the runner that fills it (sweep or ceiling)."""
    run = new_run(kind, run_id, params, seed, settings)
    limit = cpu_limit_cores(run.machine["nproc"] or 1, args.driver_cpu_share)
    params["driver_cpu_limit_cores"] = limit
    params["driver_cpu_share"] = args.driver_cpu_share
    params["samples_file"] = args.samples_file
    params["prices"] = {"vcpu_hour": settings.price_vcpu_hour, "gib_hour": settings.price_gib_hour}
    out_dir.mkdir(parents=True)
    options = Options(
        run_id,
        out_dir,
        seed.data_dir,
        shape,
        args.max_pool,
        args.recover_timeout,
        driver_cpu_limit=limit,
        live=args.live,
        samples_file=args.samples_file,
        cache_policy=args.cache_policy,
    )
    return Runner(settings, options, seed, run)


def _drive(runner: Runner, body: Any, writer: Any) -> int:
    runner.install_signal_handler()
    failure: str | None = None
    try:
        body()
    except KeyboardInterrupt:
        runner.interrupted = True
    except (StepFailed, StackError, SourceError) as error:
        failure = str(error)
    finish(runner, writer)
    if runner.interrupted:
        print("aside-bench: interrupted; the report holds the steps that finished", file=sys.stderr)
        return EXIT_INTERRUPTED
    if failure:
        print(f"aside-bench: {failure}", file=sys.stderr)
        return 1
    return 0


def cmd_ceiling(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = new_run_id(args, "ceiling")
    out_dir = new_out_dir(settings, args, run_id)
    arms = parse_arms(args.arms, CEILING_ARMS)
    duration = parse_duration(args.step_duration)
    _calibration_params(args)  # a malformed --calibration-probe before anything runs
    search = SearchParams(start=args.start, ladder_step=args.ladder_step, max_rate=args.max_rate)
    shape = _shape(args)
    seed = checked_seed(settings, args)
    params = _params(
        args,
        seed,
        shape,
        scenario="ceiling",
        duration_s=duration,
        arms=arms,
        p95_limit_ms=args.p95_ms,
        search=search.__dict__,
    )
    # The reference: the cache arm's search again under the bare scenario.
    searched = [*arms, BARE_ARM] if args.reference and "cache" in arms else arms
    params["reference"] = BARE_ARM in searched
    runner = _new_runner("ceiling", run_id, out_dir, args, settings, seed, shape, params)
    print(
        f"ceiling {run_id}: arms {' '.join(searched)}, {duration}s steps -> {out_dir}/", flush=True
    )

    def search_all() -> None:
        _calibrate(runner, args)
        for together in _search_order(searched):
            if runner.interrupted:
                return
            _search_arms(runner, together, duration, search, args.p95_ms)

    return _drive(runner, search_all, ceiling_report.write_ceiling)


def cmd_cost(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = new_run_id(args, cost.KIND)
    out_dir = new_out_dir(settings, args, run_id)
    duration = parse_duration(args.duration)
    try:
        variants = cost.parse_variants(args.variants)
    except cost.VariantError as error:
        raise UsageError(str(error)) from None
    seed = checked_seed(settings, args)
    shape = _shape(args)
    steps = cost.plan(variants, args.rate, duration, args.repeat)
    params = _params(
        args,
        seed,
        shape,
        scenario=cost.KIND,
        duration_s=duration,
        rate=args.rate,
        repeat=args.repeat,
        variants=[variant.name for variant in variants],
    )
    runner = _new_runner(cost.KIND, run_id, out_dir, args, settings, seed, shape, params)
    print(
        f"cost {run_id}: {len(variants)} variants at {args.rate}/s, {args.repeat} rounds of "
        f"{duration}s each -> {out_dir}/",
        flush=True,
    )
    return _drive(runner, lambda: cost.run_variants(runner, steps), cost.write_cost)


def _search_order(searched: list[str]) -> list[list[str]]:
    """The searches, all taking turns step by step, the cache arm's bare
    reference right after it: a drift of the machine during the run then lands
    in every arm alike rather than in the ratios between them."""
    order = [arm for arm in searched if arm != BARE_ARM]
    if BARE_ARM in searched:
        at = order.index("cache") + 1 if "cache" in order else len(order)
        order.insert(at, BARE_ARM)
    return [order]


def _search_arms(
    runner: Runner, arms: list[str], duration: int, search: SearchParams, p95_ms: float
) -> None:
    """These arms' ceiling searches, taking turns step by step (one arm: alone);
    each one's final held and missed rates run twice or more."""

    runs: Counter[tuple[str, int]] = Counter()  # every step run, reruns included

    def run(arm: str, rate: int, history: list[Trial]) -> bool | None:
        phase = "warm" if arm in (*TIERED_ARMS, BARE_ARM) else "none"
        what = "confirm" if tries_at(history, rate) else "try"
        reruns = 0  # misses of this try on a noisy host, run again
        while True:
            runs[arm, rate] += 1
            step = Step("ceiling", arm, phase, rate, duration, repeat=runs[arm, rate])
            head = f"[{step.label} {what} {len(history) + 1}] @ {rate:>5}/s"
            result = runner.step_with_progress(step, head, None)
            if runner.interrupted:
                return None
            verdict = "missed" if result is None else result.verdict(p95_ms)
            noisy = result is not None and result.noisy
            if not run_again(verdict == "held", noisy, reruns):
                break
            reruns += 1
            print(f"  -> missed with the host stealing {fmt_pct(result.host_steal)}: run again")
        note = {
            "held": "held",
            "missed": "missed",
            "limit": "not held, load generator saturated: a measurement limit",
        }[verdict]
        print(f"  -> {note} (p95 <= {p95_ms:g} ms, no drops)")
        return verdict == "held"

    interleave(arms, search, run)


def _known_run(reports_dir: Path, run_id: str, make_target: str) -> Path:
    """reports/<run_id>, or UsageError naming the latest runs."""
    found = reports_dir.glob("*/run.json") if reports_dir.exists() else []
    runs = [p.parent.name for p in sorted(found, key=lambda p: p.stat().st_mtime)]
    if not run_id:
        known = ", ".join(runs[-5:]) or "none yet"
        raise UsageError(f"give the run id: make {make_target} RUN=<id> (latest runs: {known})")
    return reports_dir / run_id


def cmd_report(args: argparse.Namespace, settings: config.Settings) -> int:
    out_dir = _known_run(args.reports_dir or settings.default_reports_dir, args.run, "report")
    run = _read_run(out_dir)
    prom = Prometheus(settings.prometheus_url)
    results = collect(prom, run.steps)
    if run.kind == "ceiling":
        writer = ceiling_report.write_ceiling
    elif run.kind == cost.KIND:
        writer = cost.write_cost
    else:
        writer = _sweep_writer(run.params.get("scenario"), settings)
    for table in writer(run, results, out_dir):
        print(table.markdown())
    print(f"report: {out_dir}/")
    return 0


def cmd_shards(args: argparse.Namespace, settings: config.Settings) -> int:
    """Every step of a run sent by several drivers, their shards merged."""
    influx = Influx(settings.influx_base, settings.influx_db)
    try:
        merged = shards.merge(shards.read_points(influx, args.run))
    except shards.ShardsError as error:
        raise UsageError(f"run {args.run}: {error}") from None
    if not merged:
        raise UsageError(f"run {args.run}: no step point in InfluxDB ({shards.MEASUREMENT})")
    print(shards.shards_table(args.run, merged).markdown())
    return 0


def cmd_screenshot(args: argparse.Namespace, settings: config.Settings) -> int:
    from aside_bench.report import browser  # Selenium and Pillow: only for this command

    run_dir = _known_run(args.reports_dir or settings.default_reports_dir, args.run, "screenshot")
    page = run_dir / "report.html"
    if not page.is_file():
        raise UsageError(f"no report.html in {run_dir}")
    out = args.out or settings.root / "docs" / "report-screenshot.png"
    try:
        with browser.chromium(args.width) as driver:
            shown = browser.render(driver, page)
            problems = shown.problems() or ([] if shown.tables else ["it shows no table"])
            if problems:
                print(f"aside-bench: {page}: {'; '.join(problems)}", file=sys.stderr)
                return 1
            browser.screenshot(driver, out, through=None if args.full else "img")
    except browser.BrowserError as error:
        print(f"aside-bench: {error}", file=sys.stderr)
        return 1
    browser.shrink(out)
    print(
        f"{page}: {len(shown.tables)} tables, {len(shown.images)} charts, all shown; "
        f"screenshot: {out} ({out.stat().st_size // 1024} KiB)"
    )


def _read_run(out_dir: Path) -> RunRecord:
    try:
        return runfile.load_run(out_dir)
    except runfile.RunSchemaError as error:
        raise UsageError(str(error)) from None
    except (OSError, json.JSONDecodeError) as error:
        raise UsageError(f"no readable run.json in {out_dir} ({error})") from error


def _load_run(reports_dir: Path, run_id: str) -> tuple[RunRecord, Path]:
    out_dir = reports_dir / run_id
    return _read_run(out_dir), out_dir


def _figures(settings: config.Settings, run: RunRecord, out_dir: Path) -> list[runfile.StepFigures]:
    """A run's per-step figures: its results.json (written with its report, so a
    run from another machine compares without its Prometheus), else its run.json
    and Prometheus."""
    saved = runfile.load_figures(out_dir)
    if saved is not None:
        return saved
    prom = Prometheus(settings.prometheus_url)
    return [runfile.StepFigures.of(r) for r in collect(prom, run.steps)]


def _run_ids(given: str) -> list[str]:
    """'r1', or a baseline of several runs: 'r1,r2' or 'r1 r2'."""
    ids = [one for one in re.split(r"[\s,]+", given) if one]
    if not ids:
        raise UsageError("compare: a side names no run")
    return ids


def _side(
    settings: config.Settings, reports_dir: Path, given: str
) -> tuple[RunRecord, list[runfile.StepFigures], list[StepResult]]:
    """One side of a compare: its run (several: compare.baseline), all their
    figures, and their steps as run.json has them (for the page's cost)."""
    runs: list[RunRecord] = []
    figures: list[runfile.StepFigures] = []
    results: list[StepResult] = []
    for run_id in _run_ids(given):
        run, out_dir = _load_run(reports_dir, run_id)
        runs.append(run)
        figures.extend(_figures(settings, run, out_dir))
        results.extend(comparepage.run_results(run))
    return compare.baseline(runs), figures, results


def cmd_compare(args: argparse.Namespace, settings: config.Settings) -> int:
    reports_dir = args.reports_dir or settings.default_reports_dir
    run_a, figures_a, results_a = _side(settings, reports_dir, args.run_a)
    run_b, figures_b, results_b = _side(settings, reports_dir, args.run_b)
    try:
        scale = machines.machine_scale(
            run_a,
            run_b,
            args.normalise,
            args.ignore_calibration,
            meter.step_speeds(figures_a, figures_b),
            args.as_measured,
        )
    except machines.CompareError as error:
        raise UsageError(str(error)) from None
    rows = compare.compare(figures_a, figures_b, scale, args.tolerance)
    if not rows:
        raise UsageError(f"{args.run_a} and {args.run_b} share no step (arm, rate, phase)")
    out_dir = reports_dir / f"compare-{run_a.run_id}-{run_b.run_id}"
    table = compare.write(run_a, run_b, rows, scale, args.tolerance, out_dir)
    sides = comparepage.Sides(run_a, run_b, results_a, results_b)
    page = comparepage.write_page(sides, rows, scale, args.tolerance, out_dir)
    print(table)
    print(f"compare: {out_dir}/ (the page: {page})")
    return 0
