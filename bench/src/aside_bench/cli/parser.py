# The argument parser of every command, read side by side (a comment, as the
# docstring below is `--help`'s description).
"""aside-bench: `run` (the sweep), `ceiling` (the highest rate held), `cost`
(the load driver's own CPU per request against a plain net/http loop), `report`
(rebuild a run's report from its run.json and Prometheus), `compare` (two runs'
common steps), `chaos` (faults under load), `soak` (memory and descriptors of
every process under a steady load), `hardening` (slow clients and a cold flood
under cached reads), `overload` (goodput, sheds and recovery past an arm's
ceiling), `shards` (a run several drivers sent, merged from
InfluxDB) and `screenshot` (a run's report.html as headless Chromium renders
it, as a PNG)."""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aside_bench.cli import commands
from aside_bench.cli import suites as suite_commands
from aside_bench.load.run import LoadShape
from aside_bench.plan.steps import EVICTION_POLICIES, SCENARIOS, WARM_CHOICES, PlanError
from aside_bench.records import keytrace
from aside_bench.records.saturation import DRIVER_CPU_SHARE_LIMIT
from aside_bench.stack import config
from aside_bench.stack.prepare import StackError
from aside_bench.stack.sources import SourceError
from aside_bench.suites.overload import run as overload
from aside_bench.sweep.runner import EXIT_INTERRUPTED, Options
from aside_bench.trust import cost
from aside_bench.trust.compare import DEFAULT_TOLERANCE


def default_of(record: type, name: str) -> Any:
    """The default a dataclass gives its field `name`: the one place it is written."""
    for field in dataclasses.fields(record):
        if field.name == name:
            if field.default is dataclasses.MISSING:
                raise LookupError(f"{record.__name__}.{name} has no default")
            return field.default
    raise LookupError(f"{record.__name__} has no field {name}")


def _shape(name: str) -> Any:
    """A default of the request mix, owned by load/run.py's LoadShape."""
    return default_of(LoadShape, name)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def _whole(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def _above_zero(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}")
    return value


def _trace_file(text: str) -> Path:
    """A key trace the driver can replay (records/keytrace.py: its rules are the driver's)."""
    path = Path(text)
    try:
        keytrace.check_replayable(path)
    except keytrace.KeyTraceError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return path


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _option(
    parser: argparse.ArgumentParser,
    flag: str,
    checked: Callable[[str], Any],
    default: Any,
    what: str,
) -> None:
    """A checked option whose help ends with its default."""
    shown = "none" if default is None else f"{default:g}" if isinstance(default, float) else default
    parser.add_argument(flag, type=checked, default=default, help=f"{what} (default {shown})")


# ---- options several commands share ----------------------------------------------------
def _paths(parser: argparse.ArgumentParser, run_id_default: str) -> None:
    """Where a run's inputs and report are, and its name."""
    parser.add_argument("--run-id", help=f"name of the run (default: {run_id_default})")
    parser.add_argument("--data-dir", type=Path, help="the seeder's files (default bench/data)")
    parser.add_argument("--reports-dir", type=Path, help="where reports go (default reports/)")


def _write_share(parser: argparse.ArgumentParser, default: float, what: str) -> None:
    parser.add_argument(
        "--write-share", type=_fraction, default=default, help=f"{what} (default {default:g})"
    )


def _steps(parser: argparse.ArgumentParser) -> None:
    """The read mix and the limits of every step of a sweep or a ceiling search."""
    _paths(parser, "time and scenario")
    _option(
        parser,
        "--hot-share",
        _fraction,
        _shape("hot_share"),
        "share of reads asking for a hot email",
    )
    _option(
        parser,
        "--cold-sample",
        _positive,
        _shape("cold_sample"),
        "cold emails used: the first N of cold_emails.json",
    )
    dist = _shape("dist")
    parser.add_argument(
        "--dist",
        choices=("hotset", "uniform", "zipf"),
        default=dist,
        help="the reads' key popularity: hotset (--hot-share over the hot and cold samples), "
        f"uniform or zipf over the table's distinct emails (default {dist})",
    )
    _option(parser, "--alpha", _above_zero, _shape("alpha"), "zipf's exponent")
    _option(
        parser,
        "--keys",
        _whole,
        _shape("keys"),
        "the key space: the first N distinct emails, 0: all",
    )
    _option(
        parser,
        "--trace",
        _trace_file,
        _shape("trace"),
        "a key trace the reads replay in its order instead of --dist (read, ceiling, "
        "interference; timed traces run at each step's rate, their gaps scaled)",
    )
    _option(parser, "--timeout", _positive, _shape("timeout_s"), "request timeout, s")
    _option(parser, "--max-pool", _positive, 1000, "the driver's workers per step at most")
    _option(
        parser,
        "--recover-timeout",
        _positive,
        180,
        "seconds to wait for the stack to go quiet between steps",
    )


def _trust(parser: argparse.ArgumentParser) -> None:
    """The machine's calibration before the steps, the driver's own limits, the live line."""
    parser.add_argument(
        "--no-calibrate",
        dest="calibrate",
        action="store_false",
        help="skip the machine's calibration (quick runs and tests)",
    )
    parser.add_argument(
        "--calibration-probe", default="3s", help="calibration: per probe (default 3s)"
    )
    _option(
        parser,
        "--calibration-budget",
        _positive,
        90,
        "calibration: seconds for both servers together",
    )
    _option(parser, "--calibration-start", _positive, 400, "calibration: first rate")
    _option(parser, "--calibration-max-rate", _positive, 12800, "calibration: highest rate")
    parser.add_argument(
        "--driver-cpu-share",
        type=_share,
        default=DRIVER_CPU_SHARE_LIMIT,
        help="share of the machine's cores the driver may use before a step counts as load "
        f"generator saturated (default {DRIVER_CPU_SHARE_LIMIT:g})",
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="the driver's line a second (rate, p95, drops, errors) while each step runs",
    )
    parser.add_argument(
        "--samples-file",
        action="store_true",
        help="every request of every step as a JSON line into the run folder "
        "(samples-NNN-*.jsonl; large: off by default)",
    )


# ---- one sub-parser per command -----------------------------------------------------------
def _add_run(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="the cache off/on sweep over rising rates")
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
    policy = default_of(Options, "cache_policy")
    run.add_argument(
        "--cache-policy",
        choices=EVICTION_POLICIES,
        default=policy,
        help=f"Redis's eviction policy under --cache-memory (default {policy})",
    )
    _write_share(
        run,
        _shape("write_share"),
        "mixed: share of requests that write (a create and its delete)",
    )
    _option(
        run,
        "--stale-per-min",
        _whole,
        _shape("stale_per_min"),
        "mixed: read-after-write checks a minute beside the load, 0: none",
    )
    _option(
        run,
        "--stale-reads-after",
        _positive,
        _shape("stale_reads_after"),
        "mixed: reads of each key after each checked write",
    )
    _option(run, "--complexity", _positive, _shape("complexity"), "compute: complexity")
    _option(
        run,
        "--repeat",
        _positive,
        1,
        "runs of each step, interleaved within each rate; medians and spreads",
    )
    _add_interference_options(run)
    _steps(run)
    _trust(run)


def _add_interference_options(run: argparse.ArgumentParser) -> None:
    group = run.add_argument_group("interference (--scenario interference, rates 0 allowed)")
    _option(
        group,
        "--read-rate",
        _positive,
        _shape("read_rate"),
        "cached reads/s beside the compute",
    )
    _option(
        group,
        "--pbkdf2-iterations",
        _positive,
        _shape("pbkdf2_iterations"),
        "pbkdf2 arms' iterations",
    )
    _option(group, "--bcrypt-cost", _positive, _shape("bcrypt_cost"), "bcrypt arms' cost")


def _without_run_options(parser: argparse.ArgumentParser) -> None:
    """A command that steps through the runner without `run`'s options of the
    mixed, compute and interference scenarios and of the memory arms: their
    defaults, and no read-after-write checks (it runs no mixed step)."""
    parser.set_defaults(
        write_share=_shape("write_share"),
        complexity=_shape("complexity"),
        stale_per_min=0,
        stale_reads_after=_shape("stale_reads_after"),
        read_rate=_shape("read_rate"),
        pbkdf2_iterations=_shape("pbkdf2_iterations"),
        bcrypt_cost=_shape("bcrypt_cost"),
        cache_policy=default_of(Options, "cache_policy"),
    )


def _add_ceiling(sub: argparse._SubParsersAction) -> None:
    ceiling = sub.add_parser("ceiling", help="highest rate held at p95 <= limit with no drops")
    ceiling.add_argument(
        "--arms",
        default="cache healthz",
        help="some of: cache (alias l2) l1 hybrid tracking healthz (default: cache healthz)",
    )
    ceiling.add_argument("--step-duration", default="12s", help="per step (default 12s)")
    ceiling.add_argument("--p95-ms", type=float, default=10.0, help="p95 limit in ms (default 10)")
    _option(ceiling, "--start", _positive, 200, "first rate")
    _option(ceiling, "--ladder-step", _positive, 400, "rate increase after 800")
    _option(ceiling, "--max-rate", _positive, 8000, "highest rate")
    ceiling.add_argument(
        "--no-reference",
        dest="reference",
        action="store_false",
        help="skip the reference: the cache arm's search again under the driver's bare "
        "scenario (no check but the status), taking turns with it when cache is one of the arms",
    )
    _steps(ceiling)
    _trust(ceiling)
    _without_run_options(ceiling)


def _add_cost(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "cost", help="the driver's own CPU per request against a plain net/http loop"
    )
    _option(parser, "--rate", _positive, cost.DEFAULT_RATE, "requests/s")
    parser.add_argument(
        "--duration",
        default=cost.DEFAULT_DURATION,
        help=f"per variant and round (default {cost.DEFAULT_DURATION})",
    )
    parser.add_argument(
        "--variants",
        help=f"some of: {' '.join(cost.NAMES)} (default: {' '.join(cost.DEFAULT_NAMES)})",
    )
    _option(parser, "--repeat", _positive, cost.DEFAULT_REPEAT, "rounds, the variants taking turns")
    _steps(parser)
    _without_run_options(parser)
    parser.set_defaults(driver_cpu_share=DRIVER_CPU_SHARE_LIMIT, live=False, samples_file=False)


def _add_chaos(sub: argparse._SubParsersAction) -> None:
    faults = sub.add_parser("chaos", help="faults under load: redis, core, postgres, worker")
    faults.add_argument("--cases", default="all", help="some of: redis core postgres worker")
    _option(faults, "--rate", _positive, 60, "requests/s")
    faults.add_argument(
        "--short", action="store_true", help="a few seconds per case (make test's form)"
    )
    faults.add_argument("--pre", help="load before the fault, e.g. 8s (default 8s; short 3s)")
    faults.add_argument("--down", help="fault to restart, e.g. 6s (default 6s; short 2s)")
    faults.add_argument("--post", help="load after the restart (default 12s; short 5s)")
    _write_share(faults, 0.2, "share of creates")
    _option(faults, "--id-sample", _positive, 50, "seeded ids read by id")
    _paths(faults, "the time")


def _add_create_rate(sub: argparse._SubParsersAction) -> None:
    rates = sub.add_parser(
        "create-rate", help="the highest rate of keyed creates held: fixed rates, then midpoints"
    )
    rates.add_argument("--rates", default="200 400 800 1600", help="creates/s, ascending")
    rates.add_argument("--duration", default="15s", help="per rate (default 15s)")
    rates.add_argument("--via", choices=("core", "gateway"), default="core")
    rates.add_argument("--p95-ms", type=float, default=100.0, help="p95 limit (default 100)")
    rates.add_argument("--refine", type=int, default=2, help="midpoints after a failed rate")
    rates.add_argument("--resolution", type=int, default=50, help="creates/s (default 50)")
    _paths(rates, "the time")


def _add_soak(sub: argparse._SubParsersAction) -> None:
    soaking = sub.add_parser("soak", help="steady mixed load; memory and fds of every process")
    _option(soaking, "--rate", _positive, 100, "requests/s")
    soaking.add_argument("--duration", default="10m", help="e.g. 10m, 20s (default 10m)")
    soaking.add_argument(
        "--warmup", help="left out of the growth figures (default 20%% of the duration)"
    )
    soaking.add_argument(
        "--interval", type=float, default=5.0, help="seconds between samples (default 5)"
    )
    _write_share(soaking, 0.2, "share of creates")
    soaking.add_argument(
        "--via", choices=("gateway", "core"), default="gateway", help="where the load goes"
    )
    _paths(soaking, "the time")


def _add_hardening(sub: argparse._SubParsersAction) -> None:
    hard = sub.add_parser("hardening", help="slow request heads and a cold flood under reads")
    hard.add_argument(
        "--experiments", default="all", help="some of: slow-heads cold-flood (default all)"
    )
    _option(hard, "--rate", _positive, 500, "cached reads/s")
    hard.add_argument("--pre", default="5s", help="reads before each attack (default 5s)")
    hard.add_argument("--post", default="5s", help="reads after it (default 5s)")
    _option(hard, "--sockets", _positive, 2000, "slow sockets")
    _option(hard, "--emails", _positive, 20000, "cold emails flooded")
    _option(hard, "--concurrency", _positive, 200, "flood requests in flight")
    _option(hard, "--client-timeout-ms", _positive, 50, "a flood client gives up after this")
    hard.add_argument(
        "--p95-ms", type=float, default=10.0, help="reads' p95 limit during slow heads (default 10)"
    )
    hard.add_argument(
        "--rss-growth-mib",
        type=float,
        default=64.0,
        help="limit on the workers' summed RSS growth (default 64)",
    )
    _paths(hard, "the time")


def _add_report(sub: argparse._SubParsersAction) -> None:
    rebuild = sub.add_parser("report", help="rebuild reports/<run>/ from run.json and Prometheus")
    rebuild.add_argument("--run", default="", help="the run id (a folder of reports/)")
    rebuild.add_argument("--reports-dir", type=Path, help="where reports are (default reports/)")


def _add_shards(sub: argparse._SubParsersAction) -> None:
    merged = sub.add_parser(
        "shards",
        help="a run sent by several drivers (the chart's Indexed Job), merged from InfluxDB",
    )
    merged.add_argument("--run", required=True, help="the run id the drivers were given")


def _add_screenshot(sub: argparse._SubParsersAction) -> None:
    shot = sub.add_parser(
        "screenshot", help="check reports/<run>/report.html in headless Chromium, save a PNG"
    )
    shot.add_argument("--run", default="", help="the run id (a folder of reports/)")
    shot.add_argument("--reports-dir", type=Path, help="where reports are (default reports/)")
    shot.add_argument(
        "--out", type=Path, help="the PNG to write (default docs/report-screenshot.png)"
    )
    shot.add_argument(
        "--full", action="store_true", help="the whole page (default: down to the first chart)"
    )
    _option(shot, "--width", _positive, 1280, "window width, CSS px")


def _add_compare(sub: argparse._SubParsersAction) -> None:
    compare = sub.add_parser("compare", help="every step two runs share, side by side")
    compare.add_argument(
        "run_a",
        help="the baseline: a run id (a folder of reports/), or several ('r1,r2' or "
        "'r1 r2') whose repeats pool, so the drift between them counts as noise",
    )
    compare.add_argument("run_b", help="the run compared with it (or several, as for run_a)")
    compare.add_argument(
        "--normalise",
        action="store_true",
        help="compare runs of machines more than 1.25x apart, B put on A's machine "
        "(runs without the driver's CPU per step: by the ratio of their calibrations)",
    )
    compare.add_argument(
        "--ignore-calibration",
        action="store_true",
        help="compare even when nothing measured a run's machine (no driver CPU per step "
        "and CALIBRATE=0) or the two differ",
    )
    compare.add_argument(
        "--as-measured",
        action="store_true",
        help="judge B's figures as measured, not put on A's machine step by step",
    )
    compare.add_argument(
        "--tolerance",
        type=_share,
        default=DEFAULT_TOLERANCE,
        help="relative change flagged between runs without repeats "
        f"(default {DEFAULT_TOLERANCE:g})",
    )
    compare.add_argument("--reports-dir", type=Path, help="where reports are (default reports/)")


def _add_search_options(over: argparse.ArgumentParser) -> None:
    """The ceiling search's options: not given, each arm searches its own way
    (overload.ARM_SEARCHES: the memory tiers' higher ladder, nocache's full
    scans on a ladder of their own)."""
    cached = overload.ArmSearch()
    for flag, checked, what, value in (
        ("--search-start", _positive, "first rate", lambda s: s.rates.start),
        ("--search-step", _positive, "rate increase after 4x its start",
         lambda s: s.rates.ladder_step),
        ("--search-max", _positive, "highest rate", lambda s: s.rates.max_rate),
        ("--p95-ms", _above_zero, "p95 limit in ms", lambda s: f"{s.p95_ms:g}"),
    ):  # fmt: skip
        own: dict[str, list[str]] = {}
        for arm, search in overload.ARM_SEARCHES.items():
            if value(search) != value(cached):
                own.setdefault(str(value(search)), []).append(arm)
        others = "".join(f"; {' '.join(arms)} {v}" for v, arms in own.items())
        help_text = f"the search's {what} (default {value(cached)}{others})"
        over.add_argument(flag, type=checked, default=None, help=help_text)


def _add_overload(sub: argparse._SubParsersAction) -> None:
    over = sub.add_parser("overload", help="goodput, sheds and recovery past an arm's ceiling")
    over.add_argument(
        "--arms",
        default="cache hybrid",
        help="some of: cache hybrid tracking l1 nocache (default: cache hybrid)",
    )
    over.add_argument(
        "--ceiling",
        action="append",
        metavar="ARM=RATE",
        help="an arm's ceiling, given: no search for it (repeatable)",
    )
    over.add_argument("--duration", default="15s", help="per step (default 15s)")
    over.add_argument(
        "--search-duration", default="5s", help="per step of the ceiling search (default 5s)"
    )
    _add_search_options(over)
    _option(over, "--timeout", _positive, 10, "request timeout in seconds")
    over.add_argument(
        "--lazy-connections",
        action="store_true",
        help="each step's driver opens connections as its requests need them, not before "
        "its first (then the steps also measure new connections accepted under overload)",
    )
    _paths(over, "the time")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aside-bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    adders = (_add_run, _add_ceiling, _add_cost, _add_chaos, _add_soak, _add_create_rate)
    adders += (_add_hardening, _add_overload, _add_report, _add_shards)
    for add in (*adders, _add_compare, _add_screenshot):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Ctrl-C before the first step stops at once (also when started in the
    # background, where SIGINT arrives ignored); the runner takes over later.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        settings = config.load()
        command = {
            "run": commands.cmd_run,
            "ceiling": commands.cmd_ceiling,
            "cost": commands.cmd_cost,
            "report": commands.cmd_report,
            "shards": commands.cmd_shards,
            "chaos": suite_commands.cmd_chaos,
            "soak": suite_commands.cmd_soak,
            "create-rate": suite_commands.cmd_create_rate,
            "screenshot": commands.cmd_screenshot,
            "hardening": suite_commands.cmd_hardening,
            "overload": suite_commands.cmd_overload,
            "compare": commands.cmd_compare,
        }[args.command]
        return command(args, settings)
    except (commands.UsageError, PlanError) as error:
        print(f"aside-bench: {error}", file=sys.stderr)
        return 2
    except (config.ConfigError, StackError, SourceError) as error:
        print(f"aside-bench: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("aside-bench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
