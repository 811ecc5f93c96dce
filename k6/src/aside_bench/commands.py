"""What each aside-bench command does once its arguments are parsed: check them,
check the stack and the seed, then run the sweep, the ceiling search, the fault
suite or the soak, or rebuild a report."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from . import chaos, config, interference, interference_report, report, soak
from .ceiling import SearchParams, next_rate
from .collect import collect
from .k6run import LoadShape
from .plan import (
    CEILING_ARMS,
    DEFAULT_ARMS,
    DEFAULT_RATES,
    TIERED_ARMS,
    ZERO_RATE_SCENARIOS,
    Step,
    arms_for,
    build_steps,
    parse_arms,
    parse_duration,
    parse_rates,
    resolve_arms,
)
from .prepare import StackError, check_stack
from .runner import EXIT_INTERRUPTED, Options, Runner, StepFailed, finish, new_run
from .seeddata import SeedData, check_seed, user_prefix
from .sources import Influx, Prometheus, SourceError

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")


class UsageError(Exception):
    """Bad command-line input: reported on one line, exit status 2."""


def _run_id(args: argparse.Namespace, label: str) -> str:
    run_id = args.run_id or time.strftime("%Y%m%d-%H%M%S") + (f"-{label}" if label else "")
    if not RUN_ID.match(run_id):
        raise UsageError(f"--run-id must be 1-40 letters, digits, '-' or '_', got {run_id!r}")
    return run_id


def _out_dir(settings: config.Settings, args: argparse.Namespace, folder: str) -> Path:
    """reports/<folder>, which must not exist yet."""
    out_dir = (args.reports_dir or settings.default_reports_dir) / folder
    if out_dir.exists():
        raise UsageError(f"{out_dir} exists already; choose another --run-id")
    return out_dir


def _checked_seed(settings: config.Settings, args: argparse.Namespace) -> SeedData:
    """The stack is up and its table is the seeded one, or StackError says why."""
    check_stack(settings)
    return check_seed(settings, args.data_dir or settings.default_data_dir)


def _shape(args: argparse.Namespace) -> LoadShape:
    return LoadShape(
        hot_share=args.hot_share,
        cold_sample=args.cold_sample,
        write_share=getattr(args, "write_share", 0.1),
        complexity=getattr(args, "complexity", 10),
        timeout_s=args.timeout,
        stale_per_min=getattr(args, "stale_per_min", 0),
        stale_reads_after=getattr(args, "stale_reads_after", 2),
        read_rate=getattr(args, "read_rate", interference.DEFAULT_READ_RATE),
        pbkdf2_iterations=getattr(
            args, "pbkdf2_iterations", interference.DEFAULT_PBKDF2_ITERATIONS
        ),
        bcrypt_cost=getattr(args, "bcrypt_cost", interference.DEFAULT_BCRYPT_COST),
    )


def plan_sweep(args: argparse.Namespace, seed_indexed: bool | None) -> list[Step]:
    """The steps of a sweep; seed_indexed None checks the parameters only."""
    scenario = args.scenario
    lowest = 0 if scenario in ZERO_RATE_SCENARIOS else 1
    rates = parse_rates(args.rates, lowest) if args.rates else list(DEFAULT_RATES[scenario])
    arms = parse_arms(args.arms, arms_for(scenario)) if args.arms else list(DEFAULT_ARMS[scenario])
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
    return build_steps(scenario, rates, arms, args.warm, duration, read_rate)


def _params(args: argparse.Namespace, seed: Any, shape: LoadShape, **extra: Any) -> dict[str, Any]:
    return {
        "hot_share": shape.hot_share,
        "hot_count": len(seed.hot),
        "cold_sample": shape.cold_sample,
        "cold_sample_used": min(shape.cold_sample, len(seed.cold)),
        "write_share": shape.write_share,
        "complexity": shape.complexity,
        "timeout_s": shape.timeout_s,
        "stale_per_min": shape.stale_per_min,
        "stale_reads_after": shape.stale_reads_after,
        "max_vus": args.max_vus,
        "data_dir": str(seed.data_dir),
        **extra,
    }


def cmd_run(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = _run_id(args, args.scenario)
    out_dir = _out_dir(settings, args, run_id)
    # Parameters first: a typo is reported before anything is touched.
    plan_sweep(args, seed_indexed=None)
    seed = _checked_seed(settings, args)
    steps = plan_sweep(args, seed.indexed)
    shape = _shape(args)
    params = _params(
        args,
        seed,
        shape,
        scenario=args.scenario,
        duration_s=steps[0].duration_s,
        warm=args.warm,
        rates=sorted({s.rate for s in steps}),
        arms=list(dict.fromkeys(s.arm for s in steps)),
        **(interference_report.run_params(shape) if steps[0].read_rate else {}),
    )
    runner = _new_runner("sweep", run_id, out_dir, args, settings, seed, shape, params)
    print(f"run {run_id}: {len(steps)} steps of {steps[0].duration_s}s -> {out_dir}/", flush=True)
    return _drive(runner, lambda: runner.run_steps(steps), _sweep_writer(args.scenario))


def _sweep_writer(scenario: str | None) -> Any:
    """The report of a sweep: the interference scenario has its own."""
    if scenario == interference.SCENARIO:
        return interference_report.write_interference
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
    out_dir.mkdir(parents=True)
    options = Options(run_id, out_dir, seed.data_dir, shape, args.max_vus, args.recover_timeout)
    return Runner(settings, options, seed, new_run(kind, run_id, params, seed, settings))


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
    run_id = _run_id(args, "ceiling")
    out_dir = _out_dir(settings, args, run_id)
    arms = parse_arms(args.arms, CEILING_ARMS)
    duration = parse_duration(args.step_duration)
    search = SearchParams(start=args.start, ladder_step=args.ladder_step, max_rate=args.max_rate)
    seed = _checked_seed(settings, args)
    shape = _shape(args)
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
    runner = _new_runner("ceiling", run_id, out_dir, args, settings, seed, shape, params)
    print(f"ceiling {run_id}: arms {' '.join(arms)}, {duration}s steps -> {out_dir}/", flush=True)

    def search_all() -> None:
        for arm in arms:
            phase = "warm" if arm in TIERED_ARMS else "none"
            history: list[tuple[int, bool]] = []
            while (rate := next_rate(history, search)) is not None:
                step = Step("ceiling", arm, phase, rate, duration)
                head = f"[{step.label} try {len(history) + 1}] @ {rate:>5}/s"
                result = runner.step_with_progress(step, head, None)
                if runner.interrupted:
                    return
                held = result is not None and result.holds(args.p95_ms)
                history.append((rate, held))
                print(f"  -> {'held' if held else 'missed'} (p95 <= {args.p95_ms:g} ms, no drops)")

    return _drive(runner, search_all, report.write_ceiling)


def _seconds(text: str | None, default: float) -> float:
    return default if text is None else float(parse_duration(text))


def cmd_chaos(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = _run_id(args, "")
    try:
        cases = chaos.parse_cases(args.cases)
        user_prefix(run_id, "postgres")
    except ValueError as error:
        raise UsageError(str(error)) from None
    base = chaos.SHORT if args.short else chaos.FULL
    timing = chaos.Timing(
        pre_s=_seconds(args.pre, base.pre_s),
        down_s=_seconds(args.down, base.down_s),
        post_s=_seconds(args.post, base.post_s),
    )
    out_dir = _out_dir(settings, args, f"chaos-{run_id}")
    seed = _checked_seed(settings, args)
    params = chaos.ChaosParams(
        run_id=run_id,
        out_dir=out_dir,
        cases=cases,
        rate=args.rate,
        timing=timing,
        write_share=args.write_share,
        id_sample=args.id_sample,
    )
    run = chaos.run_chaos(settings, params, seed)
    return 0 if run["passed"] else 1


def cmd_soak(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = _run_id(args, "")
    duration = parse_duration(args.duration)
    warmup = _seconds(args.warmup, round(duration * 0.2, 1))
    if not 0 <= warmup < duration:
        raise UsageError(f"--warmup must be shorter than --duration ({duration} s)")
    if not 0.2 <= args.interval <= duration / 4:
        raise UsageError("--interval must be from 0.2 s to a quarter of the duration")
    out_dir = _out_dir(settings, args, f"soak-{run_id}")
    seed = _checked_seed(settings, args)
    params = soak.SoakParams(
        run_id=run_id,
        out_dir=out_dir,
        rate=args.rate,
        duration_s=duration,
        warmup_s=warmup,
        interval_s=args.interval,
        write_share=args.write_share,
    )
    soak.run_soak(settings, params, seed)
    return 0


def cmd_report(args: argparse.Namespace, settings: config.Settings) -> int:
    reports_dir = args.reports_dir or settings.default_reports_dir
    found = reports_dir.glob("*/run.json") if reports_dir.exists() else []
    runs = [p.parent.name for p in sorted(found, key=lambda p: p.stat().st_mtime)]
    if not args.run:
        known = ", ".join(runs[-5:]) or "none yet"
        raise UsageError(f"give the run id: make report RUN=<id> (latest runs: {known})")
    out_dir = reports_dir / args.run
    try:
        run = json.loads((out_dir / "run.json").read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise UsageError(f"no readable run.json in {out_dir} ({error})") from error
    influx = Influx(settings.influx_base, settings.influx_db)
    prom = Prometheus(settings.prometheus_url)
    results = collect(influx, prom, run["run_id"], run["steps"])
    if run.get("kind") == "ceiling":
        writer = report.write_ceiling
    else:
        writer = _sweep_writer(run.get("params", {}).get("scenario"))
    for table in writer(run, results, out_dir):
        print(table.markdown())
    print(f"report: {out_dir}/")
    return 0
