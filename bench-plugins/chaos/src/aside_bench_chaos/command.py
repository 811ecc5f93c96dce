"""`aside-bench chaos`: its options, then the suite on a checked stack and seed (1: a failure)."""

from __future__ import annotations

import argparse
from dataclasses import replace

from aside_bench.cli import options as opt
from aside_bench.cli.options import Command
from aside_bench.plan.steps import parse_duration
from aside_bench.stack import config
from aside_bench_suite.base import user_prefix

from aside_bench_chaos import run as chaos
from aside_bench_chaos.cases import CASES, FULL, SHORT, ChaosParams

# The phases' options: flag (its dest, plus "_s", a Timing field) and what it sets.
TIMING_OPTIONS = (
    ("--pre", "load before the fault, e.g. 8s"),
    ("--down", "fault to restart, e.g. 6s"),
    ("--post", "load after the restart"),
    ("--gray", "a gray failure's length"),
)


def add_chaos(faults: argparse.ArgumentParser) -> None:
    faults.add_argument("--cases", default="all", help=f"some of: {' '.join(CASES)}")
    opt.option(faults, "--rate", opt.positive, 60, "requests/s")
    faults.add_argument(
        "--short", action="store_true", help="a few seconds per case (make test's form)"
    )
    for flag, what in TIMING_OPTIONS:
        name = f"{flag[2:]}_s"
        shown = f"default {getattr(FULL, name):g}s; short {getattr(SHORT, name):g}s"
        faults.add_argument(flag, help=f"{what} ({shown})")
    opt.write_share(faults, opt.default_of(ChaosParams, "write_share"), "share of creates")
    id_sample = opt.default_of(ChaosParams, "id_sample")
    opt.option(faults, "--id-sample", opt.positive, id_sample, "seeded ids read by id")
    opt.paths(faults, "the time")


def run_chaos(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = opt.new_run_id(args, "")
    with opt.usage_errors(ValueError):
        cases = chaos.parse_cases(args.cases)
        user_prefix(run_id, "postgres")
    base = SHORT if args.short else FULL
    given = {f"{flag[2:]}_s": getattr(args, flag[2:]) for flag, _ in TIMING_OPTIONS}
    timing = replace(
        base, **{k: float(parse_duration(v)) for k, v in given.items() if v is not None}
    )
    out_dir = opt.new_out_dir(settings, args, f"chaos-{run_id}")
    seed = opt.checked_seed(settings, args)
    params = ChaosParams(
        run_id=run_id,
        out_dir=out_dir,
        cases=cases,
        rate=args.rate,
        timing=timing,
        write_share=args.write_share,
        id_sample=args.id_sample,
    )
    return 0 if chaos.run_chaos(settings, params, seed).passed else 1


COMMANDS = (
    Command("chaos", "faults under load: redis, core, postgres, worker", add_chaos, run_chaos),
)
