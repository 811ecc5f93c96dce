"""docs/sample holds a run today's bench reads: its run.json loads, and its
steps are the default sweep's, with the report the answer was written in."""

from __future__ import annotations

from pathlib import Path

from aside_bench.plan.steps import DEFAULT_ARMS
from aside_bench.records.runfile import RUN_SCHEMA, load_run
from aside_bench.sweep.collect import step_from_record

SAMPLE = Path(__file__).resolve().parents[2] / "docs" / "sample"


def test_the_sample_run_is_read_by_todays_bench() -> None:
    run = load_run(SAMPLE)
    assert run.to_json()["schema_version"] == RUN_SCHEMA and run.kind == "sweep"
    steps = [step_from_record(record) for record in run.steps if record.get("completed")]
    assert steps, "the sample run has no completed step"
    # The default sweep's arms, every one of them, as the sample report shows them.
    assert {step.arm for step in steps} == set(DEFAULT_ARMS["read"])
    report = (SAMPLE / "report.md").read_text()
    assert f"# Aside bench {run.run_id}" in report
    for name in ("latency.png", "drop_rate.png", "cost.png"):
        assert (SAMPLE / name).stat().st_size > 0, name
