"""What `aside-bench overload` runs: its arms, factors, searches, parameters, results."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from aside_bench.ceiling.search import SearchParams
from aside_bench_suite.base import SuiteRun, parse_names
from aside_bench_suite.samples import Check, CheckRecord

from aside_bench_overload import figures as fg

ARMS = ("cache", "hybrid", "tracking", "l1", "nocache")
DEFAULT_ARMS = ("cache", "hybrid")
BASELINE_FACTOR = 0.6
OVERLOAD_FACTORS = (1.25, 1.5, 2.0)
# The cache is refilled before a step unless every key outlives what follows by this.
TTL_MARGIN_S = 10
QUIET_DEADLINE_S = 120.0
HOT_SHARE = 0.9
COLD_SAMPLE = 200
# A step's driver starts this long before its first request, to open CONNS (the rest as needed).
OPEN_LEAD_S = 3.0


@dataclass(frozen=True)
class ArmSearch:
    rates: SearchParams = field(default_factory=SearchParams)
    p95_ms: float = 10.0


# The uncached read is a full scan (tens of ms, a few dozen a second): the cached
# tiers' ladder and p95 would find no rate it holds.
UNCACHED_SEARCH = ArmSearch(SearchParams(start=5, ladder_step=5, max_rate=100), 500.0)
# The memory tiers hold 2-3x the Redis tier's rate: the cached ladder's top (8,000/s)
# would cap them on a fast machine, its 400/s rungs take twenty steps to their misses.
MEMORY_SEARCH = ArmSearch(SearchParams(start=400, ladder_step=800, max_rate=24000))
MEMORY_ARMS = ("hybrid", "tracking", "l1")
ARM_SEARCHES = dict.fromkeys(MEMORY_ARMS, MEMORY_SEARCH) | {"nocache": UNCACHED_SEARCH}


@dataclass(frozen=True)
class OverloadParams:
    run_id: str
    out_dir: Path
    arms: tuple[str, ...]
    ceilings: dict[str, int] = field(default_factory=dict)  # given: no search for these
    duration_s: int = 15
    # The cached tiers' search, and the arms searched their own way.
    search: ArmSearch = field(default_factory=ArmSearch)
    arm_searches: dict[str, ArmSearch] = field(default_factory=lambda: dict(ARM_SEARCHES))
    search_duration_s: int = 5
    timeout_s: int = 10
    max_pool: int = 1000
    targets: fg.Targets = field(default_factory=fg.Targets)
    # False: each step's driver opens connections as needed, measuring new ones too.
    open_pool: bool = True
    open_lead_s: float = OPEN_LEAD_S

    def search_of(self, arm: str) -> ArmSearch:
        return self.arm_searches.get(arm, self.search)


@dataclass
class ArmResult:
    arm: str
    ceiling: int | None = None
    ceiling_from: str = ""  # "given" or "search"
    capped: bool = False  # the search never missed: the true ceiling is higher
    search: list[tuple[fg.SearchStep, bool, bool]] = field(default_factory=list)  # held, counted
    steps: list[fg.StepFigures] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    error: str | None = None
    max_pool: int | None = None  # the steps' pool cap, below the gateway's connection bound

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.checks) and all(c.ok for c in self.checks)

    @classmethod
    def failed(cls, arm: str, error: str) -> ArmResult:
        return cls(arm, error=error)

    def as_dict(self) -> ArmRecord:
        return {
            "arm": self.arm,
            "passed": self.passed,
            "error": self.error,
            "ceiling": self.ceiling,
            "ceiling_from": self.ceiling_from,
            "capped": self.capped,
            "max_pool": self.max_pool,
            "search": [step.as_dict(held, counted) for step, held, counted in self.search],
            "steps": [s.as_dict() for s in self.steps],
            "checks": [c.as_dict() for c in self.checks],
        }


class ArmRecord(TypedDict):
    """An arm as report.json keeps it."""

    arm: str
    passed: bool
    error: str | None
    ceiling: int | None
    ceiling_from: str
    capped: bool
    max_pool: int | None
    search: list[fg.SearchRecord]
    steps: list[fg.StepRecord]
    checks: list[CheckRecord]


class ArmSearchRecord(TypedDict):
    rates: dict[str, int]
    p95_ms: float


class OverloadRecord(TypedDict):
    """report.json's "params" of an overload run."""

    arms: list[str]
    ceilings_given: dict[str, int]
    duration_s: int
    baseline_factor: float
    overload_factors: list[float]
    search: dict[str, int]
    search_duration_s: int
    search_p95_ms: float
    arm_searches: dict[str, ArmSearchRecord]
    timeout_s: int
    max_pool: int
    open_pool: bool
    open_lead_s: float
    hot_share: float
    cold_sample: int
    goodput_within_ms: float
    targets: dict[str, float]
    gateway_url: str


# An overload run's record, its parameters typed.
OverloadRun = SuiteRun[OverloadRecord]


def parse_arms(text: str | None) -> tuple[str, ...]:
    return parse_names(text, ARMS, "arm") if text else DEFAULT_ARMS


def parse_ceilings(values: list[str] | None) -> dict[str, int]:
    """`ARM=RATE` pairs; ValueError names a malformed one."""
    found: dict[str, int] = {}
    for value in values or []:
        arm, _, rate = value.partition("=")
        if arm not in ARMS or not rate.isdigit() or int(rate) < 1:
            raise ValueError(f"--ceiling wants ARM=RATE with an arm of {' '.join(ARMS)}: {value!r}")
        found[arm] = int(rate)
    return found
