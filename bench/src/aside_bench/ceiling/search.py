"""The ceiling search: up a ladder until a step misses, then bisection, the final held and
missed rates confirmed (a majority of tries holds, a tie misses, a noisy host's miss runs
again); searches take turns step by step (docs/decisions/019, 024). Pure, unit-tested."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

Trial = tuple[int, bool]  # (rate, held)


@dataclass(frozen=True)
class SearchParams:
    start: int = 200
    ladder_step: int = 400
    max_rate: int = 8000
    resolution_abs: int = 25
    resolution_rel: float = 0.05


def ladder(params: SearchParams) -> list[int]:
    """200, 400, 800, then +400 each: 1200, 1600, ... up to max_rate."""
    rates = [params.start, params.start * 2, params.start * 4]
    while rates[-1] + params.ladder_step <= params.max_rate:
        rates.append(rates[-1] + params.ladder_step)
    return sorted({r for r in rates if r <= params.max_rate})


def _tally(history: list[Trial]) -> dict[int, tuple[int, int]]:
    """rate -> (tries held, tries missed)."""
    found: dict[int, tuple[int, int]] = {}
    for rate, held in history:
        ok, missed = found.get(rate, (0, 0))
        found[rate] = (ok + 1, missed) if held else (ok, missed + 1)
    return found


def verdicts(history: list[Trial]) -> dict[int, bool]:
    """rate -> held, a rate held when more of its tries held than missed."""
    return {rate: ok > missed for rate, (ok, missed) in _tally(history).items()}


def bounds(history: list[Trial]) -> tuple[int, int | None]:
    """(highest rate held below the lowest miss, lowest miss or None)."""
    by_rate = verdicts(history)
    missed = [rate for rate, held in by_rate.items() if not held]
    lowest_miss = min(missed) if missed else None
    held = [
        rate for rate, ok in by_rate.items() if ok and (lowest_miss is None or rate < lowest_miss)
    ]
    return (max(held) if held else 0), lowest_miss


def next_rate(history: list[Trial], params: SearchParams) -> int | None:
    """The next new rate to try, or None when the search has narrowed enough."""
    low, high = bounds(history)
    tried = {rate for rate, _ in history}
    if high is None:
        return next((r for r in ladder(params) if r > low and r not in tried), None)
    gap = max(params.resolution_abs, int(low * params.resolution_rel))
    if high - low <= gap:
        return None
    middle = (low + high) // 2
    return None if middle in tried or middle <= 0 else middle


def to_confirm(history: list[Trial]) -> int | None:
    """The final held, then missed, rate if tried once or evenly split."""
    low, high = bounds(history)
    tally = _tally(history)
    for rate in (low, high):
        if rate:
            ok, missed = tally.get(rate, (0, 0))
            if ok + missed == 1 or ok == missed:
                return rate
    return None


def next_trial(history: list[Trial], params: SearchParams, confirm: bool = True) -> int | None:
    """The next rate: a new one while narrowing, then the confirmations."""
    rate = next_rate(history, params)
    if rate is None and confirm:
        rate = to_confirm(history)
    return rate


def tries_at(history: list[Trial], rate: int) -> int:
    return sum(1 for tried, _ in history if tried == rate)


# A miss on a noisy host (records.saturation.NOISY_STEAL) runs again at most this often in a row.
MAX_NOISY_RERUNS = 2
# How the reports name a step run again.
RERUN_VERDICT = "missed, host noisy: run again"


def run_again(held: bool, noisy: bool, reruns: int) -> bool:
    """A miss on a noisy host runs again, at most MAX_NOISY_RERUNS in a row."""
    return not held and noisy and reruns < MAX_NOISY_RERUNS


def reruns_of(steps: Iterable[tuple[int, bool, bool]]) -> list[bool]:
    """Per step of one search, (rate, held, noisy) each, whether it ran again."""
    found, reruns, last_rate = [], 0, None
    for rate, held, noisy in steps:
        if rate != last_rate:
            reruns = 0
        again = run_again(held, noisy, reruns)
        reruns = reruns + 1 if again else 0
        found.append(again)
        last_rate = rate
    return found


def interleave(
    names: Iterable[str], params: SearchParams, run: Callable[[str, int, list[Trial]], bool | None]
) -> dict[str, list[Trial]]:
    """Every name's search taking turns, their histories; None from `run` stops all."""
    histories: dict[str, list[Trial]] = {name: [] for name in names}
    pending = list(histories)
    while pending:
        for name in list(pending):
            history = histories[name]
            rate = next_trial(history, params)
            if rate is None:
                pending.remove(name)
                continue
            held = run(name, rate, history)
            if held is None:
                return histories
            history.append((rate, held))
    return histories


def ceiling_of(history: list[Trial]) -> tuple[int, bool]:
    """(ceiling, capped): capped means no step missed, so the true ceiling is higher."""
    low, high = bounds(history)
    return low, high is None


def limit_of(outcomes: list[tuple[int, str]]) -> int | None:
    """The lowest rate not held when all its misses were the load generator's."""
    _, high = bounds([(rate, outcome == "held") for rate, outcome in outcomes])
    if high is None:
        return None
    failed = [outcome for rate, outcome in outcomes if rate == high and outcome != "held"]
    return high if failed and all(outcome == "limit" for outcome in failed) else None


@dataclass(frozen=True)
class Reference:
    """The cache arm's ceiling against the same search under the bare scenario."""

    ceiling: int
    reference: int
    tolerance: float = 0.10  # agreeing within it: the driver's checks did not set the ceiling

    @property
    def ratio(self) -> float | None:
        """ceiling / reference; None when the reference held no rate."""
        return self.ceiling / self.reference if self.reference > 0 else None

    @property
    def agrees(self) -> bool:
        ratio = self.ratio
        return ratio is not None and abs(ratio - 1) <= self.tolerance + 1e-9

    @property
    def verdict(self) -> str:
        within = f"within {self.tolerance:.0%}".replace("%", " %")
        return f"agrees {within}" if self.agrees else f"does not agree {within}"
