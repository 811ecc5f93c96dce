"""A run's own record, run.json (its parameters, machine, seed, settings and
steps), and the figures of its steps, results.json (what `compare` reads):
one load and one save each, and the schema version run.json carries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aside_bench.records.results import StepResult

FIGURES_FILE = "results.json"


def step_figures(result: StepResult) -> dict[str, Any]:
    """One run of a step as results.json keeps it (what `compare` reads)."""
    step, latency, gen = result.step, result.latency, result.loadgen
    return {
        "scenario": step.scenario,
        "arm": step.arm,
        "phase": step.phase,
        "rate": step.rate,
        "repeat": step.repeat,
        "duration_s": step.duration_s,
        "p50": None if latency is None else latency.p50,
        "p95": None if latency is None else latency.p95,
        "p99": None if latency is None else latency.p99,
        "achieved": result.achieved_rps,
        "drops": result.drop_rate,
        "hit": result.hit_rate,
        "driver_cpu_cores": None if gen is None else gen.cpu_cores,
        "p95_from_due": None if result.from_due is None else result.from_due.p95,
        "saturated": result.saturated,
    }


def save_figures(results: list[StepResult], out_dir: Path) -> list[dict[str, Any]]:
    """Every step's figures into results.json; the figures."""
    figures = [step_figures(result) for result in results]
    (out_dir / FIGURES_FILE).write_text(json.dumps(figures, indent=1) + "\n")
    return figures


def load_figures(out_dir: Path) -> list[dict[str, Any]] | None:
    """The figures a report wrote; None when it wrote none (older runs)."""
    try:
        found = json.loads((out_dir / FIGURES_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return found if isinstance(found, list) else None


# run.json's shape: 2 since the load driver's figures (the driver's CPU and
# pool, a summary per step); a run without the field is of shape 1.
RUN_SCHEMA = 2


class RunSchemaError(ValueError):
    """A run.json of a shape this bench does not read; the message names both."""


def load_run(out_dir: Path) -> dict[str, Any]:
    """A run's run.json; RunSchemaError when its shape is not this bench's,
    OSError or ValueError when it cannot be read."""
    path = out_dir / "run.json"
    run = json.loads(path.read_text())
    found = run.get("schema_version", 1) if isinstance(run, dict) else None
    if found != RUN_SCHEMA:
        raise RunSchemaError(
            f"{path}: run.json schema version {found}, this bench reads version {RUN_SCHEMA}"
        )
    return run


def save_run(run: dict[str, Any], out_dir: Path) -> None:
    path = out_dir / "run.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(run, indent=2) + "\n")
    tmp.replace(path)
