"""aside-bench: `run` (the sweep), `ceiling` (the highest rate held), `report`
(rebuild a run's report from InfluxDB and Prometheus), `chaos` (faults under
load) and `soak` (memory and descriptors of every process under a steady load)."""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

from . import chaos, config, report, soak
from .ceiling import SearchParams, next_rate
from .collect import collect
from .k6run import LoadShape
from .plan import (
    CACHE_ARMS,
    CEILING_ARMS,
    COMPUTE_ARMS,
    DEFAULT_ARMS,
    DEFAULT_RATES,
    SCENARIOS,
    WARM_CHOICES,
    PlanError,
    Step,
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


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-id", help="name of the run (default: time and scenario)")
    parser.add_argument("--data-dir", type=Path, help="the seeder's files (default k6/data)")
    parser.add_argument("--reports-dir", type=Path, help="where reports go (default reports/)")
    parser.add_argument(
        "--hot-share",
        type=_fraction,
        default=0.9,
        help="share of reads asking for a hot email (default 0.9)",
    )
    parser.add_argument(
        "--cold-sample",
        type=_positive,
        default=200,
        help="cold emails used: the first N of cold_emails.json (default 200)",
    )
    parser.add_argument(
        "--timeout", type=_positive, default=10, help="request timeout, s (default 10)"
    )
    parser.add_argument(
        "--max-vus", type=_positive, default=1000, help="VU cap per step (default 1000)"
    )
    parser.add_argument(
        "--recover-timeout",
        type=_positive,
        default=180,
        help="seconds to wait for the stack to go quiet between steps (default 180)",
    )


def _paths(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-id", help="name of the run (default: the time)")
    parser.add_argument("--data-dir", type=Path, help="the seeder's files (default k6/data)")
    parser.add_argument("--reports-dir", type=Path, help="where reports go (default reports/)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aside-bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="the cache off/on sweep over rising rates")
    run.add_argument("--scenario", choices=SCENARIOS, default="read")
    run.add_argument("--rates", help="requests/s, e.g. '30 50 100' (default by scenario)")
    run.add_argument("--duration", default="30s", help="per step, e.g. 30s (default 30s)")
    run.add_argument("--arms", help="read/mixed: nocache cache index; compute: go python")
    run.add_argument(
        "--warm",
        choices=WARM_CHOICES,
        default="both",
        help="cache arm's starting state: cold, warm or both (default both)",
    )
    run.add_argument(
        "--write-share",
        type=_fraction,
        default=0.1,
        help="mixed: share of iterations that write (default 0.1)",
    )
    run.add_argument(
        "--complexity", type=_positive, default=10, help="compute: complexity (default 10)"
    )
    _common(run)

    ceiling = sub.add_parser("ceiling", help="highest rate held at p95 <= limit with no drops")
    ceiling.add_argument("--arms", default="cache healthz", help="cache healthz (default both)")
    ceiling.add_argument("--step-duration", default="12s", help="per step (default 12s)")
    ceiling.add_argument("--p95-ms", type=float, default=10.0, help="p95 limit in ms (default 10)")
    ceiling.add_argument("--start", type=_positive, default=200, help="first rate (default 200)")
    ceiling.add_argument(
        "--ladder-step", type=_positive, default=400, help="rate increase after 800 (default 400)"
    )
    ceiling.add_argument(
        "--max-rate", type=_positive, default=8000, help="highest rate (default 8000)"
    )
    _common(ceiling)

    faults = sub.add_parser("chaos", help="faults under load: redis, core, postgres, worker")
    faults.add_argument("--cases", default="all", help="some of: redis core postgres worker")
    faults.add_argument("--rate", type=_positive, default=60, help="requests/s (default 60)")
    faults.add_argument(
        "--short", action="store_true", help="a few seconds per case (make test's form)"
    )
    faults.add_argument("--pre", help="load before the fault, e.g. 8s (default 8s; short 3s)")
    faults.add_argument("--down", help="fault to restart, e.g. 6s (default 6s; short 2s)")
    faults.add_argument("--post", help="load after the restart (default 12s; short 5s)")
    faults.add_argument(
        "--write-share", type=_fraction, default=0.2, help="share of creates (default 0.2)"
    )
    faults.add_argument(
        "--id-sample", type=_positive, default=50, help="seeded ids read by id (default 50)"
    )
    _paths(faults)

    soaking = sub.add_parser("soak", help="steady mixed load; memory and fds of every process")
    soaking.add_argument("--rate", type=_positive, default=100, help="requests/s (default 100)")
    soaking.add_argument("--duration", default="10m", help="e.g. 10m, 20s (default 10m)")
    soaking.add_argument(
        "--warmup", help="left out of the growth figures (default 20%% of the duration)"
    )
    soaking.add_argument(
        "--interval", type=float, default=5.0, help="seconds between samples (default 5)"
    )
    soaking.add_argument(
        "--write-share", type=_fraction, default=0.2, help="share of creates (default 0.2)"
    )
    _paths(soaking)

    rebuild = sub.add_parser("report", help="rebuild reports/<run>/ from InfluxDB and Prometheus")
    rebuild.add_argument("--run", default="", help="the run id (a folder of reports/)")
    rebuild.add_argument("--reports-dir", type=Path, help="where reports are (default reports/)")
    return parser


def _run_id(args: argparse.Namespace, label: str) -> str:
    run_id = args.run_id or time.strftime("%Y%m%d-%H%M%S") + (f"-{label}" if label else "")
    if not RUN_ID.match(run_id):
        raise UsageError(f"--run-id must be 1-40 letters, digits, '-' or '_', got {run_id!r}")
    return run_id


def _out_dir(settings: config.Settings, args: argparse.Namespace, run_id: str) -> Path:
    out_dir = (args.reports_dir or settings.default_reports_dir) / run_id
    if out_dir.exists():
        raise UsageError(f"{out_dir} exists already; choose another --run-id")
    return out_dir


def _shape(args: argparse.Namespace) -> LoadShape:
    return LoadShape(
        hot_share=args.hot_share,
        cold_sample=args.cold_sample,
        write_share=getattr(args, "write_share", 0.1),
        complexity=getattr(args, "complexity", 10),
        timeout_s=args.timeout,
    )


def plan_sweep(args: argparse.Namespace, seed_indexed: bool | None) -> list[Step]:
    """The steps of a sweep; seed_indexed None checks the parameters only."""
    scenario = args.scenario
    rates = parse_rates(args.rates) if args.rates else list(DEFAULT_RATES[scenario])
    allowed = COMPUTE_ARMS if scenario == "compute" else CACHE_ARMS
    arms = parse_arms(args.arms, allowed) if args.arms else list(DEFAULT_ARMS[scenario])
    if scenario != "compute" and seed_indexed is not None:
        arms = resolve_arms(arms, seed_indexed)
    return build_steps(scenario, rates, arms, args.warm, parse_duration(args.duration))


def _params(args: argparse.Namespace, seed: Any, shape: LoadShape, **extra: Any) -> dict[str, Any]:
    return {
        "hot_share": shape.hot_share,
        "hot_count": len(seed.hot),
        "cold_sample": shape.cold_sample,
        "cold_sample_used": min(shape.cold_sample, len(seed.cold)),
        "write_share": shape.write_share,
        "complexity": shape.complexity,
        "timeout_s": shape.timeout_s,
        "max_vus": args.max_vus,
        "data_dir": str(seed.data_dir),
        **extra,
    }


def cmd_run(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = _run_id(args, args.scenario)
    out_dir = _out_dir(settings, args, run_id)
    # Parameters first: a typo is reported before anything is touched.
    plan_sweep(args, seed_indexed=None)
    check_stack(settings)
    seed = check_seed(settings, args.data_dir or settings.default_data_dir)
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
    )
    runner = _new_runner("sweep", run_id, out_dir, args, settings, seed, shape, params)
    print(f"run {run_id}: {len(steps)} steps of {steps[0].duration_s}s -> {out_dir}/", flush=True)
    return _drive(runner, lambda: runner.run_steps(steps), report.write_sweep)


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
    check_stack(settings)
    seed = check_seed(settings, args.data_dir or settings.default_data_dir)
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
            phase = "warm" if arm == "cache" else "none"
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
    out_dir = (args.reports_dir or settings.default_reports_dir) / f"chaos-{run_id}"
    if out_dir.exists():
        raise UsageError(f"{out_dir} exists already; choose another --run-id")
    check_stack(settings)
    seed = check_seed(settings, args.data_dir or settings.default_data_dir)
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
    out_dir = (args.reports_dir or settings.default_reports_dir) / f"soak-{run_id}"
    if out_dir.exists():
        raise UsageError(f"{out_dir} exists already; choose another --run-id")
    check_stack(settings)
    seed = check_seed(settings, args.data_dir or settings.default_data_dir)
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
    writer = report.write_ceiling if run.get("kind") == "ceiling" else report.write_sweep
    for table in writer(run, results, out_dir):
        print(table.markdown())
    print(f"report: {out_dir}/")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Ctrl-C before the first step stops at once (also when started in the
    # background, where SIGINT arrives ignored); the runner takes over later.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        settings = config.load()
        command = {
            "run": cmd_run,
            "ceiling": cmd_ceiling,
            "report": cmd_report,
            "chaos": cmd_chaos,
            "soak": cmd_soak,
        }[args.command]
        return command(args, settings)
    except (UsageError, PlanError) as error:
        print(f"aside-bench: {error}", file=sys.stderr)
        return 2
    except (config.ConfigError, StackError, SourceError) as error:
        print(f"aside-bench: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("aside-bench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
