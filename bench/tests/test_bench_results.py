"""Unit tests of the figures' arithmetic: drop rate, throughput, hit rate."""

from __future__ import annotations

import pytest
from aside_bench.plan.steps import Step
from aside_bench.records.results import (
    CacheCounts,
    Latency,
    StepResult,
    achieved_rps,
    drop_rate,
    hit_rate,
)
from aside_bench.records.tierstats import increase_across_reset


def test_drop_rate_counts_dropped_and_failed_against_scheduled() -> None:
    assert drop_rate(dropped=30, failed=15, scheduled=1500) == pytest.approx(0.03)
    assert drop_rate(0, 0, 100) == 0


def test_drop_rate_needs_a_schedule() -> None:
    with pytest.raises(ValueError):
        drop_rate(1, 0, 0)


def test_achieved_counts_only_successes() -> None:
    assert achieved_rps(iterations=3000, failed=600, duration_s=30) == pytest.approx(80)
    assert achieved_rps(0, 0, 30) == 0


def test_hit_rate_counts_bypassed_reads_as_not_served_from_cache() -> None:
    assert hit_rate(hits=90, misses=10, bypass=0) == pytest.approx(0.9)
    assert hit_rate(hits=0, misses=0, bypass=500) == 0
    assert hit_rate(0, 0, 0) == 0


def test_increase_across_reset_survives_a_reset() -> None:
    assert increase_across_reset(100, 160) == 60
    assert increase_across_reset(100, 40) == 40  # the gateway restarted: counting began again at 0
    assert increase_across_reset(None, 5) == 5


def _result(p95: float, dropped: int = 0, failed: int = 0) -> StepResult:
    return StepResult(
        step=Step("ceiling", "cache", "warm", 400, 10),
        latency=Latency(p50=1.0, p95=p95, p99=p95 * 2, count=4000),
        iterations=4000,
        failed=failed,
        dropped=dropped,
        cache=CacheCounts(hits=3900, misses=100, bypass=0),
    )


def test_a_step_holds_only_within_the_p95_limit_with_nothing_lost() -> None:
    assert _result(p95=9.9).holds(10)
    assert not _result(p95=10.1).holds(10)
    assert not _result(p95=2, dropped=1).holds(10)
    assert not _result(p95=2, failed=1).holds(10)


def test_step_result_figures() -> None:
    result = _result(p95=5, dropped=40, failed=10)
    assert result.drop_rate == pytest.approx(50 / 4000)
    assert result.achieved_rps == pytest.approx(399)
    assert result.hit_rate == pytest.approx(0.975)
