"""What the suites' commands do once their arguments are parsed: check them,
check the stack and the seed, then run the fault suite (chaos), the soak, the
hardening experiments or the overload steps (all but the soak exit 1 when a
check failed)."""

from __future__ import annotations

import argparse
from dataclasses import replace

from aside_bench.cli.commands import UsageError, checked_seed, new_out_dir, new_run_id
from aside_bench.plan.steps import parse_duration
from aside_bench.stack import config
from aside_bench.stack.prepare import check_stack
from aside_bench.stack.seeddata import user_prefix
from aside_bench.suites import create_rate
from aside_bench.suites.chaos import run as chaos
from aside_bench.suites.hardening import run as hardening
from aside_bench.suites.overload import run as overload
from aside_bench.suites.soak import run as soak


def _seconds(text: str | None, default: float) -> float:
    return default if text is None else float(parse_duration(text))


def cmd_chaos(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = new_run_id(args, "")
    try:
        cases = chaos.parse_cases(args.cases)
        user_prefix(run_id, "postgres")
    except ValueError as error:
        raise UsageError(str(error)) from None
    base = chaos.SHORT if args.short else chaos.FULL
    timing = chaos.Timing(
        pre_s=_seconds(args.pre, base.pre_s),
        down_s=_seconds(args.down, base.down_s),
        post_s=_seconds(args.post, base.post_s),
    )
    out_dir = new_out_dir(settings, args, f"chaos-{run_id}")
    seed = checked_seed(settings, args)
    params = chaos.ChaosParams(
        run_id=run_id,
        out_dir=out_dir,
        cases=cases,
        rate=args.rate,
        timing=timing,
        write_share=args.write_share,
        id_sample=args.id_sample,
    )
    run = chaos.run_chaos(settings, params, seed)
    return 0 if run["passed"] else 1


def cmd_soak(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = new_run_id(args, "")
    duration = parse_duration(args.duration)
    warmup = _seconds(args.warmup, round(duration * 0.2, 1))
    if not 0 <= warmup < duration:
        raise UsageError(f"--warmup must be shorter than --duration ({duration} s)")
    if not 0.2 <= args.interval <= duration / 4:
        raise UsageError("--interval must be from 0.2 s to a quarter of the duration")
    out_dir = new_out_dir(settings, args, f"soak-{run_id}")
    seed = checked_seed(settings, args)
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


def cmd_hardening(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = new_run_id(args, "")
    try:
        experiments = hardening.parse_experiments(args.experiments)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.p95_ms <= 0 or args.rss_growth_mib <= 0:
        raise UsageError("--p95-ms and --rss-growth-mib must be above 0")
    out_dir = new_out_dir(settings, args, f"hardening-{run_id}")
    params = hardening.HardeningParams(
        run_id=run_id,
        out_dir=out_dir,
        experiments=experiments,
        rate=args.rate,
        pre_s=parse_duration(args.pre),
        post_s=parse_duration(args.post),
        sockets=args.sockets,
        emails=args.emails,
        concurrency=args.concurrency,
        client_timeout_ms=args.client_timeout_ms,
        read_p95_ms=args.p95_ms,
        rss_growth_mib=args.rss_growth_mib,
    )
    seed = checked_seed(settings, args)
    run = hardening.run_hardening(settings, params, seed)
    return 0 if run["passed"] else 1


def overload_searches(
    args: argparse.Namespace,
) -> tuple[overload.ArmSearch, dict[str, overload.ArmSearch]]:
    """The ceiling search of the cached tiers, and of the arms searched their
    own way (overload.ARM_SEARCHES): what the options give, for every arm."""
    chosen = {
        name: value
        for name, value in (
            ("start", args.search_start),
            ("ladder_step", args.search_step),
            ("max_rate", args.search_max),
        )
        if value is not None
    }

    def applied(search: overload.ArmSearch) -> overload.ArmSearch:
        p95_ms = search.p95_ms if args.p95_ms is None else args.p95_ms
        return overload.ArmSearch(replace(search.rates, **chosen), p95_ms)

    own = {arm: applied(search) for arm, search in overload.ARM_SEARCHES.items()}
    return applied(overload.ArmSearch()), own


def cmd_overload(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = new_run_id(args, "")
    try:
        arms = overload.parse_arms(args.arms)
        ceilings = overload.parse_ceilings(args.ceiling)
    except ValueError as error:
        raise UsageError(str(error)) from None
    search, arm_searches = overload_searches(args)
    out_dir = new_out_dir(settings, args, f"overload-{run_id}")
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
    )
    seed = checked_seed(settings, args)
    run = overload.run_overload(settings, params, seed)
    return 0 if run["passed"] else 1


def cmd_create_rate(args: argparse.Namespace, settings: config.Settings) -> int:
    params = create_rate.params_of(args, settings)
    check_stack(settings)
    seed = checked_seed(settings, args)
    run = create_rate.run_create_rate(settings, params, seed)
    return 0 if run["highest_held"] is not None else 1
