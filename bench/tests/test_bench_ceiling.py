"""Unit tests of the ceiling search."""

from __future__ import annotations

from aside_bench.ceiling.search import SearchParams, bounds, ceiling_of, ladder, next_rate


def test_ladder_doubles_then_climbs_by_steps() -> None:
    assert ladder(SearchParams(start=200, ladder_step=400, max_rate=2400)) == [
        200, 400, 800, 1200, 1600, 2000, 2400,
    ]  # fmt: skip


def _search(true_ceiling: int, params: SearchParams) -> list[tuple[int, bool]]:
    history: list[tuple[int, bool]] = []
    while (rate := next_rate(history, params)) is not None:
        history.append((rate, rate <= true_ceiling))
        assert len(history) < 50, "the search must end"
    return history


def test_search_climbs_then_bisects_to_the_resolution() -> None:
    params = SearchParams(start=200, ladder_step=400, max_rate=8000)
    history = _search(1370, params)
    rates = [rate for rate, _ in history]
    assert rates[:5] == [200, 400, 800, 1200, 1600]
    ceiling, capped = ceiling_of(history)
    assert not capped
    assert 1370 - max(params.resolution_abs, 1370 * params.resolution_rel) <= ceiling <= 1370
    assert len(set(rates)) == len(rates)


def test_search_below_the_first_rung_bisects_down() -> None:
    history = _search(90, SearchParams())
    ceiling, capped = ceiling_of(history)
    assert history[0] == (200, False)
    assert 65 <= ceiling <= 90 and not capped


def test_nothing_held_gives_zero() -> None:
    history = _search(0, SearchParams(resolution_abs=25))
    assert ceiling_of(history) == (0, False)


def test_never_missing_is_reported_as_capped() -> None:
    params = SearchParams(max_rate=1200)
    history = _search(10_000, params)
    assert [r for r, _ in history] == [200, 400, 800, 1200]
    assert ceiling_of(history) == (1200, True)


def test_bounds_ignore_a_lucky_pass_above_a_miss() -> None:
    assert bounds([(400, True), (800, False), (1200, True)]) == (400, 800)


def test_every_arm_is_searched_turn_by_turn_the_reference_beside_the_cache_arm() -> None:
    from aside_bench.cli.run import search_order

    order = search_order(["cache", "hybrid", "healthz", "cache-bare"])
    assert order == [["cache", "cache-bare", "hybrid", "healthz"]]
    assert search_order(["hybrid", "healthz"]) == [["hybrid", "healthz"]]
    assert search_order(["hybrid", "cache-bare"]) == [["hybrid", "cache-bare"]]
