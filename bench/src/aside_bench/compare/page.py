"""compare.html: both runs' p95, drops and cost charted (A solid, B dashed), then the table."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aside_bench.compare import steps as compare
from aside_bench.compare.machines import Scale
from aside_bench.compare.steps import SeriesKey
from aside_bench.plan.steps import series_label
from aside_bench.records.goal import Goal
from aside_bench.records.prices import Prices, step_price
from aside_bench.records.results import StepResult
from aside_bench.records.runfile import RunRecord, StepKey
from aside_bench.report.decision import run_prices
from aside_bench.sweep.collect import summary_result

PAGE = "compare.html"
STYLE = {"A": ("-", "o"), "B": ("--", "s")}  # line, marker
# The goal a step's point is drawn filled (held) or hollow (missed) by.
GOAL = Goal()


@dataclass(frozen=True)
class Point:
    """One step of one side: its rate, the rate served, a figure, whether it held."""

    rate: int
    served: float | None  # None: the step's achieved rate was not compared
    value: float
    held: bool


@dataclass(frozen=True)
class Line:
    """One series of one side on a chart: a value per step."""

    series: SeriesKey  # (scenario, arm, phase): one colour
    side: str  # "A" or "B": one style
    points: list[Point]

    def at_target(self) -> list[tuple[int, float]]:
        return [(point.rate, point.value) for point in self.points]


def run_results(run: RunRecord) -> list[StepResult]:
    """A run's completed steps from its run.json alone (no Prometheus)."""
    return [summary_result(record, None) for record in run.steps if record.completed]


def step_costs(results: list[StepResult], prices: Prices) -> dict[StepKey, float]:
    """Each step's cost per million requests, the median over its repeats."""
    found: dict[StepKey, list[float]] = {}
    for result in results:
        price = step_price(result, prices)
        if price is not None:
            found.setdefault(result.step.key, []).append(price)
    return {key: statistics.median(values) for key, values in found.items()}


def _median(change: compare.Change | None, side: str) -> float | None:
    if change is None:
        return None
    spread = change.a if side == "A" else change.b
    return None if spread is None else spread.median


def _held(row: compare.Row, side: str, goal: Goal) -> bool:
    """The step's median p95 within the goal and its median drop rate within its tolerance."""
    p95, drops = (_median(row.changes.get(name), side) for name in ("p95", "drops"))
    fast = p95 is not None and p95 <= goal.p95_ms
    return fast and drops is not None and drops <= goal.drop_tolerance


def _lines(
    rows: list[compare.Row], value: Callable[[str, StepKey], float | None], goal: Goal
) -> list[Line]:
    """A line per series and side, in the order the steps come, of the values found."""
    by_key = {row.key: row for row in rows}
    lines = []
    for series in dict.fromkeys(key[:3] for key in by_key):
        steps = sorted((key for key in by_key if key[:3] == series), key=lambda key: key[3])
        for side in ("A", "B"):
            points = [
                Point(
                    key[3],
                    _median(by_key[key].changes.get("achieved"), side),
                    found,
                    _held(by_key[key], side, goal),
                )
                for key in steps
                if (found := value(side, key)) is not None
            ]
            if points:
                lines.append(Line(series, side, points))
    return lines


def figure_lines(
    rows: list[compare.Row], name: str, factor: float = 1.0, goal: Goal = GOAL
) -> list[Line]:
    """Each side's median of a figure (B's on A's machine, as compared)."""
    changes = {row.key: row.changes[name] for row in rows}

    def value(side: str, key: StepKey) -> float | None:
        found = _median(changes[key], side)
        return None if found is None else found * factor

    return _lines(rows, value, goal)


def overlay_chart(
    lines: list[Line],
    path: Path,
    title: str,
    ylabel: str,
    caption: str,
    log: bool,
    served: bool = False,
) -> Path:
    """Every line on one chart, against the rate served (`served`) or the target."""
    from aside_bench.report import charts  # matplotlib is slow to import: only when drawing

    fig, ax = charts.plt.subplots(figsize=(8, 5))
    colours: dict[SeriesKey, Any] = {}
    scenarios = len({line.series[0] for line in lines})
    xs_all: list[float] = []
    for line in lines:
        style, marker = STYLE[line.side]
        label = f"{series_label(line.series[1], line.series[2])}, {line.side}"
        label = f"{line.series[0]} {label}" if scenarios > 1 else label
        colour = colours.get(line.series)
        if served:
            points = [(p.served, p.value, p.held) for p in line.points if p.served]
            if not points:
                continue
            colour = charts.served_line(ax, points, label, style, colour, marker)
            xs_all += [x for x, _, _ in points]
        else:
            xs, ys = zip(*line.at_target(), strict=True)
            colour = ax.plot(xs, ys, style, marker=marker, color=colour, label=label)[0].get_color()
        colours.setdefault(line.series, colour)
    if served:
        charts.served_axis(ax, xs_all)
    else:
        charts.rate_axis(ax, sorted({p.rate for line in lines for p in line.points}))
    if log:
        charts.log_y(ax)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if served:
        charts.goal_legend(ax)
    else:
        ax.legend(fontsize=8)
    return charts.finish(fig, path, caption)


@dataclass(frozen=True)
class Sides:
    """The two sides of a compare: their runs and every completed step of them."""

    run_a: RunRecord
    run_b: RunRecord
    results_a: list[StepResult]
    results_b: list[StepResult]


def _charts(sides: Sides, rows: list[compare.Row], out_dir: Path, caption: str) -> list[Path]:
    prices = run_prices(sides.run_a.params)
    a, b = step_costs(sides.results_a, prices), step_costs(sides.results_b, prices)
    costs = _lines(rows, lambda side, key: (a if side == "A" else b).get(key), GOAL)
    cost_title = (
        f"cost per million requests ({prices.chart_words()}, A's prices) against the "
        "rate served\nhollow: missed the goal, so not a price of the service asked for"
    )
    wanted = (  # lines, file, title, y label, log scale, against the rate served
        (figure_lines(rows, "p95"), "compare_p95",
         "p95 latency against the rate served (hollow: missed the goal)", "p95 ms (log scale)",
         True, True),
        (figure_lines(rows, "drops", factor=100), "compare_drop_rate",
         "drop rate (dropped + failed) / scheduled", "drop rate (%)", False, False),
        (costs, "compare_cost", cost_title, "\\$ per million requests (log scale)", True, True),
    )  # fmt: skip
    return [
        overlay_chart(lines, out_dir / f"{name}.png", title, ylabel, caption, log, served)
        for lines, name, title, ylabel, log, served in wanted
        if lines
    ]


def write_page(
    sides: Sides, rows: list[compare.Row], scale: Scale, tolerance: float, out_dir: Path
) -> Path:
    """compare.html and its PNG charts into `out_dir`; the page's path."""
    run_a, run_b = sides.run_a, sides.run_b
    title = f"Compare {run_a.run_id} -> {run_b.run_id}"
    on_a = any(row.speed is not None for row in rows)
    caption = f"A {run_a.run_id} solid, B {run_b.run_id} dashed" + (
        ", B's latencies on A's machine" if on_a else ""
    )
    doc = compare.header_doc(run_a, run_b, scale, tolerance, rows)
    paths = _charts(sides, rows, out_dir, caption)
    doc.h(2, "The runs side by side")
    doc.p(
        "A's line solid, B's dashed, a colour per series. The cost is as each run measured "
        "it (the CPU and memory of its steps), priced at A's prices; the steps' "
        "latencies and drop rates are the table's. The p95 and the cost are drawn against "
        f"the rate each step served; a step that missed the goal ({GOAL.words()}) is "
        "hollow: its cost per request served is not a price of the service asked for."
    )
    for path in paths:
        doc.image(path, path.stem.replace("_", " "))
    if not any(path.stem == "compare_cost" for path in paths):
        doc.p("No step of both runs recorded its CPU and memory: no cost to draw.", note=True)
    doc.h(2, "Every step both runs ran, flagged beyond its noise")
    table = compare.table(rows)  # as compare.md has it, its Markdown emphasis left out
    doc.table(replace(table, rows=[[c.replace("**", "") for c in row] for row in table.rows]))
    page = out_dir / PAGE
    page.write_text(doc.html(title))
    return page
