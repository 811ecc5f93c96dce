"""PNG charts of a run (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator

from aside_bench.curve.points import RateCurve
from aside_bench.curve.simulate import MIN_CAPACITY
from aside_bench.plan.steps import series_label
from aside_bench.records.goal import Goal
from aside_bench.records.prices import Prices, step_price
from aside_bench.records.results import StepResult
from aside_bench.report.tables import PERCENTILES, has_cache, latency_of, series_of, series_order


def finish(fig: Figure, path: Path, caption: str) -> Path:
    fig.text(0.5, 0.01, caption, ha="center", va="bottom", fontsize=7, color="#444444", wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
    return path


def log_y(ax: plt.Axes) -> None:
    """Log scale with plain numbers at 1, 2, 5 x 10^n: readable without a slide rule."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda _value, _pos: ""))


def rate_axis(ax: plt.Axes, rates: list[int]) -> None:
    if len(rates) > 1 and max(rates) / max(min(rates), 1) >= 10:
        ax.set_xscale("log")
    ax.set_xticks(rates)
    ax.set_xticklabels([str(r) for r in rates], rotation=45, fontsize=7)
    ax.minorticks_off()
    ax.set_xlabel("target rate (requests/s)")
    ax.grid(True, which="both", alpha=0.3)


def _plot_series(
    ax: plt.Axes, results: list[StepResult], value: Callable[[StepResult], float | None]
) -> None:
    """A line a series of `value` against the target rate (steps without one left out)."""
    for arm, phase in series_order(results):
        points = [
            (r.step.rate, v) for r in series_of(results, arm, phase) if (v := value(r)) is not None
        ]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", label=series_label(arm, phase))


def latency_chart(results: list[StepResult], path: Path, title: str, caption: str) -> Path:
    rates = sorted({r.step.rate for r in results})
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.6), sharey=True)
    for ax, name in zip(axes, PERCENTILES, strict=True):
        _plot_series(ax, results, partial(latency_of, name=name))
        log_y(ax)
        ax.set_title(f"{name} latency")
        rate_axis(ax, rates)
    axes[0].set_ylabel("ms (log scale)")
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    return finish(fig, path, caption)


def _rate_plot(
    results: list[StepResult],
    value: Callable[[StepResult], float | None],
    ylabel: str,
    title: str,
    target: bool = False,
) -> tuple[Figure, plt.Axes]:
    """One panel of `value` against the target rate, a line a series."""
    rates = sorted({r.step.rate for r in results})
    fig, ax = plt.subplots(figsize=(7, 4.8))
    if target:
        ax.plot(rates, rates, linestyle="--", color="grey", label="target")
    _plot_series(ax, results, value)
    rate_axis(ax, rates)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig, ax


def throughput_chart(results: list[StepResult], path: Path, title: str, caption: str) -> Path:
    achieved = "achieved successful requests/s"
    fig, ax = _rate_plot(results, lambda r: r.achieved_rps, achieved, title, target=True)
    if ax.get_xscale() == "log":
        log_y(ax)
    return finish(fig, path, caption)


def _share_chart(results: list[StepResult], out_dir: Path, caption: str, what: str) -> Path:
    """The drop rate ("drop") or the cache hit rate ("hit") in %, against the target rate."""
    scenario = results[0].step.scenario
    field, name, title = {
        "drop": ("drop_rate", "drop rate", "drop rate (dropped + failed) / scheduled"),
        "hit": ("hit_rate", "cache hit rate", "cache hit rate (gateway counters)"),
    }[what]

    def value(result: StepResult) -> float | None:
        return None if getattr(result, field) is None else getattr(result, field) * 100

    fig, ax = _rate_plot(results, value, f"{name} (%)", f"{scenario}: {title}")
    ax.set_ylim(-3, 103)
    return finish(fig, out_dir / f"{field}.png", caption)


def sweep_charts(results: list[StepResult], out_dir: Path, caption: str) -> list[Path]:
    scenario = results[0].step.scenario
    title, achieved = f"{scenario}: latency by target rate", f"{scenario}: achieved vs target"
    paths = [
        latency_chart(results, out_dir / "latency.png", title, caption),
        throughput_chart(results, out_dir / "throughput.png", achieved, caption),
        _share_chart(results, out_dir, caption, "drop"),
    ]
    if has_cache(results):
        paths.append(_share_chart(results, out_dir, caption, "hit"))
    return paths


def ceiling_chart(
    results: list[StepResult], path: Path, p95_limit_ms: float, title: str, caption: str
) -> Path:
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for arm, phase in series_order(results):
        answered = [r for r in series_of(results, arm, phase) if r.latency]
        xs, ys = [r.step.rate for r in answered], [r.latency.p95 for r in answered]
        line = ax.plot(xs, ys, marker="", alpha=0.5)[0]
        for held, marker, verdict in ((True, "o", "held"), (False, "x", "missed")):
            shown = [r for r in answered if r.holds(p95_limit_ms) == held]
            xs, ys = [r.step.rate for r in shown], [r.latency.p95 for r in shown]
            label = f"{series_label(arm, phase)}: {verdict}"
            ax.scatter(xs, ys, color=line.get_color(), marker=marker, label=label)
    ax.axhline(p95_limit_ms, color="red", linestyle="--", label=f"p95 = {p95_limit_ms:g} ms")
    log_y(ax)
    ax.set_xlabel("target rate (requests/s)")
    ax.set_ylabel("p95 ms (log scale)")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title)
    ax.legend(fontsize=7)
    return finish(fig, path, caption)


def curve_chart(curve: RateCurve, path: Path, caption: str) -> Path:
    """Hit ratio against cache size per simulated policy, the measured arms on it."""
    fig, ax = plt.subplots(figsize=(8, 5))
    for policy in dict.fromkeys(point.policy for point in curve.points):
        points = curve.policy_points(policy)
        style = "--" if policy == "Belady" else "-"
        xs, ys = [p.capacity for p in points], [p.hit_ratio * 100 for p in points]
        ax.plot(xs, ys, style, marker=".", label=f"{policy} (simulated)")
    for point in curve.measured:
        # At the size it was simulated at (a cache that never filled: every key);
        # one that held no key at the axis's first key, hollow, so none is lost.
        size = point.simulated_keys or max(point.keys, 1)
        hollow = point.keys < MIN_CAPACITY
        face, marker = ("none", "s") if hollow else (None, "o")
        y = point.hit_rate * 100
        ax.plot(size, y, marker, markersize=9, markeredgecolor="black", markerfacecolor=face)
        note = point.arm + (" (never full)" if point.never_full else "")
        if hollow:
            note += f" ({point.keys} keys held)"
        ax.annotate(note, (size, y), textcoords="offset points", xytext=(6, -12), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel(f"cache size (keys; {curve.distinct:,} distinct keys asked for)")
    ax.set_ylabel("hit rate (%)")
    ax.set_ylim(0, 100)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(
        f"hit rate against cache size at {curve.rate}/s\n{curve.requests:,} requests after "
        f"{curve.warmup:,} of warm-up; dots: Redis as measured (hollow: few keys held)",
        fontsize=10,
    )
    ax.legend(fontsize=8)
    return finish(fig, path, caption)


def mark_points(
    ax: plt.Axes, points: list[tuple[float, float, bool]], colour: str, marker: str = "o"
) -> None:
    """(x, y, held) points in `colour`: filled where the step held the goal, hollow where not."""
    for held in (True, False):
        shown = [(x, y) for x, y, ok in points if ok == held]
        if shown:
            xs, ys = zip(*shown, strict=True)
            face = colour if held else "none"
            ax.scatter(xs, ys, marker=marker, s=36, zorder=3, edgecolors=colour, facecolors=face)


def goal_legend(ax: plt.Axes) -> None:
    """The legend, with what a filled and a hollow marker mean."""
    handles, _ = ax.get_legend_handles_labels()
    handles += [
        Line2D([], [], marker="o", linestyle="", color="grey", label="held the goal"),
        Line2D([], [], marker="o", linestyle="", color="grey", markerfacecolor="none",
               label="missed it (hollow)"),
    ]  # fmt: skip
    ax.legend(handles=handles, fontsize=8)


def served_line(
    ax: plt.Axes,
    points: list[tuple[float, float, bool]],
    label: str,
    style: str = "-",
    colour: str | None = None,
    marker: str = "o",
) -> str:
    """A line through (rate served, value, held) points, each marked; the line's colour."""
    xs, ys = [x for x, _, _ in points], [y for _, y, _ in points]
    line = ax.plot(xs, ys, style, alpha=0.6, color=colour, label=label)[0]
    mark_points(ax, points, line.get_color(), marker)
    return line.get_color()


def served_axis(ax: plt.Axes, xs: list[float]) -> None:
    """The rate served: log scale when it spans a factor of ten or more."""
    known = [x for x in xs if x > 0]
    if len(known) > 1 and max(known) / min(known) >= 10:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))
    ax.set_xlabel("rate served (successful requests/s)")
    ax.grid(True, which="both", alpha=0.3)


def served_chart(
    results: list[StepResult],
    goal: Goal,
    value: Callable[[StepResult], float | None],
    ylabel: str,
    title: str,
) -> tuple[Figure, plt.Axes]:
    """`value` against the rate served, a line a series, missed steps hollow."""
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    xs_all: list[float] = []
    for arm, phase in series_order(results):
        points = [
            (r.achieved_rps, v, goal.held(r))
            for r in series_of(results, arm, phase)
            if r.achieved_rps > 0 and (v := value(r)) is not None
        ]
        if points:
            served_line(ax, points, series_label(arm, phase))
            xs_all += [x for x, _, _ in points]
    served_axis(ax, xs_all)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    return fig, ax


def served_p95_chart(results: list[StepResult], goal: Goal, path: Path, caption: str) -> Path:
    """p95 against the rate served, the goal's limit drawn; missed steps hollow."""
    scenario = results[0].step.scenario
    title = f"{scenario}: p95 against the rate served (hollow: missed the goal)"
    p95 = partial(latency_of, name="p95")
    fig, ax = served_chart(results, goal, p95, "p95 ms (log scale)", title)
    ax.axhline(goal.p95_ms, color="red", linestyle="--", label=f"goal p95 = {goal.p95_ms:g} ms")
    log_y(ax)
    goal_legend(ax)
    return finish(fig, path, caption)


def cost_chart(
    results: list[StepResult], prices: Prices, goal: Goal, path: Path, caption: str
) -> Path:
    """Cost per million requests against the rate served, missed steps hollow."""
    title = (
        f"cost per million requests ({prices.chart_words()}) against the rate served\n"
        "hollow: the step missed the goal, so its cost is not a price of that service"
    )
    price = partial(step_price, prices=prices)
    fig, ax = served_chart(results, goal, price, "\\$ per million requests (log scale)", title)
    log_y(ax)
    goal_legend(ax)
    return finish(fig, path, caption)
