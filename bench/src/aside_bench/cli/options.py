"""What every command module shares: Command, checked option types, paths, run and seed checks."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aside_bench.records import runfile
from aside_bench.records.runfile import RunRecord
from aside_bench.stack import config
from aside_bench.stack.prepare import check_stack
from aside_bench.stack.seeddata import SeedData, check_seed

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")


class UsageError(Exception):
    """Bad command-line input: reported on one line, exit status 2."""


@contextmanager
def usage_errors(*kinds: type[Exception]) -> Iterator[None]:
    """An error of `kinds` in the block, as a UsageError saying the same."""
    try:
        yield
    except kinds as error:
        raise UsageError(str(error)) from None


@dataclass(frozen=True)
class Command:
    """A subcommand: its name, help, options and what it runs (its exit status)."""

    name: str
    help: str
    add: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, config.Settings], int]


def default_of(record: type, name: str) -> Any:
    """The default a dataclass gives its field `name`: the one place it is written."""
    for field in dataclasses.fields(record):
        if field.name == name:
            if field.default is dataclasses.MISSING:
                raise LookupError(f"{record.__name__}.{name} has no default")
            return field.default
    raise LookupError(f"{record.__name__} has no field {name}")


def _number(text: str, kind: type, ok: Callable[[float], bool], what: str) -> Any:
    """`text` as a number of `kind` that `ok` accepts, or the parser's one-line error."""
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def fraction(text: str) -> float:
    return _number(text, float, lambda v: 0 <= v <= 1, "a number in [0, 1]")


def share(text: str) -> float:
    return _number(text, float, lambda v: 0 < v <= 1, "a number in (0, 1]")


def above_zero(text: str) -> float:
    return _number(text, float, lambda v: 0 < v < float("inf"), "a number above 0")


def whole(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def option(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    flag: str,
    checked: Callable[[str], Any],
    default: Any,
    what: str,
) -> None:
    """A checked option whose help ends with its default."""
    shown = "none" if default is None else f"{default:g}" if isinstance(default, float) else default
    parser.add_argument(flag, type=checked, default=default, help=f"{what} (default {shown})")


def paths(parser: argparse.ArgumentParser, run_id_default: str) -> None:
    """Where a run's inputs and report are, and its name."""
    parser.add_argument("--run-id", help=f"name of the run (default: {run_id_default})")
    parser.add_argument("--data-dir", type=Path, help="the seeder's files (default bench/data)")
    reports_dir(parser, "go")


def reports_dir(parser: argparse.ArgumentParser, verb: str = "are") -> None:
    parser.add_argument("--reports-dir", type=Path, help=f"where reports {verb} (default reports/)")


def write_share(parser: argparse.ArgumentParser, default: float, what: str) -> None:
    parser.add_argument(
        "--write-share", type=fraction, default=default, help=f"{what} (default {default:g})"
    )


def new_run_id(args: argparse.Namespace, label: str) -> str:
    run_id = args.run_id or time.strftime("%Y%m%d-%H%M%S") + (f"-{label}" if label else "")
    if not RUN_ID.match(run_id):
        raise UsageError(f"--run-id must be 1-40 letters, digits, '-' or '_', got {run_id!r}")
    return run_id


def new_out_dir(settings: config.Settings, args: argparse.Namespace, folder: str) -> Path:
    """reports/<folder>, which must not exist yet."""
    out_dir = (args.reports_dir or settings.default_reports_dir) / folder
    if out_dir.exists():
        raise UsageError(f"{out_dir} exists already; choose another --run-id")
    return out_dir


def checked_seed(settings: config.Settings, args: argparse.Namespace) -> SeedData:
    """The stack is up and its table is the seeded one, or StackError says why."""
    check_stack(settings)
    return check_seed(settings, args.data_dir or settings.default_data_dir)


def known_run(reports_dir: Path, run_id: str, make_target: str) -> Path:
    """reports/<run_id>, or UsageError naming the latest runs."""
    found = reports_dir.glob("*/run.json") if reports_dir.exists() else []
    runs = [p.parent.name for p in sorted(found, key=lambda p: p.stat().st_mtime)]
    if not run_id:
        known = ", ".join(runs[-5:]) or "none yet"
        raise UsageError(f"give the run id: make {make_target} RUN=<id> (latest runs: {known})")
    return reports_dir / run_id


def read_run(out_dir: Path) -> RunRecord:
    try:
        return runfile.load_run(out_dir)
    except runfile.RunSchemaError as error:
        raise UsageError(str(error)) from None
    except (OSError, json.JSONDecodeError) as error:
        raise UsageError(f"no readable run.json in {out_dir} ({error})") from error
