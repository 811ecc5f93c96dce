"""The decision on top of the answer, and prices compared only at equal service,
on fixed inputs (typed records, no stack)."""

from __future__ import annotations

from aside_bench.curve.points import MeasuredPoint, RateCurve
from aside_bench.records.goal import Goal, missed_words
from aside_bench.records.prices import Prices, step_price
from aside_bench.records.results import StepResult
from aside_bench.report.answer import answer
from aside_bench.report.decision import cost_table, decide, decision_table, smallest_cache_sentences
from report_samples import priced_step as _step

PRICES = Prices(vcpu_hour=0.036, gib_hour=0.0036)
GOAL = Goal(10)


def _price(result: StepResult) -> str:
    price = step_price(result, PRICES)
    assert price is not None
    return f"${price:.3f}"


def test_the_tolerance_lets_a_lone_failure_hold_and_shed_load_miss() -> None:
    assert GOAL.held(_step("cache", "warm", 1000, 5, 1, dropped=10))  # 0.1% of 10,000
    assert not GOAL.held(_step("cache", "warm", 1000, 5, 1, dropped=11))
    assert not GOAL.held(_step("cache", "warm", 1000, 10.5, 1))
    assert missed_words(_step("coalesce", "none", 1000, 900, 1, dropped=7920)) == (
        "missed: served 208/s of 1,000, p95 900 ms"
    )


def test_an_arm_that_misses_at_every_rate_gets_no_price_comparison() -> None:
    # nocache and coalesce shed most of their load, so per request served they are
    # cheap; the cache holds the goal at a higher cost per request.
    results = []
    for rate in (100, 1000):
        results += [
            _step("nocache", "none", rate, 4000, 0.2, dropped=rate * 9),
            _step("coalesce", "none", rate, 3000, 0.1, dropped=rate * 8),
            _step("cache", "warm", rate, 3, 0.5, redis_mib=2),
        ]
    lines = answer(results, [], PRICES, GOAL, seed_indexed=False)
    assert not any("cost less" in line or "cost more" in line for line in lines), lines
    assert "cache (warm) and nocache held the goal at no rate both ran, so no price" in (
        "\n".join(lines)
    )
    # No price of a step that missed is said anywhere in the answer (but the prices').
    missed = [r for r in results if r.step.arm != "cache"]
    said = [line for line in lines if not line.startswith("Prices:")]
    assert not any(_price(r) in line for r in missed for line in said)
    table = decision_table(decide(results, GOAL, PRICES))
    assert [row[1:4] for row in table.rows] == [
        ["cache (warm)", "cache (warm)", _price(results[2])],
        ["cache (warm)", "cache (warm)", _price(results[5])],
    ]
    assert table.rows[1][-1] == (
        "nocache (missed: served 100/s of 1,000, p95 4,000 ms; held last: none); "
        "coalesce (missed: served 200/s of 1,000, p95 3,000 ms; held last: none)"
    )
    # The cost table marks the misses rather than pricing them.
    costs = cost_table(results, PRICES, GOAL)
    assert costs is not None
    at_goal = costs.headers.index("price $/M at the goal")
    assert [row[at_goal] for row in costs.rows[:2]] == [
        "missed: served 10/s of 100, p95 4,000 ms",
        "missed: served 100/s of 1,000, p95 4,000 ms",
    ]


def test_an_arm_that_holds_up_to_a_rate_is_compared_only_up_to_it() -> None:
    results = [
        _step("nocache", "none", 100, 5, 3),
        _step("nocache", "none", 200, 40, 3),
        _step("nocache", "none", 400, 900, 1, dropped=2000),
        _step("cache", "warm", 100, 2, 1, redis_mib=2),
        _step("cache", "warm", 200, 2, 1, redis_mib=2),
        _step("cache", "warm", 400, 2, 1, redis_mib=2),
    ]
    lines = answer(results, [], PRICES, GOAL, seed_indexed=False)
    assert "nocache held the goal up to 100/s and missed it from 200/s" in lines[1]
    (compared,) = [line for line in lines if "cost less" in line]
    assert compared == (
        "cache (warm) cost less than nocache at every rate both held the goal (100/s) "
        f"({_price(results[3])} against {_price(results[0])} per million requests at 100/s)."
    )
    decision = decide(results, GOAL, PRICES)
    assert [[s.label for s in one.held] for one in decision.rates] == [
        ["cache (warm)", "nocache"],
        ["cache (warm)"],
        ["cache (warm)"],
    ]
    assert [[m.held_last for m in one.missed] for one in decision.rates] == [[], [100], [100]]
    assert decision_table(decision).rows[2][-1] == (
        "nocache (missed: served 200/s of 400, p95 900 ms; held last: 100/s)"
    )


def test_of_two_arms_holding_the_goal_the_cheaper_is_named_with_its_memory() -> None:
    # An indexed read: cheap in CPU, no Redis; the cache's Redis costs memory.
    index = _step("index", "none", 100, 4, 0.3, rss_mib=80)
    cache = _step("cache", "warm", 100, 2, 0.5, redis_mib=64, rss_mib=120)
    decision = decide([index, cache], GOAL, PRICES)
    (one,) = decision.rates
    assert one.cheapest is not None and one.cheapest.label == "index"
    row = decision_table(decision).rows[0]
    assert row == ["100", "index, cache (warm)", "index", _price(index),
                   "gateway 80 MiB, no Redis", "none"]  # fmt: skip
    # The other way round, the cache is named, with its Redis.
    dear = _step("index", "none", 100, 4, 3.0, rss_mib=80)
    row = decision_table(decide([dear, cache], GOAL, PRICES)).rows[0]
    assert row[2:5] == ["cache (warm)", _price(cache), "gateway 120 MiB + Redis 64.0 MiB"]


def test_the_smallest_cache_that_held_at_each_rate_or_that_none_did() -> None:
    results = [
        _step("nocache", "none", 100, 60, 3),
        _step("nocache", "none", 300, 900, 3, dropped=2000),
        _step("cache@8mb", "warm", 100, 3, 0.5, redis_mib=8),
        _step("cache@2mb", "warm", 100, 6, 0.6, redis_mib=2),
        _step("cache@8mb", "warm", 300, 4, 0.5, redis_mib=8),
        _step("cache@2mb", "warm", 300, 30, 0.9, redis_mib=2),
        _step("cache@8mb", "warm", 600, 40, 0.5, redis_mib=8),
        _step("cache@2mb", "warm", 600, 90, 0.9, redis_mib=2),
    ]
    point = MeasuredPoint("cache@2mb", 2 * 2**20, 15_000, 2 * 2**20, 0, 0.61, None, {})
    curve = RateCurve(100, 1000, 1000, 5000, [], [point])
    decision = decide(results, GOAL, PRICES, [curve])
    smallest_of = [one.smallest_cache for one in decision.rates]
    labels = [None if one is None else one.label for one in smallest_of]
    assert labels == ["cache@2mb (warm)", "cache@8mb (warm)", None]
    table = decision_table(decision)
    smallest = table.headers.index("smallest cache that held")
    assert [row[smallest] for row in table.rows] == [
        "cache@2mb (warm): 2 MiB, 61% of reads hit, 15,000 keys held",
        "cache@8mb (warm): 8 MiB",
        "none held",
    ]
    lines = smallest_cache_sentences(decision)
    assert lines[0].startswith(
        "At 100/s the smallest cache that held the goal: cache@2mb (warm), 2 MiB of Redis "
        "(gateway 100 MiB + Redis 2.0 MiB, $"
    )
    assert lines[2] == "At 600/s no cache bound tried (2 MiB, 8 MiB) held the goal."
    # Without memory arms: no column, no sentence.
    plain = decide(results[:2], GOAL, PRICES)
    assert "smallest cache that held" not in decision_table(plain).headers
    assert smallest_cache_sentences(plain) == []


def test_a_decision_is_of_one_distance_and_says_which() -> None:
    results = [_step("cache", "warm", 100, 2, 0.5, redis_mib=2)]
    assert decide(results, GOAL, PRICES).distance is None
    table = decision_table(decide(results, GOAL, PRICES, distance="far"))
    assert table.title.startswith("the decision (far): at each rate")
