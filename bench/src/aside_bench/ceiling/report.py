"""A ceiling run's page, ceiling.md (and report.html): the highest rate each
arm held, every trial in the order run, the reference of the bare scenario and
the chart of p95 by target rate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aside_bench.ceiling.search import (
    RERUN_VERDICT,
    Reference,
    ceiling_of,
    limit_of,
    reruns_of,
)
from aside_bench.plan.steps import BARE_ARM, TIERED_ARMS, series_label
from aside_bench.records.results import StepResult
from aside_bench.records.runfile import RunRecord, save_figures
from aside_bench.report.doc import Doc, write_pages
from aside_bench.report.sweep import calibration_rates, caption, run_page, saturation_section
from aside_bench.report.tables import (
    LOADGEN_HEADERS,
    Table,
    cost_columns,
    fmt_ms,
    fmt_pct,
    fmt_rps,
    has_loadgen,
    loadgen_cells,
    series_order,
)


def _ceiling_cell(ceiling: int, capped: bool, measurement_limit: int | None) -> str:
    if measurement_limit is not None:
        return f">= {ceiling} (measurement limit at {measurement_limit})"
    return (">= " if capped else "") + str(ceiling)


def ceiling_tables(
    results: list[StepResult],
    p95_limit_ms: float,
    calibration: dict[str, int | None] | None = None,
) -> tuple[list[Table], dict[str, Any]]:
    summary_rows, found = [], {}
    trials_rows = []
    costs = cost_columns(results)
    loadgen = has_loadgen(results)
    known = {name: rate for name, rate in (calibration or {}).items() if rate}
    for arm, phase in series_order(results):
        series = [r for r in results if (r.step.arm, r.step.phase) == (arm, phase)]
        again = reruns_of((r.step.rate, r.holds(p95_limit_ms), r.noisy) for r in series)
        counted = [r for r, rerun in zip(series, again, strict=True) if not rerun]
        outcomes = [(r.step.rate, r.verdict(p95_limit_ms)) for r in counted]
        ceiling, capped = ceiling_of([(rate, v == "held") for rate, v in outcomes])
        limit = limit_of(outcomes)
        found[arm] = {"ceiling": ceiling, "capped": capped, "measurement_limit": limit}
        summary_rows.append(
            [
                series_label(arm, phase),
                _ceiling_cell(ceiling, capped, limit),
                *(f"{ceiling / rate:.2f}" for rate in known.values()),
            ]
        )
        for r, rerun in zip(series, again, strict=True):
            trials_rows.append(
                [
                    series_label(arm, phase),
                    str(r.step.rate) + (f" (run {r.step.repeat})" if r.step.repeat > 1 else ""),
                    fmt_ms(r.latency.p95 if r.latency else None),
                    fmt_ms(r.latency.p99 if r.latency else None),
                    fmt_rps(r.achieved_rps),
                    fmt_pct(r.drop_rate),
                    RERUN_VERDICT if rerun else r.verdict(p95_limit_ms),
                    *(column.cell(r) for column in costs),
                    *(loadgen_cells(r) if loadgen else []),
                ]
            )
    if "healthz" in found and found["healthz"]["ceiling"] > 0:
        for arm in TIERED_ARMS:
            if arm not in found:
                continue
            ratio = found[arm]["ceiling"] / found["healthz"]["ceiling"]
            # "ratio" stays the cache arm's, as run.json consumers read it.
            found["ratio" if arm == "cache" else f"ratio_{arm}"] = ratio
            summary_rows.append([f"{arm} / healthz", f"{ratio:.2f}", *([""] * len(known))])
    reference = reference_of(found)
    if reference is not None:
        found["reference"] = {"ratio": reference.ratio, "agrees": reference.agrees}
        summary_rows.append(
            [f"cache / {BARE_ARM} (reference)", reference_cell(reference), *([""] * len(known))]
        )
    tables = [
        Table(
            f"highest rate held at p95 <= {p95_limit_ms:g} ms with no drops (requests/s)",
            ["arm", "ceiling /s"] + [f"/ {name} calibration" for name in known],
            summary_rows,
        ),
        Table(
            "every step, in the order run",
            ["arm", "target /s", "p95 ms", "p99 ms", "achieved /s", "drop rate", "verdict"]
            + [column.header for column in costs]
            + (LOADGEN_HEADERS if loadgen else []),
            trials_rows,
        ),
    ]
    return tables, found


def reference_of(found: dict[str, Any]) -> Reference | None:
    """The cache arm's ceiling against the bare scenario's, when both were searched."""
    if "cache" not in found or BARE_ARM not in found:
        return None
    return Reference(found["cache"]["ceiling"], found[BARE_ARM]["ceiling"])


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


def _reference(doc: Doc, found: dict[str, Any]) -> None:
    reference = reference_of(found)
    if reference is None:
        return
    doc.h(2, "Reference: the bare scenario")
    doc.p(REFERENCE_TEXT)
    doc.p(
        f"cache {_ceiling_cell(**found['cache'])} req/s, {BARE_ARM} "
        f"{_ceiling_cell(**found[BARE_ARM])} req/s: ratio {reference_cell(reference)}.",
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

        chart = charts.ceiling_chart(
            results,
            out_dir / "ceiling.png",
            limit,
            "ceiling search: p95 by target rate",
            caption(run),
        )
        doc.image(chart, "ceiling")
    write_pages(doc, out_dir / "ceiling.md", out_dir / "report.html", title)
    return tables
