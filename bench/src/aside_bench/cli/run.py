"""`aside-bench run` (a sweep over rising rates) and `ceiling` (the highest rate each arm holds)."""

from __future__ import annotations

import argparse
from collections import Counter

from aside_bench.ceiling import report as ceiling_report
from aside_bench.ceiling.search import SearchParams, Trial, interleave, run_again, tries_at
from aside_bench.cli import options as opt
from aside_bench.cli import runner_commands
from aside_bench.cli.options import Command, UsageError
from aside_bench.plan import scenarios
from aside_bench.plan import steps as plan
from aside_bench.plan.arms import BARE_ARM, CEILING_ARMS, TIERED_ARMS
from aside_bench.report.tables import fmt_pct
from aside_bench.stack import config, distance
from aside_bench.sweep.runner import Options, Runner

# The options that list words, none by default: the arms' bounds and distances.
WORD_OPTIONS = {
    "--cache-memory": "read: Redis bounds, e.g. '2mb 4mb 8mb': the cache arm runs once per bound, "
    "from an empty cache (default: the stack's own maxmemory)",
    "--l1-entries": "read: L1 bounds in entries per worker, e.g. '1000 10000': the l1, hybrid and "
    "tracking arms once per bound (CACHE_L1_MAX_ENTRIES; default: the gateway's own)",
    "--cache-ttl": "read: Redis TTLs in seconds, e.g. '5 60': the cache arm once per TTL "
    "(CACHE_TTL_SECONDS; default: the gateway's own)",
    "--distance": "read/mixed: network distances, e.g. 'loopback same-zone cross-zone' (presets of "
    "infra/conf/distance.json) or 'explicit' (DISTANCE_*_MS): every arm once per distance, "
    "each hop through its proxy (default: none, no proxy in the path)",
}


def add(run: argparse.ArgumentParser) -> None:
    run.add_argument("--scenario", choices=scenarios.names(), default="read")
    run.add_argument("--rates", help="requests/s, e.g. '30 50 100' (default by scenario)")
    run.add_argument("--duration", default="20s", help="per step, e.g. 30s (default 20s)")
    run.add_argument(
        "--arms",
        help="read/mixed: nocache index coalesce cache (alias l2) l1 hybrid tracking l1-ttl "
        "nopool; compute: go python; another scenario: its own (default by scenario)",
    )
    warm = "cache arm's starting state: cold, warm or both (default both)"
    run.add_argument("--warm", choices=plan.WARM_CHOICES, default="both", help=warm)
    for flag, what in WORD_OPTIONS.items():
        run.add_argument(flag, default="", help=what)
    policy = opt.default_of(Options, "cache_policy")
    what = f"Redis's eviction policy under --cache-memory (default {policy})"
    run.add_argument("--cache-policy", choices=plan.EVICTION_POLICIES, default=policy, help=what)
    what = "mixed: share of requests that write (a create and its delete)"
    opt.write_share(run, runner_commands.shape_default("write_share"), what)
    for flag, checked, name, what in (
        ("--stale-per-min", opt.whole, "stale_per_min",
         "mixed: read-after-write checks a minute beside the load, 0: none"),
        ("--stale-reads-after", opt.positive, "stale_reads_after",
         "mixed: reads of each key after each checked write"),
        ("--complexity", opt.positive, "complexity", "compute: complexity"),
    ):  # fmt: skip
        opt.option(run, flag, checked, runner_commands.shape_default(name), what)
    what = "runs of each step, interleaved within each rate; medians and spreads"
    opt.option(run, "--repeat", opt.positive, 1, what)
    for found in scenarios.registry().values():
        if found.hooks.add_options is not None:
            found.hooks.add_options(run)
    runner_commands.add_steps(run)
    runner_commands.add_trust(run)


def plan_sweep(
    args: argparse.Namespace, seed_indexed: bool | None, distances: dict[str, distance.Distance]
) -> list[plan.Step]:
    """The steps of a sweep at `distances`; seed_indexed None checks only."""
    found = scenarios.scenario_named(args.scenario)
    rates = (
        plan.parse_rates(args.rates, found.lowest_rate) if args.rates else list(found.default_rates)
    )
    arms = plan.parse_arms(args.arms, found.arms) if args.arms else list(found.default_arms)
    if args.dist != "hotset" and not found.dist:
        raise UsageError(f"--dist {args.dist} is for the read scenario, not {found.name}")
    if args.trace is not None and not found.trace:
        traced = " and ".join(s.name for s in scenarios.registry().values() if s.trace)
        raise UsageError(f"--trace is for the {traced} scenarios, not {found.name}")
    arms = _bounded(args, found, arms)
    if found.indexed and seed_indexed is not None:
        arms = plan.resolve_arms(arms, seed_indexed)
    arms = plan.at_distances(arms, list(distances))
    if found.hooks.check is not None:
        found.hooks.check(args)
    duration = plan.parse_duration(args.duration)
    read_rate = args.read_rate if found.read_rate else 0
    steps = plan.build_steps(found.name, rates, arms, args.warm, duration, read_rate)
    return plan.repeat_steps(steps, args.repeat)


def run_distances(
    args: argparse.Namespace, found: scenarios.Scenario
) -> dict[str, distance.Distance]:
    """The distances --distance names (or DISTANCE_*_MS gives), each checked."""
    with opt.usage_errors(distance.DistanceError):
        asked = distance.asked(plan.words(args.distance))
    if asked and not found.distances:
        raise UsageError(f"--distance is for the read and mixed scenarios, not {found.name}")
    return asked


def _bounded(args: argparse.Namespace, found: scenarios.Scenario, arms: list[str]) -> list[str]:
    """The arms with their bounds: --cache-memory, --l1-entries, --cache-ttl."""
    options = plan.BOUND_OPTIONS
    asked = {
        kind: plan.words(getattr(args, flag[2:].replace("-", "_")))
        for kind, flag in options.items()
    }
    for kind, texts in asked.items():
        if texts and not found.bounded:
            raise UsageError(f"{options[kind]} is for the read scenario, not {found.name}")
    if asked["memory"] and asked["ttl"]:
        raise UsageError("--cache-memory and --cache-ttl both bound the cache arm: give one")
    for kind, texts in asked.items():
        arms = plan.bounded_arms(arms, kind, texts)
    return arms


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    found = scenarios.scenario_named(args.scenario)
    if found.hooks.run is not None:
        return found.hooks.run(args, settings)
    run_id = opt.new_run_id(args, args.scenario)
    out_dir = opt.new_out_dir(settings, args, run_id)
    # Parameters first: a typo is reported before anything is touched.
    distances = run_distances(args, found)
    plan_sweep(args, None, distances)
    runner_commands.calibration_params(args)
    shape = runner_commands.shape_of(args)
    seed = opt.checked_seed(settings, args)
    steps = plan_sweep(args, seed.indexed, distances)
    rates, arms = sorted({s.rate for s in steps}), list(dict.fromkeys(s.arm for s in steps))
    sweep = dict(scenario=args.scenario, duration_s=steps[0].duration_s, warm=args.warm)
    sweep.update(rates=rates, arms=arms, repeat=args.repeat, cache_policy=args.cache_policy)
    params = runner_commands.run_params(args, seed, shape, **sweep)
    if distances:
        params["distances"] = {name: distance.as_record(d) for name, d in distances.items()}
    if found.hooks.run_params is not None:
        params.update(found.hooks.run_params(args, shape, settings, seed))
    writer = runner_commands.sweep_writer(args.scenario, settings)
    runner = runner_commands.new_runner(
        "sweep", out_dir, args, settings, seed, shape, params, distances
    )
    print(f"run {run_id}: {len(steps)} steps of {steps[0].duration_s}s -> {out_dir}/", flush=True)

    def body() -> None:
        runner_commands.run_calibration(runner, args)
        if not runner.interrupted:
            runner.run_steps(steps)

    return runner_commands.drive(runner, body, writer)


def add_ceiling(ceiling: argparse.ArgumentParser) -> None:
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


def run_ceiling(args: argparse.Namespace, settings: config.Settings) -> int:
    run_id = opt.new_run_id(args, "ceiling")
    out_dir = opt.new_out_dir(settings, args, run_id)
    arms = plan.parse_arms(args.arms, CEILING_ARMS)
    duration = plan.parse_duration(args.step_duration)
    runner_commands.calibration_params(args)  # a malformed --calibration-probe before anything runs
    search = SearchParams(start=args.start, ladder_step=args.ladder_step, max_rate=args.max_rate)
    shape = runner_commands.shape_of(args)
    seed = opt.checked_seed(settings, args)
    own = dict(scenario="ceiling", duration_s=duration, arms=arms, p95_limit_ms=args.p95_ms)
    params = runner_commands.run_params(args, seed, shape, **own, search=search.__dict__)
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
    """Every search taking turns, the cache arm's bare reference right after it."""
    order = [arm for arm in searched if arm != BARE_ARM]
    if BARE_ARM in searched:
        at = order.index("cache") + 1 if "cache" in order else len(order)
        order.insert(at, BARE_ARM)
    return [order]


def _search_arms(
    runner: Runner, arms: list[str], duration: int, search: SearchParams, p95_ms: float
) -> None:
    """These arms' searches taking turns, the final rates run twice or more."""

    runs: Counter[tuple[str, int]] = Counter()  # every step run, reruns included

    def run(arm: str, rate: int, history: list[Trial]) -> bool | None:
        phase = "warm" if arm in (*TIERED_ARMS, BARE_ARM) else "none"
        what = "confirm" if tries_at(history, rate) else "try"
        reruns = 0  # misses of this try on a noisy host, run again
        while True:
            runs[arm, rate] += 1
            step = plan.Step("ceiling", arm, phase, rate, duration, repeat=runs[arm, rate])
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
        limit = "not held, load generator saturated: a measurement limit"
        note = limit if verdict == "limit" else verdict
        print(f"  -> {note} (p95 <= {p95_ms:g} ms, no drops)")
        return verdict == "held"

    interleave(arms, search, run)


COMMANDS = (
    Command("run", "the cache off/on sweep over rising rates", add, run),
    Command("ceiling", "highest rate held at p95 <= limit with no drops", add_ceiling, run_ceiling),
)
