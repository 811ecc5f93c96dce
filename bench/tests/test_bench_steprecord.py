"""A step of run.json as a StepRecord: what it reads back from any bench's run,
and what it writes."""

from __future__ import annotations

import json

from aside_bench.plan.steps import Step
from aside_bench.records.runfile import RunRecord
from aside_bench.records.steprecord import StepRecord
from report_samples import sample_run

# A step as an older bench wrote it: no read rate, a plug-in's field, a null summary.
OLD_STEP = {
    "scenario": "read", "arm": "cache", "phase": "warm", "rate": 30, "duration_s": 20,
    "repeat": 1, "completed": True, "pool": 30, "prep": "cache flushed",
    "summary": None, "probe": {"start": {"cpu_ticks": 10}}, "driver": {"cpu_s": 0.4},
    "wire_note": "a plug-in's own field",
}  # fmt: skip


def test_an_older_step_loads_and_keeps_what_this_bench_does_not_know() -> None:
    record = StepRecord.from_json(OLD_STEP)
    assert record.step == Step("read", "cache", "warm", 30, 20)
    assert record.completed and record.pool == 30 and record.figures == {}
    assert record.extra == {"wire_note": "a plug-in's own field"}
    saved = record.to_json()
    assert saved["wire_note"] == "a plug-in's own field"
    # A null figure is left out, the rest as read.
    assert saved == {k: v for k, v in OLD_STEP.items() if v is not None}


def test_a_read_rate_and_an_interruption_are_written_only_when_there() -> None:
    plain = StepRecord.of(Step("read", "cache", "cold", 10, 3)).to_json()
    assert "read_rate" not in plain and "interrupted" not in plain
    assert plain["completed"] is False and plain["repeat"] == 1
    beside = StepRecord.of(Step("interference", "go-bcrypt", "warm", 2, 3, read_rate=500))
    beside.interrupted = True
    saved = beside.to_json()
    assert saved["read_rate"] == 500 and saved["interrupted"] is True
    assert StepRecord.from_json(saved).step.read_rate == 500


def test_a_run_saves_its_steps_as_json_and_reads_them_back(tmp_path) -> None:
    run = sample_run()
    run.steps = [StepRecord.from_json(OLD_STEP)]
    data = json.loads(json.dumps(run.to_json()))
    assert data["steps"] == [{k: v for k, v in OLD_STEP.items() if v is not None}]
    back = RunRecord.from_json(data)
    assert back.steps == run.steps and isinstance(back.steps[0], StepRecord)
