"""Was the load generator the limit of a step? k6's own CPU over the step and
the VUs it used against those it was allowed.

A step is "load generator saturated" when k6 used more CPU than its limit
(docs/decisions.md says why that share), or when every VU it was allowed was
busy while --max-vus held that allowance below the rate x 1 s latency budget
the bench promises every step (plan.LATENCY_BUDGET_S). VUs running out at the
budget itself mean the stack was more than a second behind: that is the
server's miss, which the drop rate shows, not the load generator's.

Pure functions only, so every rule here has a unit test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .plan import LATENCY_BUDGET_S

# k6 may use up to this share of the machine's cores before its own timing is
# in doubt (docs/decisions.md, "When the load generator is the limit").
K6_CPU_SHARE_LIMIT = 0.4


def cpu_limit_cores(nproc: int, share: float = K6_CPU_SHARE_LIMIT) -> float:
    """The k6 CPU limit of a machine, in cores."""
    return round(share * max(nproc, 1), 3)


@dataclass(frozen=True)
class LoadGen:
    """A step's load generator figures; a field is None when it was not read."""

    cpu_s: float | None  # k6's utime + stime from its start to its exit
    duration_s: float  # the step's load
    cpu_limit_cores: float | None
    vus_cap: int  # maxVUs the step allowed
    vus_budget: int  # rate x the latency budget: what the step should have been allowed
    vus_peak: int | None  # the most VUs busy at once (k6's `vus`)
    vus_allocated: int | None  # the most VUs k6 had started (k6's `vus_max`)

    @property
    def cpu_cores(self) -> float | None:
        if self.cpu_s is None or self.duration_s <= 0:
            return None
        return self.cpu_s / self.duration_s

    def cpu_ms_per_request(self, requests: float) -> float | None:
        if self.cpu_s is None or requests <= 0:
            return None
        return self.cpu_s * 1000 / requests

    @property
    def out_of_vus(self) -> bool:
        """Every allowed VU was busy, and the allowance was below the budget."""
        return (
            self.vus_peak is not None
            and self.vus_peak >= self.vus_cap
            and self.vus_cap < self.vus_budget
        )

    @property
    def cpu_bound(self) -> bool:
        cores = self.cpu_cores
        return (
            cores is not None
            and self.cpu_limit_cores is not None
            and (cores > self.cpu_limit_cores)
        )

    @property
    def reasons(self) -> list[str]:
        """Why the step was load generator saturated; empty when it was not."""
        found = []
        if self.cpu_bound:
            found.append(f"k6 used {self.cpu_cores:.2f} cores > {self.cpu_limit_cores:g}")
        if self.out_of_vus:
            found.append(
                f"k6 ran out of VUs: all {self.vus_cap} busy, "
                f"fewer than the {self.vus_budget} a 1 s latency budget needs"
            )
        return found

    @property
    def saturated(self) -> bool:
        return bool(self.reasons)


def vus_budget(rate: int) -> int:
    return math.ceil(rate * LATENCY_BUDGET_S)


def loadgen_of(
    record: dict[str, Any], vus_peak: float | None, vus_allocated: float | None
) -> LoadGen | None:
    """A run.json step's load generator figures with k6's VU gauges from InfluxDB;
    None for a step recorded before k6's CPU was (older runs)."""
    k6 = record.get("k6")
    if not k6:
        return None
    return LoadGen(
        cpu_s=k6.get("cpu_s"),
        duration_s=float(record["duration_s"]),
        cpu_limit_cores=k6.get("cpu_limit_cores"),
        vus_cap=int(record["vus"][1]),
        vus_budget=vus_budget(int(record["rate"])),
        vus_peak=None if vus_peak is None else int(vus_peak),
        vus_allocated=None if vus_allocated is None else int(vus_allocated),
    )


def worst(gens: list[LoadGen | None]) -> LoadGen | None:
    """The run of a repeated step that came closest to saturating k6: the
    most CPU, then the most VUs busy."""
    known = [gen for gen in gens if gen is not None]
    if not known:
        return None
    return max(known, key=lambda gen: (gen.saturated, gen.cpu_cores or 0.0, gen.vus_peak or 0))
