"""A ceiling run's page (ceiling.md, report.html): ceilings, trials, the reference, the chart."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aside_bench.ceiling.search import RERUN_VERDICT, Reference, ceiling_of, limit_of, reruns_of
from aside_bench.plan.arms import BARE_ARM, TIERED_ARMS
from aside_bench.plan.steps import series_label
from aside_bench.records.results import StepResult
from aside_bench.records.runfile import RunRecord, save_figures
from aside_bench.report.doc import Doc, write_pages
from aside_bench.report.sweep import calibration_rates, caption, run_page, saturation_section
from aside_bench.report.tables import (
    Table,
    extra_columns,
    fmt_pct,
    fmt_rps,
    latency_cell,
    series_order,
)


@dataclass(frozen=True)
class ArmCeiling:
    """An arm's ceiling; capped: no step missed; the rate a measurement limit stopped it at."""

    ceiling: int
    capped: bool
    measurement_limit: int | None

    def cell(self) -> str:
        if self.measurement_limit is not None:
            return f">= {self.ceiling} (measurement limit at {self.measurement_limit})"
        return (">= " if self.capped else "") + str(self.ceiling)


@dataclass(frozen=True)
class Ceilings:
    """Each arm's ceiling, each tiered arm's ratio to healthz's, and the bare reference."""

    arms: dict[str, ArmCeiling]
    ratios: dict[str, float]
    reference: Reference | None


def ceiling_tables(
    results: list[StepResult], p95_limit_ms: float, calibration: dict[str, int | None] | None = None
) -> tuple[list[Table], Ceilings]:
    summary_rows, trials_rows, arms = [], [], {}
    extra, extra_cells = extra_columns(results)
    known = {name: rate for name, rate in (calibration or {}).items() if rate}
    for arm, phase in series_order(results):
        series = [r for r in results if (r.step.arm, r.step.phase) == (arm, phase)]
        again = reruns_of((r.step.rate, r.holds(p95_limit_ms), r.noisy) for r in series)
        counted = [r for r, rerun in zip(series, again, strict=True) if not rerun]
        outcomes = [(r.step.rate, r.verdict(p95_limit_ms)) for r in counted]
        ceiling, capped = ceiling_of([(rate, v == "held") for rate, v in outcomes])
        arms[arm] = found = ArmCeiling(ceiling, capped, limit_of(outcomes))
        shares = (f"{found.ceiling / rate:.2f}" for rate in known.values())
        summary_rows.append([series_label(arm, phase), found.cell(), *shares])
        for r, rerun in zip(series, again, strict=True):
            rate = str(r.step.rate) + (f" (run {r.step.repeat})" if r.step.repeat > 1 else "")
            row = [series_label(arm, phase), rate, latency_cell(r, "p95"), latency_cell(r, "p99")]
            verdict = RERUN_VERDICT if rerun else r.verdict(p95_limit_ms)
            row += [fmt_rps(r.achieved_rps), fmt_pct(r.drop_rate), verdict]
            trials_rows.append(row + extra_cells(r))
    blank = [""] * len(known)
    healthz = arms["healthz"].ceiling if "healthz" in arms else 0
    ratios = {arm: arms[arm].ceiling / healthz for arm in TIERED_ARMS if healthz and arm in arms}
    summary_rows += [[f"{arm} / healthz", f"{ratio:.2f}", *blank] for arm, ratio in ratios.items()]
    reference = reference_of(arms)
    if reference is not None:
        summary_rows.append([f"cache / {BARE_ARM} (reference)", reference_cell(reference), *blank])
    title = f"highest rate held at p95 <= {p95_limit_ms:g} ms with no drops (requests/s)"
    headers = ["arm", "ceiling /s"] + [f"/ {name} calibration" for name in known]
    trials = ["arm", "target /s", "p95 ms", "p99 ms", "achieved /s", "drop rate", "verdict", *extra]
    summary = Table(title, headers, summary_rows)
    tables = [summary, Table("every step, in the order run", trials, trials_rows)]
    return tables, Ceilings(arms, ratios, reference)


def reference_of(arms: dict[str, ArmCeiling]) -> Reference | None:
    """The cache arm's ceiling against the bare scenario's, when both were searched."""
    if "cache" not in arms or BARE_ARM not in arms:
        return None
    return Reference(arms["cache"].ceiling, arms[BARE_ARM].ceiling)


def reference_cell(reference: Reference) -> str:
    if reference.ratio is None:
        return f"none: the reference held no rate ({reference.verdict})"
    return f"{reference.ratio:.2f} ({reference.verdict})"


REFERENCE_TEXT = (
    f"The reference ({BARE_ARM}) is the cache arm's search again, the same warm cache and "
    "the same requests, sent by the driver's `bare` scenario: no check of the body or the "
    "headers, only the status. Its ceiling is what the stack holds when the driver spends "
    "the least it can per request; the cache arm's ceiling within 10 % of it means the "
    "driver's checks did not set the ceiling, a lower ratio means they did."
)


def _reference(doc: Doc, found: Ceilings) -> None:
    reference = found.reference
    if reference is None:
        return
    doc.h(2, "Reference: the bare scenario")
    doc.p(REFERENCE_TEXT)
    doc.p(
        f"cache {found.arms['cache'].cell()} req/s, {BARE_ARM} "
        f"{found.arms[BARE_ARM].cell()} req/s: ratio {reference_cell(reference)}.",
        note=not reference.agrees,
    )


def write_ceiling(run: RunRecord, results: list[StepResult], out_dir: Path) -> list[Table]:
    limit = float(run.params["p95_limit_ms"])
    title = f"Aside ceiling {run.run_id}"
    doc = run_page(title, run)
    doc.p(
        "The cache arms read counts with a warm cache (the read mix): cache through Redis, l1 "
        "from each worker's memory, hybrid memory then Redis, tracking likewise with the "
        "memory kept by Redis's client tracking; the healthz arm asks a trivial "
        "route of the same gunicorn. A ratio says how much of the server's own ceiling that "
        "cached read path keeps. Each arm's final held and missed rates ran twice: a rate "
        "holds only if both runs held. A step that missed while the driver itself was saturated is "
        "a measurement limit, not the server's ceiling. A step that missed while the host (the "
        "hypervisor) stole more than 8 % of the machine's cores (the column \"of it, host "
        'steal") is run again, at most twice in a row, before its miss counts.'
    )
    save_figures(results, out_dir)
    tables, found = ceiling_tables(results, limit, calibration_rates(run))
    for table in tables:
        doc.table(table)
    _reference(doc, found)
    saturation_section(doc, results)
    if results:
        from aside_bench.report import charts

        what = "ceiling search: p95 by target rate"
        chart = charts.ceiling_chart(results, out_dir / "ceiling.png", limit, what, caption(run))
        doc.image(chart, "ceiling")
    write_pages(doc, out_dir / "ceiling.md", out_dir / "report.html", title)
    return tables
