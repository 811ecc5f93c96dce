"""Every scenario `aside-bench run` knows, in one registry: the core's own
(read, mixed, compute) and each plug-in package's, found through the
entry-point group `aside_bench.scenarios` (an entry names a Scenario). What a
scenario does beyond the sweep's steps is a field or a hook of its record, so
the sweep, the driver's variables and the report name none of them."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from aside_bench.plan import compute
from aside_bench.plan.shape import LoadShape

ENTRY_POINTS = "aside_bench.scenarios"

# A report writer: (run, results, out_dir) -> its tables (report/sweep.write_sweep's form).
Writer = Callable[..., Any]
# The driver's variables of one step: (step, shape, max_pool) -> its environment.
Variables = Callable[[Any, LoadShape, int], dict[str, str]]


@dataclass(frozen=True)
class Hooks:
    """What a scenario adds to the sweep's own handling, each None for none.

    add_options(parser): its options of `run`; check(args): its parameters
    checked before anything is touched; run_params(args, shape, settings, seed):
    its entries of run.json's params; prepare(settings, data_dir, step): a warm
    step's own preparation, a record of it with a `prep` line; writer(settings):
    its report writer; run(args, settings): a scenario that runs its own steps."""

    add_options: Callable[[argparse.ArgumentParser], None] | None = None
    check: Callable[[argparse.Namespace], None] | None = None
    run_params: Callable[..., dict[str, Any]] | None = None
    prepare: Callable[..., dict[str, Any]] | None = None
    writer: Callable[..., Writer] | None = None
    run: Callable[..., int] | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    arms: tuple[str, ...]
    default_arms: tuple[str, ...]
    default_rates: tuple[int, ...]
    variables: Variables
    # The lowest step rate (0: the scenario's own work beside fixed reads).
    lowest_rate: int = 1
    # The reads draw their keys by popularity (--dist), and may replay a trace.
    dist: bool = False
    trace: bool = False
    # Its arms take bounds (--cache-memory, --l1-entries, --cache-ttl) and
    # match the uncached arm to the table's email index.
    bounded: bool = False
    indexed: bool = False
    # The arms with a cold and a warm phase; `phase`: every step's one phase.
    tiered: tuple[str, ...] = ()
    phase: str | None = None
    # Its steps carry a fixed read rate beside their own (--read-rate).
    read_rate: bool = False
    # Its arms run at network distances (--distance: each hop through a proxy).
    distances: bool = False
    # The driver's second scenario in a step, whose figures join the step's.
    beside: str | None = None
    hooks: Hooks = field(default_factory=Hooks)

    def phases(self, arm: str, warm: str) -> list[str]:
        """The cache states a step of `arm` runs in: cold and warm (or the one
        asked) for an arm reading through a tier, else none."""
        if self.phase is not None:
            return [self.phase]
        if re.split(r"[@~]", arm, maxsplit=1)[0] not in self.tiered:
            return ["none"]
        return ["cold", "warm"] if warm == "both" else [warm]


class UnknownScenario(ValueError):
    """No scenario of that name is registered."""


# ---- the core's scenarios --------------------------------------------------------
def _cache_variables(step: Any, shape: LoadShape, max_pool: int) -> dict[str, str]:
    from aside_bench.plan.steps import cache_param  # the arms' table

    return {
        "CACHE": cache_param(step.arm) or "off",
        "HOT_SHARE": str(shape.hot_share),
        "COLD_SAMPLE": str(shape.cold_sample),
    }


def popularity(shape: LoadShape, rate: int) -> dict[str, str]:
    """The keys' popularity of a keyed scenario at `rate`: a trace (timed: its
    timestamps scaled to the rate), or DIST; nothing for the hot set."""
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
    from aside_bench.plan import steps  # the arms' tables live beside the steps

    cached = steps.CACHE_ARMS
    rates = (30, 50, 75, 100, 150, 300, 500, 1000)
    return (
        # The answer splits the cache's saving between the misses' coalescing
        # and the hits: every default read sweep measures the three.
        Scenario("read", cached, ("nocache", "coalesce", "cache"), rates, _read_variables,
                 dist=True, trace=True, bounded=True, indexed=True, distances=True,
                 tiered=steps.TIERED_ARMS),
        Scenario("mixed", cached, ("nocache", "cache"), rates, _mixed_variables,
                 indexed=True, distances=True, tiered=steps.TIERED_ARMS),
        Scenario("compute", compute.ENGINES, compute.ENGINES, (1, 2, 5, 10, 20),
                 _compute_variables),
    )  # fmt: skip


@cache
def registry() -> dict[str, Scenario]:
    """Every scenario by name: the core's first, then the plug-ins' in their
    entry points' order; a plug-in may not take a core scenario's name."""
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
    """The registered scenario of a step; None for the steps no sweep plans
    (the ceiling's, the calibration's, a tool's)."""
    return registry().get(name)
