"""`aside-bench create-rate`: the highest rate of keyed creates the core
holds; its options and what it does once they are parsed (exit 1 when none held)."""

from __future__ import annotations

import argparse

from aside_bench.cli import options as opt
from aside_bench.cli.options import Command
from aside_bench.plan.steps import parse_duration, parse_rates
from aside_bench.stack import config

from aside_bench_create_rate import run as create_rate


def add_create_rate(rates: argparse.ArgumentParser) -> None:
    rates.add_argument("--rates", default="200 400 800 1600", help="creates/s, ascending")
    rates.add_argument("--duration", default="15s", help="per rate (default 15s)")
    rates.add_argument("--via", choices=("core", "gateway"), default="core")
    limit = create_rate.P95_LIMIT_MS
    rates.add_argument("--p95-ms", type=float, default=limit, help=f"p95 limit (default {limit:g})")
    rates.add_argument("--refine", type=int, default=2, help="midpoints after a failed rate")
    rates.add_argument("--resolution", type=int, default=50, help="creates/s (default 50)")
    opt.paths(rates, "the time")


def run_create_rate(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = opt.new_run_id(args, "")
    params = create_rate.Params(
        run_id=run_id,
        out_dir=opt.new_out_dir(settings, args, f"create-rate-{run_id}"),
        rates=parse_rates(args.rates),
        duration_s=parse_duration(args.duration),
        via=args.via,
        p95_limit_ms=args.p95_ms,
        refine=max(args.refine, 0),
        resolution=max(args.resolution, 1),
    )
    seed = opt.checked_seed(settings, args)
    run = create_rate.run_create_rate(settings, params, seed)
    return 0 if run.extra["highest_held"] is not None else 1


CREATE_RATE_HELP = "the highest rate of keyed creates held: fixed rates, then midpoints"
COMMANDS = (Command("create-rate", CREATE_RATE_HELP, add_create_rate, run_create_rate),)
