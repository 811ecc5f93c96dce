"""The load driver's JSON summary (SUMMARY_PATH), its schema checked, read as figures."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aside_bench.plan import scenarios

SUMMARY_SCHEMA = 1  # the summary schema this bench reads (bench/driver/README.md)


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

    data: dict[str, Any]

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
    def scenarios(self) -> dict[str, dict[str, Any]]:
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

    def scenario(self, name: str) -> dict[str, Any]:
        return self.scenarios.get(name) or {}

    def counters(self, name: str) -> dict[str, int]:
        return {k: int(v) for k, v in (self.scenario(name).get("counters") or {}).items()}

    def step_figures(self, name: str) -> dict[str, Any] | None:
        """Scenario `name`'s figures as run.json keeps a step's "summary"; None without it."""
        one = self.scenarios.get(name)
        if one is None:
            return None
        figures = scenario_figures(one)
        stale = self.scenarios.get("stale")
        if stale is not None:
            counters = stale.get("counters") or {}
            names = {
                "reads": "stale_checked",
                "stale": "stale_reads",
                "errors": "stale_check_errors",
            }
            figures["stale"] = {key: int(counters.get(name, 0)) for key, name in names.items()}
        found = scenarios.scenario_of(name)
        beside = None if found is None or found.beside is None else self.scenarios.get(found.beside)
        if beside is not None:
            figures["compute"] = scenario_figures(beside)
        return figures


def _latency(values: dict[str, Any] | None) -> dict[str, float | int | None]:
    """Quantiles in ms, and how many answered requests they are of."""
    values = values or {}
    found = {key: values.get(key) for key in ("p50", "p95", "p99", "max")}
    return {**found, "answered": int(values.get("count") or 0)}


def scenario_figures(one: dict[str, Any]) -> dict[str, Any]:
    """One scenario of a summary as a step's figures (latencies, counts, pool)."""
    by_name = {
        name: {**_latency(figures.get("latency")), "requests": int(figures.get("requests") or 0)}
        for name, figures in (one.get("by_name") or {}).items()
        if (figures.get("latency") or {}).get("p95") is not None
    }
    counts = ("requests", "iterations", "failed", "dropped", "late")
    found: dict[str, Any] = {
        **_latency(one.get("latency")),
        **{count: int(one.get(count) or 0) for count in counts},
        "status": one.get("status") or {},
        "from_due": _latency(one.get("latency_from_due")),
        "pool": one.get("pool"),
        "inflight_peak": one.get("inflight_peak"),
        "bytes_received": one.get("bytes_received"),
    }
    if by_name:
        found["by_name"] = by_name
    return found
