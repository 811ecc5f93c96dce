"""A step's cost per million requests served: its services' CPU and its arm's memory, priced."""

from __future__ import annotations

from dataclasses import dataclass

from aside_bench.records.results import StepResult

MIB_PER_GIB = 1024
SECONDS_PER_HOUR = 3600


@dataclass(frozen=True)
class Prices:
    """What a vCPU-hour and a GiB-hour cost, in dollars."""

    vcpu_hour: float
    gib_hour: float

    def words(self) -> str:
        """The prices as a report's text says them."""
        return f"${self.vcpu_hour:g} a vCPU-hour, ${self.gib_hour:g} a GiB-hour"

    def chart_words(self) -> str:
        """The prices in a chart's title, each $ escaped from matplotlib's mathematics."""
        return f"\\${self.vcpu_hour:g}/vCPU-h, \\${self.gib_hour:g}/GiB-h"


@dataclass(frozen=True)
class Spend:
    """A step's resources: CPU ms per request by service, memory held, the rate served."""

    gateway_cpu_ms: float
    postgres_cpu_ms: float
    redis_cpu_ms: float
    memory_mib: float
    served_per_s: float

    @property
    def cpu_ms(self) -> float:
        return self.gateway_cpu_ms + self.postgres_cpu_ms + self.redis_cpu_ms

    def cpu_per_million(self, prices: Prices) -> float:
        """CPU seconds of a million requests, priced per vCPU-hour."""
        return self.cpu_ms / 1000 * 1e6 / SECONDS_PER_HOUR * prices.vcpu_hour

    def memory_per_million(self, prices: Prices) -> float:
        """The memory held for as long as a million requests take at this rate."""
        hours = 1e6 / self.served_per_s / SECONDS_PER_HOUR
        return self.memory_mib / MIB_PER_GIB * prices.gib_hour * hours

    def per_million(self, prices: Prices) -> float:
        return self.cpu_per_million(prices) + self.memory_per_million(prices)


def step_spend(result: StepResult) -> Spend | None:
    """A step's spend; None when its CPU or memory was not read, or nothing was served."""
    cost = result.cost
    if cost is None or result.achieved_rps <= 0:
        return None
    if cost.cpu_ms_per_request is None or cost.postgres_cpu_ms_per_request is None:
        return None
    if cost.gateway_rss_mib is None:
        return None
    cached = result.redis is not None
    redis_mib = result.redis.used_memory / 2**20 if result.redis is not None else 0.0
    # Every answered request's CPU, failures included, charged to those that succeeded.
    served = result.achieved_rps * result.step.duration_s
    per_served = cost.requests / served if cost.requests > 0 else 1.0
    return Spend(
        gateway_cpu_ms=cost.cpu_ms_per_request * per_served,
        postgres_cpu_ms=cost.postgres_cpu_ms_per_request * per_served,
        redis_cpu_ms=(cost.redis_cpu_ms_per_request or 0.0) * per_served if cached else 0.0,
        memory_mib=cost.gateway_rss_mib + redis_mib,
        served_per_s=result.achieved_rps,
    )


def step_price(result: StepResult, prices: Prices) -> float | None:
    """A step's $ per million requests; None when it could not be priced."""
    spend = step_spend(result)
    return None if spend is None else spend.per_million(prices)
