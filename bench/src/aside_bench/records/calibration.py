"""run.json's "machine" -> "calibration" as typed records: each target's rate and probes."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from aside_bench.records.documents import Machine, TargetSearched

# The base latency's median is of this many lowest-rate probes: one alone moved 2.5x.
BASE_PROBES = 3


@dataclass(frozen=True)
class Probe:
    """One driver run of a target's /healthz at one rate."""

    rate: int
    held: bool
    p95_ms: float | None


@dataclass(frozen=True)
class TargetFound:
    """What the search found for one target (the core's or the gateway's /healthz)."""

    what: str
    rate: int | None  # the highest rate held; None: none held
    capped: bool  # held at every rate tried: the rate is a lower bound
    out_of_time: bool
    missed_at: int | None
    probes: tuple[Probe, ...]

    @classmethod
    def from_json(cls, target: str, data: TargetSearched) -> TargetFound:
        missed = data.get("missed_at")
        probes = (
            Probe(int(one["rate"]), bool(one.get("held")), _float(one.get("p95_ms")))
            for one in data.get("probes", [])
        )
        return cls(
            what=str(data.get("what", target)),
            rate=int(data["rate"]) if data.get("rate") else None,
            capped=bool(data.get("capped")),
            out_of_time=bool(data.get("out_of_time")),
            missed_at=None if missed is None else int(missed),
            probes=tuple(probes),
        )

    def base_latency(self) -> tuple[int, float] | None:
        """The highest rate and median p95 ms of the BASE_PROBES lowest-rate probes held."""
        held = [p for p in self.probes if p.held and p.p95_ms is not None]
        lowest = sorted(held, key=lambda probe: probe.rate)[:BASE_PROBES]
        if not lowest:
            return None
        return lowest[-1].rate, statistics.median(p.p95_ms for p in lowest if p.p95_ms is not None)

    def line(self) -> str:
        """One line for reports and the console."""
        rate = f"{'>= ' if self.capped else ''}{self.rate} req/s"
        notes = []
        if self.capped:
            notes.append("nothing missed up to the highest rate tried")
        if self.out_of_time:
            below = f" below {self.missed_at} req/s" if self.missed_at else ""
            notes.append("the time allowed ran out" + below)
        tail = f" ({'; '.join(notes)})" if notes else ""
        return f"{self.what}: {rate}{tail}"


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class Calibration:
    """A run's calibration: the probes' length and p95 limit, and each target's finding."""

    probe_s: float
    p95_ms: float
    targets: dict[str, TargetFound]

    @classmethod
    def of(cls, machine: Machine) -> Calibration | None:
        """The calibration of a run's machine record; None when it was not calibrated."""
        data = machine.get("calibration")
        if not data:
            return None
        params = data.get("params", {})
        return cls(
            probe_s=float(params.get("probe_s", 0)),
            p95_ms=float(params.get("p95_ms", 0)),
            targets={
                target: TargetFound.from_json(target, found or TargetSearched())
                for target, found in data.get("targets", {}).items()
            },
        )


def _found(calibration: Calibration | None, target: str) -> TargetFound | None:
    return None if calibration is None else calibration.targets.get(target)


def rate_of(machine: Machine, target: str = "core") -> int | None:
    """A run's calibrated rate for `target`; None when it was not calibrated."""
    found = _found(Calibration.of(machine), target)
    return None if found is None else found.rate


def base_latency(machine: Machine, target: str = "core") -> tuple[int, float] | None:
    """`target`'s base latency (TargetFound.base_latency); None without one."""
    found = _found(Calibration.of(machine), target)
    return None if found is None else found.base_latency()


def capped(machine: Machine, target: str = "core") -> bool:
    """The calibration held at every rate it tried: its rate is a lower bound."""
    found = _found(Calibration.of(machine), target)
    return found is not None and found.capped


def describe(machine: Machine) -> list[str]:
    """One line per target for reports and the console."""
    calibration = Calibration.of(machine)
    return [] if calibration is None else [found.line() for found in calibration.targets.values()]
