"""`aside-bench ceiling`: the highest rate each arm holds at p95 <= limit with
no drops, the arms' searches taking turns step by step."""

from __future__ import annotations

import argparse
from collections import Counter

from aside_bench.ceiling import report as ceiling_report
from aside_bench.ceiling.search import SearchParams, Trial, interleave, run_again, tries_at
from aside_bench.cli import options as opt
from aside_bench.cli import runner_commands
from aside_bench.cli.options import Command
from aside_bench.plan.steps import (
    BARE_ARM,
    CEILING_ARMS,
    TIERED_ARMS,
    Step,
    parse_arms,
    parse_duration,
)
from aside_bench.report.tables import fmt_pct
from aside_bench.stack import config
from aside_bench.sweep.runner import Runner


def add(ceiling: argparse.ArgumentParser) -> None:
    ceiling.add_argument(
        "--arms",
        default="cache healthz",
        help="some of: cache (alias l2) l1 hybrid tracking healthz (default: cache healthz)",
    )
    ceiling.add_argument("--step-duration", default="12s", help="per step (default 12s)")
    ceiling.add_argument("--p95-ms", type=float, default=10.0, help="p95 limit in ms (default 10)")
    for flag, name, what in (
        ("--start", "start", "first rate"),
        ("--ladder-step", "ladder_step", "rate increase after 800"),
        ("--max-rate", "max_rate", "highest rate"),
    ):
        opt.option(ceiling, flag, opt.positive, opt.default_of(SearchParams, name), what)
    ceiling.add_argument(
        "--no-reference",
        dest="reference",
        action="store_false",
        help="skip the reference: the cache arm's search again under the driver's bare "
        "scenario (no check but the status), taking turns with it when cache is one of the arms",
    )
    runner_commands.add_steps(ceiling)
    runner_commands.add_trust(ceiling)
    runner_commands.without_run_options(ceiling)


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = opt.new_run_id(args, "ceiling")
    out_dir = opt.new_out_dir(settings, args, run_id)
    arms = parse_arms(args.arms, CEILING_ARMS)
    duration = parse_duration(args.step_duration)
    runner_commands.calibration_params(args)  # a malformed --calibration-probe before anything runs
    search = SearchParams(start=args.start, ladder_step=args.ladder_step, max_rate=args.max_rate)
    shape = runner_commands.shape_of(args)
    seed = opt.checked_seed(settings, args)
    params = runner_commands.run_params(
        args,
        seed,
        shape,
        scenario="ceiling",
        duration_s=duration,
        arms=arms,
        p95_limit_ms=args.p95_ms,
        search=search.__dict__,
    )
    # The reference: the cache arm's search again under the bare scenario.
    searched = [*arms, BARE_ARM] if args.reference and "cache" in arms else arms
    params["reference"] = BARE_ARM in searched
    runner = runner_commands.new_runner("ceiling", out_dir, args, settings, seed, shape, params)
    print(
        f"ceiling {run_id}: arms {' '.join(searched)}, {duration}s steps -> {out_dir}/", flush=True
    )

    def search_all() -> None:
        runner_commands.run_calibration(runner, args)
        for together in search_order(searched):
            if runner.interrupted:
                return
            _search_arms(runner, together, duration, search, args.p95_ms)

    return runner_commands.drive(runner, search_all, ceiling_report.write_ceiling)


def search_order(searched: list[str]) -> list[list[str]]:
    """The searches, all taking turns step by step, the cache arm's bare
    reference right after it: a drift of the machine during the run then lands
    in every arm alike rather than in the ratios between them."""
    order = [arm for arm in searched if arm != BARE_ARM]
    if BARE_ARM in searched:
        at = order.index("cache") + 1 if "cache" in order else len(order)
        order.insert(at, BARE_ARM)
    return [order]


def _search_arms(
    runner: Runner, arms: list[str], duration: int, search: SearchParams, p95_ms: float
) -> None:
    """These arms' ceiling searches, taking turns step by step (one arm: alone);
    each one's final held and missed rates run twice or more."""

    runs: Counter[tuple[str, int]] = Counter()  # every step run, reruns included

    def run(arm: str, rate: int, history: list[Trial]) -> bool | None:
        phase = "warm" if arm in (*TIERED_ARMS, BARE_ARM) else "none"
        what = "confirm" if tries_at(history, rate) else "try"
        reruns = 0  # misses of this try on a noisy host, run again
        while True:
            runs[arm, rate] += 1
            step = Step("ceiling", arm, phase, rate, duration, repeat=runs[arm, rate])
            head = f"[{step.label} {what} {len(history) + 1}] @ {rate:>5}/s"
            result = runner.step_with_progress(step, head, None)
            if runner.interrupted:
                return None
            verdict = "missed" if result is None else result.verdict(p95_ms)
            noisy = result is not None and result.noisy
            if not run_again(verdict == "held", noisy, reruns):
                break
            reruns += 1
            print(f"  -> missed with the host stealing {fmt_pct(result.host_steal)}: run again")
        note = {
            "held": "held",
            "missed": "missed",
            "limit": "not held, load generator saturated: a measurement limit",
        }[verdict]
        print(f"  -> {note} (p95 <= {p95_ms:g} ms, no drops)")
        return verdict == "held"

    interleave(arms, search, run)


COMMANDS = (Command("ceiling", "highest rate held at p95 <= limit with no drops", add, run),)
