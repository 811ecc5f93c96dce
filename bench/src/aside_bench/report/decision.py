"""The decision atop a sweep's report: per rate who held the goal, the cheapest, the misses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aside_bench.curve.points import MeasuredPoint, RateCurve
from aside_bench.plan.steps import arm_memory, series_label
from aside_bench.records.documents import RunParams
from aside_bench.records.goal import Goal, missed_words
from aside_bench.records.prices import Prices, Spend, step_price, step_spend
from aside_bench.records.results import StepResult
from aside_bench.report.split import COALESCE_ARM, REFERENCE_ARMS
from aside_bench.report.tables import MISSING, Table, series_of, series_order
from aside_bench.stack.config import Settings

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
    """The uncached arms, the coalesce arm and the cached arms warm."""
    return [
        Series(arm, phase, series_of(results, arm, phase))
        for arm, phase in series_order(results)
        if arm in (*REFERENCE_ARMS, COALESCE_ARM) or phase == "warm"
    ]


def size_words(size: int) -> str:
    """4 MiB, 1.5 MiB, 1723 KiB: a memory bound as a reader would write it."""
    if size % MIB == 0 or size >= 10 * MIB:
        return f"{size / MIB:.0f} MiB"
    if size >= MIB:
        return f"{size / MIB:.1f} MiB"
    return f"{size / 1024:.0f} KiB"


@dataclass(frozen=True)
class Standing:
    """One series at one rate against the goal."""

    label: str
    arm: str
    result: StepResult
    held: bool
    # $ per million requests served; a price of the service only when `held`.
    cost: float | None

    @property
    def price(self) -> float | None:
        """The cost as a price of the goal's service: None where the step missed it."""
        return self.cost if self.held else None

    def memory_words(self) -> str:
        """Its memory at its end: the gateway's RSS, Redis's used memory (or no Redis)."""
        cost, redis = self.result.cost, self.result.redis
        rss = None if cost is None else cost.gateway_rss_mib
        gateway = MISSING if rss is None else f"{rss:,.0f} MiB"
        if redis is None:
            return f"gateway {gateway}, no Redis"
        return f"gateway {gateway} + Redis {redis.used_memory / MIB:,.1f} MiB"

    @property
    def bound(self) -> int | None:
        """The bytes a memory arm's Redis may hold; None: not a memory arm."""
        return arm_memory(self.arm)

    def cell(self) -> str:
        """The cost as a table shows it: the price where held, else the miss."""
        if not self.held:
            return missed_words(self.result)
        return MISSING if self.cost is None else f"${self.cost:.3f}"


@dataclass(frozen=True)
class Missed:
    """A series that missed the goal at a rate, and the highest lower rate it held."""

    standing: Standing
    held_last: int | None  # None: it held at no lower rate tried

    def words(self) -> str:
        last = "none" if self.held_last is None else f"{self.held_last:,}/s"
        return f"{self.standing.label} ({missed_words(self.standing.result)}; held last: {last})"


@dataclass(frozen=True)
class RateDecision:
    """One rate: the series that held the goal (cheapest first) and those that missed."""

    rate: int
    held: list[Standing]
    missed: list[Missed]
    curve_points: list[MeasuredPoint]  # the memory arms as the curve measured them here

    @property
    def cheapest(self) -> Standing | None:
        """The cheapest priced series that held; None when none held or none was priced."""
        return next((one for one in self.held if one.price is not None), None)

    @property
    def smallest_cache(self) -> Standing | None:
        """The memory arm of the smallest bound that held; None when none did."""
        bounded = [one for one in self.held if one.bound is not None]
        return min(bounded, key=lambda one: one.bound or 0, default=None)

    @property
    def memory_arms(self) -> bool:
        standings = [*self.held, *(missed.standing for missed in self.missed)]
        return any(one.bound is not None for one in standings)

    def curve_point(self, arm: str) -> MeasuredPoint | None:
        return next((point for point in self.curve_points if point.arm == arm), None)


@dataclass(frozen=True)
class Decision:
    """The decision of one distance (None: the run's only one) at every rate tried."""

    distance: str | None
    goal: Goal
    rates: list[RateDecision]

    @property
    def memory_arms(self) -> bool:
        return any(one.memory_arms for one in self.rates)


def decide(
    results: list[StepResult],
    goal: Goal,
    prices: Prices,
    curves: list[RateCurve] | None = None,
    distance: str | None = None,
) -> Decision:
    """The decision over the steps of one distance, rate by rate."""
    series = answer_series(results)
    points = {curve.rate: curve.measured for curve in curves or []}
    rates = sorted({r.step.rate for one in series for r in one.steps})
    out = []
    for rate in rates:
        held, missed = [], []
        for one in series:
            result = next((r for r in one.steps if r.step.rate == rate), None)
            if result is None:
                continue
            found = Standing(
                one.label, one.arm, result, goal.held(result), step_price(result, prices)
            )
            if found.held:
                held.append(found)
            else:
                lower = (r.step.rate for r in one.steps if r.step.rate < rate and goal.held(r))
                missed.append(Missed(found, max(lower, default=None)))
        held.sort(key=lambda one: (one.price is None, one.price or 0.0))
        out.append(RateDecision(rate, held, missed, points.get(rate, [])))
    return Decision(distance, goal, out)


def _smallest_cell(one: RateDecision) -> str:
    found = one.smallest_cache
    if found is None:
        return "none held"
    text = f"{found.label}: {size_words(found.bound or 0)}"
    point = one.curve_point(found.arm)
    if point is not None:
        text += f", {point.hit_rate:.0%} of reads hit, {point.keys:,} keys held"
    return text


def decision_table(decision: Decision) -> Table:
    """One row per rate: what held, the cheapest and its memory, the misses."""
    memory = decision.memory_arms
    headers = ["target /s", "held the goal", "cheapest that held", "its $/M", "its memory"]
    if memory:
        headers.append("smallest cache that held")
    headers.append("missed (held last)")
    rows = []
    for one in decision.rates:
        cheapest = one.cheapest
        row = [f"{one.rate:,}", ", ".join(s.label for s in one.held) or "none"]
        if cheapest is None:
            row += ["none held", MISSING, MISSING]
        else:
            row += [cheapest.label, cheapest.cell(), cheapest.memory_words()]
        if memory:
            row.append(_smallest_cell(one))
        row.append("; ".join(m.words() for m in one.missed) or "none")
        rows.append(row)
    at = "" if decision.distance is None else f" ({decision.distance})"
    title = f"the decision{at}: at each rate, the arms that held the goal ({decision.goal.words()})"
    return Table(f"{title} and the cheapest of them", headers, rows)


def smallest_cache_sentences(decision: Decision) -> list[str]:
    """With memory arms: the smallest cache that held the goal at each rate, or that none did."""
    if not decision.memory_arms:
        return []
    out = []
    for one in decision.rates:
        found = one.smallest_cache
        if found is None:
            bounds = sorted({m.standing.bound for m in one.missed if m.standing.bound})
            tried = ", ".join(size_words(b) for b in bounds)
            out.append(f"At {one.rate:,}/s no cache bound tried ({tried}) held the goal.")
            continue
        price = "" if found.price is None else f", ${found.price:.3f} per million requests"
        out.append(
            f"At {one.rate:,}/s the smallest cache that held the goal: {found.label}, "
            f"{size_words(found.bound or 0)} of Redis ({found.memory_words()}{price})."
        )
    return out


# An uncached arm's Redis cell: it reads no cache, so no Redis is costed.
NO_REDIS = "no Redis"


def run_prices(params: RunParams) -> Prices:
    """The prices a run was made with (run.json), or the defaults for a run without."""
    found = params.get("prices") or {}
    return Prices(
        float(found.get("vcpu_hour", Settings.price_vcpu_hour)),
        float(found.get("gib_hour", Settings.price_gib_hour)),
    )


def cost_table(results: list[StepResult], prices: Prices, goal: Goal) -> Table | None:
    steps = [r for arm, phase in series_order(results) for r in series_of(results, arm, phase)]
    priced = [(r, spend) for r in steps if (spend := step_spend(r)) is not None]
    if not priced:
        return None
    columns: list[tuple[str, Callable[[StepResult, Spend], str]]] = [
        ("series", lambda r, s: r.step.label),
        ("target /s", lambda r, s: f"{r.step.rate:,}"),
        ("gateway CPU ms/req", lambda r, s: f"{s.gateway_cpu_ms:.2f}"),
        ("PostgreSQL CPU ms/req", lambda r, s: f"{s.postgres_cpu_ms:.2f}"),
        ("Redis CPU ms/req", lambda r, s: NO_REDIS if r.redis is None else f"{s.redis_cpu_ms:.2f}"),
        ("memory MiB", lambda r, s: f"{s.memory_mib:.0f}"),
        ("CPU $/M", lambda r, s: f"{s.cpu_per_million(prices):.3f}"),
        ("memory $/M", lambda r, s: f"{s.memory_per_million(prices):.3f}"),
        ("total $/M served", lambda r, s: f"{s.per_million(prices):.3f}"),
        (
            "price $/M at the goal",
            lambda r, s: f"{s.per_million(prices):.3f}" if goal.held(r) else missed_words(r),
        ),
    ]
    title = (
        f"cost per million requests ({prices.words()}); a price of the service only where "
        f"the step held the goal ({goal.words()})"
    )
    rows = [[cell(r, spend) for _, cell in columns] for r, spend in priced]
    return Table(title, [header for header, _ in columns], rows)
