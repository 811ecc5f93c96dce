"""The interference report: the reads' latency and drops beside the compute throughput
(StepResult.compute), per arm and compute rate, as tables and a chart."""

from __future__ import annotations

from pathlib import Path

from aside_bench.plan.shape import LoadShape
from aside_bench.records.results import StepResult
from aside_bench.records.runfile import RunRecord
from aside_bench.report.doc import Doc, write_pages
from aside_bench.report.sweep import caption
from aside_bench.report.tables import MISSING, Table, fmt_ms, fmt_pct, fmt_rps, rates_of, step_cells
from aside_bench.stack.machine import summary

from aside_bench_interference import plan as interference

LONG_HEADERS = [
    "arm", "compute /s", "reads p50 ms", "reads p95 ms", "reads p99 ms", "reads achieved /s",
    "reads drops", "read hit rate", "compute achieved /s", "compute p95 ms", "compute drops",
]  # fmt: skip

DEFINITIONS = [
    "arm: where the compute runs (go: the core; python: the gateway's own process, beside "
    "its event loop) and what it is (checksum: a loop that holds the GIL; pbkdf2, bcrypt: "
    "hashes that release it)",
    "compute /s: the target rate of POST /api/v1/compute beside the reads; 0 is the reads "
    "alone, measured again before each arm",
    "reads p50/p95/p99: latency of the answered (2xx) cached reads of the step, the "
    "driver's scenario `interference`; reads drops: (dropped + failed) / (read rate x "
    "duration); read hit rate: the gateway's cache counters over the step (Prometheus)",
    "compute achieved /s: successful compute requests per second (answers checked: the "
    "checksum and the PBKDF2 key the bench computed, a bcrypt hash of the asked cost); "
    "compute p95: their answered latency; compute drops: (dropped + failed) / (rate x "
    "duration), the driver's scenario `interference_compute`. A 503 of a busy engine is a failure",
]


def run_params(shape: LoadShape) -> dict[str, int]:
    """What the report states about an interference run's load."""
    return {
        "read_rate": shape.read_rate,
        "pbkdf2_iterations": shape.pbkdf2_iterations,
        "bcrypt_cost": shape.bcrypt_cost,
    }


def _arms(results: list[StepResult]) -> list[str]:
    return list(dict.fromkeys(r.step.arm for r in results))


def _find(results: list[StepResult], arm: str, rate: int) -> StepResult | None:
    return next((r for r in results if (r.step.arm, r.step.rate) == (arm, rate)), None)


def _compute_cells(result: StepResult) -> list[str]:
    beside = result.compute
    if beside is None:  # rate 0: nothing ran beside the reads
        return ["0.0", "-", "-"]
    return [
        fmt_rps(beside.achieved_rps),
        fmt_ms(beside.latency.p95 if beside.latency else None),
        fmt_pct(beside.drop_rate),
    ]


def long_table(results: list[StepResult]) -> Table:
    """Every figure of every step: one row per arm and compute rate."""
    rows = []
    for arm in _arms(results):
        for rate in rates_of(results):
            result = _find(results, arm, rate)
            if result is None:
                continue
            rows.append([arm, str(rate), *step_cells(result), *_compute_cells(result)])
    return Table("cached reads beside compute, by arm and compute rate", LONG_HEADERS, rows)


def pivot_table(results: list[StepResult], percentile: str = "p99") -> Table:
    """The reads' percentile side by side: one row per compute rate, one column per arm."""
    arms = _arms(results)
    rows = []
    for rate in rates_of(results):
        row = [str(rate)]
        for arm in arms:
            result = _find(results, arm, rate)
            value = getattr(result.latency, percentile) if result and result.latency else None
            row.append(fmt_ms(value) if result else MISSING)
        rows.append(row)
    headers = ["compute /s", *(f"{arm} {percentile} ms" for arm in arms)]
    return Table(f"reads {percentile} latency by compute rate", headers, rows)


def _context(doc: Doc, run: RunRecord) -> None:
    params, seed = run.params, run.seed
    doc.p(f"Machine: {summary(run.machine)}.", note=True)
    doc.ul(
        [
            f"started {run.created}, scenario {interference.SCENARIO}, "
            f"{params.get('duration_s')} s per step",
            f"reads: {params.get('read_rate')}/s of the read mix ({params['hot_share'] * 100:.0f}% "
            f"hot emails, the rest from the first {params.get('cold_sample_used')} cold ones) "
            f"through a warm Redis cache (cache={interference.READ_CACHE_PARAM})",
            f"compute beside them: checksum complexity {params.get('complexity')}, pbkdf2 "
            f"{params.get('pbkdf2_iterations')} iterations, bcrypt cost "
            f"{params.get('bcrypt_cost')}; engine and kind = the arm",
            f"table: {seed.get('rows')} rows, email index: {'yes' if seed.get('index') else 'no'}",
            f"gateway: {run.settings['gateway_url']}",
        ]
    )
    if run.interrupted:
        doc.p("This run was interrupted: the tables show only the steps that ran to their end.")
    warnings = [f"{s.arm} @ {s.rate}/s: {s.warning}" for s in run.steps if s.warning]
    if warnings:
        doc.p("Warnings:", note=True)
        doc.ul(warnings)


def write_interference(run: RunRecord, results: list[StepResult], out_dir: Path) -> list[Table]:
    title = f"Aside interference {run.run_id}"
    doc = Doc()
    doc.h(1, title)
    _context(doc, run)
    tables = [pivot_table(results), long_table(results)] if results else []
    doc.results(tables, bool(results))
    doc.h(2, "How the figures are computed")
    doc.ul(DEFINITIONS)
    if results:
        path = interference_chart(results, out_dir / "interference.png", caption(run))
        doc.h(2, "Chart")
        doc.image(path, "reads latency and drops, compute throughput, by compute rate")
    write_pages(doc, out_dir / "report.md", out_dir / "report.html", title)
    return tables


def interference_chart(results: list[StepResult], path: Path, note: str) -> Path:
    """Against the compute rate, per arm: reads' p95, p99, drops; compute against target."""
    from aside_bench.report import charts  # matplotlib is slow to import: only when drawing

    rates = rates_of(results)
    fig, axes = charts.plt.subplots(2, 2, figsize=(12, 8.5))
    panels = (
        (axes[0][0], "reads p95 latency", "ms (log scale)"),
        (axes[0][1], "reads p99 latency", "ms (log scale)"),
        (axes[1][0], "reads drop rate", "%"),
        (axes[1][1], "compute achieved vs target", "successful compute requests/s"),
    )
    axes[1][1].plot(rates, rates, linestyle="--", color="grey", label="target")
    for arm in _arms(results):
        series = [r for rate in rates if (r := _find(results, arm, rate)) is not None]
        style = {"marker": "o", "label": arm, "linestyle": "-" if "go-" in arm else "--"}
        for ax, key in ((axes[0][0], "p95"), (axes[0][1], "p99")):
            points = [(r.step.rate, getattr(r.latency, key)) for r in series if r.latency]
            if points:
                ax.plot(*zip(*points, strict=True), **style)
        axes[1][0].plot([r.step.rate for r in series], [r.drop_rate * 100 for r in series], **style)
        axes[1][1].plot(
            [r.step.rate for r in series],
            [r.compute.achieved_rps if r.compute else 0.0 for r in series],
            **style,
        )
    for ax, title, ylabel in panels:
        ax.set(title=title, ylabel=ylabel, xticks=rates, xlabel="compute target rate (requests/s)")
        ax.grid(True, alpha=0.3)
    for ax in (axes[0][0], axes[0][1]):
        charts.log_y(ax)
    axes[1][0].set_ylim(-3, 103)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("interference: cached reads beside CPU work, by engine and kind")
    return charts.finish(fig, path, note)
