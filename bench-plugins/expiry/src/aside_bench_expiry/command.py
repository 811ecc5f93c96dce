"""`aside-bench run --scenario expiry`: the hot set's reads across the cache TTL's end."""

from __future__ import annotations

import argparse

from aside_bench.cli.options import UsageError, checked_seed, new_out_dir, new_run_id, usage_errors
from aside_bench.plan.steps import PlanError, parse_rates
from aside_bench.stack import config

from aside_bench_expiry import plan as plan
from aside_bench_expiry.report import write_report
from aside_bench_expiry.run import ExpiryOptions, ExpiryRun


def _ttl(text: str) -> int:
    words = text.replace(",", " ").split()
    if not words:
        return plan.DEFAULT_TTL_S
    seconds = words[0].removesuffix("s")
    if len(words) > 1 or not seconds.isdigit():
        raise UsageError(
            f"--cache-ttl takes one TTL in seconds for the expiry scenario, got {text!r}"
        )
    return int(seconds)


def options(args: argparse.Namespace, run_id: str, settings: config.Settings) -> ExpiryOptions:
    """The scenario's options from the run command's; a wrong one is a UsageError."""
    with usage_errors(PlanError, plan.ExpiryPlanError):
        rates = parse_rates(args.rates) if args.rates else list(plan.DEFAULT_RATES)
        arms = plan.parse_arms(args.arms)
        ttl = _ttl(args.cache_ttl)
        plan.windows_for(ttl)
    return ExpiryOptions(
        run_id=run_id,
        out_dir=new_out_dir(settings, args, run_id),
        rates=rates,
        arms=arms,
        ttl_s=ttl,
        timeout_s=args.timeout,
        recover_timeout_s=args.recover_timeout,
        **{name: getattr(args, name) for name in ("max_pool", "hot_share", "cold_sample", "live")},
    )


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = new_run_id(args, plan.SCENARIO)
    found = options(args, run_id, settings)
    seed = checked_seed(settings, args)
    if seed.indexed:
        raise UsageError("the expiry scenario builds its own email index: seed without one")
    found.out_dir.mkdir(parents=True)
    arms = " ".join(a.label for a in found.arms)
    print(f"run {run_id}: TTL {found.ttl_s}s, {arms} at {found.rates}/s -> {found.out_dir}/")
    ExpiryRun(settings, seed, found).run_all()
    report = write_report(found.out_dir)
    print(report.read_text())
    print(f"report: {found.out_dir}/")
    return 0
