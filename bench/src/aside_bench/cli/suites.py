"""The suites' commands: `chaos` (faults under load), `soak` (memory and
descriptors under a steady load), `hardening` (slow clients and a cold flood
under cached reads) and `create-rate` (the highest rate of keyed creates); their
options (defaults from each suite's parameters) and what each does once parsed:
check them, the stack and the seed, then run the suite (all but the soak exit 1
when a check failed)."""

from __future__ import annotations

import argparse

from aside_bench.cli import options as opt
from aside_bench.cli.options import Command, UsageError
from aside_bench.plan.steps import parse_duration, parse_rates
from aside_bench.stack import config
from aside_bench.stack.seeddata import user_prefix
from aside_bench.suites import create_rate
from aside_bench.suites.chaos import run as chaos
from aside_bench.suites.hardening import run as hardening
from aside_bench.suites.soak import run as soak


def _seconds(text: str | None, default: float) -> float:
    return default if text is None else float(parse_duration(text))


def add_chaos(faults: argparse.ArgumentParser) -> None:
    faults.add_argument("--cases", default="all", help="some of: redis core postgres worker")
    opt.option(faults, "--rate", opt.positive, 60, "requests/s")
    faults.add_argument(
        "--short", action="store_true", help="a few seconds per case (make test's form)"
    )
    full, short = chaos.FULL, chaos.SHORT
    for flag, what, name in (
        ("--pre", "load before the fault, e.g. 8s", "pre_s"),
        ("--down", "fault to restart, e.g. 6s", "down_s"),
        ("--post", "load after the restart", "post_s"),
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


def add_soak(soaking: argparse.ArgumentParser) -> None:
    opt.option(soaking, "--rate", opt.positive, 100, "requests/s")
    soaking.add_argument("--duration", default="10m", help="e.g. 10m, 20s (default 10m)")
    soaking.add_argument(
        "--warmup", help="left out of the growth figures (default 20%% of the duration)"
    )
    soaking.add_argument(
        "--interval", type=float, default=5.0, help="seconds between samples (default 5)"
    )
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
    warmup = _seconds(args.warmup, round(duration * 0.2, 1))
    if not 0 <= warmup < duration:
        raise UsageError(f"--warmup must be shorter than --duration ({duration} s)")
    if not 0.2 <= args.interval <= duration / 4:
        raise UsageError("--interval must be from 0.2 s to a quarter of the duration")
    out_dir = opt.new_out_dir(settings, args, f"soak-{run_id}")
    seed = opt.checked_seed(settings, args)
    params = soak.SoakParams(
        run_id=run_id,
        out_dir=out_dir,
        rate=args.rate,
        duration_s=duration,
        warmup_s=warmup,
        interval_s=args.interval,
        write_share=args.write_share,
        via=args.via,
    )
    soak.run_soak(settings, params, seed)
    return 0


# The hardening suite's counts: (flag, the HardeningParams field it sets, what it counts).
HARDENING_COUNTS = (
    ("--sockets", "sockets", "slow sockets"),
    ("--emails", "emails", "cold emails flooded"),
    ("--concurrency", "concurrency", "flood requests in flight"),
    ("--client-timeout-ms", "client_timeout_ms", "a flood client gives up after this"),
)


def add_hardening(hard: argparse.ArgumentParser) -> None:
    hard.add_argument(
        "--experiments", default="all", help="some of: slow-heads cold-flood hostile (default all)"
    )

    def default(name: str) -> object:
        return opt.default_of(hardening.HardeningParams, name)

    opt.option(hard, "--rate", opt.positive, default("rate"), "cached reads/s")
    for flag, name, what in (
        ("--pre", "pre_s", "reads before each attack"),
        ("--post", "post_s", "reads after it"),
        ("--hostile", "hostile_s", "the hostile client's run"),
    ):
        shown = f"{default(name):g}s"
        hard.add_argument(flag, default=shown, help=f"{what} (default {shown})")
    for flag, name, what in HARDENING_COUNTS:
        opt.option(hard, flag, opt.positive, default(name), what)
    hard.add_argument(
        "--p95-ms",
        type=float,
        default=default("read_p95_ms"),
        help=f"reads' p95 limit during slow heads (default {default('read_p95_ms'):g})",
    )
    hard.add_argument(
        "--rss-growth-mib",
        type=float,
        default=default("rss_growth_mib"),
        help=f"limit on the workers' summed RSS growth (default {default('rss_growth_mib'):g})",
    )
    opt.paths(hard, "the time")


def run_hardening(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = opt.new_run_id(args, "")
    with opt.usage_errors(ValueError):
        experiments = hardening.parse_experiments(args.experiments)
    if args.p95_ms <= 0 or args.rss_growth_mib <= 0:
        raise UsageError("--p95-ms and --rss-growth-mib must be above 0")
    out_dir = opt.new_out_dir(settings, args, f"hardening-{run_id}")
    params = hardening.HardeningParams(
        run_id=run_id,
        out_dir=out_dir,
        experiments=experiments,
        rate=args.rate,
        pre_s=parse_duration(args.pre),
        post_s=parse_duration(args.post),
        hostile_s=parse_duration(args.hostile),
        **{name: vars(args)[name] for _, name, _ in HARDENING_COUNTS},
        read_p95_ms=args.p95_ms,
        rss_growth_mib=args.rss_growth_mib,
    )
    seed = opt.checked_seed(settings, args)
    return 0 if hardening.run_hardening(settings, params, seed).passed else 1


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


CHAOS = Command("chaos", "faults under load: redis, core, postgres, worker", add_chaos, run_chaos)
SOAK = Command("soak", "steady mixed load; memory and fds of every process", add_soak, run_soak)
CREATE_RATE_HELP = "the highest rate of keyed creates held: fixed rates, then midpoints"
CREATE_RATE = Command("create-rate", CREATE_RATE_HELP, add_create_rate, run_create_rate)
HARDENING_HELP = "slow request heads and a cold flood under reads"
HARDENING = Command("hardening", HARDENING_HELP, add_hardening, run_hardening)
