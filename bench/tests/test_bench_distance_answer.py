"""The answer of a run at several network distances, on fixed inputs (typed
records, no stack): what each arm held at each distance, and where the ranking
of two arms on p95 and on price changes between distances."""

from __future__ import annotations

from aside_bench.plan.steps import DIRECT
from aside_bench.records.goal import Goal
from aside_bench.records.prices import Prices
from aside_bench.records.results import StepResult
from aside_bench.records.runfile import RunRecord
from aside_bench.report.decision import answer_series
from aside_bench.report.distances import by_distance, distance_answer, held_line, ranking_line
from report_samples import priced_step, sample_run, step_record

PRICES = Prices(vcpu_hour=0.036, gib_hour=0.0036)
GOAL = Goal(10)


def _step(arm: str, rate: int, p95: float, cpu_ms: float = 1.0, dropped: int = 0) -> StepResult:
    phase = "none" if arm.split("~")[0] in ("nocache", "coalesce") else "warm"
    return priced_step(arm, phase, rate, p95, cpu_ms, dropped)


def _run() -> RunRecord:
    run = sample_run()
    hops = {"redis": {"round_trip_ms": 2}, "postgres": {"round_trip_ms": 2}}
    run.params["distances"] = {"cross-zone": {"hops": hops}}
    run.steps.extend(
        step_record(distance="cross-zone", hops={"redis": {"median_ms": m, "p95_ms": m}})
        for m in (2.3, 2.5, 2.4)
    )
    return run


# hybrid answers from the worker's memory, so a farther Redis costs it less than
# the cache arm, whose every hit crosses the hop: the ranking turns at cross-zone.
RESULTS = [
    _step("nocache", 100, 900, dropped=800),
    _step("cache", 100, 3.0, cpu_ms=1.0),
    _step("hybrid", 100, 4.0, cpu_ms=1.5),
    _step("nocache~cross-zone", 100, 950, dropped=800),
    _step("cache~cross-zone", 100, 8.0, cpu_ms=2.0),
    _step("hybrid~cross-zone", 100, 4.5, cpu_ms=1.6),
]


def _pair(cache: float, hybrid: float, cache_far: float, hybrid_far: float) -> list[StepResult]:
    """The cache and hybrid arms at 100/s, direct and cross-zone, at these p95s."""
    return [_step("cache", 100, cache), _step("hybrid", 100, hybrid),
            _step("cache~cross-zone", 100, cache_far),
            _step("hybrid~cross-zone", 100, hybrid_far)]  # fmt: skip


def test_each_distance_says_what_each_arm_held_and_the_cheapest() -> None:
    found = by_distance(RESULTS)
    direct = held_line(_run(), DIRECT, found[DIRECT], GOAL, PRICES)
    assert direct.startswith("At direct (no proxy in the path): held the goal: ")
    assert "cache (warm) at 100/s; hybrid (warm) at 100/s; nocache at no rate tried" in direct
    assert "The cheapest that held: 100/s cache (warm), $" in direct
    far = held_line(_run(), "cross-zone", found["cross-zone"], GOAL, PRICES)
    assert far.startswith("At cross-zone (Redis 2 ms set, measured 2.40 ms; PostgreSQL 2 ms "
                          "set, not measured): ")  # fmt: skip
    assert "100/s hybrid (warm), $" in far


def test_the_ranking_of_two_arms_changes_where_the_distance_turns_it() -> None:
    series = {name: answer_series(steps) for name, steps in by_distance(RESULTS).items()}
    line = ranking_line(series, "cache (warm)", "hybrid (warm)", "p95", GOAL, PRICES)
    assert line is not None
    assert "cache (warm) at direct; hybrid (warm) at cross-zone" in line
    assert line.endswith("the ranking changes from direct to cross-zone.")
    price = ranking_line(series, "cache (warm)", "hybrid (warm)", "price", GOAL, PRICES)
    assert price is not None and "changes from direct to cross-zone" in price


def test_a_ranking_that_holds_says_so_and_a_close_one_is_even() -> None:
    steady = _pair(3.0, 5.0, 4.0, 6.0)
    series = {name: answer_series(steps) for name, steps in by_distance(steady).items()}
    line = ranking_line(series, "cache (warm)", "hybrid (warm)", "p95", GOAL, PRICES)
    assert line is not None and line.endswith("(direct and cross-zone); no change.")
    close = _pair(3.0, 3.2, 4.0, 6.0)
    series = {name: answer_series(steps) for name, steps in by_distance(close).items()}
    line = ranking_line(series, "cache (warm)", "hybrid (warm)", "p95", GOAL, PRICES)
    assert line is not None and "even at direct; cache (warm) at cross-zone" in line
    assert line.endswith("no distance turns the ranking.")  # an even distance is no turn


def test_no_ranking_is_drawn_where_one_arm_missed_the_goal() -> None:
    # hybrid misses at cross-zone (p95 over 10 ms): one distance left, no comparison.
    results = _pair(3.0, 5.0, 4.0, 12.0)
    series = {name: answer_series(steps) for name, steps in by_distance(results).items()}
    assert ranking_line(series, "cache (warm)", "hybrid (warm)", "p95", GOAL, PRICES) is None
    assert ranking_line(series, "cache (warm)", "hybrid (warm)", "price", GOAL, PRICES) is None


def test_the_answer_names_the_goal_each_distance_and_the_prices() -> None:
    lines = distance_answer(_run(), RESULTS, PRICES, GOAL)
    assert lines[0].startswith("Service goal: p95 <= 10 ms")
    assert [line.split(" (")[0] for line in lines[1:3]] == ["At direct", "At cross-zone"]
    assert any("the ranking changes from direct to cross-zone" in line for line in lines)
    assert lines[-1].startswith("Prices: $0.036 a vCPU-hour")
