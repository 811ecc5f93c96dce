"""Was the load generator a step's limit: its CPU over its limit, or its pool full below budget?"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from aside_bench.plan.steps import LATENCY_BUDGET_S
from aside_bench.records.steprecord import StepRecord

# The driver's share of the cores before its timing is in doubt (decision 019).
DRIVER_CPU_SHARE_LIMIT = 0.4


# A miss while the host stole more than this says more of the host than of the
# server: the searches run it again (ceiling.search.run_again).
NOISY_STEAL = 0.08


def noisy(steal: float | None) -> bool:
    """Whether the host took more than NOISY_STEAL of the cores over a step."""
    return steal is not None and steal > NOISY_STEAL


# A reading of the machine's ticks: (busy, total, steal), stack.procs.MachineTicks.
Ticks = Sequence[int]


def _shares(before: Ticks | None, after: Ticks | None) -> tuple[float, float] | None:
    """(busy, steal) between two readings of the machine's ticks."""
    if not before or not after or after[1] <= before[1]:
        return None
    total = after[1] - before[1]
    return (after[0] - before[0]) / total, (after[2] - before[2]) / total


def busy_share(before: Ticks | None, after: Ticks | None) -> float | None:
    """The machine's busy share (the host's steal included) between two readings."""
    shares = _shares(before, after)
    return None if shares is None else shares[0]


def steal_share(before: Ticks | None, after: Ticks | None) -> float | None:
    """The host's steal between two readings, as a share of the machine's ticks."""
    shares = _shares(before, after)
    return None if shares is None else shares[1]


def cpu_limit_cores(nproc: int, share: float = DRIVER_CPU_SHARE_LIMIT) -> float:
    """The driver's CPU limit on a machine, in cores."""
    return round(share * max(nproc, 1), 3)


@dataclass(frozen=True)
class LoadGen:
    """A step's load generator figures; a field is None when it was not read."""

    cpu_s: float | None  # the driver's utime + stime from its start to its exit
    duration_s: float  # the step's load
    cpu_limit_cores: float | None
    pool: int  # the workers the step allowed
    pool_budget: int  # rate x the latency budget: what the step should have been allowed
    inflight_peak: int | None  # the most requests in flight at once

    @property
    def cpu_cores(self) -> float | None:
        return None if self.cpu_s is None or self.duration_s <= 0 else self.cpu_s / self.duration_s

    def cpu_ms_per_request(self, requests: float) -> float | None:
        return None if self.cpu_s is None or requests <= 0 else self.cpu_s * 1000 / requests

    @property
    def out_of_pool(self) -> bool:
        """Every worker was busy, and the pool was below the budget."""
        peak = self.inflight_peak
        return peak is not None and peak >= self.pool and self.pool < self.pool_budget

    @property
    def cpu_bound(self) -> bool:
        cores, limit = self.cpu_cores, self.cpu_limit_cores
        return cores is not None and limit is not None and cores > limit

    @property
    def reasons(self) -> list[str]:
        """Why the step was load generator saturated; empty when it was not."""
        found = []
        if self.cpu_bound:
            found.append(f"driver used {self.cpu_cores:.2f} cores > {self.cpu_limit_cores:g}")
        if self.out_of_pool:
            found.append(
                f"driver's pool ran out: all {self.pool} workers busy, "
                f"fewer than the {self.pool_budget} a 1 s latency budget needs"
            )
        return found

    @property
    def saturated(self) -> bool:
        return bool(self.reasons)


def pool_budget(rate: int) -> int:
    return math.ceil(rate * LATENCY_BUDGET_S)


def loadgen_of(record: StepRecord, inflight_peak: float | None) -> LoadGen | None:
    """A run.json step's load generator figures; None without the driver's CPU."""
    driver = record.driver
    if not driver or record.pool is None:
        return None
    return LoadGen(
        cpu_s=driver.get("cpu_s"),
        duration_s=float(record.duration_s),
        cpu_limit_cores=driver.get("cpu_limit_cores"),
        pool=int(record.pool),
        pool_budget=pool_budget(int(record.rate)),
        inflight_peak=None if inflight_peak is None else int(inflight_peak),
    )


def worst(gens: list[LoadGen | None]) -> LoadGen | None:
    """The run of a repeated step closest to saturating the driver."""
    known = [gen for gen in gens if gen is not None]
    if not known:
        return None
    return max(known, key=lambda gen: (gen.saturated, gen.cpu_cores or 0.0, gen.inflight_peak or 0))
