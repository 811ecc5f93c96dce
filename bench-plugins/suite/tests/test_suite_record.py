"""A suite's report.json: written with its schema, read back as the same
record; one written before the schema field reads as schema 1; another schema
is refused in one line naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aside_bench_suite.base import SUITE_SCHEMA, SuiteRun, SuiteSchemaError, load_suite_run


def _run() -> SuiteRun:
    return SuiteRun(
        "r1",
        "chaos",
        {"rows": 1000},
        {"rate": 60},
        limits={"read_max_ms": 500},
        items=[{"name": "redis", "passed": True}],
        extra={"removed_users": 3},
        passed=True,
        created="2026-11-27T10:00:00+00:00",
        machine={"nproc": 2},
    )


def _write(folder: Path, data: dict[str, object]) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "report.json").write_text(json.dumps(data))
    return folder


def test_a_record_reads_back_as_written(tmp_path: Path) -> None:
    run = _run()
    data = run.to_json()
    assert data["schema"] == SUITE_SCHEMA and data["cases"] == run.items
    assert data["removed_users"] == 3 and "extra" not in data
    assert load_suite_run(_write(tmp_path, data)) == run


def test_a_record_written_before_the_schema_field_reads_as_schema_1(tmp_path: Path) -> None:
    data = _run().to_json()
    del data["schema"]
    assert load_suite_run(_write(tmp_path, data)) == _run()


@pytest.mark.parametrize(
    "change", [{"schema": SUITE_SCHEMA + 1}, {"kind": "sweep"}], ids=["schema", "kind"]
)
def test_another_schema_or_kind_is_refused_in_one_line(
    tmp_path: Path, change: dict[str, object]
) -> None:
    folder = _write(tmp_path, {**_run().to_json(), **change})
    with pytest.raises(SuiteSchemaError) as refused:
        load_suite_run(folder)
    message = str(refused.value)
    assert "\n" not in message and str(folder / "report.json") in message


def test_every_item_passed() -> None:
    run = _run()
    assert run.all_passed()
    run.items.append({"name": "core", "passed": False})
    assert not run.all_passed()
    assert not SuiteRun("r", "soak", {}, {}).all_passed()
