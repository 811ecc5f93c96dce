"""Key traces: the keys a step sent, one a line (optionally a tab and seconds)."""

from __future__ import annotations

import gzip
from pathlib import Path


class KeyTraceError(ValueError):
    """A key trace cannot be read; the message names the file and line."""


def read_key_trace(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as lines:
            return [
                line.split("\t", 1)[0].rstrip("\n")
                for line in lines
                if line.strip() and not line.startswith("#")
            ]
    except (OSError, UnicodeDecodeError) as error:
        raise KeyTraceError(f"{path}: {error}") from error
