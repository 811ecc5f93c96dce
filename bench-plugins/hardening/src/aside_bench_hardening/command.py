"""`aside-bench hardening`'s options, and the run once they are parsed (exit 1: a check failed)."""

from __future__ import annotations

import argparse

from aside_bench.cli import options as opt
from aside_bench.cli.options import Command, UsageError
from aside_bench.plan.steps import parse_duration
from aside_bench.stack import config

from aside_bench_hardening import hostile as hostile_client
from aside_bench_hardening import run as hardening

# The suite's options by kind of value: (flag, the HardeningParams field it sets, its help).
HARDENING_COUNTS = (
    ("--sockets", "sockets", "slow sockets"),
    ("--emails", "emails", "cold emails flooded"),
    ("--concurrency", "concurrency", "flood requests in flight"),
    ("--client-timeout-ms", "client_timeout_ms", "a flood client gives up after this"),
)
HARDENING_DURATIONS = (
    ("--pre", "pre_s", "reads before each attack"),
    ("--post", "post_s", "reads after it"),
    ("--hostile", "hostile_s", "the hostile client's run"),
)
HARDENING_LIMITS = (
    ("--p95-ms", "read_p95_ms", "reads' p95 limit during slow heads"),
    ("--rss-growth-mib", "rss_growth_mib", "limit on the workers' summed RSS growth"),
)


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def add_hardening(hard: argparse.ArgumentParser) -> None:
    hard.add_argument(
        "--experiments", default="all", help="some of: slow-heads cold-flood hostile (default all)"
    )

    def default(name: str) -> object:
        return opt.default_of(hardening.HardeningParams, name)

    hard.add_argument(
        "--hostile-parts",
        default="all",
        help="the hostile client's parts, some of: "
        f"{','.join(hostile_client.PARTS)} (comma-separated, default all)",
    )
    opt.option(hard, "--rate", opt.positive, default("rate"), "cached reads/s")
    for flag, name, what in HARDENING_DURATIONS:
        opt.option(hard, flag, str, f"{default(name):g}s", what)
    for flag, name, what in HARDENING_COUNTS:
        opt.option(hard, flag, opt.positive, default(name), what)
    for flag, name, what in HARDENING_LIMITS:
        opt.option(hard, flag, float, default(name), what)
    opt.paths(hard, "the time")


def run_hardening(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = opt.new_run_id(args, "")
    with opt.usage_errors(ValueError):
        experiments = hardening.parse_experiments(args.experiments)
        hostile_parts = hostile_client.parse_parts(args.hostile_parts)
    if args.p95_ms <= 0 or args.rss_growth_mib <= 0:
        raise UsageError("--p95-ms and --rss-growth-mib must be above 0")
    out_dir = opt.new_out_dir(settings, args, f"hardening-{run_id}")
    params = hardening.HardeningParams(
        run_id,
        out_dir,
        experiments,
        rate=args.rate,
        hostile_parts=hostile_parts,
        **{name: vars(args)[_dest(flag)] for flag, name, _ in HARDENING_COUNTS + HARDENING_LIMITS},
        **{name: parse_duration(vars(args)[_dest(flag)]) for flag, name, _ in HARDENING_DURATIONS},
    )
    seed = opt.checked_seed(settings, args)
    return 0 if hardening.run_hardening(settings, params, seed).passed else 1


HARDENING_HELP = "slow request heads and a cold flood under reads"
COMMANDS = (Command("hardening", HARDENING_HELP, add_hardening, run_hardening),)
