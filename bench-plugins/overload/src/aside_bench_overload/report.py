"""The overload suite's page (report.md, report.html, report.json) and overload.png."""

from __future__ import annotations

from pathlib import Path

from aside_bench.ceiling.search import RERUN_VERDICT
from aside_bench.plan.steps import SCRAPE_ROOM
from aside_bench.report.tables import Table
from aside_bench_suite.base import item_section, save_report, suite_page

from aside_bench_overload import figures as fg
from aside_bench_overload.plan import ArmResult, OverloadRun

CHART = "overload.png"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _by(mapping: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.0f}" for k, v in mapping.items()) or "-"


def _goodput(step: fg.StepFigures) -> float:
    return round(step.goodput_rps, 1)  # as report.json holds it


def one_line(arm: ArmResult) -> str:
    if arm.error:
        return f"error: {arm.error}"
    failed = [c.name for c in arm.checks if not c.ok]
    verdict = "pass" if not failed else f"FAIL ({len(failed)} of {len(arm.checks)})"
    return f"ceiling {arm.ceiling}/s ({arm.ceiling_from}): {verdict}"


def step_row(step: fg.StepFigures, ceiling: int) -> list[str]:
    req, counters = step.requests, step.counters
    served, shed = req.served, req.shed
    recovered = "-"
    if step.label == "0.6x after":
        recovered = "never" if step.recovery_s is None else f"{step.recovery_s:.0f} s"
    return [
        step.label, str(step.rate), f"{_goodput(step):.0f}",
        f"{_goodput(step) / ceiling:.2f}", _num(served.p50_ms), _num(served.p99_ms),
        str(shed.count), f"{_num(shed.p50_ms)} / {_num(shed.p99_ms)}",
        str(req.timeouts + req.other_errors), str(req.dropped),
        f"{counters.breaker_skips:.0f}", f"{counters.fallback_reads:.0f}",
        _by(counters.shed), _pct(step.driver_share), recovered,
    ]  # fmt: skip


HEADERS = [
    "step", "offered /s", "goodput /s", "goodput / ceiling", "served p50 ms", "served p99 ms",
    "shed (503)", "shed p50 / p99 ms", "no answer (timeouts)", "driver drops",
    "breaker-skipped reads", "fallback reads", "gateway sheds by reason", "driver CPU",
    "recovered after",
]  # fmt: skip


def arm_table(arm: ArmResult) -> Table:
    ceiling = arm.ceiling or 0  # an arm that ran its steps has its ceiling
    capped = " (the search never missed: a lower bound)" if arm.capped else ""
    title = f"{arm.arm}: ceiling {ceiling}/s ({arm.ceiling_from}){capped}"
    return Table(title, HEADERS, [step_row(s, ceiling) for s in arm.steps])


def machine_row(step: fg.StepFigures) -> list[str]:
    req, machine = step.requests, step.machine or fg.MachineShare(None, None, None)
    on_open, on_new = req.served_open, req.served_new
    return [
        step.label, _pct(machine.busy), _pct(machine.steal),
        _num(machine.gateway_cores, 2), _num(machine.redis_cores, 2),
        _loop_wait(machine), _num(step.driver_cores, 2), _collections(step.counters),
        f"{on_open.count}: {_num(on_open.p50_ms)} / {_num(on_open.p99_ms)}",
        f"{on_new.count}: {_num(on_new.p50_ms)} / {_num(on_new.p99_ms)}",
    ]  # fmt: skip


def _loop_wait(machine: fg.MachineShare) -> str:
    per_s, per_turn = machine.loop_wait_ms_per_s, machine.loop_wait_ms_per_turn
    if per_s is None:
        return "-"
    turn = "-" if per_turn is None else f"{per_turn * 1000:.0f}"
    return f"{per_s:.0f} / {turn}"


def _collections(counters: fg.Counters) -> str:
    return f"{counters.gc_collections:.0f}: {counters.gc_pause_s * 1000:.0f} ms"


def machine_table(arm: ArmResult) -> Table:
    """Where a served request's time went: the shared machine, and the connection it went over."""
    return Table(
        f"{arm.arm}: the machine, and the served by connection",
        ["step", "machine busy", "of it, host steal", "gateway cores", "Redis cores",
         "gateway loops waiting for a core: ms per s / µs a turn", "driver cores",
         "gateway GC: collections: ms",
         "served on open connections: n, p50 / p99 ms",
         "served on new connections: n, p50 / p99 ms"],
        [machine_row(s) for s in arm.steps],
    )  # fmt: skip


def search_table(arm: ArmResult) -> Table:
    rows = [
        [str(t.rate), _num(t.p95_ms), str(t.dropped), str(t.shed), str(t.failed - t.shed),
         _pct(t.steal), "held" if held else "missed" if counted else RERUN_VERDICT]
        for t, held, counted in arm.search
    ]  # fmt: skip
    head = ["rate /s", "p95 ms", "dropped", "shed (503)", "other failures", "host steal", ""]
    return Table(f"{arm.arm}: the ceiling search", head, rows)


def timeline_table(arm: ArmResult) -> Table:
    rows = [
        [str(s.at_s), str(s.served), _num(s.served_p95_ms), str(s.shed), str(s.unanswered),
         str(s.dropped)]
        for s in arm.steps[-1].requests.seconds
    ]  # fmt: skip
    title = f"{arm.arm}: the 0.6x step after the overload, second by second (by due time)"
    head = ["second", "served", "served p95 ms", "shed", "no answer", "dropped"]
    return Table(title, head, rows)


def _points(steps: list[fg.StepFigures]) -> tuple[list[int], list[float]]:
    return [s.rate for s in steps], [_goodput(s) for s in steps]


def chart(arms: list[ArmResult], run_targets: dict[str, float], path: Path, caption: str) -> Path:
    from aside_bench.report import charts  # matplotlib is slow to import: only when drawing

    fig, axes = charts.plt.subplots(1, len(arms), figsize=(6 * len(arms), 4.8), squeeze=False)
    share = run_targets["goodput_share"]
    for ax, arm in zip(axes[0], arms, strict=True):
        steps = sorted(arm.steps, key=lambda s: s.rate)
        top, ceiling = max(s.rate for s in steps) * 1.05, arm.ceiling or 0
        after = [s for s in steps if s.label == "0.6x after"]
        ax.plot([0, top], [0, top], linestyle="--", color="grey", label="ideal (goodput = offered)")
        ax.axhline(ceiling, color="red", linestyle=":", label=f"ceiling {ceiling}/s")
        ax.plot(*_points(after), marker="s", linestyle="none", label="after the overload (0.6x)")
        ax.plot(*_points(steps), marker="o", linestyle="-", label="goodput (2xx within 1 s)")
        target = f"target: {share:g} x ceiling"
        ax.axhline(share * ceiling, color="red", linestyle=":", alpha=0.4, label=target)
        for s in steps:
            # The two 0.6x steps share a rate: one label above, one below.
            below = -10 if s.label != "0.6x after" else 6
            at = (s.rate, _goodput(s))
            ax.annotate(s.label, at, fontsize=7, textcoords="offset points", xytext=(4, below))
        ax.set(xlim=(0, top), ylim=(0, top), title=arm.arm)
        ax.set(xlabel="offered load (requests/s)", ylabel="goodput (requests/s)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle("Overload: goodput against the offered load")
    return charts.finish(fig, path, caption)


def _connections(run: OverloadRun, arms: list[ArmResult]) -> str:
    params = run.params
    caps = sorted({a.max_pool for a in arms if a.max_pool is not None})
    # None: a run recorded before the pools were kept below the gateway's bound.
    most = "/".join(str(c) for c in caps) if caps else params.get("max_pool", "-")
    pools = f"pools of the rate x 1 s, at most {most} connections"
    if caps:
        pools += (
            f" ({SCRAPE_ROOM} below what a gateway worker holds, GATEWAY_MAX_CONNECTIONS, so "
            "the scrapes of /metrics find room)"
        )
    if not params.get("open_pool", True):
        return (
            f"connections: {pools}; each step's driver opened them as its requests needed them "
            "(--lazy-connections), so a step past the ceiling also waits for new ones accepted"
        )
    return (
        f"connections: {pools}; each step's driver opened its pool before its first request "
        "(as a client's pool holds them); the recovery's driver opened its while the gateway "
        "still drained the 2x step, which counts against the recovery"
    )


def _own_searches(run: OverloadRun) -> str:
    own = [
        f"{arm}: p95 <= {search['p95_ms']:g} ms, rates from {search['rates']['start']}/s "
        f"by {search['rates']['ladder_step']} up to {search['rates']['max_rate']}/s"
        for arm, search in run.params.get("arm_searches", {}).items()
    ]
    return f" ({'; '.join(own)})" if own else ""


def _context(run: OverloadRun, arms: list[ArmResult]) -> list[str]:
    p, t = run.params, run.params["targets"]
    return [
        f"load: the driver's read scenario through {p['gateway_url']} ({p['hot_share']:.0%} hot "
        f"emails, {p['cold_sample']} cold, cache warmed before), an open model: each step "
        f"{p['duration_s']} s at 0.6x, 1.25x, 1.5x, 2x of the arm's ceiling, then 0.6x started "
        f"as the 2x schedule ends; request timeout {p['timeout_s']} s",
        _connections(run, arms),
        f"ceiling: given, or the highest rate held at p95 <= {p['search_p95_ms']:g} ms"
        f"{_own_searches(run)} with "
        f"nothing dropped, no failure but the gateway's sheds and those at most "
        f"{fg.MAX_SHED_SHARE:.0%} of the step, {p['search_duration_s']} s steps, "
        + ("each over a pool opened before it" if p.get("open_pool", True) else "lazy pools"),
        f"goodput: 2xx answered within {p['goodput_within_ms']:.0f} ms, per second of the step; "
        "latency and sheds from every request's sample, counters from the gateway's /metrics",
        f"targets at 1.25x, 1.5x and 2x: goodput >= {t['goodput_share']:g} x ceiling, served "
        f"p99 <= {t['served_p99_ms']:g} ms, no client timeout, sheds p99 <= "
        f"{t['shed_p99_ms']:g} ms, no read skipping Redis behind an open breaker; after: from "
        f"{t['recovery_s']:g} s after the 2x schedule's end, the served p95 within "
        f"{t['recovery_factor']:g} x the one of the 0.6x step before the overload, nothing "
        f"unanswered or dropped, at most {fg.MAX_SHED_SHARE:.0%} shed; 'recovered after' is the "
        f"first whole second after the overload's end from which that holds for the rest of "
        f"the step (at least {fg.MIN_WINDOW_S} s)",
        "driver CPU: the driver's own CPU time over the step, as a share of the machine's cores",
        "machine busy: the share of every core's time not idle over the step (/proc/stat: the "
        "driver, the services and everything else); of it, host steal: the time a virtual "
        "machine's hypervisor gave other guests (a noise nothing here caused); gateway and "
        "Redis cores: their process trees' CPU time over the step; gateway GC: the workers' "
        "garbage collections over the step, and the time they held them in all; gateway "
        "loops waiting for a core: how long a worker's event loop was ready to run while no "
        "core was free (its main thread's run-queue wait, /proc/<pid>/schedstat), in each "
        "second of the step (a worker's mean) and in each of its turns on a core (the mean): "
        "a wait every request it reads, a shed one too, sits through",
        "open and new connections: a served request went over a connection the driver had open "
        "already, or over one it opened for that request (whose first answer waits until a "
        "worker's loop accepts the connection)",
        f"table: {run.seed.get('rows')} rows, email index: "
        f"{'yes' if run.seed.get('index') else 'no'}",
    ]


def write_report(run: OverloadRun, arms: list[ArmResult], out_dir: Path) -> list[Table]:
    doc = suite_page("overload", run)
    doc.ul(_context(run, arms))
    verdicts = [[a.arm, one_line(a)] for a in arms]
    tables = [Table("Overload: every arm", ["arm", "verdict"], verdicts)]
    doc.table(tables[0])
    measured = [a for a in arms if not a.error]
    if measured:
        caption = "dashed: goodput = offered; dotted: the ceiling"
        path = chart(measured, run.params["targets"], out_dir / CHART, caption)
        doc.image(path, "goodput against the offered load, per arm")
    for arm in arms:
        own = []
        if not arm.error:  # a failed arm has its error instead, and may lack the steps
            own = [arm_table(arm), machine_table(arm), timeline_table(arm)]
            own += [search_table(arm)] if arm.search else []
        tables += own
        item_section(doc, arm.arm, arm.as_dict(), "arm", own, [])
    saved = save_report(doc, run, out_dir, tables[:2])
    (out_dir / "report.html").write_text(doc.html(f"Aside overload {run.run_id}"))
    return saved
