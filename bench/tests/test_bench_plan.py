"""Unit tests of the bench plan: parameters, step order, the driver's pool."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from aside_bench.plan.steps import (
    MIN_POOL,
    SCRAPE_ROOM,
    PlanError,
    Step,
    build_steps,
    parse_arms,
    parse_duration,
    parse_rates,
    phases_for,
    pool_for,
    resolve_arms,
)
from aside_bench.sweep.runner import Runner


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("2m", 120), ("1m30s", 90), ("1h", 3600), ("45", 45), (" 10s ", 10)],
)
def test_parse_duration_accepts_go_style_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0s", "0", "10ms", "-5s", "abc", "1.5s", "s"])
def test_parse_duration_rejects_the_rest(text: str) -> None:
    with pytest.raises(PlanError, match="duration"):
        parse_duration(text)


def test_parse_rates_sorts_and_deduplicates() -> None:
    assert parse_rates("300 30, 50 30") == [30, 50, 300]


@pytest.mark.parametrize("text", ["", "  ", "0", "10 -5", "ten", "1.5"])
def test_parse_rates_rejects_bad_rates(text: str) -> None:
    with pytest.raises(PlanError, match="rate"):
        parse_rates(text)


def test_parse_arms_keeps_order_and_drops_repeats() -> None:
    assert parse_arms("cache nocache cache", ("nocache", "cache")) == ["cache", "nocache"]


def test_parse_arms_names_the_unknown_arm() -> None:
    with pytest.raises(PlanError, match="'redis'"):
        parse_arms("nocache redis", ("nocache", "cache"))


def test_an_indexed_seed_turns_nocache_into_index() -> None:
    assert resolve_arms(["nocache", "cache"], seed_indexed=True) == ["index", "cache"]
    assert resolve_arms(["nocache", "cache"], seed_indexed=False) == ["nocache", "cache"]


def test_the_index_arm_needs_an_indexed_seed() -> None:
    with pytest.raises(PlanError, match="INDEX=1"):
        resolve_arms(["index"], seed_indexed=False)


def test_only_the_cache_arm_has_cold_and_warm_phases() -> None:
    assert phases_for("read", "cache", "both") == ["cold", "warm"]
    assert phases_for("read", "cache", "warm") == ["warm"]
    assert phases_for("read", "nocache", "both") == ["none"]
    with pytest.raises(PlanError):
        phases_for("read", "cache", "lukewarm")


def test_steps_run_by_rising_rate_then_arm_then_cold_before_warm() -> None:
    steps = build_steps("read", [50, 30], ["nocache", "cache"], "both", 30)
    assert [(s.rate, s.arm, s.phase) for s in steps] == [
        (50, "nocache", "none"),
        (50, "cache", "cold"),
        (50, "cache", "warm"),
        (30, "nocache", "none"),
        (30, "cache", "cold"),
        (30, "cache", "warm"),
    ]
    assert all(s.duration_s == 30 and s.scenario == "read" for s in steps)


def test_compute_steps_have_no_phase() -> None:
    steps = build_steps("compute", [1, 2], ["go", "python"], "both", 10)
    assert [(s.rate, s.arm, s.phase) for s in steps] == [
        (1, "go", "none"), (1, "python", "none"), (2, "go", "none"), (2, "python", "none"),
    ]  # fmt: skip


def test_arms_must_belong_to_the_scenario() -> None:
    with pytest.raises(PlanError, match="compute"):
        build_steps("compute", [1], ["cache"], "both", 10)
    with pytest.raises(PlanError, match="scenario"):
        build_steps("write", [1], ["cache"], "both", 10)


def test_scheduled_requests_are_rate_times_duration() -> None:
    assert Step("read", "cache", "warm", 75, 30).scheduled == 2250


@pytest.mark.parametrize("rate", [1, 30, 100, 1000, 5000])
def test_the_pool_covers_a_second_of_the_rate_and_stays_bounded(rate: int) -> None:
    pool = pool_for(rate, max_pool=1000)
    # A worker per request of the latency budget, up to the cap: a slow stack shows as drops.
    assert MIN_POOL <= pool <= 1000
    assert pool >= min(rate, 1000)


def test_the_pool_cap_wins() -> None:
    assert pool_for(5000, max_pool=50) == 50


def test_a_sweeps_pools_stay_below_what_one_gateway_worker_holds() -> None:
    bounds = iter([100, 40])  # what the gateway says, before and after a restart
    runner = object.__new__(Runner)  # only what max_pool reads
    runner.options = SimpleNamespace(max_pool=1000)  # type: ignore[assignment]
    runner.probe = SimpleNamespace(connections_per_worker=lambda: next(bounds))  # type: ignore[assignment]
    runner.connection_bound_read = False
    assert runner.max_pool == 100 - SCRAPE_ROOM
    assert runner.max_pool == 100 - SCRAPE_ROOM  # read once
    runner.connection_bound_read = False  # the gateway was restarted
    assert runner.max_pool == 40 - SCRAPE_ROOM
