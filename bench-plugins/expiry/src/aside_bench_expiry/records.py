"""The `expiry` scenario's records: each arm's run as run.json keeps them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Reading:
    """One reading: rows PostgreSQL scanned of users (and its rows), the gateway's counters."""

    t: float
    rows_scanned: int
    misses: float
    stale: float
    early: float
    stale_age_max: float | None
    count_queries: float = 0.0  # the gateway's count queries (a batch of misses once)
    table_rows: float = 0.0  # pg_class.reltuples of users


@dataclass
class ArmRun:
    label: str
    mode: str | None
    indexed: bool
    rate: int
    expiry_at: float  # epoch s: the fill's start + the TTL (the reference: its pseudo-expiry)
    fill: dict[str, float] = field(default_factory=dict)
    load_start: float = 0.0
    load_s: int = 0
    samples: str = ""
    summary: dict = field(default_factory=dict)
    driver_cpu_s: float | None = None
    readings: list[Reading] = field(default_factory=list)


def load_run(out_dir: Path) -> tuple[dict, list[ArmRun]]:
    """run.json read back: its params and each arm's run."""
    record = json.loads((out_dir / "run.json").read_text())
    arms = []
    for one in record["arms"]:
        readings = [Reading(**r) for r in one.pop("readings")]
        arms.append(ArmRun(**one, readings=readings))
    return record["params"], arms
