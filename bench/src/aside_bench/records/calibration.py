"""What a run's calibration found (run.json's "machine" -> "calibration"): the
rate each target held, the machine's base latency, and a line per target for
the reports. Pure readers of the record trust/calibrate.py writes."""

from __future__ import annotations

import statistics
from typing import Any


def _found(machine: dict[str, Any], target: str) -> dict[str, Any]:
    """What a run's calibration found for `target` ({} when not calibrated)."""
    return (machine.get("calibration") or {}).get("targets", {}).get(target) or {}


def rate_of(machine: dict[str, Any], target: str = "core") -> int | None:
    """A run's calibrated rate for `target`; None when it was not calibrated."""
    found = _found(machine, target)
    return int(found["rate"]) if found.get("rate") else None


# How many of the lowest-rate probes the base latency is the median of: one 3 s
# probe's p95 alone moved 2.5x between runs where the runs' own figures agreed.
BASE_PROBES = 3


def base_latency(machine: dict[str, Any], target: str = "core") -> tuple[int, float] | None:
    """(the highest rate used, median p95 ms) of the calibration's BASE_PROBES
    lowest-rate probes of `target` that held: the machine's latency for a
    trivial request at low load, which moves between runs where the rate found
    at the knee does not; None without one."""
    probes = _found(machine, target).get("probes", [])
    held = [p for p in probes if p.get("held") and p.get("p95_ms") is not None]
    lowest = sorted(held, key=lambda probe: probe["rate"])[:BASE_PROBES]
    if not lowest:
        return None
    return int(lowest[-1]["rate"]), statistics.median(float(p["p95_ms"]) for p in lowest)


def capped(machine: dict[str, Any], target: str = "core") -> bool:
    """The calibration held at every rate it tried: its rate is a lower bound."""
    return bool(_found(machine, target).get("capped"))


def describe(machine: dict[str, Any]) -> list[str]:
    """One line per target for reports and the console."""
    calibration = machine.get("calibration")
    if not calibration:
        return []
    lines = []
    for target, found in calibration.get("targets", {}).items():
        rate = f"{'>= ' if found.get('capped') else ''}{found.get('rate')} req/s"
        notes = []
        if found.get("capped"):
            notes.append("nothing missed up to the highest rate tried")
        if found.get("out_of_time"):
            missed = found.get("missed_at")
            notes.append("the time allowed ran out" + (f" below {missed} req/s" if missed else ""))
        tail = f" ({'; '.join(notes)})" if notes else ""
        lines.append(f"{found.get('what', target)}: {rate}{tail}")
    return lines
