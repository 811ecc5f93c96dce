"""`aside-bench chaos`: faults under load; its options (defaults from the
suite's parameters) and what it does once they are parsed: check them, the
stack and the seed, then run the suite (exit 1 when a check failed)."""

from __future__ import annotations

import argparse

from aside_bench.cli import options as opt
from aside_bench.cli.options import Command
from aside_bench.plan.steps import parse_duration
from aside_bench.stack import config
from aside_bench_suite.base import user_prefix

from aside_bench_chaos import run as chaos


def _seconds(text: str | None, default: float) -> float:
    return default if text is None else float(parse_duration(text))


def add_chaos(faults: argparse.ArgumentParser) -> None:
    faults.add_argument("--cases", default="all", help=f"some of: {' '.join(chaos.CASES)}")
    opt.option(faults, "--rate", opt.positive, 60, "requests/s")
    faults.add_argument(
        "--short", action="store_true", help="a few seconds per case (make test's form)"
    )
    full, short = chaos.FULL, chaos.SHORT
    for flag, what, name in (
        ("--pre", "load before the fault, e.g. 8s", "pre_s"),
        ("--down", "fault to restart, e.g. 6s", "down_s"),
        ("--post", "load after the restart", "post_s"),
        ("--gray", "a gray failure's length", "gray_s"),
    ):
        shown = f"default {getattr(full, name):g}s; short {getattr(short, name):g}s"
        faults.add_argument(flag, help=f"{what} ({shown})")
    opt.write_share(faults, opt.default_of(chaos.ChaosParams, "write_share"), "share of creates")
    opt.option(
        faults,
        "--id-sample",
        opt.positive,
        opt.default_of(chaos.ChaosParams, "id_sample"),
        "seeded ids read by id",
    )
    opt.paths(faults, "the time")


def run_chaos(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = opt.new_run_id(args, "")
    with opt.usage_errors(ValueError):
        cases = chaos.parse_cases(args.cases)
        user_prefix(run_id, "postgres")
    base = chaos.SHORT if args.short else chaos.FULL
    timing = chaos.Timing(
        pre_s=_seconds(args.pre, base.pre_s),
        down_s=_seconds(args.down, base.down_s),
        post_s=_seconds(args.post, base.post_s),
        gray_s=_seconds(args.gray, base.gray_s),
    )
    out_dir = opt.new_out_dir(settings, args, f"chaos-{run_id}")
    seed = opt.checked_seed(settings, args)
    params = chaos.ChaosParams(
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
