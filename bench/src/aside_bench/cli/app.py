"""aside-bench: `run` (the sweep), `ceiling` (the highest rate held), `report`
(rebuild a run's report from its run.json and Prometheus) and `compare` (two
runs' common steps); and the commands of every plug-in package installed
beside it (the suites, the tools), found through the entry-point group
`aside_bench.commands`."""

from __future__ import annotations

import argparse
import signal
import sys
from importlib.metadata import entry_points

from aside_bench.cli import report_and_compare, run
from aside_bench.cli.options import Command, UsageError
from aside_bench.plan.steps import PlanError
from aside_bench.stack import config
from aside_bench.stack.prepare import StackError
from aside_bench.stack.sources import SourceError
from aside_bench.sweep.runner import EXIT_INTERRUPTED

# The core's commands as `--help` lists them; a plug-in's entry names a tuple of Commands.
CORE_COMMANDS: tuple[Command, ...] = (
    *run.COMMANDS,
    report_and_compare.REPORT,
    report_and_compare.COMPARE,
)
COMMAND_ENTRY_POINTS = "aside_bench.commands"


def commands() -> tuple[Command, ...]:
    """The core's commands, then each installed plug-in's."""
    found = list(CORE_COMMANDS)
    for entry in sorted(entry_points(group=COMMAND_ENTRY_POINTS), key=lambda e: e.name):
        for command in entry.load():
            if any(c.name == command.name for c in found):
                raise ValueError(f"two commands are named {command.name!r}")
            found.append(command)
    return tuple(found)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aside-bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in commands():
        command.add(sub.add_parser(command.name, help=command.help))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Ctrl-C before the first step stops at once (also when started in the
    # background, where SIGINT arrives ignored); the runner takes over later.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        settings = config.load()
        command = next(c for c in commands() if c.name == args.command)
        return command.run(args, settings)
    except (UsageError, PlanError, config.ConfigError, StackError, SourceError) as error:
        print(f"aside-bench: {error}", file=sys.stderr)
        return 2 if isinstance(error, UsageError | PlanError) else 1  # usage, else the stack
    except KeyboardInterrupt:
        print("aside-bench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
