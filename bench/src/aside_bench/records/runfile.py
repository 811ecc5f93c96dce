"""A run's record, run.json, and its steps' figures, results.json: a load and a save each."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from aside_bench.records.documents import Machine, RunParams, SeedMeta
from aside_bench.records.results import StepResult
from aside_bench.records.steprecord import StepRecord

FIGURES_FILE = "results.json"
QUANTILES = ("p50", "p95", "p99")


# A step of a run: (scenario, arm, phase, rate); its repeats share it.
StepKey = tuple[str, str, str, int]


@dataclass(frozen=True)
class StepFigures:
    """One run of a step as results.json keeps it; a figure not measured is None."""

    scenario: str
    arm: str
    phase: str
    rate: int
    repeat: int = 1
    duration_s: float | None = None
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    achieved: float | None = None
    drops: float | None = None
    hit: float | None = None
    driver_cpu_cores: float | None = None
    p95_from_due: float | None = None
    saturated: bool = False

    @property
    def key(self) -> StepKey:
        return (self.scenario, self.arm, self.phase, self.rate)

    def figure(self, name: str) -> float | None:
        """A figure by its name in results.json ("p95", "achieved", ...)."""
        value = getattr(self, name)
        return None if value is None else float(value)

    @classmethod
    def of(cls, result: StepResult) -> StepFigures:
        step, latency, gen = result.step, result.latency, result.loadgen
        names = ("scenario", "arm", "phase", "rate", "repeat", "duration_s")
        quantiles = {q: None if latency is None else getattr(latency, q) for q in QUANTILES}
        return cls(
            **{name: getattr(step, name) for name in names},
            **quantiles,
            achieved=result.achieved_rps,
            drops=result.drop_rate,
            hit=result.hit_rate,
            driver_cpu_cores=None if gen is None else gen.cpu_cores,
            p95_from_due=None if result.from_due is None else result.from_due.p95,
            saturated=result.saturated,
        )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepFigures:
        """A row of results.json; a field it lacks (an older bench's) is None."""
        known = {f.name for f in fields(cls)}
        values = {name: value for name, value in data.items() if name in known}
        return cls(**{**values, "rate": int(values["rate"])})


def save_figures(results: list[StepResult], out_dir: Path) -> list[StepFigures]:
    """Every step's figures into results.json; the figures."""
    figures = [StepFigures.of(result) for result in results]
    rows = [asdict(one) for one in figures]
    (out_dir / FIGURES_FILE).write_text(json.dumps(rows, indent=1) + "\n")
    return figures


def load_figures(out_dir: Path) -> list[StepFigures] | None:
    """The figures a report wrote; None when there are none readable (older runs)."""
    try:
        found = json.loads((out_dir / FIGURES_FILE).read_text())
        return [StepFigures.from_json(row) for row in found]
    except (OSError, ValueError, TypeError, KeyError):
        return None


# run.json's shape: 2 since the driver's figures; a run without the field is of shape 1.
RUN_SCHEMA = 2


class RunSchemaError(ValueError):
    """A run.json of a shape this bench does not read; the message names both."""


@dataclass
class RunRecord:
    """A run of the sweep's kinds as run.json keeps it; a kind's own findings ride in `extra`."""

    run_id: str
    kind: str
    created: str
    params: RunParams
    machine: Machine
    seed: SeedMeta
    settings: dict[str, str]
    steps: list[StepRecord] = field(default_factory=list)
    interrupted: bool = False
    finished: str | None = None
    probe_warning: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)  # a baseline's runs (compare's); not saved

    def to_json(self) -> dict[str, Any]:
        skip = _NOT_SAVED | {n for n in ("finished", "probe_warning") if getattr(self, n) is None}
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        data["steps"] = [step.to_json() for step in self.steps]
        return {"schema_version": RUN_SCHEMA, **data, **self.extra}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        known = {f.name for f in fields(cls)} - _NOT_SAVED
        values = {name: value for name, value in data.items() if name in known}
        values["steps"] = [StepRecord.from_json(step) for step in values.get("steps", [])]
        return cls(
            **values,
            extra={k: v for k, v in data.items() if k not in known and k != "schema_version"},
        )


_NOT_SAVED = {"extra", "runs"}


def load_run(out_dir: Path) -> RunRecord:
    """A run's run.json; RunSchemaError for another shape, OSError or ValueError unread."""
    path = out_dir / "run.json"
    data = json.loads(path.read_text())
    found = data.get("schema_version", 1) if isinstance(data, dict) else None
    if found != RUN_SCHEMA:
        raise RunSchemaError(
            f"{path}: run.json schema version {found}, this bench reads version {RUN_SCHEMA}"
        )
    try:
        return RunRecord.from_json(data)
    except TypeError as error:  # a field missing or unknown
        raise RunSchemaError(f"{path}: not a run of version {RUN_SCHEMA}: {error}") from None


def save_run(run: RunRecord, out_dir: Path) -> None:
    path = out_dir / "run.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(run.to_json(), indent=2) + "\n")
    tmp.replace(path)
