"""A cached arm's saving split between coalescing the misses and the hits (decision 056)."""

from __future__ import annotations

from dataclasses import astuple, dataclass

from aside_bench.plan.steps import series_label
from aside_bench.records.goal import Goal
from aside_bench.records.prices import Prices, step_price
from aside_bench.records.results import StepResult
from aside_bench.report.tables import Table, latency_of

COALESCE_ARM = "coalesce"
REFERENCE_ARMS = ("nocache", "index")


@dataclass(frozen=True)
class Split:
    """One figure of three arms: uncached, coalesced, cached (lower is better)."""

    uncached: float
    coalesced: float
    cached: float

    @property
    def saving(self) -> float:
        return self.uncached - self.cached

    @property
    def by_coalescing(self) -> float:
        """The part of the saving coalescing alone reaches, within [0, saving]."""
        return min(max(self.uncached - self.coalesced, 0.0), max(self.saving, 0.0))

    @property
    def by_hits(self) -> float:
        return max(self.saving, 0.0) - self.by_coalescing

    @property
    def hits_share(self) -> float | None:
        """The hits' share of the saving; None when the cached arm saved nothing."""
        return self.by_hits / self.saving if self.saving > 0 else None


@dataclass(frozen=True)
class Held:
    """Which of the three arms held the goal at a rate."""

    uncached: bool
    coalesced: bool
    cached: bool


@dataclass(frozen=True)
class RateSplit:
    """A cached series against the uncached and coalesce arms at one rate."""

    cached_label: str
    uncached_label: str
    rate: int
    cost: Split | None  # $ per million requests served; None: a step was not priced
    p95: Split | None  # ms; None: a step had no answer
    drops: Split
    served: Split  # successful requests /s
    held: Held

    @property
    def comparable(self) -> bool:
        """All three held the goal: their figures are of the same service."""
        return all(astuple(self.held))

    @property
    def cost_split(self) -> Split | None:
        """The prices, only where they are prices of the same service."""
        return self.cost if self.comparable else None

    def missed_words(self) -> str:
        """Those of the three that missed the goal, each with what it served."""
        labels = (self.uncached_label, COALESCE_ARM, self.cached_label)
        named = zip(labels, astuple(self.held), astuple(self.served), strict=True)
        return ", ".join(
            f"{label} (served {served:,.0f}/s of {self.rate:,})"
            for label, held, served in named
            if not held
        )


def _by_rate(results: list[StepResult], arm: str, phase: str) -> dict[int, StepResult]:
    return {r.step.rate: r for r in results if (r.step.arm, r.step.phase) == (arm, phase)}


def _three(values: list[float | None]) -> Split | None:
    return None if any(v is None for v in values) else Split(*values)  # type: ignore[arg-type]


def rate_splits(results: list[StepResult], prices: Prices, goal: Goal) -> list[RateSplit]:
    """Every cached series (warm) at every rate the uncached and coalesce arms ran too."""
    uncached_arm = next(
        (arm for arm in REFERENCE_ARMS if any(r.step.arm == arm for r in results)), None
    )
    if uncached_arm is None:
        return []
    uncached = _by_rate(results, uncached_arm, "none")
    coalesced = _by_rate(results, COALESCE_ARM, "none")
    cached_series = sorted(
        {(r.step.arm, r.step.phase) for r in results if r.step.phase == "warm"},
        key=lambda pair: min(r.step.rate for r in results if (r.step.arm, r.step.phase) == pair),
    )
    out = []
    for arm, phase in cached_series:
        for rate, mine in sorted(_by_rate(results, arm, phase).items()):
            base, coal = uncached.get(rate), coalesced.get(rate)
            if base is None or coal is None:
                continue
            three = (base, coal, mine)
            cost = _three([step_price(r, prices) for r in three])
            p95 = _three([latency_of(r, "p95") for r in three])
            drops = Split(*(r.drop_rate for r in three))
            served = Split(*(r.achieved_rps for r in three))
            held = Held(*(goal.held(r) for r in three))
            label = series_label(arm, phase)
            out.append(RateSplit(label, uncached_arm, rate, cost, p95, drops, served, held))
    return out


def _share_words(split: Split) -> str:
    """How a saving divides, in words."""
    share = split.hits_share
    if share is None:
        return "no saving to split"
    if split.by_coalescing <= 0:
        return "coalescing alone recovered none of the saving: the hits account for all of it"
    if split.by_hits <= 0:
        return "coalescing alone recovered all of the saving: the hits add nothing"
    return f"coalescing alone recovered {1 - share:.0%} of the saving, the hits {share:.0%}"


def _beside(one: RateSplit) -> list[str]:
    """The p95, drops and rates served of the three arms: the figures beside a split."""
    parts = []
    if one.p95 is not None:
        p = one.p95
        share = p.hits_share if one.comparable else None
        parts.append(
            f"p95 {p.uncached:,.1f} / {p.coalesced:,.1f} / {p.cached:,.1f} ms"
            + ("" if share is None else f" (the hits' share of that saving {share:.0%})")
        )
    d = one.drops
    parts.append(f"dropped or failed {d.uncached:.1%} / {d.coalesced:.1%} / {d.cached:.1%}")
    return parts


def _cost_words(one: RateSplit) -> str | None:
    """The prices and their split, only where all three held the goal."""
    c = one.cost_split
    if c is None:
        return None
    if c.saving <= 0:
        return (
            f"it cost no less than {one.uncached_label} (${c.cached:.3f} against "
            f"${c.uncached:.3f} per million requests; {COALESCE_ARM} ${c.coalesced:.3f})"
        )
    return (
        f"{one.uncached_label} ${c.uncached:.3f} per million requests, {COALESCE_ARM} "
        f"(misses batched, nothing stored) ${c.coalesced:.3f}, {one.cached_label} "
        f"${c.cached:.3f}: {_share_words(c)}"
    )


def _not_split_words(one: RateSplit) -> str:
    """Why a rate's saving is not split: who missed the goal, and what that leaves."""
    held = one.held
    missed = one.missed_words()
    if not held.cached:
        return f"not split: {missed} missed the goal, the cached arm among them"
    if not held.uncached:
        return (
            f"not split: {missed} missed the goal, so no price of the same service stands "
            f"against {one.cached_label}'s"
        )
    # The uncached read and the cache held, coalescing alone did not.
    cost, both = one.cost, ""
    if cost is not None:
        both = (
            f" ({one.uncached_label} ${cost.uncached:.3f}, {one.cached_label} "
            f"${cost.cached:.3f} per million requests, both at the goal)"
        )
    return (
        f"coalescing alone did not hold the goal ({missed}), so none of the saving{both} "
        "is credited to it"
    )


def split_sentence(one: RateSplit) -> str:
    """A cached series' saving at one rate, split where all three held, else why not."""
    head = f"At {one.rate:,}/s, what the cache itself bought ({one.cached_label})"
    if one.comparable:
        cost = _cost_words(one)
        parts = ([] if cost is None else [cost]) + _beside(one)
    else:
        parts = [_not_split_words(one), *_beside(one)]
    return f"{head}: " + "; ".join(parts) + "."


def _shares(splits: list[RateSplit], figure: str) -> list[float]:
    found: list[Split | None] = [getattr(one, figure) for one in splits]
    return [split.hits_share for split in found if split and split.hits_share is not None]


def range_sentence(splits: list[RateSplit]) -> str | None:
    """The hits' share over the rates all three held; None for fewer than two."""
    splits = [one for one in splits if one.comparable]
    if len(splits) < 2:
        return None
    parts = []
    for figure, words in (("cost", "the $ saving"), ("p95", "the p95 saving"),
                          ("drops", "the drops saved")):  # fmt: skip
        shares = _shares(splits, figure)
        if shares:
            low, high = min(shares), max(shares)
            span = f"{low:.0%}" if round(low, 2) == round(high, 2) else f"{low:.0%}-{high:.0%}"
            parts.append(f"{span} of {words}")
    if not parts:
        return None
    every = [share for figure in ("cost", "p95", "drops") for share in _shares(splits, figure)]
    rest = "coalescing the rest"
    if min(every) >= 0.995:
        rest = "coalescing none of it"
    elif max(every) <= 0.005:
        rest = "coalescing all of it"
    rates = ", ".join(f"{one.rate:,}" for one in splits)
    return (
        f"Over the {len(splits)} rates where the three arms held the goal ({rates}/s), the "
        f"hits of {splits[0].cached_label} account for " + ", ".join(parts) + f" ({rest})."
    )


def none_comparable_sentence(splits: list[RateSplit]) -> str:
    """Where no rate had all three arms at the goal: that nothing is split."""
    one = splits[0]
    return (
        f"At no rate tried did {one.uncached_label}, {COALESCE_ARM} and {one.cached_label} "
        "all hold the goal, so no saving of the same service is split between coalescing "
        "and the hits."
    )


def answer_lines(results: list[StepResult], prices: Prices, goal: Goal) -> list[str]:
    """Per cached series: its split at the highest comparable rate, then over the rates."""
    by_series: dict[str, list[RateSplit]] = {}
    for one in rate_splits(results, prices, goal):
        by_series.setdefault(one.cached_label, []).append(one)  # rates rise
    lines = []
    for splits in by_series.values():
        comparable = [one for one in splits if one.comparable]
        priced = [one for one in comparable if one.cost is not None]
        if not comparable:
            lines.append(none_comparable_sentence(splits))
        lines.append(split_sentence((priced or comparable or splits)[-1]))
        over = range_sentence(splits)
        if over is not None:
            lines.append(over)
    return lines


NOT_SPLIT = "not split"


def _cells(split: Split | None, fmt: str, comparable: bool) -> list[str]:
    """Uncached, coalesced and cached in `fmt`, and the hits' share where comparable."""
    if split is None:
        return ["n/a"] * 4
    share = "no saving" if split.hits_share is None else f"{split.hits_share:.0%}"
    values = [fmt.format(v) for v in astuple(split)]
    return [*values, share if comparable else NOT_SPLIT]


def _cost_cells(one: RateSplit) -> list[str]:
    """The three prices where each held (else what it served), and the hits' share."""
    cost = one.cost
    if cost is None:
        return ["n/a"] * 4
    three = zip(astuple(cost), astuple(one.held), astuple(one.served), strict=True)
    cells = [
        f"{value:.3f}" if ok else f"missed: served {rate:,.0f}/s of {one.rate:,}"
        for value, ok, rate in three
    ]
    share = "no saving" if cost.hits_share is None else f"{cost.hits_share:.0%}"
    return [*cells, share if one.comparable else NOT_SPLIT]


def split_table(results: list[StepResult], prices: Prices, goal: Goal) -> Table | None:
    """Every rate's split: the three arms' cost, p95 and drops, and the hits' shares."""
    rows = []
    for one in rate_splits(results, prices, goal):
        *drops, drops_share = _cells(one.drops, "{:.1%}", one.comparable)
        row = [one.cached_label, f"{one.rate:,}", *_cost_cells(one)]
        row += [*_cells(one.p95, "{:,.1f}", one.comparable), " / ".join(drops), drops_share]
        rows.append(row)
    if not rows:
        return None
    three = ("uncached", "coalesce", "cached")
    headers = ["cached series", "target /s", *(f"{arm} $/M" for arm in three)]
    headers += ["hits' share of the $ saving", *(f"{arm} p95 ms" for arm in three)]
    headers += ["hits' share of the p95 saving", f"drops {' / '.join(three)}"]
    headers.append("hits' share of the drops saved")
    title = (
        "what the cache itself bought: the saving against the uncached read, split between "
        "coalescing the misses (coalesce: batched, nothing stored) and the hits where all "
        f"three arms held the goal ({goal.words()})"
    )
    return Table(title, headers, rows)
