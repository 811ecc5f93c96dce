"""The cost arithmetic and the answer's wording, on fixed inputs."""

from __future__ import annotations

import pytest
from aside_bench.curve.points import MeasuredPoint, RateCurve
from aside_bench.plan.steps import Step
from aside_bench.records.goal import Goal
from aside_bench.records.prices import Prices, Spend, step_spend
from aside_bench.records.results import CacheCounts, Latency, RedisCounts, StepResult
from aside_bench.records.tierstats import StepCost
from aside_bench.report.answer import Series, answer, break_even_sentence, goal_sentence

PRICES = Prices(vcpu_hour=0.036, gib_hour=0.0036)
GOAL = Goal(10)


def _cost(gateway_ms: float, postgres_ms: float, redis_ms: float, rss_mib: float) -> StepCost:
    return StepCost(
        requests=0, cpu_ms_per_request=gateway_ms, gateway_rss_mib=rss_mib,
        redis_rss_mib=None, l1_hit_rate=None, l2_hit_rate=None, l1_entries=None, l1_mib=None,
        lag_count=0, lag_p50_ms=None, lag_p99_ms=None, lag_max_ms=None,
        postgres_cpu_ms_per_request=postgres_ms, redis_cpu_ms_per_request=redis_ms,
    )  # fmt: skip


def _step(arm: str, phase: str, rate: int, p95: float, cpu: tuple[float, float, float],
          rss_mib: float = 100, redis_mib: float | None = None,
          failed: int = 0) -> StepResult:  # fmt: skip
    redis = None if redis_mib is None else RedisCounts(1000, int(redis_mib * 2**20), 0, 0)
    return StepResult(
        step=Step("read", arm, phase, rate, 10),
        latency=Latency(p95 / 2, p95, p95 * 2, rate * 10),
        iterations=rate * 10,
        failed=failed,
        dropped=0,
        cache=CacheCounts(rate * 5, rate * 5, 0),
        cost=_cost(*cpu, rss_mib),
        redis=redis,
    )


def test_a_million_requests_cost_their_cpu_and_the_memory_held_meanwhile() -> None:
    spend = Spend(gateway_cpu_ms=2, postgres_cpu_ms=7, redis_cpu_ms=1, memory_mib=1024,
                  served_per_s=100)  # fmt: skip
    # 10 ms x 1e6 = 10,000 CPU seconds = 2.78 vCPU-hours at $0.036.
    assert spend.cpu_per_million(PRICES) == pytest.approx(10_000 / 3600 * 0.036)
    # 1 GiB held for 1e6 / 100 s = 2.78 hours at $0.0036.
    assert spend.memory_per_million(PRICES) == pytest.approx(10_000 / 3600 * 0.0036)
    assert spend.per_million(PRICES) == pytest.approx(10_000 / 3600 * 0.0396)
    # Twice the rate: the same CPU, half the memory's share.
    faster = Spend(2, 7, 1, 1024, 200)
    assert faster.memory_per_million(PRICES) == pytest.approx(spend.memory_per_million(PRICES) / 2)


def test_an_uncached_step_pays_no_redis() -> None:
    cached = step_spend(_step("cache", "warm", 100, 2, (1, 0.5, 0.3), redis_mib=24))
    uncached = step_spend(_step("nocache", "none", 100, 90, (1, 40, 0.3)))
    assert cached is not None and uncached is not None
    assert (cached.redis_cpu_ms, cached.memory_mib) == (0.3, 124)
    assert (uncached.redis_cpu_ms, uncached.memory_mib) == (0, 100)
    # Nothing served: no cost per request.
    assert step_spend(_step("nocache", "none", 100, 90, (1, 40, 0.3), failed=1000)) is None


def test_the_goal_sentence_names_the_last_rate_held_and_the_first_missed() -> None:
    steps = [_step("nocache", "none", rate, p95, (1, 1, 0)) for rate, p95 in
             ((50, 4.0), (100, 8.0), (200, 35.5))]  # fmt: skip
    assert goal_sentence(Series("nocache", "none", steps), GOAL) == (
        "nocache held the goal up to 100/s and missed it from 200/s "
        "(p95 35.5 ms, 0.0% dropped or failed, served 200/s of 200)."
    )
    assert goal_sentence(Series("nocache", "none", steps[:2]), GOAL) == (
        "nocache held the goal at every rate tried (up to 100/s)."
    )
    assert goal_sentence(Series("nocache", "none", steps[2:]), GOAL).startswith(
        "nocache missed the goal at every rate tried, from 200/s"
    )
    # A miss below a rate held (a noisy machine): both said, no threshold claimed.
    bumpy = [steps[2], _step("nocache", "none", 400, 3.0, (1, 1, 0))]
    assert goal_sentence(Series("nocache", "none", bumpy), GOAL) == (
        "nocache held the goal at 400/s and missed it at 200/s "
        "(at 200/s: p95 35.5 ms, 0.0% dropped or failed, served 200/s of 200)."
    )


def test_the_break_even_is_the_first_rate_from_which_the_cache_is_cheaper() -> None:
    # Uncached: 4 ms of CPU a request, 100 MiB. Cached: 1 ms, but 2 GiB of Redis.
    def series(arm: str, phase: str, cpu: tuple[float, float, float],
               redis: float | None) -> Series:  # fmt: skip
        return Series(arm, phase, [_step(arm, phase, rate, 1, cpu, redis_mib=redis)
                                   for rate in (10, 100, 1000)])  # fmt: skip

    uncached = series("nocache", "none", (1, 3, 0), None)
    cached = series("cache", "warm", (0.8, 0, 0.2), 2048)
    sentence = break_even_sentence(cached, uncached, PRICES, GOAL)
    assert sentence is not None and sentence.startswith(
        "cache (warm) cost less than nocache from 100/s on, of the rates both held the goal ($"
    ), sentence
    cheap = series("cache", "warm", (0.8, 0, 0.2), 1)
    assert "at every rate tried" in (break_even_sentence(cheap, uncached, PRICES, GOAL) or "")
    dear = series("cache", "warm", (5, 0, 0.2), 2048)
    assert (break_even_sentence(dear, uncached, PRICES, GOAL) or "").startswith(
        "cache (warm) cost more than nocache at every rate tried"
    )


def test_the_answer_speaks_of_the_goal_the_cost_the_memory_and_the_index() -> None:
    results = [
        _step("nocache", "none", 100, 60, (1, 30, 0)),
        _step("cache@2mb", "cold", 100, 30, (1, 10, 0.2), redis_mib=2),
        _step("cache@2mb", "warm", 100, 8, (1, 5, 0.2), redis_mib=2),
    ]
    point = MeasuredPoint("cache@2mb", 2 * 2**20, 15_000, 2 * 2**20, 900, 0.61, 2**20,
                          {"LRU": 0.63, "Belady": 0.74})  # fmt: skip
    starved = MeasuredPoint("cache@1mb", 2**20, 3, 2**20, 900, 0.05, 2**20 * 3 // 4,
                            {"LRU": 0.01, "Belady": 0.02})  # fmt: skip
    curve = RateCurve(100, 1000, 1000, 5000, [], [point, starved])
    lines = answer(results, [curve], PRICES, GOAL, seed_indexed=False)
    assert lines[0].startswith("Service goal: p95 <= 10 ms with at most 0.1% of the requests")
    assert "nocache missed the goal at every rate tried, from 100/s" in lines[1]
    assert lines[2] == "cache@2mb (warm) held the goal at every rate tried (up to 100/s)."
    # nocache missed where the cache held: their prices are not compared.
    assert lines[3].startswith("cache@2mb (warm) and nocache held the goal at no rate both ran")
    assert lines[4].startswith(
        "At 100/s the smallest cache that held the goal: cache@2mb (warm), 2 MiB of Redis"
    )
    assert lines[6] == (
        "At 100/s, 2 MiB of Redis held 15,000 keys and answered 61% of reads "
        "(a simulated LRU of that size: 63%; Belady, the bound: 74%)."
    )
    # A bound its clients' buffers took: no comparison with a simulated size.
    assert lines[7] == (
        "At 100/s, 1 MiB of Redis held almost no key during the step: its clients' buffers "
        "took 768 KiB of it; it answered 5% of reads."
    )
    assert "make seed INDEX=1" in lines[-1]
    assert not any("cold" in line for line in lines)  # a cold cache is the warm-up


def test_the_cpu_of_failed_requests_is_charged_to_the_served_ones() -> None:
    # 100/s for 10 s, the gateway answered 1,000 requests of which 500 failed.
    result = _step("nocache", "none", 100, 900, (2, 40, 0), failed=500)
    assert result.cost is not None
    result.cost.requests = 1000
    spend = step_spend(result)
    assert spend is not None and spend.served_per_s == 50
    assert (spend.gateway_cpu_ms, spend.postgres_cpu_ms) == (4, 80)
