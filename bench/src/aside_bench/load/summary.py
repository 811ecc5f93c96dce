"""The load driver's JSON summary (SUMMARY_PATH), its schema checked, read as figures."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from aside_bench.plan import scenarios
from aside_bench.records.documents import LatencyFigures, NamedFigures, StaleFigures, StepSummary

SUMMARY_SCHEMA = 1  # the summary schema this bench reads (bench/driver/README.md)


class DriverLatency(TypedDict, total=False):
    count: int
    p50: float
    p95: float
    p99: float
    max: float


class NameSummary(TypedDict, total=False):
    requests: int
    latency: DriverLatency | None


class ScenarioSummary(TypedDict, total=False):
    """What this bench reads of a scenario of the summary (bench/driver/README.md)."""

    pool: int
    inflight_peak: int
    dropped: int
    late: int
    iterations: int
    failed: int
    requests: int
    bytes_received: int
    status: dict[str, int]
    latency: DriverLatency | None
    latency_from_due: DriverLatency | None
    by_name: dict[str, NameSummary]
    counters: dict[str, int]


class DriverSummary(TypedDict, total=False):
    """The summary's sections this bench reads; empty when the driver wrote none."""

    schema_version: int
    scenarios: dict[str, ScenarioSummary]
    key_trace: dict[str, int | str]  # path, lines, lost
    cpu: dict[str, float]  # user_s, system_s
    influx: dict[str, int | str]  # written, spooled, lost, spool


@dataclass(frozen=True)
class KeyTrace:
    """The key trace a step recorded: its lines written and lost."""

    lines: int
    lost: int


class SummaryError(ValueError):
    """A summary this bench cannot read; the message says why."""


@dataclass(frozen=True)
class Summary:
    """The driver's summary; empty when it wrote none."""

    data: DriverSummary

    @classmethod
    def read(cls, path: Path) -> Summary:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return cls({})
        if not isinstance(data, dict):
            return cls({})
        version = data.get("schema_version")
        if version != SUMMARY_SCHEMA:
            raise SummaryError(
                f"{path.name}: summary schema version {version}, this bench reads "
                f"version {SUMMARY_SCHEMA}; rebuild the driver (make install)"
            )
        return cls(data)

    @property
    def scenarios(self) -> dict[str, ScenarioSummary]:
        return self.data.get("scenarios") or {}

    @property
    def key_trace(self) -> KeyTrace | None:
        """The recorded key trace; None without one."""
        found = self.data.get("key_trace")
        if not isinstance(found, dict):
            return None
        return KeyTrace(int(found.get("lines") or 0), int(found.get("lost") or 0))

    @property
    def cpu_s(self) -> float | None:
        cpu = self.data.get("cpu")
        return None if not cpu else float(cpu.get("user_s", 0.0)) + float(cpu.get("system_s", 0.0))

    def scenario(self, name: str) -> ScenarioSummary:
        return self.scenarios.get(name) or ScenarioSummary()

    def counters(self, name: str) -> dict[str, int]:
        return {k: int(v) for k, v in (self.scenario(name).get("counters") or {}).items()}

    def step_figures(self, name: str) -> StepSummary | None:
        """Scenario `name`'s figures as run.json keeps a step's "summary"; None without it."""
        one = self.scenarios.get(name)
        if one is None:
            return None
        figures = scenario_figures(one)
        stale = self.scenarios.get("stale")
        if stale is not None:
            counters = stale.get("counters") or {}
            figures["stale"] = StaleFigures(
                reads=int(counters.get("stale_checked", 0)),
                stale=int(counters.get("stale_reads", 0)),
                errors=int(counters.get("stale_check_errors", 0)),
            )
        found = scenarios.scenario_of(name)
        beside = None if found is None or found.beside is None else self.scenarios.get(found.beside)
        if beside is not None:
            figures["compute"] = scenario_figures(beside)
        return figures


def _latency(values: DriverLatency | None) -> LatencyFigures:
    """Quantiles in ms, and how many answered requests they are of."""
    values = values or DriverLatency()
    return LatencyFigures(
        p50=values.get("p50"),
        p95=values.get("p95"),
        p99=values.get("p99"),
        max=values.get("max"),
        answered=int(values.get("count") or 0),
    )


def scenario_figures(one: ScenarioSummary) -> StepSummary:
    """One scenario of a summary as a step's figures (latencies, counts, pool)."""
    by_name = {
        name: NamedFigures(
            **_latency(figures.get("latency")), requests=int(figures.get("requests") or 0)
        )
        for name, figures in (one.get("by_name") or {}).items()
        if (figures.get("latency") or {}).get("p95") is not None
    }
    found = StepSummary(
        **_latency(one.get("latency")),
        requests=int(one.get("requests") or 0),
        iterations=int(one.get("iterations") or 0),
        failed=int(one.get("failed") or 0),
        dropped=int(one.get("dropped") or 0),
        late=int(one.get("late") or 0),
        status=one.get("status") or {},
        from_due=_latency(one.get("latency_from_due")),
        pool=one.get("pool"),
        inflight_peak=one.get("inflight_peak"),
        bytes_received=one.get("bytes_received"),
    )
    if by_name:
        found["by_name"] = by_name
    return found
