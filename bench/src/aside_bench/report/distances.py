"""A run at several network distances: its hops set and measured, the proxy's cost, its answer."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from itertools import combinations, pairwise

from aside_bench.plan.steps import DIRECT, arm_distance, series_label, without_distance
from aside_bench.records.goal import Goal
from aside_bench.records.prices import Prices, step_price
from aside_bench.records.results import StepResult
from aside_bench.records.runfile import RunRecord
from aside_bench.records.steprecord import StepRecord
from aside_bench.report.answer import rate_list
from aside_bench.report.decision import Series, answer_series, decide
from aside_bench.report.tables import MISSING, Table, fmt_ms, latency_of

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
    return [
        s.hops[hop]["median_ms"] for s in steps if s.distance == name and s.hops and hop in s.hops
    ]


def measured_median(run: RunRecord, name: str, hop: str) -> float | None:
    """The median of a distance's steps' measured round trips on one hop."""
    values = _measured(run.steps, name, hop)
    return statistics.median(values) if values else None


def agrees(measured_ms: float, set_ms: float) -> bool:
    return abs(measured_ms - set_ms) <= max(AGREE_SHARE * set_ms, AGREE_MS)


def hop_table(run: RunRecord) -> Table | None:
    """Each distance's hops: set, measured, added over the loopback, and whether they agree."""
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
    """Each arm's p50 through the proxies (loopback) against its direct step's."""
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
    """The proxy's share of a core: its CPU per request at the rate served."""
    if cpu_ms_per_request is None or not result.achieved_rps:
        return MISSING
    return f"{cpu_ms_per_request * result.achieved_rps / 1000:.2f}"


# A p95 or a price within this share of the other's is a tie, not a ranking.
TIE_SHARE = 0.10
READ_HOPS = (("redis", "Redis"), ("postgres", "PostgreSQL"))


def _names(labels: list[str]) -> str:
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def hop_words(run: RunRecord, name: str) -> str:
    """A distance's read hops as set and as measured, or that no proxy was in the path."""
    if name == DIRECT:
        return "no proxy in the path"
    asked = (run.params.get("distances") or {}).get(name, {}).get("hops") or {}
    parts = []
    for hop, title in READ_HOPS:
        if (setting := asked.get(hop)) is None:
            continue
        median = measured_median(run, name, hop)
        seen = "not measured" if median is None else f"measured {median:.2f} ms"
        parts.append(f"{title} {float(setting['round_trip_ms']):g} ms set, {seen}")
    return "; ".join(parts) or "no hop set"


def held_line(
    run: RunRecord, name: str, steps: list[StepResult], goal: Goal, prices: Prices
) -> str:
    """What each arm held at one distance, and the cheapest that held at each rate."""
    held, none = [], []
    for one in answer_series(steps):
        rates = [r.step.rate for r in one.steps if goal.held(r)]
        if rates:
            held.append(f"{one.label} at {rate_list(rates)}/s")
        else:
            none.append(one.label)
    parts = [("held the goal: " + "; ".join(held)) if held else "no arm held the goal"]
    if none and held:
        parts.append(f"{_names(none)} at no rate tried")
    cheapest = []
    for one in decide(steps, goal, prices).rates:
        best = one.cheapest
        found = "none held" if best is None else f"{best.label}, ${best.price:.3f}/M"
        cheapest.append(f"{one.rate:,}/s {found}")
    return (
        f"At {name} ({hop_words(run, name)}): {'; '.join(parts)}. The cheapest that held: "
        f"{'; '.join(cheapest)}."
    )


@dataclass(frozen=True)
class Verdict:
    """Two arms at one distance on one measure, over the rates both held the goal."""

    distance: str
    winner: str | None  # None: even, or each won at some rate
    rates: list[int]
    split: bool


def _measure(result: StepResult, metric: str, prices: Prices) -> float | None:
    if metric == "p95":
        return latency_of(result, "p95")
    return step_price(result, prices)


def _verdict(
    name: str, one: Series, other: Series, metric: str, goal: Goal, prices: Prices
) -> Verdict | None:
    theirs = {r.step.rate: r for r in other.steps if goal.held(r)}
    wins: dict[str, list[int]] = {one.label: [], other.label: []}
    rates = []
    for mine in (r for r in one.steps if goal.held(r) and r.step.rate in theirs):
        a, b = _measure(mine, metric, prices), _measure(theirs[mine.step.rate], metric, prices)
        if a is None or b is None:
            continue
        rates.append(mine.step.rate)
        if abs(a - b) > TIE_SHARE * max(a, b):
            wins[one.label if a < b else other.label].append(mine.step.rate)
    if not rates:
        return None
    winners = [label for label, won in wins.items() if won]
    return Verdict(name, winners[0] if len(winners) == 1 else None, rates, len(winners) > 1)


def _verdict_words(verdict: Verdict) -> str:
    if verdict.winner is not None:
        return f"{verdict.winner} at {verdict.distance}"
    return f"{'each at some rate' if verdict.split else 'even'} at {verdict.distance}"


def ranking_line(
    found: dict[str, list[Series]], a: str, b: str, metric: str, goal: Goal, prices: Prices
) -> str | None:
    """Which of two arms had the lower p95 (or price) at each distance, and where that changes."""
    verdicts = []
    for name, series in found.items():
        one = next((s for s in series if s.label == a), None)
        other = next((s for s in series if s.label == b), None)
        if one is not None and other is not None:
            verdict = _verdict(name, one, other, metric, goal, prices)
            if verdict is not None:
                verdicts.append(verdict)
    if len(verdicts) < 2:
        return None
    measure = "the lower p95" if metric == "p95" else "the lower price per million requests"
    winners = {v.winner for v in verdicts}
    if len(winners) == 1 and None not in winners:
        return (
            f"{measure.capitalize()} of {a} and {b}: {verdicts[0].winner} at every distance "
            f"where both held the goal ({_names([v.distance for v in verdicts])}); no change."
        )
    # A change: a winner other than the last distance's winner (an even one changes nothing).
    decided = [v for v in verdicts if v.winner is not None]
    changes = [
        f"{before.distance} to {after.distance}"
        for before, after in pairwise(decided)
        if before.winner != after.winner
    ]
    turn = "no distance turns the ranking"
    if changes:
        turn = f"the ranking changes from {', and from '.join(changes)}"
    return (
        f"{measure.capitalize()} of {a} and {b} (within {TIE_SHARE:.0%}: even), where both "
        f"held the goal: {'; '.join(_verdict_words(v) for v in verdicts)}: {turn}."
    )


def distance_answer(
    run: RunRecord, results: list[StepResult], prices: Prices, goal: Goal
) -> list[str]:
    """The answer's lines of a run at several distances."""
    steps = by_distance(results)
    lines = [
        f"Service goal: {goal.words()} (this machine, the load driver and the proxies "
        "sharing its cores); a price is compared only between steps that held it."
    ]
    lines += [held_line(run, name, found, goal, prices) for name, found in steps.items()]
    series = {name: answer_series(found) for name, found in steps.items()}
    labels = list(dict.fromkeys(s.label for found in series.values() for s in found))
    for a, b in combinations(labels, 2):
        for metric in ("p95", "price"):
            line = ranking_line(series, a, b, metric, goal, prices)
            if line is not None:
                lines.append(line)
    lines.append(f"Prices: {prices.words()} (ASIDE_PRICE_VCPU_HOUR, ASIDE_PRICE_GIB_HOUR).")
    return lines
