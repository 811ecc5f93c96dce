"""`aside-bench cost`: the driver's own CPU per request against a plain net/http loop."""

from __future__ import annotations

import argparse

from aside_bench.cli import options as opt
from aside_bench.cli import runner_commands
from aside_bench.cli.options import Command
from aside_bench.plan.steps import parse_duration
from aside_bench.records.saturation import DRIVER_CPU_SHARE_LIMIT
from aside_bench.stack import config

from aside_bench_cost import run as cost


def add(parser: argparse.ArgumentParser) -> None:
    opt.option(parser, "--rate", opt.positive, cost.DEFAULT_RATE, "requests/s")
    parser.add_argument(
        "--duration",
        default=cost.DEFAULT_DURATION,
        help=f"per variant and round (default {cost.DEFAULT_DURATION})",
    )
    parser.add_argument(
        "--variants",
        help=f"some of: {' '.join(cost.NAMES)} (default: {' '.join(cost.DEFAULT_NAMES)})",
    )
    opt.option(
        parser, "--repeat", opt.positive, cost.DEFAULT_REPEAT, "rounds, the variants taking turns"
    )
    runner_commands.add_steps(parser)
    runner_commands.without_run_options(parser)
    parser.set_defaults(driver_cpu_share=DRIVER_CPU_SHARE_LIMIT, live=False, samples_file=False)


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = opt.new_run_id(args, cost.KIND)
    out_dir = opt.new_out_dir(settings, args, run_id)
    duration = parse_duration(args.duration)
    with opt.usage_errors(cost.VariantError):
        variants = cost.parse_variants(args.variants)
    seed = opt.checked_seed(settings, args)
    shape = runner_commands.shape_of(args)
    steps = cost.plan(variants, args.rate, duration, args.repeat)
    params = runner_commands.run_params(
        args,
        seed,
        shape,
        scenario=cost.KIND,
        duration_s=duration,
        rate=args.rate,
        repeat=args.repeat,
        variants=[variant.name for variant in variants],
    )
    runner = runner_commands.new_runner(cost.KIND, out_dir, args, settings, seed, shape, params)
    print(
        f"cost {run_id}: {len(variants)} variants at {args.rate}/s, {args.repeat} rounds of "
        f"{duration}s each -> {out_dir}/",
        flush=True,
    )
    return runner_commands.drive(runner, lambda: cost.run_variants(runner, steps), cost.write_cost)


COMMANDS = (
    Command("cost", "the driver's own CPU per request against a plain net/http loop", add, run),
)
