"""Command-line options: every bad value is one line naming the option."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
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


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; aside-seed prints only the error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _whole_number(option: str, minimum: int):
    def parse(raw: str) -> int:
        text = raw.strip()
        digits = text[1:] if text.startswith("-") else text
        if not (digits.isascii() and digits.isdigit()) or int(text) < minimum:
            raise UsageError(f"{option} must be a whole number >= {minimum}, got {raw!r}")
        return int(text)

    return parse


def _ratio(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:  # also rejects nan
        raise UsageError(f"--hot-ratio must be a number from 0 to 1, got {raw!r}")
    return value


def _seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0.001 <= value <= 3600:
        raise UsageError(f"--lock-timeout must be seconds from 0.001 to 3600, got {raw!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="aside-seed",
        description="Load Faker-made users into PostgreSQL (DATABASE_URL) with COPY "
        "and write the key files the load driver reads.",
    )
    add = parser.add_argument
    add(
        "--rows",
        type=_whole_number("--rows", 1),
        default=1_000_000,
        help="users to load (default 1000000)",
    )
    add(
        "--seed",
        type=_whole_number("--seed", 0),
        default=42,
        help="the same seed gives the same rows (default 42)",
    )
    add(
        "--hot-emails",
        type=_whole_number("--hot-emails", 0),
        default=100,
        help="distinct shared addresses (default 100)",
    )
    add(
        "--hot-ratio",
        type=_ratio,
        default=0.8,
        help="share of rows using a hot address (default 0.8)",
    )
    add(
        "--reset",
        action="store_true",
        help="replace the users already in the table (without it a non-empty table is refused)",
    )
    add(
        "--index",
        action="store_true",
        help="also create users_email_idx (default: none, so a count is a full scan)",
    )
    add(
        "--data-dir",
        type=Path,
        default=None,
        help="where to write the key files (default $ASIDE_DATA_DIR or $ASIDE_ROOT/bench/data)",
    )
    add(
        "--sample-size",
        type=_whole_number("--sample-size", 0),
        default=1000,
        help="ids and cold addresses written to the key files (default 1000)",
    )
    add(
        "--lock-timeout",
        type=_seconds,
        default=5.0,
        help="seconds the final swap waits for readers of users, per try (3 tries; default 5)",
    )
    add(
        "--tracks",
        type=_whole_number("--tracks", 0),
        default=2000,
        help="GPS tracks loaded beside the users, whatever --rows (default 2000)",
    )
    add("--copy-format", choices=COPY_FORMATS, default="binary",
        help="how rows travel: pre-formatted binary (default), pre-formatted text, "
        "or psycopg write_row (slowest; kept for comparison)")  # fmt: skip
    return parser


def parse_options(argv: Sequence[str] | None = None) -> Options:
    args = build_parser().parse_args(argv)
    options = Options(
        rows=args.rows,
        seed=args.seed,
        hot_emails=args.hot_emails if args.hot_ratio > 0 else 0,
        hot_ratio=args.hot_ratio,
        reset=args.reset,
        index=args.index,
        data_dir=args.data_dir,
        sample_size=args.sample_size,
        copy_format=args.copy_format,
        lock_timeout_s=args.lock_timeout,
        tracks=args.tracks,
    )
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
