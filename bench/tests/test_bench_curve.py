"""The miss-ratio curve's pure parts: memory arms, the stream's annotation, the
simulated policies on streams whose answer is known, a step's Redis figures."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from aside_bench.curve.points import MeasuredPoint, measured_point, step_stream
from aside_bench.curve.simulate import (
    NEVER,
    POLICIES,
    Stream,
    capacities,
    curve,
    hit_ratio,
    next_accesses,
    object_ids,
)
from aside_bench.plan.arms import base_arm, cache_param
from aside_bench.plan.steps import (
    Bound,
    PlanError,
    Step,
    arm_bound,
    arm_memory,
    bounded_arms,
    gateway_env,
    parse_bound,
    parse_memory,
    phases_for,
)
from aside_bench.records.results import CacheCounts, Latency, RedisCounts, StepResult, redis_counts
from aside_bench.report.curves import gap_cause
from report_samples import step_record


def test_memory_sizes_are_redis_binary_units() -> None:
    assert parse_memory("4mb") == 4 * 1024 * 1024
    assert parse_memory(" 512KB ") == 512 * 1024
    assert parse_memory("1gb") == 1024**3
    for bad in ("4m", "0mb", "-1mb", "mb", "4.5mb", ""):
        with pytest.raises(PlanError, match="cache memory must look like"):
            parse_memory(bad)


def test_the_cache_arm_runs_once_per_memory_bound_smallest_first() -> None:
    arms = bounded_arms(["nocache", "cache", "hybrid"], "memory", ["16mb", "2mb", "4MB", "2mb"])
    assert arms == ["nocache", "cache@2mb", "cache@4mb", "cache@16mb", "hybrid"]
    assert bounded_arms(["cache"], "memory", []) == ["cache"]
    with pytest.raises(PlanError, match="--cache-memory bounds the cache arms"):
        bounded_arms(["nocache"], "memory", ["2mb"])


def test_l1_entries_and_ttls_bound_their_arms_and_restart_the_gateway_with_them() -> None:
    arms = bounded_arms(["nocache", "l1", "hybrid"], "entries", ["10000keys", "1000keys"])
    assert arms == ["nocache", "l1@1000keys", "l1@10000keys", "hybrid@1000keys", "hybrid@10000keys"]
    untracked = {"CACHE_L1_TRACKING": "off"}
    assert gateway_env("hybrid@1000keys") == {"CACHE_L1_MAX_ENTRIES": "1000", **untracked}
    assert gateway_env("tracking@1000keys") == {"CACHE_L1_MAX_ENTRIES": "1000"}
    assert bounded_arms(["cache"], "ttl", ["ttl5s"]) == ["cache@ttl5s"]
    assert gateway_env("cache@ttl5s") == {"CACHE_TTL_SECONDS": "5", **untracked}
    assert gateway_env("cache@4mb") == untracked and arm_memory("cache@ttl5s") is None
    assert arm_bound("hybrid@1000keys") == Bound("entries", 1000)
    assert bounded_arms(["cache"], "ttl", ["5", "60s"]) == ["cache@ttl5s", "cache@ttl60s"]
    assert bounded_arms(["l1"], "entries", ["200"]) == ["l1@200keys"]
    with pytest.raises(
        PlanError, match="--l1-entries takes values like 1000 or 1000keys, got '4mb'"
    ):
        bounded_arms(["l1"], "entries", ["4mb"])
    with pytest.raises(PlanError, match="--cache-ttl takes values like 5 or 5s, got '5m'"):
        bounded_arms(["cache"], "ttl", ["5m"])
    with pytest.raises(PlanError, match="at least 1"):
        parse_bound("0keys")


def test_a_memory_arm_is_its_base_arm_with_a_bound() -> None:
    assert base_arm("cache@4mb") == "cache" and base_arm("hybrid") == "hybrid"
    assert arm_memory("cache@4mb") == 4 * 1024 * 1024 and arm_memory("cache") is None
    assert cache_param("cache@4mb") == "l2"
    assert phases_for("read", "cache@4mb", "both") == ["cold", "warm"]


def test_next_accesses_point_at_the_same_keys_next_request() -> None:
    ids = object_ids(["a", "b", "a", "c", "b", "a"])
    assert ids == [0, 1, 0, 2, 1, 0]
    assert next_accesses(ids) == [2, 4, 5, NEVER, NEVER, NEVER]


def test_a_cycle_one_key_longer_than_lru_misses_every_time_and_belady_does_not() -> None:
    # k0 .. k10 over and over: LRU of 10 keys always evicts the next key asked for.
    cycle = [f"k{i}" for i in range(11)]
    stream = Stream(cycle * 100, warmup=11)
    assert hit_ratio(stream, "LRU", 10) == 0
    # Belady keeps the keys that come back soonest: 9 of every 10 requests hit.
    assert hit_ratio(stream, "Belady", 10) == pytest.approx(0.9, abs=0.01)
    # A cache with room for every key twice over hits every measured request
    # (S3-FIFO keeps a tenth of it for keys seen once).
    assert all(hit_ratio(stream, policy, 22) == 1 for policy in POLICIES)
    with pytest.raises(ValueError, match="at least 10 keys"):
        hit_ratio(stream, "S3-FIFO", 9)


def test_the_warm_up_fills_the_cache_without_counting() -> None:
    keys = [f"k{i}" for i in range(10)] * 2
    assert hit_ratio(Stream(keys), "LRU", 10) == 0.5
    assert hit_ratio(Stream(keys, warmup=10), "LRU", 10) == 1.0
    with pytest.raises(ValueError, match="outside a stream"):
        Stream(keys, warmup=21)


def test_on_a_skewed_stream_belady_bounds_every_policy_and_more_memory_hits_more() -> None:
    rng = random.Random(3)
    weights = [1 / (rank + 1) ** 0.99 for rank in range(5000)]
    keys = [f"k{k}" for k in rng.choices(range(5000), weights=weights, k=20000)]
    sizes = [50, 500, 2000]
    points = curve(Stream(keys, warmup=10000), sizes)
    by = {(p.policy, p.capacity): p.hit_ratio for p in points}
    for size in sizes:
        for policy in POLICIES:
            assert by[(policy, size)] <= by[("Belady", size)] + 1e-9, (policy, size)
    for policy in POLICIES:
        assert by[(policy, 50)] < by[(policy, 500)] < by[(policy, 2000)], policy


def test_curve_sizes_span_a_hundredth_to_every_key_and_keep_the_measured_ones() -> None:
    sizes = capacities(10000, also=[1234])
    assert sizes[0] == 100 and sizes[-1] == 10000 and 1234 in sizes
    assert sizes == sorted(set(sizes))
    assert capacities(500)[0] == 10  # never below the smallest cache simulated
    assert capacities(0) == [] and capacities(7) == [10]


def test_a_steps_redis_figures_are_its_counters_increase() -> None:
    start = {"keys": 0, "used_memory": 900_000, "evicted_keys": 10, "expired_keys": 1}
    end = {"keys": 1500, "used_memory": 1_900_000, "evicted_keys": 510, "expired_keys": 1}
    counts = redis_counts({"start": start, "end": end}, {"maxmemory": 2 * 1024 * 1024})
    assert counts is not None
    assert (counts.keys, counts.evicted, counts.expired) == (1500, 500, 0)
    assert counts.maxmemory == 2 * 1024 * 1024
    assert redis_counts(None, None) is None
    assert redis_counts({"start": start, "end": end}, None).maxmemory is None


# ---- a measured point against the simulation: the stream, the size, the causes -------


def _trace(path, keys: list[str]) -> None:
    path.write_text("".join(f"{key}\t{i / 100:.2f}\n" for i, key in enumerate(keys)))


def test_a_warm_steps_stream_is_its_cold_steps_keys_then_its_own(tmp_path) -> None:
    cold, warm = ["a", "b", "a", "c"], ["b", "d"]
    _trace(tmp_path / "cold.trace", cold)
    _trace(tmp_path / "warm.trace", warm)
    steps = [
        step_record(phase="cold", key_trace="cold.trace"),
        step_record(key_trace="warm.trace", skip=4),
    ]
    stream = step_stream(steps, 1, tmp_path)
    assert stream is not None
    assert list(stream.keys) == cold + warm and stream.warmup == len(cold)
    assert stream.measured == len(warm)
    # A warm step that started over (no skip): its own keys alone, none a warm-up.
    alone = step_stream([steps[0], replace(steps[1], skip=0)], 1, tmp_path)
    assert alone is not None and list(alone.keys) == warm and alone.warmup == 0
    # The cold step's trace missing: no stream rather than a wrong one.
    (tmp_path / "cold.trace").unlink()
    assert step_stream(steps, 1, tmp_path) is None


def _warm(evicted: int, held: int, hit_rate: float, expired: int = 0,
          failed: int = 0) -> StepResult:  # fmt: skip
    redis = RedisCounts(held, 2**20, evicted, expired, 2**20, keys_held=held)
    hits = round(hit_rate * 1000)
    return StepResult(Step("read", "cache@1mb", "warm", 100, 10), Latency(1, 2, 3, 1000), 1000,
                      failed, 0, CacheCounts(hits, 1000 - hits, 0), redis=redis)  # fmt: skip


def _cyclic(keys: int, rounds: int) -> Stream:
    ring = [f"k{i}" for i in range(keys)]
    return Stream(ring * rounds, warmup=keys)


def test_a_cache_that_never_evicted_is_simulated_holding_every_key() -> None:
    # 50 keys asked in a cycle after a warm-up: a cache that never filled hits them
    # all, whatever its median key count while it filled.
    point = measured_point(_cyclic(50, 4), _warm(evicted=0, held=30, hit_rate=1.0), None)
    assert point.never_full and point.simulated_keys == 50
    assert point.simulated["LRU"] == 1.0
    assert gap_cause(point) == "within 3 points"
    # The same median held by a cache that evicted: simulated at 30 keys, where
    # LRU misses every request of a cycle of 50.
    full = measured_point(_cyclic(50, 4), _warm(evicted=200, held=30, hit_rate=0.2), None)
    assert not full.never_full and full.simulated_keys == 30
    assert full.simulated["LRU"] == 0.0
    assert "200 evicted by Redis's sampled LRU" in gap_cause(full)


def test_the_cold_steps_evictions_count_for_the_stream() -> None:
    cold = _warm(evicted=7, held=30, hit_rate=0.0, expired=2, failed=1)
    point = measured_point(_cyclic(50, 4), _warm(evicted=0, held=30, hit_rate=0.2), cold)
    assert (point.evicted, point.expired, point.failed) == (7, 2, 1)
    assert point.simulated_keys == 30  # it filled during the cold step


def test_a_point_that_held_few_keys_is_still_simulated_at_its_size() -> None:
    point = measured_point(_cyclic(4, 10), _warm(evicted=90, held=3, hit_rate=0.0), None)
    assert point.simulated_keys == 3
    assert "LRU" in point.simulated and "S3-FIFO" not in point.simulated
    # A cache that held no key hits nothing in any policy; a measured hit rate
    # above that names what it counted.
    empty = measured_point(_cyclic(4, 10), _warm(evicted=90, held=0, hit_rate=0.14), None)
    assert empty.simulated_keys == 0 and set(empty.simulated.values()) == {0.0}
    assert gap_cause(empty).startswith("90 evicted by Redis's sampled LRU")
    # Its clients' buffers taking the bound is a measured cause too.
    crowded = MeasuredPoint("cache@1mb", 2**20, 0, 2**20, 90, 0.14, 2**20 * 3 // 4, {"LRU": 0.0},
                            simulated_keys=0)  # fmt: skip
    assert gap_cause(crowded).startswith("its clients' buffers took 0.75 of its 1.00 MiB")


def test_a_gap_beyond_three_points_names_each_counted_cause() -> None:
    def point(hit: float, evicted: int = 0, expired: int = 0, failed: int = 0) -> MeasuredPoint:
        return MeasuredPoint("cache@2mb", 2**21, 500, 2**21, evicted, hit, None, {"LRU": 0.5},
                             expired=expired, failed=failed, simulated_keys=500)  # fmt: skip

    assert gap_cause(point(0.53)) == "within 3 points"
    assert gap_cause(point(0.47, evicted=9)) == "within 3 points"
    assert gap_cause(point(0.6)) == "no counted cause: no eviction, expiry or failure"
    cause = gap_cause(point(0.4, evicted=12, expired=3, failed=2))
    assert "12 evicted" in cause and "3 expired by TTL" in cause and "2 requests failed" in cause
