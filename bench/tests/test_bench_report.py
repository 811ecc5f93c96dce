"""Unit tests of the tables, charts and report files, from made-up results."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from aside_bench.ceiling import report as ceiling_report
from aside_bench.plan.steps import Step
from aside_bench.records import runfile
from aside_bench.records.results import Latency, StepResult
from aside_bench.report import sweep as report
from aside_bench.report.tables import MISSING, comparison_table, series_table, sweep_tables
from report_samples import RESULTS, sample_result, sample_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _cells(markdown: str) -> list[str]:
    rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    return [cell.strip() for row in rows[1:] for cell in row.strip("|").split("|")]


def test_series_table_has_every_figure_per_rate() -> None:
    table = series_table(RESULTS, "cache", "warm")
    assert table.headers[-1] == "cache hit rate"
    assert table.rows == [
        ["30", "1.33", "4.00", "6.00", "29.0", "3.3%", "97.8%"],
        ["100", "1.67", "5.00", "7.50", "96.7", "3.3%", "98.3%"],
    ]


def test_uncached_arm_shows_a_zero_hit_rate_not_a_gap() -> None:
    assert [row[-1] for row in series_table(RESULTS, "nocache", "none").rows] == ["0.0%", "0.0%"]


def test_comparison_puts_arms_side_by_side_with_the_speedup() -> None:
    table = comparison_table(RESULTS)
    assert table.headers[0] == "target /s"
    assert table.headers[-1] == "nocache / cache (warm) p95"
    assert table.rows[0][-1] == "20.0x"
    assert table.rows[1][-1] == "180.0x"


def test_a_missing_step_shows_as_na_not_as_an_error() -> None:
    table = comparison_table(RESULTS[:3])
    assert table.rows[1][3] == MISSING  # no cache (warm) step at 100/s


def test_tables_are_fully_filled(tmp_path: Path) -> None:
    for table in sweep_tables(RESULTS):
        for cell in _cells(table.markdown()):
            assert cell and cell != MISSING and "nan" not in cell.lower()


def test_per_request_kind_table_appears_for_mixed_runs() -> None:
    mixed = [sample_result("cache", "warm", 30, 4.0, 880, by_name=True)]
    titles = [t.title for t in sweep_tables(mixed)]
    assert "p95 latency by request kind" in titles


def test_sweep_report_writes_markdown_html_and_png_charts(tmp_path: Path) -> None:
    report.write_sweep(sample_run(), RESULTS, tmp_path)
    names = {"latency.png", "throughput.png", "drop_rate.png", "hit_rate.png", "p95_served.png"}
    for name in names:
        assert (tmp_path / name).read_bytes().startswith(PNG_MAGIC), name
    markdown = (tmp_path / "report.md").read_text()
    assert "the load driver shares the 2 cores with the services" in markdown
    assert all(f"]({name})" in markdown for name in names)
    html = (tmp_path / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(names)
    # Self-contained: nothing is fetched from elsewhere.
    assert not re.search(r"""(src|href)=['"](?!data:)""", html)
    assert "<style>" in html


def test_ceiling_report_names_each_ceiling_and_the_ratio(tmp_path: Path) -> None:
    base = sample_run()
    run = replace(base, params=base.params | {"p95_limit_ms": 10, "scenario": "ceiling"})

    def step(arm: str, phase: str, rate: int, p95: float) -> StepResult:
        return StepResult(Step("ceiling", arm, phase, rate, 10), Latency(1, p95, p95, rate * 10),
                          rate * 10, 0, 0, None)  # fmt: skip

    results = [
        step("cache", "warm", 200, 3),
        step("cache", "warm", 400, 14),
        step("cache", "warm", 300, 8),
        step("healthz", "none", 200, 2),
        step("healthz", "none", 400, 4),
        step("healthz", "none", 800, 30),
        step("healthz", "none", 600, 12),
    ]
    tables = ceiling_report.write_ceiling(run, results, tmp_path)
    assert tables[0].rows == [
        ["cache (warm)", "300"],
        ["healthz", "400"],
        ["cache / healthz", "0.75"],
    ]
    assert (tmp_path / "ceiling.png").read_bytes().startswith(PNG_MAGIC)
    assert "0.75" in (tmp_path / "ceiling.md").read_text()


def test_a_run_of_another_shape_is_refused_naming_both_versions(tmp_path: Path) -> None:
    from aside_bench.cli import app as cli

    run = replace(sample_run(), run_id="now", extra={"cost": [{"variant": "driver"}]})
    (tmp_path / "now").mkdir()
    runfile.save_run(run, tmp_path / "now")
    assert runfile.load_run(tmp_path / "now") == run  # a kind's own findings too
    saved = json.loads((tmp_path / "now" / "run.json").read_text())
    assert saved["schema_version"] == runfile.RUN_SCHEMA and saved["cost"] == [
        {"variant": "driver"}
    ]
    # A run from before the field (the load generator's old figures): shape 1.
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "run.json").write_text(json.dumps({"run_id": "old", "steps": []}))
    with pytest.raises(
        runfile.RunSchemaError, match="schema version 1, this bench reads version 2"
    ):
        runfile.load_run(tmp_path / "old")
    assert cli.main(["report", "--run", "old", "--reports-dir", str(tmp_path)]) == 2


def test_the_request_mix_says_which_keys_the_reads_asked_for() -> None:
    hotset = report.request_mix(sample_run().params)
    assert "90% of reads ask for one of the 100 hot emails" in hotset
    zipf = report.request_mix({"dist": "zipf", "alpha": 0.99, "keys": 0})
    assert zipf.startswith("request mix: Zipf popularity, exponent 0.99 over every distinct")
    uniform = report.request_mix({"dist": "uniform", "alpha": 0.99, "keys": 5000})
    assert "uniform over the first 5000 distinct emails of the table" in uniform
    trace = {"file": "sample.trace", "lines": 3000, "keys": 900, "rate": 200.0}
    replayed = report.request_mix({"dist": "hotset", "trace": trace})
    assert replayed.startswith("request mix: trace sample.trace (3000 keys, 900 distinct)")
    assert "scaled to each step's rate" in replayed


def test_the_served_charts_draw_a_step_that_missed_the_goal_hollow() -> None:
    from aside_bench.records.goal import Goal
    from aside_bench.report import charts

    held = [replace(r, failed=0) for r in RESULTS]  # nocache 80 and 900 ms, cache 4 and 5 ms
    fig, ax = charts.served_chart(held, Goal(10), lambda r: r.latency.p95, "p95", "t")
    filled, hollow = [], []
    for collection in ax.collections:
        faces = collection.get_facecolors()
        (hollow if len(faces) == 0 or faces[0][3] == 0 else filled).append(
            [tuple(xy) for xy in collection.get_offsets()]
        )
    charts.plt.close(fig)
    # Against the rate served (here every request of a step), missed ones hollow.
    assert filled == [[(30.0, 4.0), (100.0, 5.0)]]
    assert hollow == [[(30.0, 80.0), (100.0, 900.0)]]
