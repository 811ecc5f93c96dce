"""The soak's report: report.md, report.json and soak.png in reports/soak-<run id>/."""

from __future__ import annotations

import statistics
from pathlib import Path

from aside_bench.report.tables import Table
from aside_bench.stack.machine import summary
from aside_bench_suite.base import SuiteRun, save_report, suite_page

from aside_bench_soak import growth


def chart(
    samples: list[growth.SoakSample], services: list[str], warmup_s: float, path: Path, caption: str
) -> Path:
    from aside_bench.report import charts  # matplotlib is slow to import: only when drawing

    t0 = samples[0].t
    fig, axes = charts.plt.subplots(1, 3, figsize=(15, 4.8))
    for service in services:
        points = [(s.t - t0, p) for s in samples if (p := s.procs.get(service))]
        if not points:
            continue
        xs = [x for x, _ in points]
        rss = [p["rss_kib"] / 1024 for _, p in points]
        private = [p.get("anon_kib", p["rss_kib"]) / p["processes"] for _, p in points]
        warm = [v for x, v in zip(xs, private, strict=True) if x >= warmup_s]
        # Relative to the median right after the warm-up, like the table's warm-up value.
        base = statistics.median(warm[: max(3, len(warm) // 20)] or private) or 1
        axes[0].plot(xs, rss, label=service)
        axes[1].plot(xs, [100 * v / base for v in private], label=service)
        axes[2].plot(xs, [p["fds"] for _, p in points], label=service)
    titles = (
        "VmRSS summed over the tree, MiB (log scale)",
        "private memory (RssAnon) per process,\n% of its value after the warm-up",
        "open fds summed over the tree",
    )
    for ax, title in zip(axes, titles, strict=True):
        ax.axvline(warmup_s, color="grey", linestyle="--", linewidth=1)
        ax.set(title=title, xlabel="seconds since the start")
        ax.grid(True, alpha=0.3)
    charts.log_y(axes[0])
    axes[1].axhline(100 * (1 + growth.MEMORY_GROWTH_FLAG), color="red", linestyle=":", linewidth=1)
    charts.log_y(axes[2])
    axes[0].legend(fontsize=7)
    fig.suptitle("Soak: memory and file descriptors of every process (dashed: end of warm-up)")
    return charts.finish(fig, path, caption)


def write_report(run: SuiteRun, out_dir: Path) -> list[Table]:
    params, extra = run.params, run.extra
    rows = [growth.ProcessGrowth.of(row) for row in run.items]
    samples = [growth.SoakSample.of(sample) for sample in extra["samples"]]
    services = [row.service for row in rows]
    tables = [growth.growth_table(rows), growth.load_table(extra["load"])]
    keys = extra.get("idempotency_keys")
    if keys is not None:
        tables.insert(1, growth.key_table(growth.KeyGrowth.of(keys)))
    caption = f"Soak {run.run_id} on {summary(run.machine)}."
    chart_path = chart(samples, services, params["warmup_s"], out_dir / "soak.png", caption)
    doc = suite_page("soak", run)
    doc.ul(
        [
            f"load: the load driver at a constant arrival rate of {params['rate']} req/s for "
            f"{params['duration_s']} s to {params.get('target_url', params['gateway_url'])}: "
            f"{params['write_share']:.0%} creates with an Idempotency-Key, the rest cached reads "
            "by id and by hot email; connections reused",
            f"sampled every {params['interval_s']:g} s: VmRSS, RssAnon and the number of open fds "
            "of every process of each service's tree (/proc), summed over the tree; VmRSS counts "
            "a shared page once per process that touched it (PostgreSQL's shared buffers once "
            "per backend), RssAnon is the private memory only (where a leak shows)",
            f"warm-up: the first {params['warmup_s']:g} s are left out; the warm-up and end "
            f"values are medians over {params['window_share']:.0%} of the run (at least 3 "
            "samples) right after the warm-up and at the end; max is over everything after the "
            "warm-up",
            f"flagged: growth of VmRSS or of RssAnon above {params['memory_growth_flag']:.0%}, "
            f"any fd growth; table: {run.seed.get('rows')} rows",
            "idempotency_keys: its rows counted with each sample; flagged when the median at the "
            "end exceeds the median after the warm-up by more than "
            f"{params.get('key_growth_flag', 0.1):.0%} (each median over at least a key's "
            "lifetime: the core's CORE_IDEMPOTENCY_TTL plus CORE_IDEMPOTENCY_PURGE_INTERVAL, "
            "read from its environment), judged only when the warm-up is at least that lifetime "
            "(before, the table fills by design; flat, it holds about creates/s x lifetime); and "
            "whenever a sample after the warm-up finds a key overdue, older than the TTL plus "
            "two purge intervals",
        ]
    )
    for table in tables:
        doc.table(table)
    if keys is not None:
        over_time = ", ".join(
            f"{t} s: {'n/a' if n is None else n}" for t, n in growth.key_counts_over_time(samples)
        )
        doc.p(f"Rows of idempotency_keys over the run: {over_time}.")
    flagged = extra["flagged"]
    verdict = "Flagged: " + ", ".join(flagged) if flagged else "Nothing flagged."
    doc.p(verdict, note=bool(flagged))
    doc.image(chart_path, "RSS and open fds of every process over the run")
    return save_report(doc, run, out_dir, tables, also=[verdict])
