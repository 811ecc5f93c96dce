"""What `run`, `ceiling` and `cost` share: the mix's options, params, the runner's set-up."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from aside_bench.calibration import calibrate
from aside_bench.cli import options as opt
from aside_bench.plan import scenarios
from aside_bench.plan.shape import LoadShape
from aside_bench.plan.steps import parse_duration
from aside_bench.records import calibration, keytrace, runfile
from aside_bench.records.documents import RunParams, TraceParams
from aside_bench.records.saturation import DRIVER_CPU_SHARE_LIMIT, cpu_limit_cores
from aside_bench.report import sweep as report
from aside_bench.stack import config
from aside_bench.stack.distance import Distance
from aside_bench.stack.prepare import StackError
from aside_bench.stack.seeddata import SeedData
from aside_bench.stack.sources import SourceError
from aside_bench.sweep.runner import EXIT_INTERRUPTED, Options, Runner, StepFailed, finish, new_run

MAX_POOL = 1000  # the driver's workers per step at most
RECOVER_TIMEOUT_S = 180  # waiting for the stack to go quiet between steps
Writer = Callable[..., Any]  # a run's report: (run, results, out_dir) -> its tables


def shape_default(name: str) -> Any:
    """A default of the request mix, owned by plan/shape.py's LoadShape."""
    return opt.default_of(LoadShape, name)


def _trace_file(text: str) -> Path:
    """A key trace the driver can replay (records/keytrace.py: its rules are the driver's)."""
    path = Path(text)
    try:
        keytrace.check_replayable(path)
    except keytrace.KeyTraceError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return path


def add_steps(parser: argparse.ArgumentParser) -> None:
    """The read mix and the limits of every step of a sweep or a ceiling search."""
    opt.paths(parser, "time and scenario")
    for flag, checked, name, what in (
        ("--hot-share", opt.fraction, "hot_share", "share of reads asking for a hot email"),
        ("--cold-sample", opt.positive, "cold_sample",
         "cold emails used: the first N of cold_emails.json"),
    ):  # fmt: skip
        opt.option(parser, flag, checked, shape_default(name), what)
    dist = shape_default("dist")
    parser.add_argument(
        "--dist",
        choices=("hotset", "uniform", "zipf"),
        default=dist,
        help="the reads' key popularity: hotset (--hot-share over the hot and cold samples), "
        f"uniform or zipf over the table's distinct emails (default {dist})",
    )
    for flag, checked, default, what in (
        ("--alpha", opt.above_zero, shape_default("alpha"), "zipf's exponent"),
        ("--keys", opt.whole, shape_default("keys"),
         "the key space: the first N distinct emails, 0: all"),
        ("--trace", _trace_file, shape_default("trace"),
         "a key trace the reads replay in its order instead of --dist (read, ceiling, "
         "interference; timed traces run at each step's rate, their gaps scaled)"),
        ("--timeout", opt.positive, shape_default("timeout_s"), "request timeout, s"),
        ("--max-pool", opt.positive, MAX_POOL, "the driver's workers per step at most"),
        ("--recover-timeout", opt.positive, RECOVER_TIMEOUT_S,
         "seconds to wait for the stack to go quiet between steps"),
    ):  # fmt: skip
        opt.option(parser, flag, checked, default, what)


TRUST_FLAGS = {
    "--live": "the driver's line a second (rate, p95, drops, errors) while each step runs",
    "--samples-file": "every request of every step as a JSON line into the run folder "
    "(samples-NNN-*.jsonl; large: off by default)",
}


def add_trust(parser: argparse.ArgumentParser) -> None:
    """The machine's calibration before the steps, the driver's own limits, the live line."""
    parser.add_argument(
        "--no-calibrate",
        dest="calibrate",
        action="store_false",
        help="skip the machine's calibration (quick runs and tests)",
    )
    probe = f"{opt.default_of(calibrate.CalibrationParams, 'probe_s')}s"
    opt.option(parser, "--calibration-probe", str, probe, "calibration: per probe")
    for flag, name, what in (
        ("--calibration-budget", "budget_s", "calibration: seconds for both servers together"),
        ("--calibration-start", "start", "calibration: first rate"),
        ("--calibration-max-rate", "max_rate", "calibration: highest rate"),
    ):
        default = int(opt.default_of(calibrate.CalibrationParams, name))
        opt.option(parser, flag, opt.positive, default, what)
    what = "share of the machine's cores the driver may use before a step counts as load generator"
    opt.option(parser, "--driver-cpu-share", opt.share, DRIVER_CPU_SHARE_LIMIT, f"{what} saturated")
    for flag, what in TRUST_FLAGS.items():
        parser.add_argument(flag, action="store_true", help=what)


def without_run_options(parser: argparse.ArgumentParser) -> None:
    """The defaults of `run`'s scenario and memory-arm options, no stale checks."""
    names = ("write_share", "complexity", "stale_reads_after", "read_rate")
    parser.set_defaults(
        **{name: shape_default(name) for name in names},
        stale_per_min=0,
        pbkdf2_iterations=shape_default("pbkdf2_iterations"),
        bcrypt_cost=shape_default("bcrypt_cost"),
        cache_policy=opt.default_of(Options, "cache_policy"),
    )


def _trace(args: argparse.Namespace) -> tuple[Path | None, float | None]:
    """The key trace to replay (--trace) and, when timed, its requests a second."""
    path = args.trace
    if path is None:
        return None, None
    if args.dist != "hotset":
        raise opt.UsageError(
            f"--trace and --dist {args.dist} are exclusive: a trace asks for its own keys"
        )
    return path, keytrace.timed_rate(keytrace.check_replayable(path))


def shape_of(args: argparse.Namespace) -> LoadShape:
    """The request mix the options give."""
    trace, trace_rate = _trace(args)
    given = vars(args)  # every other field of LoadShape is an option of its name
    named = {f.name: given[f.name] for f in fields(LoadShape) if f.name in given}
    return LoadShape(
        **{**named, "trace": trace, "trace_rate": trace_rate, "timeout_s": args.timeout}
    )


def run_params(
    args: argparse.Namespace, seed: SeedData, shape: LoadShape, **extra: Any
) -> RunParams:
    """run.json's "params": the request mix, the seed it reads and the command's own."""
    used = min(shape.cold_sample, len(seed.cold))
    params = RunParams(hot_share=shape.hot_share, hot_count=len(seed.hot))
    params.update(cold_sample=shape.cold_sample, cold_sample_used=used)
    params.update(dist=shape.dist, alpha=shape.alpha, keys=shape.keys)
    if shape.trace is not None:
        keys = keytrace.read_key_trace(shape.trace)
        params["trace"] = TraceParams(
            file=shape.trace.name,
            path=str(shape.trace.resolve()),
            lines=len(keys),
            keys=len(set(keys)),
            rate=shape.trace_rate,
        )
    params.update(write_share=shape.write_share, complexity=shape.complexity)
    params.update(timeout_s=shape.timeout_s, stale_per_min=shape.stale_per_min)
    params.update(stale_reads_after=shape.stale_reads_after)
    params.update(max_pool=args.max_pool, data_dir=str(seed.data_dir), **extra)
    return params


def calibration_params(args: argparse.Namespace) -> calibrate.CalibrationParams:
    return calibrate.CalibrationParams(
        probe_s=parse_duration(args.calibration_probe),
        budget_s=float(args.calibration_budget),
        start=args.calibration_start,
        max_rate=max(args.calibration_max_rate, args.calibration_start),
    )


def run_calibration(runner: Runner, args: argparse.Namespace) -> None:
    """The machine's calibration into run.json's machine, printed (or skipped)."""
    if not args.calibrate:
        print("calibration: skipped (--no-calibrate)", flush=True)
        return
    params = calibration_params(args)
    print(f"calibration: {params.probe_s}s probes, at most {params.budget_s:.0f}s", flush=True)
    runner.run.machine["calibration"] = calibrate.calibrate(runner, params)
    runfile.save_run(runner.run, runner.options.out_dir)
    for line in calibration.describe(runner.run.machine):
        print(f"calibration: {line}", flush=True)


def sweep_writer(scenario: str | None, settings: config.Settings) -> Writer:
    """The report of a sweep: its scenario's own writer where it has one."""
    found = scenarios.scenario_of(scenario or "read")
    if found is not None and found.hooks.writer is not None:
        return found.hooks.writer(settings)
    return report.write_sweep


def new_runner(
    kind: str,
    out_dir: Path,
    args: argparse.Namespace,
    settings: config.Settings,
    seed: SeedData,
    shape: LoadShape,
    params: RunParams,
    distances: dict[str, Distance] | None = None,
) -> Runner:
    """The run's folder and its runner; `distances`: those its arms run at."""
    run_id = out_dir.name
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
        distances=distances or {},
    )
    return Runner(settings, options, seed, run)


def drive(runner: Runner, body: Callable[[], None], writer: Writer) -> int:
    """Run `body` on the runner, then write the report of what finished."""
    runner.install_signal_handler()
    failure: str | None = None
    try:
        body()
    except KeyboardInterrupt:
        runner.interrupted = True
    except (StepFailed, StackError, SourceError) as error:
        failure = str(error)
    except BaseException:
        runner.cleanup()  # a step's bug still gives Redis, the gateway and the hops back
        raise
    finish(runner, writer)
    if runner.interrupted:
        print("aside-bench: interrupted; the report holds the steps that finished", file=sys.stderr)
        return EXIT_INTERRUPTED
    if failure:
        print(f"aside-bench: {failure}", file=sys.stderr)
        return 1
    return 0
