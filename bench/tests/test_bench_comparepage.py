"""compare.html: two fixed runs compared, the page built from them (p95, drop
rate and cost against the rate, A and B overlaid, and the table with its
flags); the page as headless Chromium shows it is the screenshot plug-in's test."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from aside_bench.compare import page as comparepage
from aside_bench.records.results import StepResult
from report_samples import SAME, compare_page, compare_rows, compare_sides, sample_run, step_record

CHARTS = ["compare cost", "compare drop rate", "compare p95"]


def test_the_page_overlays_both_runs_and_keeps_the_tables_flags(tmp_path: Path) -> None:
    page = compare_page(tmp_path)
    assert page == tmp_path / "compare.html"
    assert sorted(p.stem.replace("_", " ") for p in tmp_path.glob("*.png")) == CHARTS
    html = page.read_text()
    assert "<h1>Compare a -&gt; b</h1>" in html
    assert html.count("src='data:image/png;base64,") == 3
    # The table of compare.md, its flags as words: the cache arm's p95 worse at both rates.
    assert "every step both runs ran: A -&gt; B (change)" in html
    assert html.count("p95 worse") == 2 and "**" not in html


def test_each_series_has_an_a_and_a_b_line_at_its_rates() -> None:
    rows = compare_rows(compare_sides(3.0))
    lines = comparepage.figure_lines(rows, "p95")
    p95 = {(line.series[1], line.side): line.at_target() for line in lines}
    assert p95[("cache", "A")] == [(30, 4.0), (100, 5.0)]
    assert p95[("cache", "B")] == [(30, 12.0), (100, 15.0)]
    assert p95[("nocache", "A")] == p95[("nocache", "B")]
    drops = comparepage.figure_lines(rows, "drops", factor=100)
    assert [line.at_target() for line in drops] == [[(30, 0.0), (100, 0.0)]] * 4


def test_each_point_carries_the_rate_served_and_whether_it_held_the_goal() -> None:
    # The sample's nocache p95 is 80 and 900 ms: it missed the goal (p95 <= 10 ms); the
    # cache's is 4 and 5 ms in A, and 2.2 times that in B: 8.8 ms held, 11 ms missed.
    rows = compare_rows(compare_sides(2.2))
    found = comparepage.figure_lines(rows, "p95")
    lines = {(line.series[1], line.side): line.points for line in found}
    assert [(p.rate, p.served, p.held) for p in lines[("cache", "A")]] == [
        (30, 30.0, True),
        (100, 100.0, True),
    ]
    assert [p.held for p in lines[("cache", "B")]] == [True, False]
    assert not any(p.held for p in lines[("nocache", "A")])


def test_the_cost_is_each_runs_own_at_as_prices() -> None:
    sides = compare_sides(1.0)
    prices = comparepage.run_prices(sides.run_a.params)
    a = comparepage.step_costs(sides.results_a, prices)
    b = comparepage.step_costs(sides.results_b, prices)
    key = ("read", "cache", "warm", 100)
    assert b[key] > a[key] > 0  # twice the CPU per request costs more
    assert a[("read", "nocache", "none", 100)] == b[("read", "nocache", "none", 100)]
    no_cost = [replace(r, cost=None) for r in sides.results_a]
    assert comparepage.step_costs(no_cost, prices) == {}


def test_without_any_cost_the_page_says_so(tmp_path: Path) -> None:
    sides = compare_sides(3.0)
    bare = replace(sides, results_a=[replace(r, cost=None) for r in sides.results_a],
                   results_b=[replace(r, cost=None) for r in sides.results_b])  # fmt: skip
    html = comparepage.write_page(bare, compare_rows(sides), SAME, 0.2, tmp_path).read_text()
    assert "no cost to draw" in html and html.count("data:image/png") == 2


def test_run_results_are_the_completed_steps_of_run_json() -> None:
    summary = {"iterations": 900, "failed": 0, "dropped": 0,
               "p50": 1.0, "p95": 2.0, "p99": 3.0, "answered": 900}  # fmt: skip
    run = replace(sample_run(), steps=[step_record(summary=summary, completed=True),
                                       step_record(summary=summary)])  # fmt: skip
    (one,) = comparepage.run_results(run)
    assert isinstance(one, StepResult) and one.latency is not None and one.latency.p95 == 2.0
