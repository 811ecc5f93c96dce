"""docs/sample holds a run today's bench reads: its run.json loads, and its
steps are the default sweep's, with the report the answer was written in."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from aside_bench.plan.scenarios import scenario_named
from aside_bench.records.runfile import RUN_SCHEMA, load_run

SAMPLE = Path(__file__).resolve().parents[2] / "docs" / "sample"
PNG = b"\x89PNG\r\n\x1a\n"


def test_the_sample_run_is_read_by_todays_bench() -> None:
    run = load_run(SAMPLE)
    assert run.to_json()["schema_version"] == RUN_SCHEMA and run.kind == "sweep"
    steps = [record.step for record in run.steps if record.completed]
    assert steps, "the sample run has no completed step"
    # The default sweep's arms, every one of them, as the sample report shows them.
    assert {step.arm for step in steps} == set(scenario_named("read").default_arms)
    report = (SAMPLE / "report.md").read_text()
    assert f"# Aside bench {run.run_id}" in report
    for name in ("latency.png", "drop_rate.png", "cost.png"):
        assert (SAMPLE / name).stat().st_size > 0, name


def test_every_file_of_the_sample_is_read() -> None:
    """run.json loads (above); each page is a report's and each picture a PNG
    a page (or README.md: the curve) shows: no file there today's bench could
    not have written."""
    pages = sorted(SAMPLE.glob("*.md"))
    shown = {
        name for page in pages for name in re.findall(r"\]\(([\w.-]+\.png)\)", page.read_text())
    }
    for path in sorted(SAMPLE.iterdir()):
        if path.name == "run.json":
            assert load_run(SAMPLE).run_id in path.read_text()
        elif path.suffix == ".md":
            assert path.read_text().startswith("# Aside "), path.name
        elif path.suffix == ".png":
            assert path.read_bytes()[:8] == PNG, path.name
            assert path.name in shown or path.name == "hit_rate_curve.png", path.name
        else:
            pytest.fail(f"docs/sample/{path.name}: no reader for it")


def _answer_of_report(report: str) -> list[str]:
    """The answer of a report.md: its decision table's title and rows, then its lines."""
    section = report.split("## The answer\n", 1)[1].split("\n> Machine:", 1)[0]
    found = []
    for line in section.splitlines():
        if line.startswith("### "):
            found.append(line[4:])
        elif line.startswith(("|", "- ")):
            found.append(line)
    return found


def _answer_of_readme(readme: str) -> list[str]:
    """README's quote of the sample's answer, its wrapped lines joined back."""
    quote = readme.split("It opens with its answer", 1)[1].split("\n\n", 2)[1]
    found: list[str] = []
    for line in quote.splitlines():
        text = line.removeprefix(">").removeprefix(" ")
        if text.startswith("**") and text.endswith("**"):
            found.append(text.strip("*"))
        elif text.startswith(("|", "- ")):
            found.append(text)
        elif text.startswith("  ") and found:
            found[-1] += " " + text.strip()
    return found


def test_the_readme_quotes_the_sample_reports_answer() -> None:
    readme = (SAMPLE.parents[1] / "README.md").read_text()
    report = _answer_of_report((SAMPLE / "report.md").read_text())
    quoted = _answer_of_readme(readme)
    assert report and report[0].startswith("the decision: at each rate")
    quoted = [line[0].lower() + line[1:] for line in quoted[:1]] + quoted[1:]
    # README quotes some of the decision table's rate rows (in order), the rest whole.
    rows = [line for line in quoted if line.startswith("|")]
    table = [line for line in report if line.startswith("|")]
    assert [line for line in quoted if not line.startswith("|")] == [
        line for line in report if not line.startswith("|")
    ]
    assert rows[:2] == table[:2] and len(rows) >= 5
    remaining = iter(table[2:])
    assert all(row in remaining for row in rows[2:]), rows
