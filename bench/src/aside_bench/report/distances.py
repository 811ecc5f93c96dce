"""A run at several network distances (arms like `cache~same-zone`): each
distance's steps on their own, their arms without it (the decision per
distance); each hop's round trip as set and as measured beside the steps'
load; and the proxy's own cost, a `loopback` step's p50 against the same
arm's direct one at the same rate. Pure, unit-tested."""

from __future__ import annotations

import statistics
from dataclasses import replace

from aside_bench.plan.steps import DIRECT, arm_distance, series_label, without_distance
from aside_bench.records.results import StepResult
from aside_bench.records.runfile import RunRecord
from aside_bench.records.steprecord import StepRecord
from aside_bench.report.tables import MISSING, Table, fmt_ms

LOOPBACK = "loopback"
# A measured round trip agrees with its setting within this share, or this many ms.
AGREE_SHARE, AGREE_MS = 0.2, 0.1


def by_distance(results: list[StepResult]) -> dict[str, list[StepResult]]:
    """The steps of each distance in the run's order, their arms without it."""
    found: dict[str, list[StepResult]] = {}
    for result in results:
        name = arm_distance(result.step.arm) or DIRECT
        step = replace(result.step, arm=without_distance(result.step.arm))
        found.setdefault(name, []).append(replace(result, step=step))
    return found


def _measured(steps: list[StepRecord], name: str, hop: str) -> list[float]:
    return [s.hops[hop]["median_ms"] for s in steps
            if s.distance == name and s.hops and hop in s.hops]  # fmt: skip


def measured_median(run: RunRecord, name: str, hop: str) -> float | None:
    """The median of a distance's steps' measured round trips on one hop."""
    values = _measured(run.steps, name, hop)
    return statistics.median(values) if values else None


def agrees(measured_ms: float, set_ms: float) -> bool:
    return abs(measured_ms - set_ms) <= max(AGREE_SHARE * set_ms, AGREE_MS)


def hop_table(run: RunRecord) -> Table | None:
    """Each distance's hops: the round trip set, the median of the steps'
    measured medians (through the proxy, so the loopback's own round trip is in
    it), what that adds over the loopback's median where a loopback ran (the
    part the distance's toxic added), and whether the setting agrees with the
    added part (with the measured one, without a loopback)."""
    asked = run.params.get("distances") or {}
    rows = []
    for name, distance in asked.items():
        for hop, setting in (distance.get("hops") or {}).items():
            values = _measured(run.steps, name, hop)
            median = statistics.median(values) if values else None
            base = None if name == LOOPBACK else measured_median(run, LOOPBACK, hop)
            added = None if median is None or base is None else median - base
            set_ms = float(setting["round_trip_ms"])
            seen = added if added is not None else median
            verdict = MISSING if seen is None else ("yes" if agrees(seen, set_ms) else "no")
            if name == LOOPBACK:  # what the others are judged against, not a setting to meet
                verdict = "reference"
            rows.append([name, hop, fmt_ms(set_ms), fmt_ms(median), fmt_ms(added),
                         str(len(values)), verdict])  # fmt: skip
    if not rows:
        return None
    headers = ["distance", "hop", "set ms", "measured ms (median)", "added over loopback ms",
               "steps", f"within {AGREE_SHARE:.0%} or {AGREE_MS:g} ms"]  # fmt: skip
    return Table("Distances: each hop's round trip, set and measured", headers, rows)


def proxy_cost_table(results: list[StepResult]) -> Table | None:
    """The proxy's own cost: each arm's p50 through the proxies with nothing
    added (loopback) against its direct step's, at each rate both ran."""
    found = by_distance(results)
    direct = {(r.step.arm, r.step.phase, r.step.rate): r for r in found.get(DIRECT, [])}
    rows = []
    for result in found.get(LOOPBACK, []):
        plain = direct.get((result.step.arm, result.step.phase, result.step.rate))
        if plain is None or plain.latency is None or result.latency is None:
            continue
        one, other = plain.latency.p50, result.latency.p50
        label = series_label(result.step.arm, result.step.phase)
        proxy = None if result.cost is None else result.cost.proxy_cpu_ms_per_request
        rows.append([label, str(result.step.rate), fmt_ms(one), fmt_ms(other), fmt_ms(other - one),
                     fmt_ms(proxy), _cores(proxy, result)])  # fmt: skip
    if not rows:
        return None
    headers = ["series", "target /s", "direct p50 ms", "loopback p50 ms", "added ms",
               "toxiproxy CPU ms/req", "toxiproxy cores"]  # fmt: skip
    return Table("The proxy's own cost: loopback through the proxies against direct", headers, rows)


def _cores(cpu_ms_per_request: float | None, result: StepResult) -> str:
    """The proxy's share of a core over the step: its CPU per request at the
    rate the step served."""
    if cpu_ms_per_request is None or not result.achieved_rps:
        return MISSING
    return f"{cpu_ms_per_request * result.achieved_rps / 1000:.2f}"
