"""`aside-bench overload`'s options, and the ceiling searches they give every arm."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace

from aside_bench.cli import options as opt
from aside_bench.cli.options import Command
from aside_bench.plan.steps import parse_duration
from aside_bench.stack import config

from aside_bench_overload import plan as overload
from aside_bench_overload.plan import ArmSearch
from aside_bench_overload.run import run_overload

# A ceiling search's option: its flag, type, what it sets, and that value of a search.
SearchOption = tuple[str, Callable[[str], object], str, Callable[[ArmSearch], object]]
SEARCH_OPTIONS: tuple[SearchOption, ...] = (
    ("--search-start", opt.positive, "first rate", lambda s: s.rates.start),
    ("--search-step", opt.positive, "rate increase after 4x its start",
     lambda s: s.rates.ladder_step),
    ("--search-max", opt.positive, "highest rate", lambda s: s.rates.max_rate),
    ("--p95-ms", opt.above_zero, "p95 limit in ms", lambda s: f"{s.p95_ms:g}"),
)  # fmt: skip


def _add_search_options(over: argparse.ArgumentParser) -> None:
    """The ceiling search's options; not given, each arm searches its own way (ARM_SEARCHES)."""
    cached = ArmSearch()
    for flag, checked, what, value in SEARCH_OPTIONS:
        own: dict[str, list[str]] = {}
        for arm, search in overload.ARM_SEARCHES.items():
            if value(search) != value(cached):
                own.setdefault(str(value(search)), []).append(arm)
        others = "".join(f"; {' '.join(arms)} {v}" for v, arms in own.items())
        help_text = f"the search's {what} (default {value(cached)}{others})"
        over.add_argument(flag, type=checked, default=None, help=help_text)


def add(over: argparse.ArgumentParser) -> None:
    arms = "some of: cache hybrid tracking l1 nocache (default: cache hybrid)"
    over.add_argument("--arms", default="cache hybrid", help=arms)
    given = "an arm's ceiling, given: no search for it (repeatable)"
    over.add_argument("--ceiling", action="append", metavar="ARM=RATE", help=given)
    for flag, name, what in (
        ("--duration", "duration_s", "per step"),
        ("--search-duration", "search_duration_s", "per step of the ceiling search"),
    ):
        shown = f"{opt.default_of(overload.OverloadParams, name)}s"
        over.add_argument(flag, default=shown, help=f"{what} (default {shown})")
    _add_search_options(over)
    timeout = opt.default_of(overload.OverloadParams, "timeout_s")
    opt.option(over, "--timeout", opt.positive, timeout, "request timeout in seconds")
    lead = opt.default_of(overload.OverloadParams, "open_lead_s")
    what = "seconds before its first request each step's driver starts, to open its pool"
    opt.option(over, "--open-lead", opt.above_zero, lead, what)
    over.add_argument(
        "--lazy-connections",
        action="store_true",
        help="each step's driver opens connections as its requests need them, not before "
        "its first (then the steps also measure new connections accepted under overload)",
    )
    opt.paths(over, "the time")


def overload_searches(args: argparse.Namespace) -> tuple[ArmSearch, dict[str, ArmSearch]]:
    """The cached tiers' ceiling search, and the ARM_SEARCHES arms', as the options give them."""
    given = (args.search_start, args.search_step, args.search_max)
    names = ("start", "ladder_step", "max_rate")
    chosen = {name: value for name, value in zip(names, given, strict=True) if value is not None}

    def applied(search: ArmSearch) -> ArmSearch:
        p95_ms = search.p95_ms if args.p95_ms is None else args.p95_ms
        return ArmSearch(replace(search.rates, **chosen), p95_ms)

    own = {arm: applied(search) for arm, search in overload.ARM_SEARCHES.items()}
    return applied(ArmSearch()), own


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = opt.new_run_id(args, "")
    with opt.usage_errors(ValueError):
        arms = overload.parse_arms(args.arms)
        ceilings = overload.parse_ceilings(args.ceiling)
    search, arm_searches = overload_searches(args)
    out_dir = opt.new_out_dir(settings, args, f"overload-{run_id}")
    params = overload.OverloadParams(
        run_id=run_id,
        out_dir=out_dir,
        arms=arms,
        ceilings=ceilings,
        duration_s=parse_duration(args.duration),
        search=search,
        arm_searches=arm_searches,
        search_duration_s=parse_duration(args.search_duration),
        timeout_s=args.timeout,
        open_pool=not args.lazy_connections,
        open_lead_s=args.open_lead,
    )
    seed = opt.checked_seed(settings, args)
    return 0 if run_overload(settings, params, seed).passed else 1


COMMANDS = (Command("overload", "goodput, sheds and recovery past an arm's ceiling", add, run),)
