"""`aside-bench compare RUN_A RUN_B`: every step two runs share (scenario, arm,
phase, rate), figure by figure, with a change flagged only where it exceeds
the noise the runs themselves measured, else a stated tolerance.

The noise of a figure is pooled over a series (scenario, arm, phase): the
widest spread (max - min) of its repeats at any rate of the series in either
run, relative to the median for latencies and rates (their noise grows with
them), in points for shares. One step's two repeats alone would be a poor
estimate: with REPEAT=2, identical runs would flag about one figure in five;
pooled over three rates, about one in eighteen, and one in a hundred with
REPEAT=3 (docs/decisions.md, "Comparing two runs").

A step that dropped iterations in both runs was past its capacity in both: k6
could not send all it was asked to, so its latencies describe how long the
overload lasted (a cold step's fill, say) rather than the service, and they
move with it. Its latencies and drop rate are shown but not judged (drops
non-zero in both: alike); its achieved rate, the capacity it found, is (the
repeats' goal: p95 alike for every step under capacity, drops zero or non-zero
alike). The drop rate is left to the achieved rate because at a rate far past
capacity it is 1 - capacity / rate: its noise in points shrinks as the rate
grows, so a series' spread pooled in points (below) under-states it at the
series' lowest rate.

Runs are compared only on machines of about the same speed, judged by their
calibration (calibrate.py): more than MACHINE_RATIO_LIMIT apart is refused
unless --normalise, which puts B's figures on A's machine by the ratio.

Pure functions only (but `write`), so every rule here has a unit test.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .calibrate import base_latency, capped, rate_of
from .plan import series_label
from .repeats import Spread, spread
from .tables import Table, fmt_ms, fmt_pct, fmt_rps

# Runs whose machine calibrations differ by more than this are not compared as they are.
MACHINE_RATIO_LIMIT = 1.25
# Base latencies (calibrate.base_latency) further apart than this get a warning line.
BASE_LATENCY_WARNING = 0.15
# Without repeats: a latency or a rate must change by this share of A's value,
DEFAULT_TOLERANCE = 0.2
# a drop or hit rate by this many points (absolute).
SHARE_TOLERANCE = 0.02
# Below these a change is never flagged, whatever the spread (0 wide when runs agree).
FLOOR = {"ms": 0.05, "rate": 0.5, "share": 0.005}
# figure -> (unit, True when higher is better)
FIGURES = {
    "p50": ("ms", False),
    "p95": ("ms", False),
    "p99": ("ms", False),
    "achieved": ("rate", True),
    "drops": ("share", False),
    "hit": ("share", True),
}
# What a step past capacity in both runs is not judged on.
UNJUDGED_PAST_CAPACITY = frozenset(
    name for name, (unit, _) in FIGURES.items() if unit == "ms" or name == "drops"
)
PAST_CAPACITY = "past capacity"
StepKey = tuple[str, str, str, int]
SeriesKey = tuple[str, str, str]


class CompareError(ValueError):
    """Two runs cannot be compared as asked; the message says why."""


@dataclass(frozen=True)
class Scale:
    """How B's figures are put next to A's."""

    rate_a: int | None  # the machines' calibrations (k6 + the core's /healthz)
    rate_b: int | None
    normalised: bool

    @property
    def ratio(self) -> float | None:
        """How much faster B's machine measured than A's."""
        if not self.rate_a or not self.rate_b:
            return None
        return self.rate_b / self.rate_a

    def apply(self, name: str, value: float | None) -> float | None:
        """B's figure on A's machine: a rate divided by the ratio, a latency
        multiplied by it, a share as it is."""
        ratio = self.ratio
        if value is None or not self.normalised or ratio is None:
            return value
        unit = FIGURES[name][0]
        if unit == "rate":
            return value / ratio
        return value * ratio if unit == "ms" else value


def machine_scale(
    run_a: dict[str, Any], run_b: dict[str, Any], normalise: bool, ignore: bool = False
) -> Scale:
    """A's and B's calibrations, checked: CompareError when either is missing
    or they differ by more than MACHINE_RATIO_LIMIT, unless `ignore` (the
    reader knows both ran on one machine: the calibration's own noise) or,
    for the difference, `normalise`."""
    scale = Scale(rate_of(run_a["machine"]), rate_of(run_b["machine"]), normalise)
    for run, rate in ((run_a, scale.rate_a), (run_b, scale.rate_b)):
        if rate is None and not ignore:
            raise CompareError(
                f"run {run['run_id']} has no machine calibration (it ran with CALIBRATE=0), "
                "so nothing says its machine measures like the other's; "
                "pass --ignore-calibration to compare anyway"
            )
    ratio = scale.ratio
    if ratio is None:
        if normalise:
            raise CompareError("--normalise needs both runs calibrated")
        return scale
    if max(ratio, 1 / ratio) > MACHINE_RATIO_LIMIT and not (normalise or ignore):
        raise CompareError(
            f"the machines differ: calibrated at {scale.rate_a} and {scale.rate_b} req/s "
            f"({max(ratio, 1 / ratio):.2f}x, more than {MACHINE_RATIO_LIMIT:g}x); "
            "pass --normalise to divide by their ratio, or --ignore-calibration to compare "
            "as measured (one machine, a noisy calibration)"
        )
    return scale


@dataclass(frozen=True)
class Change:
    """One figure of one step in both runs."""

    a: Spread | None
    b: Spread | None
    noise: float  # the change a figure must exceed to be flagged
    basis: str  # "spread" (the runs' repeats), "tolerance" or PAST_CAPACITY (not judged)
    flag: str  # "" | "better" | "worse"

    @property
    def delta(self) -> float | None:
        return None if self.a is None or self.b is None else self.b.median - self.a.median


def relative_width(name: str, one: Spread) -> float:
    """A spread's width as the noise of its figure: relative to the median for
    latencies and rates, in points for shares."""
    if FIGURES[name][0] == "share":
        return one.width
    return one.width / abs(one.median) if one.median else 0.0


def noise_of(
    name: str, a: Spread, b: Spread, tolerance: float, series_width: float | None = None
) -> tuple[float, str]:
    """The change this figure must exceed: the widest spread of its series
    (`series_width`, from relative_width) scaled to A's value, else the widest
    spread of a run that repeated the step, else the tolerance; never below
    the figure's floor."""
    unit = FIGURES[name][0]
    widths = [relative_width(name, one) for one in (a, b) if one.runs > 1]
    if series_width is not None:
        widths.append(series_width)
    if widths:
        width = max(widths)
        noise, basis = (width if unit == "share" else width * abs(a.median)), "spread"
    elif unit == "share":
        noise, basis = SHARE_TOLERANCE, "tolerance"
    else:
        noise, basis = tolerance * abs(a.median), "tolerance"
    return max(noise, FLOOR[unit]), basis


def dropped(figures: dict[str, Spread | None]) -> bool:
    """Whether any repeat of the step dropped iterations: it ran past capacity."""
    drops = figures.get("drops")
    return drops is not None and drops.high > 0


def change(
    name: str,
    a: Spread | None,
    b: Spread | None,
    tolerance: float,
    series_width: float | None = None,
    past_capacity: bool = False,
) -> Change:
    if a is None or b is None:
        return Change(a, b, 0.0, "", "")
    if past_capacity and name in UNJUDGED_PAST_CAPACITY:
        return Change(a, b, 0.0, PAST_CAPACITY, "")
    noise, basis = noise_of(name, a, b, tolerance, series_width)
    delta = b.median - a.median
    flag = ""
    if abs(delta) > noise:
        higher_better = FIGURES[name][1]
        flag = "better" if (delta > 0) == higher_better else "worse"
    return Change(a, b, noise, basis, flag)


def _by_step(figures: list[dict[str, Any]]) -> dict[StepKey, list[dict[str, Any]]]:
    grouped: dict[StepKey, list[dict[str, Any]]] = {}
    for one in figures:
        key = (one["scenario"], one["arm"], one["phase"], int(one["rate"]))
        grouped.setdefault(key, []).append(one)
    return grouped


@dataclass(frozen=True)
class Row:
    key: StepKey
    changes: dict[str, Change]

    @property
    def flags(self) -> list[str]:
        return [f"{name} {c.flag}" for name, c in self.changes.items() if c.flag]


def compare(
    figures_a: list[dict[str, Any]],
    figures_b: list[dict[str, Any]],
    scale: Scale,
    tolerance: float = DEFAULT_TOLERANCE,
) -> list[Row]:
    """One row per step both runs ran, in A's order."""
    runs_a, runs_b = _by_step(figures_a), _by_step(figures_b)
    spreads_a = {key: _spreads(runs, None) for key, runs in runs_a.items()}
    spreads_b = {key: _spreads(runs, scale) for key, runs in runs_b.items()}
    widths = series_widths([spreads_a, spreads_b])
    rows = []
    for key, a in spreads_a.items():
        b = spreads_b.get(key)
        if b is None:
            continue
        series = widths.get(key[:3], {})
        past = dropped(a) and dropped(b)
        changes = {
            name: change(name, a[name], b[name], tolerance, series.get(name), past)
            for name in FIGURES
        }
        rows.append(Row(key, changes))
    return rows


def _spreads(runs: list[dict[str, Any]], scale: Scale | None) -> dict[str, Spread | None]:
    """Each figure of a step over its repeats, B's put on A's machine."""
    return {
        name: spread([one.get(name) if scale is None else scale.apply(name, one.get(name))
                      for one in runs])
        for name in FIGURES
    }  # fmt: skip


def series_widths(
    runs: list[dict[StepKey, dict[str, Spread | None]]],
) -> dict[SeriesKey, dict[str, float]]:
    """The widest relative spread of each figure over every repeated step of a
    series (scenario, arm, phase) in any of the runs."""
    widest: dict[SeriesKey, dict[str, float]] = {}
    for steps in runs:
        for key, figures in steps.items():
            for name, one in figures.items():
                if one is None or one.runs < 2:
                    continue
                series = widest.setdefault(key[:3], {})
                series[name] = max(series.get(name, 0.0), relative_width(name, one))
    return widest


_FORMAT = {"ms": fmt_ms, "rate": fmt_rps, "share": fmt_pct}


def cell(name: str, found: Change) -> str:
    """'4.00 -> 4.50 (+0.50, noise 0.30) worse', or 'n/a' when a side lacks it."""
    fmt = _FORMAT[FIGURES[name][0]]
    if found.a is None or found.b is None or found.delta is None:
        return "n/a"
    delta = found.delta
    shown = f"{delta * 100:+.1f} pt" if FIGURES[name][0] == "share" else f"{delta:+.3g}"
    text = f"{fmt(found.a.median)} -> {fmt(found.b.median)} ({shown})"
    if found.basis == PAST_CAPACITY:
        return f"{text} not judged"
    return f"{text} **{found.flag}**" if found.flag else text


def table(rows: list[Row]) -> Table:
    headers = ["scenario", "series", "target /s", *FIGURES, "flagged"]
    body = [
        [
            row.key[0],
            series_label(row.key[1], row.key[2]),
            str(row.key[3]),
            *(cell(name, row.changes[name]) for name in FIGURES),
            ", ".join(row.flags) or "none",
        ]
        for row in rows
    ]
    return Table("every step both runs ran: A -> B (change)", headers, body)


def _run_line(name: str, run: dict[str, Any], rate: int | None) -> str:
    machine = run["machine"]
    bound = " (held at every rate tried: a lower bound)" if capped(machine) else ""
    return (
        f"{name}: {run['run_id']} ({machine.get('cpu')}, {machine.get('nproc')} cores), "
        f"machine calibration {rate or 'none'} req/s{bound}"
    )


def base_latency_line(run_a: dict[str, Any], run_b: dict[str, Any]) -> str | None:
    """The machines' latency for a trivial request at low load, A's and B's,
    with a warning when they differ by more than BASE_LATENCY_WARNING: a drift
    of the machine between the runs that their repeats cannot see."""
    a, b = base_latency(run_a["machine"]), base_latency(run_b["machine"])
    if a is None or b is None:
        return None
    ratio = b[1] / a[1] if a[1] > 0 else 1.0
    line = (
        "base latency (median p95 of the core's /healthz over the calibration's lowest "
        f"probes): A {a[1]:.2f} ms up to {a[0]}/s, B {b[1]:.2f} ms up to {b[0]}/s "
        f"({ratio:.2f}x)"
    )
    if abs(ratio - 1) > BASE_LATENCY_WARNING:
        faster = "faster" if ratio < 1 else "slower"
        line += (
            f": B's machine answered a trivial request {abs(1 - ratio):.0%} {faster} at low "
            "load, a drift between the runs that their repeats cannot see; read a latency "
            "change of about that share as the machine's, and confirm flags with a third run"
        )
    return line


def header_lines(
    run_a: dict[str, Any], run_b: dict[str, Any], scale: Scale, tolerance: float, rows: list[Row]
) -> list[str]:
    bases = {c.basis for row in rows for c in row.changes.values() if c.basis}
    lines = [_run_line(name, run, rate) for name, run, rate in
             (("A", run_a, scale.rate_a), ("B", run_b, scale.rate_b))]  # fmt: skip
    base = base_latency_line(run_a, run_b)
    if base is not None:
        lines.append(base)
    ratio = scale.ratio
    if ratio is not None:
        lines.append(
            f"B's machine measured {ratio:.2f}x A's"
            + (
                ": B's rates are divided and its latencies multiplied by that ratio"
                if scale.normalised
                else (
                    " (within the 1.25x allowed; figures as measured)"
                    if max(ratio, 1 / ratio) <= MACHINE_RATIO_LIMIT
                    else " (beyond the 1.25x allowed, compared as measured: --ignore-calibration)"
                )
            )
        )
    if "spread" in bases:
        lines.append(
            "flagged where the change of the median exceeds the widest spread (max - min) "
            "of the repeats at any rate of the same series in either run, relative to the "
            "median for latencies and rates"
        )
    if PAST_CAPACITY in bases:
        lines.append(
            "not judged: the latencies and drop rate of a step that dropped iterations in "
            "both runs (past capacity in both: they measure the overload); its achieved "
            "rate is"
        )
    if "tolerance" in bases:
        lines.append(
            f"steps run once: flagged where a latency or rate changes by more than "
            f"{tolerance:.0%} of A's value, a drop or hit rate by more than "
            f"{SHARE_TOLERANCE * 100:g} points"
        )
    return lines


def write(
    run_a: dict[str, Any],
    run_b: dict[str, Any],
    rows: list[Row],
    scale: Scale,
    tolerance: float,
    out_dir: Path,
) -> str:
    """compare.md and compare.json into `out_dir`; the Markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = header_lines(run_a, run_b, scale, tolerance, rows)
    markdown = (
        f"# Compare {run_a['run_id']} -> {run_b['run_id']}\n\n"
        + "\n".join(f"- {line}" for line in lines)
        + "\n\n"
        + table(rows).markdown()
    )
    (out_dir / "compare.md").write_text(markdown)
    found = {
        "a": run_a["run_id"],
        "b": run_b["run_id"],
        "ratio": scale.ratio,
        "normalised": scale.normalised,
        "tolerance": tolerance,
        "steps": [
            {"key": list(row.key), "changes": {n: asdict(c) for n, c in row.changes.items()}}
            for row in rows
        ],
    }
    (out_dir / "compare.json").write_text(json.dumps(found, indent=1) + "\n")
    return markdown
