"""The driver's samples file (SAMPLES_PATH): a JSON line a request, gzipped once read."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


class SamplesError(ValueError):
    """A samples file this bench cannot read; the message names the file and line."""


def sample_lines(
    lines: Iterable[str], source: str, first: int = 1
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each non-blank line as a JSON object, with where it is for an error."""
    for number, text in enumerate(lines, first):
        if not text.strip():
            continue
        where = f"{source}, line {number}"
        try:
            line = json.loads(text)
        except ValueError as error:
            raise SamplesError(f"{where}: not JSON ({error})") from None
        if not isinstance(line, dict):
            raise SamplesError(f"{where}: not a JSON object")
        yield where, line


def number(line: dict[str, Any], key: str, where: str) -> float:
    """A line's numeric field; SamplesError when it is missing or no number."""
    value = line.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SamplesError(f"{where}: {key!r} is {value!r}, not a number")
    return float(value)


def compress(path: Path) -> Path:
    """Gzip a samples file once read; the .gz beside it, the original removed."""
    target = path.with_name(path.name + ".gz")
    with path.open("rb") as source, gzip.open(target, "wb") as out:
        shutil.copyfileobj(source, out)
    path.unlink()
    return target
