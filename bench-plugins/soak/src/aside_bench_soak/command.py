"""`aside-bench soak`'s options, and the run once they are parsed."""

from __future__ import annotations

import argparse

from aside_bench.cli import options as opt
from aside_bench.cli.options import Command, UsageError
from aside_bench.plan.steps import parse_duration
from aside_bench.stack import config

from aside_bench_soak import run as soak


def add_soak(soaking: argparse.ArgumentParser) -> None:
    opt.option(soaking, "--rate", opt.positive, 100, "requests/s")
    opt.option(soaking, "--duration", str, "10m", "e.g. 10m, 20s")
    soaking.add_argument(
        "--warmup", help="left out of the growth figures (default 20%% of the duration)"
    )
    opt.option(soaking, "--interval", float, 5.0, "seconds between samples")
    opt.write_share(soaking, opt.default_of(soak.SoakParams, "write_share"), "share of creates")
    soaking.add_argument(
        "--via",
        choices=("gateway", "core"),
        default=opt.default_of(soak.SoakParams, "via"),
        help="where the load goes",
    )
    opt.paths(soaking, "the time")


def run_soak(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = opt.new_run_id(args, "")
    duration = parse_duration(args.duration)
    warmup = round(duration * 0.2, 1) if args.warmup is None else float(parse_duration(args.warmup))
    if not 0 <= warmup < duration:
        raise UsageError(f"--warmup must be shorter than --duration ({duration} s)")
    if not 0.2 <= args.interval <= duration / 4:
        raise UsageError("--interval must be from 0.2 s to a quarter of the duration")
    out_dir = opt.new_out_dir(settings, args, f"soak-{run_id}")
    seed = opt.checked_seed(settings, args)
    params = soak.SoakParams(
        run_id, out_dir, args.rate, duration, warmup, args.interval, args.write_share, via=args.via
    )
    soak.run_soak(settings, params, seed)
    return 0


COMMANDS = (
    Command("soak", "steady mixed load; memory and fds of every process", add_soak, run_soak),
)
