"""The machine's meter: the driver's CPU per request (docs/decisions/040-the-machines-meter.md)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from aside_bench.records.runfile import StepFigures, StepKey

# A step dropping more than this share does not read the machine's speed.
MAX_DROPS = 0.01


def driver_cost(one: StepFigures) -> float | None:
    """The driver's CPU s per request of a repeat that held its rate; None otherwise."""
    cores, achieved = one.driver_cpu_cores, one.achieved
    if not cores or not achieved or cores <= 0 or achieved <= 0 or (one.drops or 0) > MAX_DROPS:
        return None
    return float(cores) / float(achieved)


def _costs_by_step(figures: list[StepFigures]) -> dict[StepKey, list[float]]:
    """Every step's costs, for the steps whose every repeat has one."""
    found: dict[StepKey, list[float | None]] = {}
    for one in figures:
        found.setdefault(one.key, []).append(driver_cost(one))
    return {
        key: [cost for cost in costs if cost is not None]
        for key, costs in found.items()
        if all(cost is not None for cost in costs)
    }


def driver_costs(figures: list[StepFigures]) -> dict[StepKey, float]:
    """Each step's median driver cost per request, for steps held in every repeat."""
    return {key: statistics.median(costs) for key, costs in _costs_by_step(figures).items()}


def step_speeds(figures_a: list[StepFigures], figures_b: list[StepFigures]) -> dict[StepKey, float]:
    """A's driver cost per request over B's for each step both held (above 1: B faster)."""
    costs_a, costs_b = driver_costs(figures_a), driver_costs(figures_b)
    return {key: costs_a[key] / costs_b[key] for key in costs_a.keys() & costs_b.keys()}


@dataclass(frozen=True)
class Drift:
    """How far the machine's speed moved between the repeats of one step."""

    key: StepKey
    ratio: float  # the slowest repeat's cost over the fastest's
    low: float  # seconds of driver CPU per request, fastest and slowest repeat
    high: float


def widest_drift(figures: list[StepFigures]) -> Drift | None:
    """The held repeated step whose repeats' driver costs lay furthest apart."""
    drifts = [
        Drift(key, max(costs) / min(costs), min(costs), max(costs))
        for key, costs in _costs_by_step(figures).items()
        if len(costs) > 1
    ]
    return max(drifts, key=lambda drift: drift.ratio, default=None)
