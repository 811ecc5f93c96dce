"""A step's InfluxDB points written, spooled (`influx-spool/`, resent by `report`) or lost."""

from __future__ import annotations

import time
from dataclasses import astuple, dataclass
from pathlib import Path

from aside_bench.stack.sources import Influx, SourceError

SPOOL_DIR = "influx-spool"
BENCH_SPOOL = "bench_step.lp"
# The bench's own point: attempts of ATTEMPT_S each, this long apart, all within BUDGET_S.
ATTEMPT_S = 2.0
RETRY_WAITS_S = (0.25, 0.5)
BUDGET_S = 5.0
RESEND_CHUNK = 5000  # lines a resend posts at once


@dataclass(frozen=True)
class InfluxPoints:
    written: int = 0
    spooled: int = 0
    lost: int = 0

    @classmethod
    def of(cls, found: dict[str, int] | None) -> InfluxPoints:
        """The driver summary's `influx` (or a step record's)."""
        found = found or {}
        return cls(*(int(found.get(k) or 0) for k in ("written", "spooled", "lost")))

    def __add__(self, other: InfluxPoints) -> InfluxPoints:
        return InfluxPoints(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def as_record(self) -> dict[str, int]:
        return {"written": self.written, "spooled": self.spooled, "lost": self.lost}

    def note(self) -> str:
        """A line's mention of the points not written; empty when all were."""
        parts = [f"{self.spooled} spooled"] if self.spooled else []
        parts += [f"{self.lost} LOST"] if self.lost else []
        return f"InfluxDB points: {', '.join(parts)}" if parts else ""


def write_or_spool(influx: Influx, lines: list[str], spool: Path) -> InfluxPoints:
    """`lines` into InfluxDB within BUDGET_S, else appended to `spool`."""
    deadline = time.monotonic() + BUDGET_S
    for wait in (*RETRY_WAITS_S, None):
        try:
            influx.write(lines, timeout_s=min(ATTEMPT_S, max(deadline - time.monotonic(), 0.1)))
            return InfluxPoints(written=len(lines))
        except SourceError:
            if wait is None or time.monotonic() + wait >= deadline:
                break
            time.sleep(wait)  # the pause between attempts
    try:
        spool.parent.mkdir(parents=True, exist_ok=True)
        with spool.open("a") as handle:
            handle.write("".join(f"{line}\n" for line in lines))
    except OSError:
        return InfluxPoints(lost=len(lines))
    return InfluxPoints(spooled=len(lines))


@dataclass(frozen=True)
class Resent:
    files: int
    points: int


def resend(influx: Influx, run_dir: Path) -> Resent:
    """Every spooled point of a run into InfluxDB, each file sent whole removed."""
    files = sorted((run_dir / SPOOL_DIR).glob("*.lp"))
    points = 0
    for path in files:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        for start in range(0, len(lines), RESEND_CHUNK):
            influx.write(lines[start : start + RESEND_CHUNK])
        points += len(lines)
        path.unlink()
    return Resent(len(files), points)
