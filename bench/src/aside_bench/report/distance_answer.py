"""The answer of a run at several network distances: for each distance, what
each arm held of the service goal (records/goal.py) and the cheapest that held
at each rate, with the Redis and PostgreSQL round trips set and measured; then,
for each two arms, which had the lower p95 and the lower price at each distance
where both held the goal, and between which distances that ranking changes.
Pure, unit-tested."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations, pairwise

from aside_bench.plan.steps import DIRECT
from aside_bench.records.goal import Goal
from aside_bench.records.prices import Prices, step_price
from aside_bench.records.results import StepResult
from aside_bench.records.runfile import RunRecord
from aside_bench.report.answer import rate_list
from aside_bench.report.decision import Series, answer_series, decide
from aside_bench.report.distances import by_distance, measured_median

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
        setting = asked.get(hop)
        if setting is None:
            continue
        median = measured_median(run, name, hop)
        seen = "not measured" if median is None else f"measured {median:.2f} ms"
        parts.append(f"{title} {float(setting['round_trip_ms']):g} ms set, {seen}")
    return "; ".join(parts) or "no hop set"


def held_line(run: RunRecord, name: str, steps: list[StepResult], goal: Goal,
              prices: Prices) -> str:  # fmt: skip
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
        return None if result.latency is None else result.latency.p95
    return step_price(result, prices)


def _verdict(name: str, one: Series, other: Series, metric: str, goal: Goal,
             prices: Prices) -> Verdict | None:  # fmt: skip
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


def ranking_line(found: dict[str, list[Series]], a: str, b: str, metric: str, goal: Goal,
                 prices: Prices) -> str | None:  # fmt: skip
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
    # A change is a distance whose winner is the other arm than the last one
    # that had a winner: an even distance between them changes nothing.
    decided = [v for v in verdicts if v.winner is not None]
    changes = [
        f"{before.distance} to {after.distance}"
        for before, after in pairwise(decided)
        if before.winner != after.winner
    ]
    turn = (
        f"the ranking changes from {', and from '.join(changes)}"
        if changes
        else "no distance turns the ranking"
    )
    return (
        f"{measure.capitalize()} of {a} and {b} (within {TIE_SHARE:.0%}: even), where both "
        f"held the goal: {'; '.join(_verdict_words(v) for v in verdicts)}: {turn}."
    )


def distance_answer(run: RunRecord, results: list[StepResult], prices: Prices,
                    goal: Goal) -> list[str]:  # fmt: skip
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
