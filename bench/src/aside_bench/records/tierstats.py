"""A step's gateway cost and tier figures from the probes around it (sweep/stepprobe.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from aside_bench.records.documents import StepProbe
from aside_bench.records.saturation import busy_share, steal_share

TIERS = ("l1", "l2")
Bucket = tuple[float, float]  # (upper bound `le`, cumulative count)


def increase_across_reset(start: float | None, end: float | None) -> float:
    """Increase of a counter between two instants; a restart (reset) counts from 0."""
    start, end = start or 0.0, end or 0.0
    return end - start if end >= start else end


def increases(start: dict[str, float], end: dict[str, float]) -> dict[str, float]:
    """Each counter's increase from `start` to `end` (a restart counts from 0)."""
    return {key: increase_across_reset(start.get(key), value) for key, value in end.items()}


def tier_hit_rates(start: dict[str, float], end: dict[str, float]) -> dict[str, float | None]:
    """Per tier, hits / lookups over the interval (None: not looked in)."""
    delta = increases(start, end)
    hits = {tier: delta.get(f"{tier} hit", 0.0) for tier in TIERS}
    lookups = {tier: hits[tier] + delta.get(f"{tier} miss", 0.0) for tier in TIERS}
    return {tier: hits[tier] / lookups[tier] if lookups[tier] > 0 else None for tier in TIERS}


def cpu_ms_per_request(
    start_ticks: float | None, end_ticks: float | None, clk_tck: float, requests: float
) -> float | None:
    """The gateway's CPU ms (utime + stime ticks) per request; None without one."""
    if start_ticks is None or end_ticks is None or requests <= 0 or clk_tck <= 0:
        return None
    return max(end_ticks - start_ticks, 0.0) / clk_tck * 1000 / requests


def _le(text: str) -> float:
    return math.inf if text in ("+Inf", "inf", "Inf") else float(text)


def bucket_increase(start: dict[str, float], end: dict[str, float]) -> list[Bucket]:
    """A histogram's cumulative buckets (le, count) between two readings, sorted by le."""
    delta = increases(start, end)
    buckets: list[Bucket] = []
    running = 0.0
    for le, count in sorted((_le(key), value) for key, value in delta.items()):
        running = max(running, count)
        buckets.append((le, running))
    return buckets


def nearest_rank(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0 < q <= 100) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(q / 100 * len(ordered)) - 1, 0)]


def histogram_quantile(q: float, buckets: list[Bucket]) -> float | None:
    """The q-quantile of cumulative buckets as Prometheus' histogram_quantile computes it."""
    if not 0 <= q <= 1:
        raise ValueError("q must be in [0, 1]")
    if len(buckets) < 2 or not math.isinf(buckets[-1][0]):
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    index = next(i for i, (_, count) in enumerate(buckets) if count >= rank)
    if index == len(buckets) - 1:
        return buckets[-2][0]
    upper, count = buckets[index]
    lower, below = (0.0, 0.0) if index == 0 else buckets[index - 1]
    if index == 0 and upper <= 0:
        return upper
    in_bucket = count - below
    if in_bucket <= 0:
        return upper
    return lower + (upper - lower) * (rank - below) / in_bucket


def histogram_max(buckets: list[Bucket]) -> float | None:
    """The le of the highest bucket that gained an observation; None without one."""
    below = 0.0
    highest = None
    for le, count in buckets:
        if count > below:
            highest = le
        below = count
    return highest


@dataclass
class StepCost:
    """A step's gateway figures; a field is None when it could not be read."""

    requests: float
    cpu_ms_per_request: float | None
    gateway_rss_mib: float | None
    redis_rss_mib: float | None
    l1_hit_rate: float | None
    l2_hit_rate: float | None
    l1_entries: float | None
    l1_mib: float | None
    lag_count: float
    lag_p50_ms: float | None
    lag_p99_ms: float | None
    lag_max_ms: float | None  # an upper bound: the top of the highest bucket used
    # The same messages' lag at a subscriber doing nothing else (sweep/invalidation_lag_floor.py).
    floor_count: int | None = None
    floor_p50_ms: float | None = None
    floor_p99_ms: float | None = None
    # PostgreSQL's and Redis's CPU per request the gateway answered.
    postgres_cpu_ms_per_request: float | None = None
    redis_cpu_ms_per_request: float | None = None
    proxy_cpu_ms_per_request: float | None = None  # toxiproxy's: the lab's, not the service's
    # The share of the machine's cores busy (every process) and, of it, the host's steal.
    machine_busy: float | None = None
    host_steal: float | None = None


def _mib(kib: float | None) -> float | None:
    return None if kib is None else kib / 1024


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def step_cost(probe: StepProbe | None) -> StepCost | None:
    """The figures of a run.json step's "probe"; None when a reading is missing."""
    if not probe or not probe.get("start") or not probe.get("end"):
        return None
    start, end = probe["start"], probe["end"]
    requests = increase_across_reset(start.get("requests"), end.get("requests"))
    rates = tier_hit_rates(start.get("tier_reads", {}), end.get("tier_reads", {}))
    lag = bucket_increase(start.get("lag_buckets", {}), end.get("lag_buckets", {}))
    l1_bytes, clk_tck = end.get("l1_bytes"), float(end.get("clk_tck", 100))
    floor = probe.get("floor") or {}

    def service_cpu(service: str) -> float | None:
        before, after = (one.get("service_cpu_ticks") or {} for one in (start, end))
        return cpu_ms_per_request(before.get(service), after.get(service), clk_tck, requests)

    return StepCost(
        requests=requests,
        cpu_ms_per_request=cpu_ms_per_request(
            start.get("cpu_ticks"), end.get("cpu_ticks"), clk_tck, requests
        ),
        gateway_rss_mib=_mib(end.get("gateway_rss_kib")),
        redis_rss_mib=_mib(end.get("redis_rss_kib")),
        l1_hit_rate=rates["l1"],
        l2_hit_rate=rates["l2"],
        l1_entries=end.get("l1_entries"),
        l1_mib=None if l1_bytes is None else l1_bytes / 2**20,
        lag_count=lag[-1][1] if lag else 0.0,
        lag_p50_ms=_ms(histogram_quantile(0.5, lag)),
        lag_p99_ms=_ms(histogram_quantile(0.99, lag)),
        lag_max_ms=_ms(histogram_max(lag)),
        floor_count=floor.get("count"),
        floor_p50_ms=floor.get("p50_ms"),
        floor_p99_ms=floor.get("p99_ms"),
        postgres_cpu_ms_per_request=service_cpu("postgres"),
        redis_cpu_ms_per_request=service_cpu("redis"),
        proxy_cpu_ms_per_request=service_cpu("toxiproxy"),
        machine_busy=busy_share(start.get("machine_ticks"), end.get("machine_ticks")),
        host_steal=steal_share(start.get("machine_ticks"), end.get("machine_ticks")),
    )
