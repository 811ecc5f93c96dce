"""`aside-bench run`: the cache off/on sweep over rising rates (the read,
mixed, compute, interference and tracks scenarios), its options and its plan."""

from __future__ import annotations

import argparse

from aside_bench.cli import expiry, stepping
from aside_bench.cli import options as opt
from aside_bench.cli.options import Command, UsageError
from aside_bench.plan import expiry as expiryplan
from aside_bench.plan import interference
from aside_bench.plan import tracks as trackplan
from aside_bench.plan.steps import (
    DEFAULT_ARMS,
    DEFAULT_RATES,
    EVICTION_POLICIES,
    SCENARIOS,
    WARM_CHOICES,
    ZERO_RATE_SCENARIOS,
    Step,
    bounded_arms,
    build_steps,
    parse_arms,
    parse_duration,
    parse_rates,
    repeat_steps,
    resolve_arms,
    scenario_arms,
)
from aside_bench.report import interference as interference_report
from aside_bench.stack import config
from aside_bench.sweep import tracks
from aside_bench.sweep.runner import Options


def add(run: argparse.ArgumentParser) -> None:
    run.add_argument("--scenario", choices=SCENARIOS, default="read")
    run.add_argument("--rates", help="requests/s, e.g. '30 50 100' (default by scenario)")
    run.add_argument("--duration", default="20s", help="per step, e.g. 30s (default 20s)")
    run.add_argument(
        "--arms",
        help="read/mixed: nocache index coalesce cache (alias l2) l1 hybrid tracking l1-ttl "
        "nopool; "
        "compute: go python; interference: <go|python>-<checksum|pbkdf2|bcrypt>",
    )
    run.add_argument(
        "--warm",
        choices=WARM_CHOICES,
        default="both",
        help="cache arm's starting state: cold, warm or both (default both)",
    )
    run.add_argument(
        "--cache-memory",
        default="",
        help="read: Redis bounds, e.g. '2mb 4mb 8mb': the cache arm runs once per bound, "
        "from an empty cache (default: the stack's own maxmemory)",
    )
    run.add_argument(
        "--l1-entries",
        default="",
        help="read: L1 bounds in entries per worker, e.g. '1000 10000': the l1, hybrid and "
        "tracking arms once per bound (CACHE_L1_MAX_ENTRIES; default: the gateway's own)",
    )
    run.add_argument(
        "--cache-ttl",
        default="",
        help="read: Redis TTLs in seconds, e.g. '5 60': the cache arm once per TTL "
        "(CACHE_TTL_SECONDS; default: the gateway's own)",
    )
    policy = opt.default_of(Options, "cache_policy")
    run.add_argument(
        "--cache-policy",
        choices=EVICTION_POLICIES,
        default=policy,
        help=f"Redis's eviction policy under --cache-memory (default {policy})",
    )
    opt.write_share(
        run,
        stepping.shape_default("write_share"),
        "mixed: share of requests that write (a create and its delete)",
    )
    for flag, checked, name, what in (
        ("--stale-per-min", opt.whole, "stale_per_min",
         "mixed: read-after-write checks a minute beside the load, 0: none"),
        ("--stale-reads-after", opt.positive, "stale_reads_after",
         "mixed: reads of each key after each checked write"),
        ("--complexity", opt.positive, "complexity", "compute: complexity"),
    ):  # fmt: skip
        opt.option(run, flag, checked, stepping.shape_default(name), what)
    opt.option(
        run,
        "--repeat",
        opt.positive,
        1,
        "runs of each step, interleaved within each rate; medians and spreads",
    )
    group = run.add_argument_group("interference (--scenario interference, rates 0 allowed)")
    for flag, name, what in (
        ("--read-rate", "read_rate", "cached reads/s beside the compute"),
        ("--pbkdf2-iterations", "pbkdf2_iterations", "pbkdf2 arms' iterations"),
        ("--bcrypt-cost", "bcrypt_cost", "bcrypt arms' cost"),
    ):
        opt.option(group, flag, opt.positive, stepping.shape_default(name), what)
    stepping.add_steps(run)
    stepping.add_trust(run)


def plan_sweep(args: argparse.Namespace, seed_indexed: bool | None) -> list[Step]:
    """The steps of a sweep; seed_indexed None checks the parameters only."""
    scenario = args.scenario
    lowest = 0 if scenario in ZERO_RATE_SCENARIOS else 1
    rates = parse_rates(args.rates, lowest) if args.rates else list(DEFAULT_RATES[scenario])
    arms = (
        parse_arms(args.arms, scenario_arms(scenario))
        if args.arms
        else list(DEFAULT_ARMS[scenario])
    )
    if args.dist != "hotset" and scenario not in ("read", "ceiling"):
        raise UsageError(f"--dist {args.dist} is for the read scenario, not {scenario}")
    if args.trace is not None and scenario not in (
        "read",
        "ceiling",
        interference.SCENARIO,
    ):
        raise UsageError(f"--trace is for the read and interference scenarios, not {scenario}")
    arms = _bounded(args, scenario, arms)
    if scenario in ("read", "mixed") and seed_indexed is not None:
        arms = resolve_arms(arms, seed_indexed)
    read_rate = 0
    if scenario == interference.SCENARIO:
        read_rate = args.read_rate
        with opt.usage_errors(interference.InterferenceError):
            interference.check_work(args.pbkdf2_iterations, args.bcrypt_cost)
    duration = parse_duration(args.duration)
    steps = build_steps(scenario, rates, arms, args.warm, duration, read_rate)
    return repeat_steps(steps, args.repeat)


def _bounded(args: argparse.Namespace, scenario: str, arms: list[str]) -> list[str]:
    """The arms with their bounds: --cache-memory, --l1-entries, --cache-ttl."""
    given = {
        "memory": ("--cache-memory", args.cache_memory),
        "entries": ("--l1-entries", args.l1_entries),
        "ttl": ("--cache-ttl", args.cache_ttl),
    }
    asked = {kind: text.replace(",", " ").split() for kind, (_, text) in given.items()}
    for kind, texts in asked.items():
        if texts and scenario != "read":
            raise UsageError(f"{given[kind][0]} is for the read scenario, not {scenario}")
    if asked["memory"] and asked["ttl"]:
        raise UsageError("--cache-memory and --cache-ttl both bound the cache arm: give one")
    for kind, texts in asked.items():
        arms = bounded_arms(arms, kind, texts)
    return arms


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    if args.scenario == expiryplan.SCENARIO:
        return expiry.run(args, settings)
    run_id = opt.new_run_id(args, args.scenario)
    out_dir = opt.new_out_dir(settings, args, run_id)
    # Parameters first: a typo is reported before anything is touched.
    plan_sweep(args, seed_indexed=None)
    stepping.calibration_params(args)
    shape = stepping.shape_of(args)
    seed = opt.checked_seed(settings, args)
    steps = plan_sweep(args, seed.indexed)
    params = stepping.run_params(
        args,
        seed,
        shape,
        scenario=args.scenario,
        duration_s=steps[0].duration_s,
        warm=args.warm,
        rates=sorted({s.rate for s in steps}),
        arms=list(dict.fromkeys(s.arm for s in steps)),
        repeat=args.repeat,
        cache_policy=args.cache_policy,
        **(interference_report.run_params(shape) if steps[0].read_rate else {}),
    )
    if args.scenario == trackplan.SCENARIO:
        params["tracks"] = tracks.check_tracks(settings, seed.data_dir)
    writer = stepping.sweep_writer(args.scenario, settings)
    runner = stepping.new_runner("sweep", out_dir, args, settings, seed, shape, params)
    print(f"run {run_id}: {len(steps)} steps of {steps[0].duration_s}s -> {out_dir}/", flush=True)

    def body() -> None:
        stepping.run_calibration(runner, args)
        if not runner.interrupted:
            runner.run_steps(steps)

    return stepping.drive(runner, body, writer)


COMMANDS = (Command("run", "the cache off/on sweep over rising rates", add, run),)
