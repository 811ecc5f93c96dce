"""The saving split between coalescing the misses and the hits, on fixed inputs."""

from __future__ import annotations

import pytest
from aside_bench.plan.steps import Step
from aside_bench.records.goal import Goal
from aside_bench.records.prices import Prices, step_spend
from aside_bench.records.results import CacheCounts, Latency, StepResult
from aside_bench.records.tierstats import StepCost
from aside_bench.report.answer import answer
from aside_bench.report.split import Split, answer_lines, rate_splits, split_sentence, split_table

PRICES = Prices(vcpu_hour=0.036, gib_hour=0.0036)
# Wide enough that every arm of _run holds it at 100/s and only the cache at 200/s.
GOAL = Goal(p95_ms=250)
LOOSE = Goal(p95_ms=1000, drop_tolerance=1.0)  # every step holds it


def _cost(postgres_ms: float) -> StepCost:
    return StepCost(
        requests=0, cpu_ms_per_request=1.0, gateway_rss_mib=100, redis_rss_mib=None,
        l1_hit_rate=None, l2_hit_rate=None, l1_entries=None, l1_mib=None, lag_count=0,
        lag_p50_ms=None, lag_p99_ms=None, lag_max_ms=None,
        postgres_cpu_ms_per_request=postgres_ms, redis_cpu_ms_per_request=0.0,
    )  # fmt: skip


def _step(arm: str, phase: str, rate: int, p95: float, postgres_ms: float,
          dropped: int = 0) -> StepResult:  # fmt: skip
    return StepResult(
        step=Step("read", arm, phase, rate, 10),
        latency=Latency(p95 / 2, p95, p95 * 2, rate * 10),
        iterations=rate * 10 - dropped,
        failed=0,
        dropped=dropped,
        cache=CacheCounts(0, 0, rate * 10),
        cost=_cost(postgres_ms),
    )


def _price(result: StepResult) -> float:
    spend = step_spend(result)
    assert spend is not None
    return spend.per_million(PRICES)


def test_a_split_gives_coalescing_what_the_coalesce_arm_reached_and_the_hits_the_rest() -> None:
    split = Split(uncached=10.0, coalesced=4.0, cached=2.0)
    assert split.saving == 8.0
    assert split.by_coalescing == 6.0
    assert split.by_hits == 2.0
    assert split.hits_share == pytest.approx(0.25)


def test_coalescing_that_holds_everything_leaves_the_hits_nothing() -> None:
    # The coalesce arm as cheap as the cache, or cheaper: all of the saving is coalescing's.
    for coalesced in (2.0, 1.0):
        split = Split(uncached=10.0, coalesced=coalesced, cached=2.0)
        assert split.by_coalescing == 8.0
        assert split.by_hits == 0.0
        assert split.hits_share == 0.0


def test_coalescing_that_holds_nothing_leaves_the_hits_everything() -> None:
    # As costly as the uncached read, or costlier: none of the saving is coalescing's.
    for coalesced in (10.0, 12.0):
        split = Split(uncached=10.0, coalesced=coalesced, cached=2.0)
        assert split.by_coalescing == 0.0
        assert split.by_hits == 8.0
        assert split.hits_share == 1.0


def test_no_saving_has_no_share() -> None:
    split = Split(uncached=2.0, coalesced=3.0, cached=2.5)
    assert split.hits_share is None
    assert split.by_coalescing == split.by_hits == 0.0


def _run() -> list[StepResult]:
    return [
        _step("nocache", "none", 100, 90.0, 40.0),
        _step("nocache", "none", 200, 580.0, 47.0, dropped=1630),
        _step("coalesce", "none", 100, 30.0, 10.0),
        _step("coalesce", "none", 200, 250.0, 12.6, dropped=200),
        _step("cache", "cold", 200, 300.0, 20.0),
        _step("cache", "warm", 100, 3.0, 2.0),
        _step("cache", "warm", 200, 208.0, 8.5),
    ]


def test_every_rate_the_three_arms_share_is_split_from_the_runs_own_figures() -> None:
    results = _run()
    splits = rate_splits(results, PRICES, LOOSE)
    assert [(s.cached_label, s.rate) for s in splits] == [
        ("cache (warm)", 100),
        ("cache (warm)", 200),
    ]
    at200 = splits[1]
    assert at200.cost is not None and at200.p95 is not None
    assert at200.cost.uncached == pytest.approx(_price(results[1]))
    assert at200.cost.coalesced == pytest.approx(_price(results[3]))
    assert at200.cost.cached == pytest.approx(_price(results[6]))
    assert (at200.p95.uncached, at200.p95.coalesced, at200.p95.cached) == (580.0, 250.0, 208.0)
    assert at200.drops.uncached == pytest.approx(1630 / 2000)
    assert at200.drops.coalesced == pytest.approx(0.1)
    assert at200.drops.cached == 0.0


def test_the_answer_states_the_split_at_the_highest_rate() -> None:
    results = _run()
    lines = answer_lines(results, PRICES, LOOSE)
    assert len(lines) == 2
    line = lines[0]
    cost = rate_splits(results, PRICES, LOOSE)[1].cost
    assert cost is not None and cost.hits_share is not None
    assert line.startswith("At 200/s, what the cache itself bought (cache (warm)): nocache $")
    assert f"coalescing alone recovered {1 - cost.hits_share:.0%} of the saving, the hits " in line
    assert "p95 580.0 / 250.0 / 208.0 ms" in line
    assert "dropped or failed 81.5% / 10.0% / 0.0%" in line
    # And the report's answer carries it.
    assert line in answer(results, [], PRICES, LOOSE, False)
    # The hits' share over both rates: p95 (60 - 3) / (90 - 3) at 100/s and
    # (250 - 208) / (580 - 208) at 200/s.
    low, high = (250 - 208) / (580 - 208), (30 - 3) / (90 - 3)
    assert lines[1].startswith(
        "Over the 2 rates where the three arms held the goal (100, 200/s), the hits of "
    )
    assert f"{low:.0%}-{high:.0%} of the p95 saving" in lines[1]


def test_the_split_is_stated_at_the_highest_rate_all_three_were_priced() -> None:
    results = _run()
    # Nothing served at 200/s by the uncached arm: no cost there, so the sentence
    # speaks of 100/s, where all three were priced.
    results[1] = _step("nocache", "none", 200, 580.0, 47.0, dropped=2000)
    line = answer_lines(results, PRICES, LOOSE)[0]
    assert line.startswith("At 100/s, what the cache itself bought")
    assert "per million requests" in line


def test_without_a_coalesce_arm_nothing_is_split() -> None:
    results = [r for r in _run() if r.step.arm != "coalesce"]
    assert rate_splits(results, PRICES, LOOSE) == []
    assert answer_lines(results, PRICES, LOOSE) == []
    assert split_table(results, PRICES, LOOSE) is None


def test_the_table_has_a_row_per_rate_with_the_hits_share() -> None:
    table = split_table(_run(), PRICES, LOOSE)
    assert table is not None
    assert [row[:2] for row in table.rows] == [["cache (warm)", "100"], ["cache (warm)", "200"]]
    p95_share = table.rows[1][table.headers.index("hits' share of the p95 saving")]
    # (250 - 208) / (580 - 208) of the p95 saving is the hits'.
    assert p95_share == f"{(250 - 208) / (580 - 208):.0%}"


def test_an_index_that_coalescing_only_slows_leaves_every_saving_to_the_hits() -> None:
    # On an indexed table a batched read can be slower than a read of its own.
    results = [
        _step("index", "none", 100, 6.0, 1.0),
        _step("index", "none", 300, 19.0, 0.8),
        _step("coalesce", "none", 100, 7.0, 1.2),
        _step("coalesce", "none", 300, 38.0, 1.0),
        _step("cache", "warm", 100, 5.0, 0.5),
        _step("cache", "warm", 300, 12.0, 0.3),
    ]
    lines = answer_lines(results, PRICES, LOOSE)
    assert (
        "coalescing alone recovered none of the saving: the hits account for all of it"
        in (lines[0])
    )
    assert "p95 19.0 / 38.0 / 12.0 ms (the hits' share of that saving 100%)" in lines[0]
    assert lines[1].endswith("(coalescing none of it).")


def test_where_coalescing_alone_missed_the_goal_it_is_credited_with_no_share() -> None:
    # An indexed table: the uncached read and the cache hold 250 ms at 100/s and
    # 200/s, the coalesce arm holds at 100/s and drops a tenth of its load at 200/s.
    results = [
        _step("index", "none", 100, 90.0, 40.0),
        _step("index", "none", 200, 120.0, 42.0),
        _step("coalesce", "none", 100, 30.0, 10.0),
        _step("coalesce", "none", 200, 240.0, 4.0, dropped=200),
        _step("cache", "warm", 100, 3.0, 2.0),
        _step("cache", "warm", 200, 4.0, 2.0),
    ]
    splits = rate_splits(results, PRICES, GOAL)
    assert [one.comparable for one in splits] == [True, False]
    at200 = splits[1]
    assert at200.cost is not None and at200.cost_split is None
    lines = answer_lines(results, PRICES, GOAL)
    # The highest rate all three held is 100/s: the split is stated there.
    assert lines[0].startswith("At 100/s, what the cache itself bought (cache (warm)): index $")
    assert "coalescing alone recovered" in lines[0]
    # At 200/s coalescing's cheaper $ per request served is no share of a saving.
    line = split_sentence(at200)
    assert line.startswith(
        "At 200/s, what the cache itself bought (cache (warm)): coalescing alone did not hold "
        "the goal (coalesce (served 180/s of 200)), so none of the saving (index $"
    ), line
    assert "recovered" not in line and "share" not in line
    assert "p95 120.0 / 240.0 / 4.0 ms; dropped or failed 0.0% / 10.0% / 0.0%" in line
    table = split_table(results, PRICES, GOAL)
    assert table is not None
    row = table.rows[1]
    assert row[table.headers.index("coalesce $/M")] == "missed: served 180/s of 200"
    assert row[table.headers.index("hits' share of the $ saving")] == "not split"
    assert row[table.headers.index("hits' share of the p95 saving")] == "not split"


def test_where_no_rate_had_all_three_at_the_goal_nothing_is_split() -> None:
    # As the sample run: the uncached read and coalescing miss at every rate.
    results = [r for r in _run() if r.step.rate == 200 and r.step.phase != "cold"]
    lines = answer_lines(results, PRICES, Goal(p95_ms=210))
    assert lines[0] == (
        "At no rate tried did nocache, coalesce and cache (warm) all hold the goal, so no "
        "saving of the same service is split between coalescing and the hits."
    )
    assert lines[1].startswith(
        "At 200/s, what the cache itself bought (cache (warm)): not split: nocache (served "
        "37/s of 200), coalesce (served 180/s of 200) missed the goal, so no price of the same "
        "service stands against cache (warm)'s; p95 580.0 / 250.0 / 208.0 ms"
    ), lines[1]
    assert not any("$" in line for line in lines)
