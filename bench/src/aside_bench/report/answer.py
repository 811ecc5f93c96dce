"""The answer at the top of a sweep's report, in a few sentences computed from
the run: from which rate the uncached arm misses the latency goal, whether and
from which rate each cached arm costs less per million requests than the
uncached one (the break-even), what hit rate each cache memory bought, and what
an index alone held. Pure: every sentence has a unit test on fixed inputs."""

from __future__ import annotations

from dataclasses import dataclass

from aside_bench.curve.points import RateCurve
from aside_bench.curve.simulate import MIN_CAPACITY
from aside_bench.plan.steps import series_label
from aside_bench.records.results import StepResult
from aside_bench.records.spend import Prices, step_price
from aside_bench.report import split
from aside_bench.report.tables import series_of, series_order

UNCACHED_ARMS = split.REFERENCE_ARMS
MIB = 2**20


@dataclass(frozen=True)
class Series:
    """One arm in one phase, its steps by rising rate."""

    arm: str
    phase: str
    steps: list[StepResult]

    @property
    def label(self) -> str:
        return series_label(self.arm, self.phase)


def answer_series(results: list[StepResult]) -> list[Series]:
    """The series the answer speaks of: the uncached arms, the coalesce arm, and
    the cached arms warm (a cold cache is the warm-up, not the steady state)."""
    return [
        Series(arm, phase, series_of(results, arm, phase))
        for arm, phase in series_order(results)
        if arm in (*UNCACHED_ARMS, split.COALESCE_ARM) or phase == "warm"
    ]


def _rates(rates: list[int]) -> str:
    return ", ".join(f"{rate:,}" for rate in rates)


def goal_sentence(series: Series, goal_ms: float) -> str:
    """Up to which rate a series held p95 <= goal with nothing dropped or failed."""
    held = [r.step.rate for r in series.steps if r.holds(goal_ms)]
    missed = [r for r in series.steps if not r.holds(goal_ms)]
    if not missed:
        return f"{series.label} held the goal at every rate tried (up to {max(held):,}/s)."
    first = missed[0]
    p95 = "no answer" if first.latency is None else f"p95 {first.latency.p95:,.1f} ms"
    shown = f"{p95}, {first.drop_rate:.1%} dropped or failed"
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
        f"{series.label} held the goal at {_rates(held)}/s and missed it at "
        f"{_rates([r.step.rate for r in missed])}/s (at {first.step.rate:,}/s: {shown})."
    )


def break_even_sentence(cached: Series, uncached: Series, prices: Prices) -> str | None:
    """From which rate the cached series costs less per million requests than the
    uncached one and keeps doing so; None without a rate both priced."""
    theirs = {r.step.rate: step_price(r, prices) for r in uncached.steps}
    pairs = [
        (r.step.rate, mine, other)
        for r in cached.steps
        if (mine := step_price(r, prices)) is not None
        and (other := theirs.get(r.step.rate)) is not None
    ]
    if not pairs:
        return None
    cheaper = [rate for rate, mine, other in pairs if mine < other]
    rate, mine, other = pairs[-1]
    at = f"${mine:.3f} against ${other:.3f} per million requests at {rate:,}/s"
    if not cheaper:
        return f"{cached.label} cost more than {uncached.label} at every rate tried ({at})."
    # The break-even: the first rate from which every rate tried is cheaper.
    first = len(pairs)
    while first > 0 and pairs[first - 1][1] < pairs[first - 1][2]:
        first -= 1
    if first == len(pairs):
        return (
            f"{cached.label} cost less than {uncached.label} at {_rates(cheaper)}/s "
            f"but not at the highest rate tried ({at})."
        )
    if first == 0:
        return f"{cached.label} cost less than {uncached.label} at every rate tried ({at})."
    return f"{cached.label} cost less than {uncached.label} from {pairs[first][0]:,}/s on ({at})."


def _size(size: int) -> str:
    """4 MiB, 1.5 MiB, 1723 KiB: a memory bound as a reader would write it."""
    if size % MIB == 0 or size >= 10 * MIB:
        return f"{size / MIB:.0f} MiB"
    if size >= MIB:
        return f"{size / MIB:.1f} MiB"
    return f"{size / 1024:.0f} KiB"


def memory_sentences(curves: list[RateCurve]) -> list[str]:
    """What each Redis bound held and hit, against the simulated LRU and Belady."""
    out = []
    # The highest rate's: the longest stream, so the most a bound can matter.
    for curve in curves[-1:]:
        for point in curve.measured:
            bound = (
                "Redis with its own bound"
                if point.maxmemory is None
                else f"{_size(point.maxmemory)} of Redis"
            )
            if point.keys < MIN_CAPACITY:
                clients = (
                    ""
                    if point.clients_memory is None
                    else f": its clients' buffers took {_size(point.clients_memory)} of it"
                )
                out.append(
                    f"At {curve.rate:,}/s, {bound} held almost no key during the step{clients}; "
                    f"it answered {point.hit_rate:.0%} of reads."
                )
                continue
            lru, belady = point.simulated.get("LRU"), point.simulated.get("Belady")
            size = "that holds every key (it never filled)" if point.never_full else "of that size"
            sim = (
                ""
                if lru is None or belady is None
                else f" (a simulated LRU {size}: {lru:.0%}; Belady, the bound: {belady:.0%})"
            )
            out.append(
                f"At {curve.rate:,}/s, {bound} held {point.keys:,} keys and answered "
                f"{point.hit_rate:.0%} of reads{sim}."
            )
    return out


def index_sentence(series: list[Series], goal_ms: float, seed_indexed: bool) -> str:
    indexed = next((s for s in series if s.arm == "index"), None)
    if indexed is not None:
        return "An email index alone: " + goal_sentence(indexed, goal_ms)
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
    goal_ms: float,
    seed_indexed: bool,
) -> list[str]:
    """The report's first lines: the goal and each series against it, the
    break-even of each cached series, its saving split between coalescing and
    hits (with a coalesce arm), the hit rate memory bought, the index."""
    series = answer_series(results)
    if not series:
        return []
    lines = [
        f"Latency goal: p95 <= {goal_ms:g} ms with nothing dropped or failed "
        "(this machine, the load driver sharing its cores)."
    ]
    lines += [goal_sentence(one, goal_ms) for one in series]
    uncached = next((s for s in series if s.arm in UNCACHED_ARMS), None)
    if uncached is not None:
        for one in series:
            if one.arm not in UNCACHED_ARMS:
                sentence = break_even_sentence(one, uncached, prices)
                if sentence is not None:
                    lines.append(sentence)
        lines += split.answer_lines(results, prices)
        lines.append(
            f"Prices: {prices.words()} (ASIDE_PRICE_VCPU_HOUR, ASIDE_PRICE_GIB_HOUR); CPU of "
            "the gateway, PostgreSQL and Redis per request, memory of the gateway and of Redis "
            "for the cached arms."
        )
    lines += memory_sentences(curves)
    lines.append(index_sentence(series, goal_ms, seed_indexed))
    return lines
