"""A step run several times (REPEAT=N): the median of its runs and their spread."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, fields, replace

from aside_bench.records.results import Latency, StaleCounts, StepResult
from aside_bench.records.runfile import StepFigures
from aside_bench.records.saturation import worst
from aside_bench.records.tierstats import StepCost


@dataclass(frozen=True)
class Spread:
    """A figure over a step's runs."""

    median: float
    low: float
    high: float
    runs: int

    @property
    def width(self) -> float:
        return self.high - self.low


def spread(values: list[float | None]) -> Spread | None:
    """Median, min and max of the values measured; None when none was."""
    known = [value for value in values if value is not None]
    if not known:
        return None
    return Spread(statistics.median(known), min(known), max(known), len(known))


def median(values: list[float | None]) -> float | None:
    """The median of the values measured; None when none was."""
    found = spread(values)
    return None if found is None else found.median


@dataclass
class RepeatedResult(StepResult):
    """A step's runs merged: each figure the median of the runs' ones (kept in `runs`)."""

    runs: list[StepResult] = field(default_factory=list)

    def figure(self, name: str) -> Spread | None:
        """A figure by its name in results.json over the runs."""
        return spread([StepFigures.of(run).figure(name) for run in self.runs])

    @property
    def drop_rate(self) -> float:
        return median([run.drop_rate for run in self.runs]) or 0.0

    @property
    def achieved_rps(self) -> float:
        return median([run.achieved_rps for run in self.runs]) or 0.0

    @property
    def hit_rate(self) -> float | None:
        return median([run.hit_rate for run in self.runs])


def figure_spread(result: StepResult, name: str) -> Spread | None:
    """The spread of a figure over a step's runs; None for a step run once."""
    if isinstance(result, RepeatedResult) and len(result.runs) > 1:
        return result.figure(name)
    return None


def _median_latency(latencies: list[Latency | None]) -> Latency | None:
    known = [latency for latency in latencies if latency is not None]
    if not known:
        return None
    quantiles = (statistics.median(getattr(one, q) for one in known) for q in ("p50", "p95", "p99"))
    return Latency(*quantiles, count=sum(one.count for one in known))


def _median_cost(costs: list[StepCost | None]) -> StepCost | None:
    known = [cost for cost in costs if cost is not None]
    if not known:
        return None
    values = {f.name: median([getattr(cost, f.name) for cost in known]) for f in fields(StepCost)}
    return replace(known[0], **values)


def _stale(results: list[StepResult]) -> StaleCounts | None:
    known = [result.stale for result in results if result.stale is not None]
    if not known:
        return None
    return StaleCounts(*(sum(getattr(one, f.name) for one in known) for f in fields(StaleCounts)))


def merge(runs: list[StepResult]) -> StepResult:
    """One result for a step's runs: the median of each figure, stale counts summed."""
    if len(runs) == 1:
        return runs[0]
    names = set.intersection(*(set(run.by_name) for run in runs))
    return RepeatedResult(
        step=replace(runs[0].step, repeat=1),
        latency=_median_latency([run.latency for run in runs]),
        iterations=sum(run.iterations for run in runs),
        failed=sum(run.failed for run in runs),
        dropped=sum(run.dropped for run in runs),
        cache=None,
        by_name={
            name: latency
            for name in sorted(names)
            if (latency := _median_latency([run.by_name[name] for run in runs])) is not None
        },
        cost=_median_cost([run.cost for run in runs]),
        stale=_stale(runs),
        loadgen=worst([run.loadgen for run in runs]),
        runs=list(runs),
    )


def merge_repeats(results: list[StepResult]) -> list[StepResult]:
    """The results of a run with every step's repeats merged, in first-run order."""
    groups: dict[tuple[str, str, str, int], list[StepResult]] = {}
    for result in results:
        groups.setdefault(result.step.key, []).append(result)
    return [merge(runs) for runs in groups.values()]
