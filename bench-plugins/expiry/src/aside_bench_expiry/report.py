"""The `expiry` scenario's report: each arm's steady window against the expiry's, and a second's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aside_bench.load.samples import sample_lines
from aside_bench.records.tierstats import nearest_rank
from aside_bench.report.tables import Table
from aside_bench.stack.machine import summary

from aside_bench_expiry import plan as plan
from aside_bench_expiry.plan import ArmRun, Reading, load_run

# The p99 of the expiry window at most this many times the steady window's.
GOAL_RATIO = 3.0
# Seconds shown a second before the expiry window and after E.
SHOWN_BEFORE_S = 3


@dataclass(frozen=True)
class Request:
    rel_s: float  # sent, in seconds from the expiry instant E
    ms: float | None  # None: dropped
    ok: bool


@dataclass(frozen=True)
class Figures:
    requests: int
    failed: int
    dropped: int
    p50: float | None
    p95: float | None
    p99: float | None
    max: float | None
    scans: float | None  # rows read by scans over the table's rows: full scans
    misses: float | None
    queries: float | None
    stale: float | None
    early: float | None


def read_requests(path: Path, expiry_at: float) -> list[Request]:
    found = []
    with path.open() as handle:
        for _, line in sample_lines(handle, path.name):
            dropped = bool(line.get("dropped"))
            ms = None if dropped else float(line["ms"])
            found.append(Request(float(line["t"]) - expiry_at, ms, not dropped and line["ok"]))
    return found


def reading_at(readings: list[Reading], t: float) -> Reading | None:
    """The last reading at or before t (else the first)."""
    before = [r for r in readings if r.t <= t]
    return before[-1] if before else (readings[0] if readings else None)


def figures(arm: ArmRun, requests: list[Request], lo: float, hi: float) -> Figures:
    inside = [r for r in requests if lo <= r.rel_s < hi]
    answered = sorted(r.ms for r in inside if r.ms is not None and r.ok)
    start, end = (reading_at(arm.readings, arm.expiry_at + t) for t in (lo, hi))

    def delta(name: str) -> float | None:
        return None if start is None or end is None else getattr(end, name) - getattr(start, name)

    rows = delta("rows_scanned")
    table_rows = end.table_rows if end is not None else 0.0
    return Figures(
        requests=len(inside),
        failed=sum(1 for r in inside if r.ms is not None and not r.ok),
        dropped=sum(1 for r in inside if r.ms is None),
        p50=nearest_rank(answered, 50),
        p95=nearest_rank(answered, 95),
        p99=nearest_rank(answered, 99),
        max=answered[-1] if answered else None,
        scans=None if rows is None or table_rows <= 0 else rows / table_rows,
        misses=delta("misses"),
        queries=delta("count_queries"),
        stale=delta("stale"),
        early=delta("early"),
    )


@dataclass(frozen=True)
class ArmFigures:
    arm: ArmRun
    steady: Figures
    expiry: Figures
    seconds: dict[int, Figures]
    found: bool  # the load covered both windows

    @property
    def ratio(self) -> float | None:
        steady, expiry = self.steady.p99, self.expiry.p99
        return None if not steady or expiry is None else expiry / steady

    @property
    def keys(self) -> int:
        return int(self.arm.fill.get("keys", 0))

    @property
    def meets_goal(self) -> bool:
        return (
            self.ratio is not None
            and self.ratio <= GOAL_RATIO
            and all(f.failed == 0 and f.dropped == 0 for f in (self.steady, self.expiry))
            and self.expiry.queries is not None
            and self.expiry.queries <= self.keys
        )


def arm_figures(arm: ArmRun, out_dir: Path, windows: plan.Windows) -> ArmFigures:
    requests = read_requests(out_dir / arm.samples, arm.expiry_at)
    steady = figures(arm, requests, *windows.steady)
    expiry = figures(arm, requests, *windows.expiry)
    first = -windows.lead_s - SHOWN_BEFORE_S
    seconds = {s: figures(arm, requests, s, s + 1) for s in range(first, windows.expiry[1])}
    rels = [r.rel_s for r in requests]
    earliest, latest = min(rels, default=float("inf")), max(rels, default=float("-inf"))
    covered = earliest <= windows.steady[0] + 1 <= windows.expiry[1] - 1 <= latest
    # Every key's end in the expiry window: the keys were stored within fill_s of E - TTL.
    found = covered and float(arm.fill.get("fill_s", 0.0)) < windows.expiry[1]
    return ArmFigures(arm, steady, expiry, seconds, found or arm.mode is None)


def _ms(value: float | None) -> str:
    return "-" if value is None else (f"{value:.2f}" if value < 10 else f"{value:,.0f}")


def _n(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def window_table(rate: int, arms: list[ArmFigures]) -> Table:
    headers = ["arm", "window", "requests", "failed", "dropped", "p50 ms", "p95 ms", "p99 ms",
               "max ms", "full scans (PostgreSQL)", "count queries", "misses", "stale answers",
               "early refreshes", "p99 / steady p99", "keys expired", "fill s"]  # fmt: skip
    rows = []
    for one in arms:
        for name, f in (("steady", one.steady), ("expiry", one.expiry)):
            is_expiry = name == "expiry" and one.arm.mode is not None
            rows.append([one.arm.label, name if one.arm.mode else "whole load",
                         _n(f.requests), _n(f.failed), _n(f.dropped), _ms(f.p50), _ms(f.p95),
                         _ms(f.p99), _ms(f.max), _n(f.scans, 1), _n(f.queries), _n(f.misses),
                         _n(f.stale), _n(f.early),
                         f"{one.ratio:.1f}x" if is_expiry and one.ratio else "",
                         _n(one.keys) if is_expiry else "",
                         f"{one.arm.fill.get('fill_s', 0):.1f}" if is_expiry else ""])  # fmt: skip
            if one.arm.mode is None:
                break
    return Table(
        f"expiry at {rate}/s: the steady window and the one holding the expiry", headers, rows
    )


def seconds_table(rate: int, arms: list[ArmFigures], indexed: bool) -> Table:
    cached = [a for a in arms if a.arm.mode is not None and a.arm.indexed == indexed]
    headers = ["s from E"] + [f"{a.arm.label} p99 ms / queries" for a in cached]
    rows = []
    for second in sorted(cached[0].seconds) if cached else []:
        cells = [f"{_ms(a.seconds[second].p99)} / {_n(a.seconds[second].queries)}" for a in cached]
        rows.append([f"{second:+d}", *cells])
    table = "with the email index" if indexed else "on the table as seeded"
    return Table(f"expiry at {rate}/s, {table}: p99 and count queries a second", headers, rows)


def stale_age(arm: ArmRun) -> float | None:
    return max((r.stale_age_max for r in arm.readings if r.stale_age_max is not None), default=None)


def answer(rate: int, arms: list[ArmFigures]) -> list[str]:
    lines = []
    for indexed in (False, True):
        group = {a.arm.mode: a for a in arms if a.arm.indexed == indexed and a.arm.mode}
        table = "with the email index" if indexed else "without the email index"
        plain = group.get("plain")
        if plain is not None and plain.ratio is not None:
            lines.append(
                f"At {rate}/s {table}, the expiry with plain costs p99 {_ms(plain.expiry.p99)} ms "
                f"against {_ms(plain.steady.p99)} ms ({plain.ratio:.1f}x), "
                f"{_n(plain.expiry.queries)} count queries against {_n(plain.steady.queries)} "
                "in the steady window."
            )
        for mode, one in group.items():
            if one.ratio is None:
                continue
            age = stale_age(one.arm)
            lines.append(
                f"{mode} ({table}, {rate}/s): p99 {_ms(one.expiry.p99)} ms, {one.ratio:.1f}x the "
                f"steady window's; {_n(one.expiry.queries)} count queries for {one.keys} keys; "
                f"{_n(one.expiry.stale)} stale answers (largest age "
                f"{'-' if age is None else f'{age:.1f} s'}); {one.expiry.failed} failed; "
                f"{'meets' if one.meets_goal else 'misses'} the goal."
            )
    return lines


DEFINITIONS = [
    "E: the fill's start + the TTL the scenario set (CACHE_TTL_SECONDS); every key was "
    "filled within the fill's time (`fill_s` in run.json) after the fill's start",
    "steady window: [E - lead - width, E - lead), no key expires in it (but early refreshes "
    "may); expiry window: [E - lead, E - lead + width), every key's TTL ends in it",
    "latency: every request of the driver (its samples file) by the second it was sent, "
    "nearest-rank percentiles of the answered ones; failed: answered wrong or not at all",
    "full scans: the rows PostgreSQL read from users by scanning it "
    "(pg_stat_user_tables.seq_tup_read, whole scans, parallel or not, and the slices of pages "
    "swr's paced refreshes read) over the table's rows (pg_class.reltuples); a backend reports its "
    "counts when it next ends a transaction a second after its last report, or after 10 s idle, so "
    "they may land a window late; count queries: the gateway's aside_gateway_db_queries_total of "
    "its count queries, counted as they are sent (a batch of misses counts once; without the email "
    "index each is one full scan); misses: the gateway's l2 miss count, stale answers and early "
    "refreshes: its expiry counters, read once a second (a window's count is the difference of the "
    "readings at or before its ends, to a second)",
    f"goal: p99 of the expiry window at most {GOAL_RATIO:g}x the steady one's, no failed or "
    "dropped request, no more count queries (full scans without the index) than keys that "
    "expired",
]


def write_report(out_dir: Path) -> Path:
    params, runs = load_run(out_dir)
    windows = plan.Windows(**params["windows"])
    lines = [f"# Expiry under load: run {params.get('run_id', out_dir.name)}", ""]
    machine = params.get("machine")
    lines += [f"Machine: {summary(machine)}." if machine else "", ""]
    lines += [f"TTL {params['ttl_s']} s; windows of {windows.width_s} s, lead {windows.lead_s} s;"
              f" {params['hot_count']} hot and {params['cold_sample']} cold emails, hot share "
              f"{params['hot_share']}.", "", "## Answer", ""]  # fmt: skip
    shares = [a.driver_cpu_s / a.load_s for a in runs if a.driver_cpu_s and a.load_s]
    if shares:
        lines[-4] += (
            f" The load driver used {min(shares):.2f} to {max(shares):.2f} of a core"
            " (its CPU time over its load's length, per arm)."
        )
    tables, by_rate = [], {}
    for rate in params["rates"]:
        arms = [arm_figures(a, out_dir, windows) for a in runs if a.rate == rate]
        by_rate[rate] = arms
        lines += [f"- {line}" for line in answer(rate, arms)]
        missing = [a.arm.label for a in arms if not a.found]
        if missing:
            lines.append(f"- The expiry window was not found for {', '.join(missing)} at {rate}/s.")
        indexed = {a.arm.indexed for a in arms}
        tables.append(window_table(rate, arms))
        tables += [seconds_table(rate, arms, idx) for idx in (False, True) if idx in indexed]
    lines += ["", "## Windows and seconds", ""] + [t.markdown() for t in tables]
    chart = expiry_chart(by_rate, windows, out_dir / "expiry.png", f"Run {out_dir.name}.")
    lines += ["", f"![p99 a second around the expiry]({chart.name})", ""]
    lines += ["## How the figures are computed", "", *(f"- {d}" for d in DEFINITIONS), ""]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines))
    return path


def expiry_chart(
    by_rate: dict[int, list[ArmFigures]], windows: plan.Windows, path: Path, caption: str
) -> Path:
    """p99 a second around E, a panel per rate, the seeded table solid, the indexed dashed."""
    from aside_bench.report import charts  # matplotlib only when drawing

    plt = charts.plt
    fig, axes = plt.subplots(1, len(by_rate), figsize=(6.5 * len(by_rate), 4.6), squeeze=False)
    for ax, (rate, arms) in zip(axes[0], by_rate.items(), strict=True):
        for one in (a for a in arms if a.arm.mode is not None):
            points = [(s, f.p99) for s, f in sorted(one.seconds.items()) if f.p99 is not None]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, "--" if one.arm.indexed else "-", marker=".", label=one.arm.label)
        ax.axvspan(*windows.expiry, color="#f4cccc", alpha=0.4, label="expiry window")
        ax.axvline(0, color="grey", linewidth=0.8)
        charts.log_y(ax)
        ax.set(title=f"{rate} reads/s: p99 a second", xlabel="seconds from the TTL's end (E)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("ms (log scale)")
    axes[0][0].legend(fontsize=7)
    return charts.finish(fig, path, caption)
