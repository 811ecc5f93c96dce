"""The answer's sentences atop a sweep's report: goal, break-even, split, memory (decision 071)."""

from __future__ import annotations

from aside_bench.curve.points import RateCurve
from aside_bench.curve.simulate import MIN_CAPACITY
from aside_bench.records.goal import Goal, served_words
from aside_bench.records.prices import Prices, step_price
from aside_bench.records.results import StepResult
from aside_bench.report import decision, split
from aside_bench.report.decision import Series, answer_series, size_words
from aside_bench.report.split import REFERENCE_ARMS


def rate_list(rates: list[int]) -> str:
    return ", ".join(f"{rate:,}" for rate in rates)


def goal_sentence(series: Series, goal: Goal) -> str:
    """Up to which rate a series held the goal: p95 within it, drops within its tolerance."""
    held = [r.step.rate for r in series.steps if goal.held(r)]
    missed = [r for r in series.steps if not goal.held(r)]
    if not missed:
        return f"{series.label} held the goal at every rate tried (up to {max(held):,}/s)."
    first = missed[0]
    p95 = "no answer" if first.latency is None else f"p95 {first.latency.p95:,.1f} ms"
    shown = f"{p95}, {first.drop_rate:.1%} dropped or failed, {served_words(first)}"
    if not held:
        return (
            f"{series.label} missed the goal at every rate tried, from {first.step.rate:,}/s "
            f"({shown})."
        )
    if max(held) < first.step.rate:
        return (
            f"{series.label} held the goal up to {max(held):,}/s and missed it from "
            f"{first.step.rate:,}/s ({shown})."
        )
    # Not a single threshold: say which rates held and which did not.
    return (
        f"{series.label} held the goal at {rate_list(held)}/s and missed it at "
        f"{rate_list([r.step.rate for r in missed])}/s (at {first.step.rate:,}/s: {shown})."
    )


def break_even_sentence(cached: Series, uncached: Series, prices: Prices, goal: Goal) -> str | None:
    """From which rate the cached series costs less than the uncached, where both held."""
    theirs = {r.step.rate: r for r in uncached.steps}
    common = [(r, theirs[r.step.rate]) for r in cached.steps if r.step.rate in theirs]
    if not common:
        return None
    pairs = [
        (mine.step.rate, a, b)
        for mine, other in common
        if goal.held(mine)
        and goal.held(other)
        and (a := step_price(mine, prices)) is not None
        and (b := step_price(other, prices)) is not None
    ]
    if not pairs:
        return (
            f"{cached.label} and {uncached.label} held the goal at no rate both ran, so no "
            "price of theirs is compared (the decision table says which held at each rate)."
        )
    cheaper = [rate for rate, mine, other in pairs if mine < other]
    rate, mine, other = pairs[-1]
    at = f"${mine:.3f} against ${other:.3f} per million requests at {rate:,}/s"
    where = "at every rate tried"
    if len(pairs) != len(common):
        where = f"at every rate both held the goal ({rate_list([p[0] for p in pairs])}/s)"
    if not cheaper:
        return f"{cached.label} cost more than {uncached.label} {where} ({at})."
    # The break-even: the first rate from which every rate both held is cheaper.
    first = len(pairs)
    while first > 0 and pairs[first - 1][1] < pairs[first - 1][2]:
        first -= 1
    if first == len(pairs):
        return (
            f"{cached.label} cost less than {uncached.label} at {rate_list(cheaper)}/s "
            f"but not at the highest rate both held the goal ({at})."
        )
    if first == 0:
        return f"{cached.label} cost less than {uncached.label} {where} ({at})."
    return (
        f"{cached.label} cost less than {uncached.label} from {pairs[first][0]:,}/s on, "
        f"of the rates both held the goal ({at})."
    )


def memory_sentences(curves: list[RateCurve]) -> list[str]:
    """What each Redis bound held and hit, against the simulated LRU and Belady."""
    out = []
    # The highest rate's: the longest stream, so the most a bound can matter.
    for curve in curves[-1:]:
        for point in curve.measured:
            bound = "Redis with its own bound"
            if point.maxmemory is not None:
                bound = f"{size_words(point.maxmemory)} of Redis"
            if point.keys < MIN_CAPACITY:
                clients = ""
                if point.clients_memory is not None:
                    clients = (
                        f": its clients' buffers took {size_words(point.clients_memory)} of it"
                    )
                out.append(
                    f"At {curve.rate:,}/s, {bound} held almost no key during the step{clients}; "
                    f"it answered {point.hit_rate:.0%} of reads."
                )
                continue
            lru, belady = point.simulated.get("LRU"), point.simulated.get("Belady")
            size = "that holds every key (it never filled)" if point.never_full else "of that size"
            sim = ""
            if lru is not None and belady is not None:
                sim = f" (a simulated LRU {size}: {lru:.0%}; Belady, the bound: {belady:.0%})"
            out.append(
                f"At {curve.rate:,}/s, {bound} held {point.keys:,} keys and answered "
                f"{point.hit_rate:.0%} of reads{sim}."
            )
    return out


def index_sentence(series: list[Series], goal: Goal, seed_indexed: bool) -> str:
    indexed = next((s for s in series if s.arm == "index"), None)
    if indexed is not None:
        return "An email index alone: " + goal_sentence(indexed, goal)
    if seed_indexed:
        return "The table has an email index, but no step ran without the cache."
    return (
        "The table has no email index: seed it with one (make seed INDEX=1) and run the "
        "same command to see what an index alone holds."
    )


def answer(
    results: list[StepResult],
    curves: list[RateCurve],
    prices: Prices,
    goal: Goal,
    seed_indexed: bool,
) -> list[str]:
    """The report's first lines under the decision table, series by series."""
    series = answer_series(results)
    if not series:
        return []
    lines = [
        f"Service goal: {goal.words()} (this machine, the load driver sharing its cores); "
        "a cost per million requests is a price of that service only where the step held "
        "it, and only such prices are compared."
    ]
    lines += [goal_sentence(one, goal) for one in series]
    uncached = next((s for s in series if s.arm in REFERENCE_ARMS), None)
    if uncached is not None:
        cached = [one for one in series if one.arm not in REFERENCE_ARMS]
        evens = (break_even_sentence(one, uncached, prices, goal) for one in cached)
        lines += [sentence for sentence in evens if sentence is not None]
        lines += split.answer_lines(results, prices, goal)
    lines += decision.smallest_cache_sentences(decision.decide(results, goal, prices, curves))
    if uncached is not None:
        lines.append(
            f"Prices: {prices.words()} (ASIDE_PRICE_VCPU_HOUR, ASIDE_PRICE_GIB_HOUR); CPU of "
            "the gateway, PostgreSQL and Redis per request, memory of the gateway and of Redis "
            "for the cached arms."
        )
    lines += memory_sentences(curves)
    lines.append(index_sentence(series, goal, seed_indexed))
    return lines
