"""A step's figures and the arithmetic that makes them (pure, unit-tested)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from aside_bench.plan.steps import Step
from aside_bench.records.saturation import LoadGen, noisy
from aside_bench.records.tierstats import StepCost


def drop_rate(dropped: float, failed: float, scheduled: float) -> float:
    """Share of scheduled requests dropped by the driver or failed."""
    if scheduled <= 0:
        raise ValueError("scheduled must be positive")
    return (dropped + failed) / scheduled


def achieved_rps(iterations: float, failed: float, duration_s: float) -> float:
    """Successful requests per second over the step."""
    if duration_s <= 0:
        raise ValueError("duration must be positive")
    return max(iterations - failed, 0) / duration_s


def hit_rate(hits: float, misses: float, bypass: float) -> float:
    """Share of count reads answered from Redis (a bypass counts as not)."""
    total = hits + misses + bypass
    return hits / total if total > 0 else 0.0


@dataclass
class Latency:
    p50: float
    p95: float
    p99: float
    count: int


@dataclass
class CacheCounts:
    hits: float
    misses: float
    bypass: float

    @property
    def hit_rate(self) -> float:
        return hit_rate(self.hits, self.misses, self.bypass)


@dataclass
class StaleCounts:
    """The mixed scenario's read-after-write checks and the stale reads among them."""

    reads: int
    stale: int
    errors: int = 0  # reads that got no usable answer (not counted as stale)


@dataclass(frozen=True)
class RedisCounts:
    """The Redis tier over a step: keys and memory at its end, evictions, expiries, bound."""

    keys: int
    used_memory: int
    evicted: int
    expired: int
    maxmemory: int | None = None  # None: the stack's own bound
    keys_held: int | None = None  # the median of its keys, counted once a second
    clients_memory: int | None = None  # its clients' buffers at the end (within maxmemory)


def redis_counts(
    readings: dict[str, dict[str, int] | list[int]] | None, bound: dict[str, int | str] | None
) -> RedisCounts | None:
    """A step's Redis figures from its readings at start and end (run.json)."""
    if not readings or "start" not in readings or "end" not in readings:
        return None
    start, end = readings["start"], readings["end"]
    held = readings.get("keys_each_second")
    return RedisCounts(
        keys=int(end["keys"]),
        used_memory=int(end["used_memory"]),
        evicted=max(int(end["evicted_keys"]) - int(start["evicted_keys"]), 0),
        expired=max(int(end["expired_keys"]) - int(start["expired_keys"]), 0),
        maxmemory=None if bound is None else int(bound["maxmemory"]),
        keys_held=statistics.median_high(held) if held else None,
        clients_memory=end.get("clients_memory"),
    )


@dataclass
class StepResult:
    step: Step
    latency: Latency | None
    iterations: int
    failed: int
    dropped: int
    cache: CacheCounts | None  # None: Prometheus had no gateway data for the step
    by_name: dict[str, Latency] = field(default_factory=dict)
    cost: StepCost | None = None  # None: no probe around the step (older runs)
    stale: StaleCounts | None = None  # None: no staleness checker ran
    loadgen: LoadGen | None = None  # None: the driver's CPU was not recorded
    compute: StepResult | None = None  # interference's compute beside the reads (None: none)
    from_due: Latency | None = None  # the answered requests' latency from their due time
    redis: RedisCounts | None = None  # None: not read

    @property
    def drop_rate(self) -> float:
        return drop_rate(self.dropped, self.failed, self.step.scheduled)

    @property
    def achieved_rps(self) -> float:
        return achieved_rps(self.iterations, self.failed, self.step.duration_s)

    @property
    def hit_rate(self) -> float | None:
        return None if self.cache is None else self.cache.hit_rate

    def holds(self, p95_limit_ms: float) -> bool:
        """The ceiling's test: every request started and succeeded, p95 within the limit."""
        latency, clean = self.latency, self.dropped == 0 and self.failed == 0
        return clean and latency is not None and latency.p95 <= p95_limit_ms

    @property
    def host_steal(self) -> float | None:
        """The host's share of the machine's cores over the step (None: not read)."""
        return None if self.cost is None else self.cost.host_steal

    @property
    def noisy(self) -> bool:
        """The host stole more than records.saturation.NOISY_STEAL of the cores."""
        return noisy(self.host_steal)

    @property
    def saturated(self) -> bool:
        """The load driver was the limit of this step (records/saturation.py)."""
        return self.loadgen is not None and self.loadgen.saturated

    def verdict(self, p95_limit_ms: float) -> str:
        """held, missed, or limit (did not hold while the driver was saturated)."""
        if self.holds(p95_limit_ms):
            return "held"
        return "limit" if self.saturated else "missed"
