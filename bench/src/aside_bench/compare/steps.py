"""Two runs' common steps, a change flagged only beyond their noise (decisions 022, 023, 040)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

from aside_bench.compare.machines import Scale, base_latency_line, machine_lines, run_line
from aside_bench.plan.steps import series_label
from aside_bench.records.calibration import rate_of
from aside_bench.records.repeats import Spread, spread
from aside_bench.records.runfile import RunRecord, StepFigures, StepKey
from aside_bench.report.doc import Doc
from aside_bench.report.tables import Table, fmt_ms, fmt_pct, fmt_rps

# Without repeats: a latency or a rate must change by this share of A's value,
DEFAULT_TOLERANCE = 0.2
# a drop or hit rate by this many points (absolute).
SHARE_TOLERANCE = 0.02
# A step whose speed moved further than this is named beside its flags: a tail near
# capacity grows faster than the machine slows, beyond what the speed puts right.
STEP_SPEED_WARNING = 0.1
# Below these a change is never flagged, whatever the spread (0 wide when runs agree).
FLOOR = {"ms": 0.05, "rate": 0.5, "share": 0.005}
# figure -> (unit, True when higher is better)
FIGURES = {
    "p50": ("ms", False), "p95": ("ms", False), "p99": ("ms", False),
    "achieved": ("rate", True), "drops": ("share", False), "hit": ("share", True),
}  # fmt: skip
# What a step past capacity in both runs is not judged on.
UNJUDGED_PAST_CAPACITY = frozenset({"p50", "p95", "p99", "drops"})
PAST_CAPACITY = "past capacity"
SeriesKey = tuple[str, str, str]


def baseline(runs: list[RunRecord]) -> RunRecord:
    """Several runs as one: ids joined by '+', the machine of the median calibration."""
    if len(runs) == 1:
        return runs[0]
    ordered = sorted(runs, key=lambda run: rate_of(run.machine) or 0)
    middle = ordered[(len(ordered) - 1) // 2] if rate_of(ordered[-1].machine) else runs[0]
    return replace(
        middle, run_id="+".join(run.run_id for run in runs), runs=[run.run_id for run in runs]
    )


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
    """A spread's width relative to its median; in points for shares."""
    if FIGURES[name][0] == "share":
        return one.width
    return one.width / abs(one.median) if one.median else 0.0


def noise_of(
    name: str, a: Spread, b: Spread, tolerance: float, series_width: float | None = None
) -> tuple[float, str]:
    """The change a figure must exceed: its series' spread, a run's, else the tolerance."""
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
    flag = "better" if (delta > 0) == FIGURES[name][1] else "worse"  # [1]: higher is better
    return Change(a, b, noise, basis, flag if abs(delta) > noise else "")


def _by_step(figures: list[StepFigures]) -> dict[StepKey, list[StepFigures]]:
    grouped: dict[StepKey, list[StepFigures]] = {}
    for one in figures:
        grouped.setdefault(one.key, []).append(one)
    return grouped


@dataclass(frozen=True)
class Row:
    key: StepKey
    changes: dict[str, Change]
    speed: float | None = None  # how much faster B's machine ran this step (None: as measured)

    @property
    def flags(self) -> list[str]:
        return [f"{name} {c.flag}" for name, c in self.changes.items() if c.flag]

    @property
    def machine_moved(self) -> bool:
        """B's machine ran this step more than STEP_SPEED_WARNING off A's."""
        return self.speed is not None and abs(self.speed - 1) > STEP_SPEED_WARNING

    def verdict(self) -> str:
        """The flagged column: its flags, and the machine's move beside them."""
        if not self.flags:
            return "none"
        moved = f" (B's machine {self.speed:.2f}x here)" if self.machine_moved else ""
        return ", ".join(self.flags) + moved


def compare(
    figures_a: list[StepFigures],
    figures_b: list[StepFigures],
    scale: Scale,
    tolerance: float = DEFAULT_TOLERANCE,
) -> list[Row]:
    """One row per step both ran, in A's order, B put on A's machine."""
    runs_a, runs_b = _by_step(figures_a), _by_step(figures_b)
    spreads_a = {key: _spreads(runs) for key, runs in runs_a.items()}
    spreads_b = {key: _spreads(runs, partial(scale.apply, key=key)) for key, runs in runs_b.items()}
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
        rows.append(Row(key, changes, scale.speed(key)))
    return rows


def _spreads(
    runs: list[StepFigures],
    put: Callable[[str, float | None], float | None] = lambda _name, value: value,
) -> dict[str, Spread | None]:
    """Each figure of a step over its repeats, each repeat's figure `put` on A's machine."""
    return {name: spread([put(name, one.figure(name)) for one in runs]) for name in FIGURES}


def series_widths(
    runs: list[dict[StepKey, dict[str, Spread | None]]],
) -> dict[SeriesKey, dict[str, float]]:
    """The widest relative spread of each figure over a series' repeated steps."""
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
    speeds = any(row.speed is not None for row in rows)
    headers = ["scenario", "series", "target /s", *(["B's speed"] if speeds else []),
               *FIGURES, "flagged"]  # fmt: skip
    body = []
    for row in rows:
        speed = [f"{row.speed:.2f}x" if row.speed is not None else "n/a"] if speeds else []
        head = [row.key[0], series_label(row.key[1], row.key[2]), str(row.key[3]), *speed]
        body.append([*head, *(cell(name, row.changes[name]) for name in FIGURES), row.verdict()])
    title = "every step both runs ran: A -> B" + (" on A's machine" if speeds else "")
    return Table(f"{title} (change)", headers, body)


def header_lines(
    run_a: RunRecord, run_b: RunRecord, scale: Scale, tolerance: float, rows: list[Row]
) -> list[str]:
    bases = {c.basis for row in rows for c in row.changes.values() if c.basis}
    lines = [
        run_line(name, run, rate)
        for name, run, rate in (("A", run_a, scale.rate_a), ("B", run_b, scale.rate_b))
    ]
    base = base_latency_line(run_a, run_b)
    if base is not None:
        lines.append(base)
    lines.extend(machine_lines(scale))
    moved = [row for row in rows if row.flags and row.machine_moved]
    if moved:
        lines.append(
            f"{len(moved)} of the {sum(1 for row in rows if row.flags)} flagged steps ran on a "
            f"machine more than {STEP_SPEED_WARNING:.0%} off A's (named in the flagged column): "
            "a p95 or p99 near capacity grows faster than the machine slows, which the speed "
            "does not put right; run both again before believing them"
        )
    notes = {  # how each basis judges, for the bases the rows used
        "spread": "flagged where the change of the median exceeds the widest spread (max - min) "
        "of the repeats at any rate of the same series in either run, relative to the "
        "median for latencies and rates",
        PAST_CAPACITY: "not judged: the latencies and drop rate of a step that dropped iterations "
        "in both runs (past capacity in both: they measure the overload); its achieved rate is",
        "tolerance": f"steps run once: flagged where a latency or rate changes by more than "
        f"{tolerance:.0%} of A's value, a drop or hit rate by more than "
        f"{SHARE_TOLERANCE * 100:g} points",
    }
    lines += [note for basis, note in notes.items() if basis in bases]
    return lines


def header_doc(
    run_a: RunRecord, run_b: RunRecord, scale: Scale, tolerance: float, rows: list[Row]
) -> Doc:
    """A compare's page begun: its title and what it compares, on which machines, how judged."""
    doc = Doc()
    doc.h(1, f"Compare {run_a.run_id} -> {run_b.run_id}")
    doc.ul(header_lines(run_a, run_b, scale, tolerance, rows))
    return doc


def write(
    run_a: RunRecord,
    run_b: RunRecord,
    rows: list[Row],
    scale: Scale,
    tolerance: float,
    out_dir: Path,
) -> str:
    """compare.md and compare.json into `out_dir`; the Markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = header_doc(run_a, run_b, scale, tolerance, rows)
    doc.table(table(rows))
    markdown = doc.markdown()
    (out_dir / "compare.md").write_text(markdown)
    steps = [
        {
            "key": list(row.key),
            "speed": row.speed,
            "changes": {n: asdict(c) for n, c in row.changes.items()},
        }
        for row in rows
    ]
    found = {
        "a": run_a.runs or [run_a.run_id],
        "b": run_b.runs or [run_b.run_id],
        **{
            name: getattr(scale, name)
            for name in ("ratio", "judged_by", "calibration_ratio", "normalised", "as_measured")
        },
        "tolerance": tolerance,
        "steps": steps,
    }
    (out_dir / "compare.json").write_text(json.dumps(found, indent=1) + "\n")
    return markdown
