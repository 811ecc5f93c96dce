"""Command-line options: every bad value is one line naming the option."""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from aside_seed.errors import UsageError

# binary and text: rows pre-formatted by aside_seed.encode; rows: psycopg's write_row.
COPY_FORMATS = ("binary", "text", "rows")


@dataclass(frozen=True)
class Options:
    rows: int
    seed: int
    hot_emails: int
    hot_ratio: float
    reset: bool
    index: bool
    data_dir: Path | None
    sample_size: int
    copy_format: str
    lock_timeout_s: float
    tracks: int = 2000


@dataclass(frozen=True)
class _Number:
    """One numeric option: its flag, the Options field it fills, its parser and default."""

    flag: str
    field: str
    parse: Callable[[str], float]
    default: float
    help: str


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; aside-seed prints only the error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _whole_number(option: str, minimum: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        text = raw.strip()
        digits = text[1:] if text.startswith("-") else text
        if not (digits.isascii() and digits.isdigit()) or int(text) < minimum:
            raise UsageError(f"{option} must be a whole number >= {minimum}, got {raw!r}")
        return int(text)

    return parse


def _between(option: str, low: float, high: float, what: str) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not low <= value <= high:  # also rejects nan
            raise UsageError(f"{option} must be {what} from {low:g} to {high:g}, got {raw!r}")
        return value

    return parse


_NUMBERS = (
    _Number("--rows", "rows", _whole_number("--rows", 1), 1_000_000, "users to load"),
    _Number("--seed", "seed", _whole_number("--seed", 0), 42, "the same seed gives the same rows"),
    _Number(
        "--hot-emails",
        "hot_emails",
        _whole_number("--hot-emails", 0),
        100,
        "distinct shared addresses",
    ),
    _Number(
        "--hot-ratio",
        "hot_ratio",
        _between("--hot-ratio", 0.0, 1.0, "a number"),
        0.8,
        "share of rows using a hot address",
    ),
    _Number(
        "--sample-size",
        "sample_size",
        _whole_number("--sample-size", 0),
        1000,
        "ids and cold addresses written to the key files",
    ),
    _Number(
        "--lock-timeout",
        "lock_timeout_s",
        _between("--lock-timeout", 0.001, 3600, "seconds"),
        5.0,
        "seconds the final swap waits for readers of users, per try of 3",
    ),
    _Number(
        "--tracks",
        "tracks",
        _whole_number("--tracks", 0),
        2000,
        "GPS tracks loaded beside the users, whatever --rows",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="aside-seed",
        description="Load Faker-made users into PostgreSQL (DATABASE_URL) with COPY "
        "and write the key files the load driver reads.",
    )
    for number in _NUMBERS:
        parser.add_argument(
            number.flag,
            dest=number.field,
            metavar=number.flag.removeprefix("--").upper().replace("-", "_"),
            type=number.parse,
            default=number.default,
            help=f"{number.help} (default {number.default:.15g})",
        )
    parser.add_argument(
        "--reset",
        action="store_true",
        help="replace the users already in the table (without it a non-empty table is refused)",
    )
    parser.add_argument(
        "--index",
        action="store_true",
        help="also create users_email_idx (default: none, so a count is a full scan)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where to write the key files (default $ASIDE_DATA_DIR or $ASIDE_ROOT/bench/data)",
    )
    parser.add_argument(
        "--copy-format",
        choices=COPY_FORMATS,
        default="binary",
        help="how rows travel: pre-formatted binary (default), pre-formatted text, "
        "or psycopg write_row (slowest; kept for comparison)",
    )
    return parser


def parse_options(argv: Sequence[str] | None = None) -> Options:
    """The options, each parser's destination an Options field of the same name."""
    options = Options(**vars(build_parser().parse_args(argv)))
    if options.hot_ratio == 0:
        options = dataclasses.replace(options, hot_emails=0)
    check_hot_set(options)
    return options


def check_hot_set(options: Options) -> None:
    """A hot address must be shared: each is used by at least two rows."""
    if options.hot_ratio == 0:
        return
    if options.hot_emails == 0:
        raise UsageError(
            f"--hot-emails 0 leaves no address for --hot-ratio {options.hot_ratio:g}; "
            "give --hot-emails >= 1 or --hot-ratio 0"
        )
    hot_rows = round(options.rows * options.hot_ratio)
    if hot_rows < 2 * options.hot_emails:
        raise UsageError(
            f"--rows {options.rows} x --hot-ratio {options.hot_ratio:g} gives {hot_rows} hot rows, "
            f"too few to share each of --hot-emails {options.hot_emails} by two rows"
        )
