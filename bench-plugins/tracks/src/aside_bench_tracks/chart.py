"""The tracks report's own chart: p95 by the size of the value read."""

from __future__ import annotations

from pathlib import Path

from aside_bench.plan.steps import series_label
from aside_bench.records.results import StepResult
from aside_bench.report.charts import finish, log_y, plt
from aside_bench.report.tables import series_of, series_order

from aside_bench_tracks.plan import SIZE_LABELS, class_of_name


def p95_by_size_chart(results: list[StepResult], path: Path, caption: str) -> Path:
    """p95 against the size class read, a line per arm, a panel per target rate."""
    rates = sorted({r.step.rate for r in results})
    fig, axes = plt.subplots(
        1, len(rates), figsize=(4.2 * len(rates), 4.4), sharey=True, squeeze=False
    )
    for ax, rate in zip(axes[0], rates, strict=True):
        for arm, phase in series_order(results):
            step = next((r for r in series_of(results, arm, phase) if r.step.rate == rate), None)
            if step is None:
                continue
            points = sorted(
                (cls, lat.p95)
                for name, lat in step.by_name.items()
                if (cls := class_of_name(name)) is not None
            )
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="o", label=series_label(arm, phase))
        log_y(ax)
        ax.set_xticks(range(len(SIZE_LABELS)))
        ax.set_xticklabels(SIZE_LABELS, rotation=30, fontsize=7)
        ax.set_title(f"{rate}/s")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("p95 ms (log scale)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("tracks: p95 by value size (the whole track's JSON)")
    return finish(fig, path, caption)
