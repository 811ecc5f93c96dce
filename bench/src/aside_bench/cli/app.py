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
import signal
import sys

from aside_bench.cli import ceiling, cost, overload, reading, run, shards, suites
from aside_bench.cli.options import Command, UsageError
from aside_bench.plan.steps import PlanError
from aside_bench.stack import config
from aside_bench.stack.prepare import StackError
from aside_bench.stack.sources import SourceError
from aside_bench.sweep.runner import EXIT_INTERRUPTED

# Every command, in the order `--help` lists them: a new one is a module
# holding its options and its run function, and a line here.
COMMANDS: tuple[Command, ...] = (
    *run.COMMANDS,
    *ceiling.COMMANDS,
    *cost.COMMANDS,
    suites.CHAOS,
    suites.SOAK,
    suites.CREATE_RATE,
    suites.HARDENING,
    *overload.COMMANDS,
    reading.REPORT,
    *shards.COMMANDS,
    reading.COMPARE,
    reading.SCREENSHOT,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aside-bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add(sub.add_parser(command.name, help=command.help))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Ctrl-C before the first step stops at once (also when started in the
    # background, where SIGINT arrives ignored); the runner takes over later.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        settings = config.load()
        command = next(c for c in COMMANDS if c.name == args.command)
        return command.run(args, settings)
    except (UsageError, PlanError) as error:
        print(f"aside-bench: {error}", file=sys.stderr)
        return 2
    except (config.ConfigError, StackError, SourceError) as error:
        print(f"aside-bench: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("aside-bench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
