"""Key traces (bench/driver/README.md, "Key traces"), read by the driver's rules."""

from __future__ import annotations

import gzip
import math
from collections.abc import Iterator
from pathlib import Path

GZIP_MAGIC = b"\x1f\x8b"


class KeyTraceError(ValueError):
    """A key trace that cannot be read; the message names the file and the line."""


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with path.open("rb") as raw:
            zipped = raw.read(2) == GZIP_MAGIC
        with gzip.open(path, "rt") if zipped else path.open() as handle:
            for number, line in enumerate(handle, start=1):
                yield number, line.rstrip("\r\n")
    except (OSError, EOFError, UnicodeDecodeError) as error:
        raise KeyTraceError(f"{path}: cannot read: {error}") from None


def _timestamp(path: Path, number: int, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        value = -1.0
    if not (value >= 0 and math.isfinite(value)):
        raise KeyTraceError(
            f"{path}: line {number}: the timestamp must be seconds >= 0, got {text!r}"
        )
    return value


def read_timed_key_trace(path: Path) -> list[tuple[str, float | None]]:
    """Every request's key and timestamp (None without one); KeyTraceError on a bad line."""
    found: list[tuple[str, float | None]] = []
    last = 0.0
    for number, line in _lines(Path(path)):
        if not line.strip() or line.startswith("#"):
            continue
        key, tab, stamp = line.partition("\t")
        key = key.strip()
        if not key:
            raise KeyTraceError(f"{path}: line {number}: no key before the TAB")
        if " " in key or "\t" in key:
            raise KeyTraceError(f"{path}: line {number}: a key holds no blank, got {key!r}")
        at = _timestamp(Path(path), number, stamp) if tab else None
        if at is not None:
            if at < last:
                raise KeyTraceError(
                    f"{path}: line {number}: the timestamp {stamp.strip()} is below the line "
                    f"before's ({last:g}): a trace is in send order"
                )
            last = at
        found.append((key, at))
    return found


def check_replayable(path: Path) -> list[tuple[str, float | None]]:
    """The requests of a trace the driver can replay (a key, timestamps not all 0)."""
    found = read_timed_key_trace(path)
    if not found:
        raise KeyTraceError(f"{path}: holds no key")
    if all(at == 0 for _, at in found):
        raise KeyTraceError(f"{path}: every timestamp is 0: a timed trace must span some time")
    return found


def read_key_trace(path: Path) -> list[str]:
    """The trace's keys in order, one per request."""
    return [key for key, _ in read_timed_key_trace(path)]


def timed_rate(requests: list[tuple[str, float | None]]) -> float | None:
    """A timed trace's rate (lines over its last timestamp); None when one has none."""
    stamps = [at for _, at in requests if at is not None]
    if len(stamps) < len(requests) or not stamps or stamps[-1] <= 0:
        return None
    return len(stamps) / stamps[-1]
