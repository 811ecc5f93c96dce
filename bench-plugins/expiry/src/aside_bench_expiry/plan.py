"""The `expiry` scenario's plan and its records in run.json (pure): per CACHE_EXPIRY mode and the
cache off, with and without an email index. E = the fill + the TTL: the steady window
[E - lead - width, E - lead) holds no expiry, [E - lead, E - lead + width) every key's."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from aside_bench.records.documents import Machine, StepSummary

SCENARIO = "expiry"
# CACHE_EXPIRY's values (gateway/README.md); `nocache` reads with ?cache=off.
MODES = ("plain", "jitter", "early", "swr")
NOCACHE = "nocache"
ARM_NAMES = (NOCACHE, *MODES)
INDEX_SUFFIX = "+index"
DEFAULT_RATES = (1000, 2000)
DEFAULT_ARMS = (*ARM_NAMES, *(f"{name}{INDEX_SUFFIX}" for name in ARM_NAMES))
# Long enough for the steady window to start after a slow fill (unindexed, 300 keys: 4-7 s).
DEFAULT_TTL_S = 30
# The longest the two windows are; a short TTL gets half of it each.
WINDOW_S = 10
LEAD_S = 3
TAIL_S = 1
# The cache-off reference has no expiry: one steady window's worth of load.
NOCACHE_S = WINDOW_S
# The scenario sets its own TTL on the gateway (CACHE_TTL_SECONDS), at least this.
MIN_TTL_S = 6


class ExpiryPlanError(ValueError):
    """A parameter of the expiry scenario is invalid; the message says which."""


@dataclass(frozen=True)
class Arm:
    mode: str | None  # a CACHE_EXPIRY value; None: the cache off
    indexed: bool

    @property
    def label(self) -> str:
        return (self.mode or NOCACHE) + (INDEX_SUFFIX if self.indexed else "")

    @property
    def cache(self) -> str:
        """The ?cache= value of its reads."""
        return "off" if self.mode is None else "l2"


@dataclass(frozen=True)
class Windows:
    """Where the two windows lie, in seconds from the expiry instant E."""

    lead_s: int
    width_s: int

    @property
    def steady(self) -> tuple[int, int]:
        return (-self.lead_s - self.width_s, -self.lead_s)

    @property
    def expiry(self) -> tuple[int, int]:
        return (-self.lead_s, self.width_s - self.lead_s)


def parse_arms(text: str | None) -> list[Arm]:
    """'plain swr+index' -> the arms, unindexed first (the index is built once)."""
    words = [w for w in re.split(r"[\s,]+", (text or "").strip()) if w] or list(DEFAULT_ARMS)
    arms: list[Arm] = []
    for word in words:
        name = word.removesuffix(INDEX_SUFFIX)
        if name not in ARM_NAMES:
            raise ExpiryPlanError(
                f"unknown expiry arm {word!r}; choose from {', '.join(ARM_NAMES)}, "
                f"each optionally with {INDEX_SUFFIX}"
            )
        arm = Arm(None if name == NOCACHE else name, word.endswith(INDEX_SUFFIX))
        if arm not in arms:
            arms.append(arm)
    return sorted(arms, key=lambda a: a.indexed)


def windows_for(ttl_s: int) -> Windows:
    """WINDOW_S each when the TTL leaves room after the fill and the driver's start (3 s)."""
    if ttl_s < MIN_TTL_S:
        raise ExpiryPlanError(f"the expiry scenario needs a TTL of at least {MIN_TTL_S}s")
    lead = min(LEAD_S, max(1, ttl_s // 6))
    return Windows(lead, min(WINDOW_S, ttl_s - lead - 3))


def load_seconds(arm: Arm, ttl_s: int, since_fill_s: float) -> int:
    """The driver's seconds from `since_fill_s` after the fill to TAIL_S past the expiry window."""
    if arm.mode is None:
        return NOCACHE_S
    end = ttl_s + windows_for(ttl_s).expiry[1] + TAIL_S
    return max(1, math.ceil(end - since_fill_s))


def gateway_env(arm: Arm, ttl_s: int) -> dict[str, str]:
    """The gateway's settings for a cached arm (the reference keeps the last)."""
    if arm.mode is None:
        return {}
    return {"CACHE_EXPIRY": arm.mode, "CACHE_TTL_SECONDS": str(ttl_s), "CACHE_L1_TRACKING": "off"}


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
    summary: StepSummary = field(default_factory=StepSummary)
    driver_cpu_s: float | None = None
    readings: list[Reading] = field(default_factory=list)


class RunParams(TypedDict):
    """run.json's "params": what the run was asked and where it ran."""

    run_id: str
    machine: Machine
    rates: list[int]
    arms: list[str]
    ttl_s: int
    windows: dict[str, int]  # Windows' fields
    hot_count: int
    cold_sample: int
    hot_share: float


def load_run(out_dir: Path) -> tuple[RunParams, list[ArmRun]]:
    """run.json read back: its params and each arm's run."""
    record = json.loads((out_dir / "run.json").read_text())
    arms = []
    for one in record["arms"]:
        readings = [Reading(**r) for r in one.pop("readings")]
        arms.append(ArmRun(**one, readings=readings))
    return record["params"], arms
