"""The ceiling search: raise the rate along a ladder until a step misses, then
bisect between the highest rate held and the lowest missed (pure, unit-tested)."""

from __future__ import annotations

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


def bounds(history: list[Trial]) -> tuple[int, int | None]:
    """(highest rate held below the lowest miss, lowest miss or None)."""
    missed = [rate for rate, held in history if not held]
    lowest_miss = min(missed) if missed else None
    held = [rate for rate, ok in history if ok and (lowest_miss is None or rate < lowest_miss)]
    return (max(held) if held else 0), lowest_miss


def next_rate(history: list[Trial], params: SearchParams) -> int | None:
    """The next rate to try, or None when the search is over."""
    low, high = bounds(history)
    tried = {rate for rate, _ in history}
    if high is None:
        return next((r for r in ladder(params) if r > low and r not in tried), None)
    gap = max(params.resolution_abs, int(low * params.resolution_rel))
    if high - low <= gap:
        return None
    middle = (low + high) // 2
    return None if middle in tried or middle <= 0 else middle


def ceiling_of(history: list[Trial]) -> tuple[int, bool]:
    """(ceiling, capped): capped means no step missed, so the true ceiling is higher."""
    low, high = bounds(history)
    return low, high is None
