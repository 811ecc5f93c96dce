"""What a bench run will do: parsed parameters, the ordered steps, pool sizing. Pure."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from itertools import groupby

from aside_bench.plan import scenarios
from aside_bench.plan.arms import ARM_ALIASES, GATEWAY_ENV, UNTRACKED_ENV, base_arm

WARM_CHOICES = ("both", "cold", "warm")
MIN_POOL = 10
# The driver's pool holds rate x this budget in flight: past it the stack is far
# behind, and iterations that cannot start count as dropped.
LATENCY_BUDGET_S = 1.0

_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


class PlanError(ValueError):
    """A bench parameter is invalid; the message says which and why."""


@dataclass(frozen=True)
class Step:
    scenario: str
    arm: str
    phase: str  # cold | warm | none
    rate: int  # target iterations (requests) per second
    duration_s: int
    # Keyword-only, both: two optional counts must never be told apart by position.
    repeat: int = field(default=1, kw_only=True)  # which run (1..REPEAT); a tag of its samples
    # interference: the reads' fixed rate beside the step's own, theirs its figures. 0: none.
    read_rate: int = field(default=0, kw_only=True)

    @property
    def label(self) -> str:
        return series_label(self.arm, self.phase)

    @property
    def key(self) -> tuple[str, str, str, int]:
        """The step whatever its repeat: what repeats are merged and runs compared by."""
        return (self.scenario, self.arm, self.phase, self.rate)

    @property
    def run_key(self) -> tuple[str, str, str, int, int]:
        """One run of the step: the tags its samples carry."""
        return (*self.key, self.repeat)

    @property
    def scheduled(self) -> int:
        """Requests the step's figures count: its reads' when it has a read rate."""
        return (self.read_rate or self.rate) * self.duration_s


# ---- a bounded cache as an arm, from an empty cache: `cache@4mb` (maxmemory),
# `hybrid@2000keys` (CACHE_L1_MAX_ENTRIES), `cache@ttl10s` (CACHE_TTL_SECONDS; the
# last two restart the gateway).
BOUND_SEP = "@"
EVICTION_POLICIES = ("allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu")
_MEMORY = re.compile(r"^(\d+)(kb|mb|gb)$")
_ENTRIES = re.compile(r"^(\d+)keys$")
_TTL = re.compile(r"^ttl(\d+)s$")
_UNITS = {"kb": 1024, "mb": 1024**2, "gb": 1024**3}


@dataclass(frozen=True)
class Bound:
    """What bounds an arm's cache: kind `memory` (bytes), `entries` or `ttl` (s)."""

    kind: str
    value: int


# The arms each kind of bound applies to, and the option that asks for it.
BOUND_ARMS = {"memory": ("cache",), "entries": ("l1", "hybrid", "tracking"), "ttl": ("cache",)}
BOUND_OPTIONS = {"memory": "--cache-memory", "entries": "--l1-entries", "ttl": "--cache-ttl"}


def parse_memory(text: str) -> int:
    """'4mb' -> 4194304: a whole number of kb, mb or gb (Redis's binary units)."""
    match = _MEMORY.match(text.strip().lower())
    if match is None or int(match.group(1)) < 1:
        raise PlanError(f"cache memory must look like 512kb, 4mb or 1gb, got {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


def parse_bound(text: str) -> Bound:
    """An arm's bound from its text: 4mb, 2000keys or ttl10s."""
    text = text.strip().lower()
    for kind, pattern in (("entries", _ENTRIES), ("ttl", _TTL)):
        match = pattern.match(text)
        if match is not None:
            if int(match.group(1)) < 1:
                raise PlanError(f"a cache bound must be at least 1, got {text!r}")
            return Bound(kind, int(match.group(1)))
    return Bound("memory", parse_memory(text))


def arm_bound(arm: str) -> Bound | None:
    _, sep, text = arm.split(DISTANCE_SEP, 1)[0].partition(BOUND_SEP)
    return parse_bound(text) if sep else None


def arm_memory(arm: str) -> int | None:
    """The bytes a memory arm's Redis may hold; None: the stack's own bound."""
    bound = arm_bound(arm)
    return bound.value if bound is not None and bound.kind == "memory" else None


def bound_text(bound: Bound) -> str:
    if bound.kind == "entries":
        return f"{bound.value}keys"
    if bound.kind == "ttl":
        return f"ttl{bound.value}s"
    for unit in ("gb", "mb", "kb"):
        if bound.value % _UNITS[unit] == 0:
            return f"{bound.value // _UNITS[unit]}{unit}"
    raise PlanError(f"a memory bound must be whole kb, got {bound.value} bytes")


def option_bound(kind: str, text: str) -> Bound:
    """A bound as its option gives it: 4mb; 1000 or 1000keys; 5, 5s or ttl5s."""
    word = text.strip().lower()
    if kind == "entries" and word.isdigit():
        word += "keys"
    elif kind == "ttl":
        word = word.removeprefix("ttl").removesuffix("s")
        word = f"ttl{word}s" if word.isdigit() else text
    try:
        bound = parse_bound(word)
    except PlanError:
        bound = None
    if bound is None or bound.kind != kind:
        shape = {"memory": "512kb, 4mb or 1gb", "entries": "1000 or 1000keys", "ttl": "5 or 5s"}
        raise PlanError(f"{BOUND_OPTIONS[kind]} takes values like {shape[kind]}, got {text!r}")
    return bound


def bounded_arms(arms: list[str], kind: str, texts: list[str]) -> list[str]:
    """Each arm a bound applies to once per bound, smallest first; others as given."""
    if not texts:
        return arms
    bounds = sorted({option_bound(kind, text) for text in texts}, key=lambda b: b.value)
    out: list[str] = []
    for arm in arms:
        if arm in BOUND_ARMS[kind]:
            out += [f"{arm}{BOUND_SEP}{bound_text(bound)}" for bound in bounds]
        else:
            out.append(arm)
    if out == arms:
        raise PlanError(
            f"{BOUND_OPTIONS[kind]} bounds the {' and '.join(BOUND_ARMS[kind])} arms; "
            "add one to the arms"
        )
    return out


# ---- a distance as an arm, each hop through its proxy (stack/distance.py): `cache~same-zone`.
DISTANCE_SEP = "~"
# No proxy in the path: what a `loopback` step's added p50, the proxy's own cost, is read against.
DIRECT = "direct"


def arm_distance(arm: str) -> str | None:
    """The distance an arm's steps run at; None: no proxy in the path."""
    _, sep, name = arm.partition(DISTANCE_SEP)
    return name if sep else None


def at_distances(arms: list[str], names: list[str]) -> list[str]:
    """Each arm once per distance, in the order given (none: the arms as given)."""
    if not names:
        return arms
    return [
        arm if name == DIRECT else f"{arm}{DISTANCE_SEP}{name}" for name in names for arm in arms
    ]


def without_distance(arm: str) -> str:
    return arm.split(DISTANCE_SEP, 1)[0]


def series_label(arm: str, phase: str) -> str:
    return arm if phase == "none" else f"{arm} ({phase})"


def words(text: str) -> list[str]:
    """'30 50,75' -> ['30', '50', '75']: the words of a list option."""
    return [word for word in re.split(r"[\s,]+", text.strip()) if word]


def parse_duration(text: str) -> int:
    """'30s', '2m', '1m30s' or a bare number of seconds -> seconds (>= 1)."""
    text = text.strip()
    if text.isdigit():
        seconds = int(text)
    else:
        match = _DURATION.match(text)
        if not text or match is None:
            raise PlanError(f"duration must look like 30s, 2m or 1m30s, got {text!r}")
        hours, minutes, secs = (int(group or 0) for group in match.groups())
        seconds = hours * 3600 + minutes * 60 + secs
    if seconds < 1:
        raise PlanError(f"duration must be at least 1s, got {text!r}")
    return seconds


def parse_rates(text: str, lowest: int = 1) -> list[int]:
    """'30 50,75' -> [30, 50, 75]: whole numbers >= lowest, deduplicated, ascending."""
    if not words(text):
        raise PlanError("rates must list at least one rate, e.g. --rates '30 100'")
    rates: set[int] = set()
    for word in words(text):
        if not word.isdigit() or int(word) < lowest:
            raise PlanError(
                f"rates must be whole numbers of requests per second >= {lowest}, got {word!r}"
            )
        rates.add(int(word))
    return sorted(rates)


def parse_arms(text: str, allowed: tuple[str, ...]) -> list[str]:
    """'nocache l2' -> ['nocache', 'cache']: known arms, given order, no repeats."""
    for word in words(text):
        if ARM_ALIASES.get(word, word) not in allowed:
            raise PlanError(f"unknown arm {word!r}; choose from {', '.join(allowed)}")
    arms = list(dict.fromkeys(ARM_ALIASES.get(word, word) for word in words(text)))
    if not arms:
        raise PlanError(f"arms must list at least one of {', '.join(allowed)}")
    return arms


def resolve_arms(arms: list[str], seed_indexed: bool) -> list[str]:
    """The uncached arm matched to the table: 'nocache' becomes 'index' if indexed."""
    if "index" in arms and not seed_indexed:
        raise PlanError("arm 'index' needs a table seeded with an email index (make seed INDEX=1)")
    return list(
        dict.fromkeys("index" if arm == "nocache" and seed_indexed else arm for arm in arms)
    )


def phases_for(scenario: str, arm: str, warm: str) -> list[str]:
    """The cache states an arm of a scenario runs in."""
    if warm not in WARM_CHOICES:
        raise PlanError(f"warm must be one of {', '.join(WARM_CHOICES)}, got {warm!r}")
    return scenarios.scenario_named(scenario).phases(arm, warm)


def gateway_env(arm: str, untracked: bool = True) -> dict[str, str]:
    """The gateway's settings for `arm`; `untracked`: UNTRACKED_ENV but for tracking."""
    found = dict(GATEWAY_ENV.get(base_arm(arm), {}))
    if untracked and base_arm(arm) != "tracking":
        found.update(UNTRACKED_ENV)
    bound = arm_bound(arm)
    if bound is not None and bound.kind == "entries":
        found["CACHE_L1_MAX_ENTRIES"] = str(bound.value)
    elif bound is not None and bound.kind == "ttl":
        found["CACHE_TTL_SECONDS"] = str(bound.value)
    return found


def build_steps(
    scenario: str, rates: list[int], arms: list[str], warm: str, duration_s: int, read_rate: int = 0
) -> list[Step]:
    """Steps in run order: rising rate, the arms as given, cold before warm."""
    try:
        found = scenarios.scenario_named(scenario)
    except scenarios.UnknownScenario as error:
        raise PlanError(str(error)) from None
    for arm in arms:
        if base_arm(arm) not in found.arms:
            raise PlanError(
                f"arm {arm!r} does not belong to scenario {scenario}; "
                f"choose from {', '.join(found.arms)}"
            )
    if not found.read_rate:
        read_rate = 0
    elif read_rate < 1:
        raise PlanError(f"the {scenario} scenario needs a read rate >= 1 (--read-rate)")
    return [
        Step(scenario, arm, phase, rate, duration_s, read_rate=read_rate)
        for rate in rates
        for arm in arms
        for phase in phases_for(scenario, arm, warm)
    ]


def pool_for(rate: int, max_pool: int) -> int:
    """The driver's workers: rate x the latency budget, within MIN_POOL and `max_pool`."""
    return min(max(math.ceil(rate * LATENCY_BUDGET_S), MIN_POOL), max_pool)


# Connections left free below a gateway worker's bound for /metrics and Prometheus's scrapes.
SCRAPE_ROOM = 8


def pool_cap(max_pool: int, per_worker: int | None) -> int:
    """`max_pool`, SCRAPE_ROOM below one gateway worker's connections (None: unknown)."""
    if per_worker is None:
        return max_pool
    return max(min(max_pool, per_worker - SCRAPE_ROOM), MIN_POOL)


def repeat_steps(steps: list[Step], times: int) -> list[Step]:
    """Each rate's steps `times` over, round by round (A B A B), rates rising."""
    if times < 1:
        raise PlanError(f"repeat must be at least 1, got {times}")
    groups = [list(group) for _, group in groupby(steps, key=lambda step: step.rate)]
    return [
        replace(step, repeat=round_)
        for group in groups
        for round_ in range(1, times + 1)
        for step in group
    ]
