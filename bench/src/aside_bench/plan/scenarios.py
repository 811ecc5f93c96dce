"""Every scenario `run` knows, the core's and the plug-ins' (entry points), with their hooks."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from aside_bench.plan import arms, compute
from aside_bench.plan.shape import LoadShape

ENTRY_POINTS = "aside_bench.scenarios"

# A report writer: (run, results, out_dir) -> its tables (report/sweep.write_sweep's form).
Writer = Callable[..., Any]
# The driver's variables of one step: (step, shape, max_pool) -> its environment.
Variables = Callable[[Any, LoadShape, int], dict[str, str]]


@dataclass(frozen=True)
class Hooks:
    """What a scenario adds to the sweep, each None for none."""

    add_options: Callable[[argparse.ArgumentParser], None] | None = None
    check: Callable[[argparse.Namespace], None] | None = None
    # (args, shape, settings, seed) -> its own keys of run.json's params, free-form JSON
    run_params: Callable[..., dict[str, Any]] | None = None
    # (settings, data_dir, step) -> a warm step's record, with its `prep` line
    prepare: Callable[..., dict[str, int | float | str]] | None = None
    writer: Callable[..., Writer] | None = None  # (settings) -> the report's writer
    run: Callable[..., int] | None = None  # (args, settings) -> exit status: the whole run


@dataclass(frozen=True)
class Scenario:
    name: str
    arms: tuple[str, ...]
    default_arms: tuple[str, ...]
    default_rates: tuple[int, ...]
    variables: Variables
    lowest_rate: int = 1  # 0: the scenario's own work beside fixed reads
    dist: bool = False  # the reads draw their keys by popularity (--dist)
    trace: bool = False  # the reads may replay a trace
    bounded: bool = False  # its arms take --cache-memory, --l1-entries, --cache-ttl
    indexed: bool = False  # the uncached arm matches the table's email index
    tiered: tuple[str, ...] = ()  # the arms with a cold and a warm phase
    phase: str | None = None  # every step's one phase
    read_rate: bool = False  # its steps carry a fixed read rate beside their own (--read-rate)
    distances: bool = False  # its arms run at network distances (--distance)
    beside: str | None = None  # the driver's second scenario, its figures joining the step's
    hooks: Hooks = field(default_factory=Hooks)

    def phases(self, arm: str, warm: str) -> list[str]:
        """The phases a step of `arm` runs in: cold and warm (or one) for a tiered arm."""
        if self.phase is not None:
            return [self.phase]
        if arms.base_arm(arm) not in self.tiered:
            return ["none"]
        return ["cold", "warm"] if warm == "both" else [warm]


class UnknownScenario(ValueError):
    """No scenario of that name is registered."""


# ---- the core's scenarios --------------------------------------------------------
def _cache_variables(step: Any, shape: LoadShape, max_pool: int) -> dict[str, str]:
    return {
        "CACHE": arms.cache_param(step.arm) or "off",
        "HOT_SHARE": str(shape.hot_share),
        "COLD_SAMPLE": str(shape.cold_sample),
    }


def popularity(shape: LoadShape, rate: int) -> dict[str, str]:
    """The keys' popularity at `rate`: a trace (timed: scaled), DIST, or the hot set."""
    if shape.trace is not None:
        found = {"TRACE": str(shape.trace.resolve())}
        if shape.trace_rate and rate > 0:
            found["TRACE_SPEED"] = f"{rate / shape.trace_rate:.6g}"
        return found
    if shape.dist != "hotset":
        return {"DIST": shape.dist, "ALPHA": str(shape.alpha), "KEYS": str(shape.keys)}
    return {}


def _read_variables(step: Any, shape: LoadShape, max_pool: int) -> dict[str, str]:
    return {**_cache_variables(step, shape, max_pool), **popularity(shape, step.rate)}


def _mixed_variables(step: Any, shape: LoadShape, max_pool: int) -> dict[str, str]:
    return {
        **_cache_variables(step, shape, max_pool),
        "WRITE_SHARE": str(shape.write_share),
        "STALE_PER_MIN": str(shape.stale_per_min),
        "STALE_READS_AFTER": str(shape.stale_reads_after),
    }


def _compute_variables(step: Any, shape: LoadShape, max_pool: int) -> dict[str, str]:
    work = (shape.complexity, shape.pbkdf2_iterations, shape.bcrypt_cost)
    return compute.compute_variables(f"{step.arm}-checksum", work)


def _core() -> tuple[Scenario, ...]:
    cached = arms.CACHE_ARMS
    rates = (30, 50, 75, 100, 150, 300, 500, 1000)
    return (
        # The answer splits the cache's saving between the misses' coalescing
        # and the hits: every default read sweep measures the three.
        Scenario("read", cached, ("nocache", "coalesce", "cache"), rates, _read_variables,
                 dist=True, trace=True, bounded=True, indexed=True, distances=True,
                 tiered=arms.TIERED_ARMS),
        Scenario("mixed", cached, ("nocache", "cache"), rates, _mixed_variables,
                 indexed=True, distances=True, tiered=arms.TIERED_ARMS),
        Scenario("compute", compute.ENGINES, compute.ENGINES, (1, 2, 5, 10, 20),
                 _compute_variables),
    )  # fmt: skip


@cache
def registry() -> dict[str, Scenario]:
    """Every scenario by name: the core's, then the plug-ins' (no name taken twice)."""
    found = {scenario.name: scenario for scenario in _core()}
    for entry in entry_points(group=ENTRY_POINTS):
        scenario = entry.load()
        if not isinstance(scenario, Scenario):
            raise TypeError(f"entry point {entry.name} of {ENTRY_POINTS} names no Scenario")
        if scenario.name in found:
            raise ValueError(f"two scenarios are named {scenario.name!r}")
        found[scenario.name] = scenario
    return found


def names() -> tuple[str, ...]:
    return tuple(registry())


def scenario_named(name: str) -> Scenario:
    found = registry().get(name)
    if found is None:
        raise UnknownScenario(f"scenario must be one of {', '.join(names())}, got {name!r}")
    return found


def scenario_of(name: str) -> Scenario | None:
    """The registered scenario of a step; None for steps no sweep plans."""
    return registry().get(name)
