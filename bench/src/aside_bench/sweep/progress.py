"""What the console says of a run: each step's quick result and the points InfluxDB lacks."""

from __future__ import annotations

import sys
from pathlib import Path

from aside_bench.plan.arms import CACHE_PARAMS, base_arm
from aside_bench.records.results import StepResult
from aside_bench.records.runfile import RunRecord
from aside_bench.report.tables import fmt_ms, fmt_pct, fmt_rps
from aside_bench.stack.influxpoints import SPOOL_DIR, InfluxPoints


def clock(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def quick_line(result: StepResult) -> str:
    latency = result.latency
    parts = [
        f"p95 {fmt_ms(latency.p95 if latency else None)} ms",
        f"achieved {fmt_rps(result.achieved_rps)}/s",
        f"drops {fmt_pct(result.drop_rate)}",
    ]
    if base_arm(result.step.arm) in CACHE_PARAMS:
        parts.append(f"hits {fmt_pct(result.hit_rate)}")
    if result.redis is not None and result.redis.evicted:
        parts.append(f"evicted {result.redis.evicted}")
    if result.compute is not None:  # interference: the compute beside the reads
        beside = result.compute.latency
        parts.append(
            f"compute {fmt_rps(result.compute.achieved_rps)}/s "
            f"p95 {fmt_ms(beside.p95 if beside else None)} ms"
        )
    cost, gen = result.cost, result.loadgen
    if gen is not None and gen.cpu_cores is not None:
        parts.append(f"driver {gen.cpu_cores:.2f} cores")
    if gen is not None and gen.saturated:
        parts.append("LOAD GENERATOR SATURATED")
    if cost is not None:
        if cost.l1_hit_rate is not None:
            parts.append(f"L1 {fmt_pct(cost.l1_hit_rate)}")
        if cost.cpu_ms_per_request is not None:
            parts.append(f"CPU {cost.cpu_ms_per_request:.2f} ms/req")
        if result.noisy:
            parts.append(f"HOST STOLE {fmt_pct(cost.host_steal)}")
    if result.stale is not None and result.stale.reads:
        parts.append(f"stale {result.stale.stale}/{result.stale.reads}")
    return "  ".join(parts)


def not_written(run: RunRecord, out_dir: Path) -> InfluxPoints:
    """The run's InfluxDB points not written, said on stderr with how to send them."""
    total = sum((InfluxPoints.of(s.influx) for s in run.steps), InfluxPoints())
    if total.spooled:
        print(
            f"aside-bench: {total.spooled} InfluxDB points were not written; they wait in "
            f"{out_dir / SPOOL_DIR}/: aside-bench report --run {run.run_id} sends them",
            file=sys.stderr,
        )
    if total.lost:
        print(f"aside-bench: {total.lost} InfluxDB points LOST (not spooled)", file=sys.stderr)
    return total
