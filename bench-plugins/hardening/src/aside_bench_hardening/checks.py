"""The hardening figures and verdicts, from plain numbers (pure)."""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from aside_bench.records.tierstats import nearest_rank
from aside_bench_suite.samples import Check, fmt_ms_unit, fmt_s

from aside_bench_hardening.attacks import SlowSocket

# One RSS reading: (epoch s, {worker pid: VmRSS KiB}).
RssSample = tuple[float, dict[int, int]]
# One reading of a counter: (epoch s, value).
Reading = tuple[float, float]
# Figures by name, as report.json holds them: counts, seconds, ms (None: none measured).
Figures = dict[str, float | None]


@dataclass(frozen=True)
class Limits:
    head_deadline_s: float  # the gateway's GATEWAY_HEAD_TIMEOUT_S
    close_slack_s: float = 1.0  # a slow socket is closed within the deadline plus this
    rss_growth_mib: float = 64.0  # the workers' summed RSS, peak over before
    read_p95_ms: float = 10.0  # reads during the slow-heads attack
    settle_s: float = 1.0  # the query counter's last rise after the flood's end

    @property
    def close_limit_s(self) -> float:
        return self.head_deadline_s + self.close_slack_s

    def record(self) -> dict[str, float]:
        """The limits as report.json holds them: the close limit in place of its slack."""
        names = ("head_deadline_s", "close_limit_s", "rss_growth_mib", "read_p95_ms", "settle_s")
        return {name: getattr(self, name) for name in names}


def _rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


# ---- slow heads ------------------------------------------------------------------------
@dataclass(frozen=True)
class SocketFigures:
    """How the server dealt with the slow sockets; close times in s after each connect."""

    sockets: int
    opened: int
    connect_errors: dict[str, int]
    answers: dict[str, int]
    refused_503: int  # answered 503 at once: the accepting worker held its bound
    held: int  # kept open for the rest of the head, with no answer
    closed: int
    still_open: int
    resets: int
    close_max_s: float | None
    close_p99_s: float | None
    held_close_min_s: float | None
    held_close_p50_s: float | None
    held_close_p99_s: float | None
    held_close_max_s: float | None
    # Closed before the deadline with no answer: the server gave up on them early.
    held_closed_early: int


def socket_figures(records: Sequence[SlowSocket], head_deadline_s: float) -> SocketFigures:
    opened = [r for r in records if r.opened_at is not None]
    closed = [r for r in opened if r.close_s is not None]
    held = [r for r in opened if r.status is None]
    held_closes = [r.close_s for r in held if r.close_s is not None]
    all_closes = [r.close_s for r in opened if r.close_s is not None]
    answers = Counter(r.status for r in opened if r.status is not None)
    return SocketFigures(
        sockets=len(records),
        opened=len(opened),
        connect_errors=dict(Counter(r.error for r in records if r.error)),
        answers={str(k): v for k, v in sorted(answers.items())},
        refused_503=sum(1 for r in opened if r.status == 503),
        held=len(held),
        closed=len(closed),
        still_open=len(opened) - len(closed),
        resets=sum(1 for r in closed if r.reset),
        close_max_s=_rounded(max(all_closes, default=None)),
        close_p99_s=_rounded(nearest_rank(all_closes, 99)),
        held_close_min_s=_rounded(min(held_closes, default=None)),
        held_close_p50_s=_rounded(nearest_rank(held_closes, 50)),
        held_close_p99_s=_rounded(nearest_rank(held_closes, 99)),
        held_close_max_s=_rounded(max(held_closes, default=None)),
        held_closed_early=sum(1 for s in held_closes if s < head_deadline_s - 0.5),
    )


def close_check(figures: SocketFigures, limits: Limits) -> Check:
    limit, opened, still_open = limits.close_limit_s, figures.opened, figures.still_open
    worst = figures.close_max_s
    ok = opened > 0 and still_open == 0 and worst is not None and worst <= limit
    errors = sum(figures.connect_errors.values())
    detail = (
        f"{figures.closed} of {opened} opened sockets closed by the server, "
        f"max {fmt_s(worst)}, p99 {fmt_s(figures.close_p99_s)} after their connect "
        f"(limit {limit:g} s); {figures.refused_503} answered 503 at connect (worker full), "
        f"{figures.held} held until closed"
    )
    if still_open:
        detail += f"; {still_open} still open at the end of the wait"
    if errors:
        detail += f"; {errors} could not connect {figures.connect_errors}"
    name = f"every slow socket closed within the head deadline + {limits.close_slack_s:g} s"
    return Check(name, ok, detail)


def _summed(sample: RssSample) -> int:
    return sum(sample[1].values())


@dataclass(frozen=True)
class RssFigures:
    """Workers' RSS in KiB, summed and per pid: before (its last second's median), peak, last."""

    before_kib: int
    peak_kib: int
    peak_at: float
    after_kib: int
    after_at: float
    per_worker: dict[str, dict[str, int | None]]


def rss_figures(samples: Sequence[RssSample], start: float, end: float) -> RssFigures | None:
    before = [s for s in samples if start - 1.0 <= s[0] < start] or [
        s for s in samples if s[0] < start
    ][-1:]
    during = [s for s in samples if start <= s[0] <= end]
    if not before or not during:
        return None
    peak = max(during, key=_summed)
    last = samples[-1]
    pids = sorted(set(peak[1]) | set(before[-1][1]))
    return RssFigures(
        before_kib=round(statistics.median(_summed(s) for s in before)),
        peak_kib=_summed(peak),
        peak_at=peak[0],
        after_kib=_summed(last),
        after_at=last[0],
        per_worker={
            str(pid): {
                "before_kib": before[-1][1].get(pid),
                "peak_kib": max((s[1].get(pid, 0) for s in during), default=None),
                "after_kib": last[1].get(pid),
            }
            for pid in pids
        },
    )


REPLACED = "; a worker was replaced during the experiment"


def rss_check(rss: RssFigures | None, workers_kept: bool, limits: Limits) -> Check:
    name = f"gateway workers' RSS grows by at most {limits.rss_growth_mib:g} MiB"
    if rss is None:
        return Check(name, False, "no RSS reading before and during the attack")
    growth = (rss.peak_kib - rss.before_kib) / 1024
    ok = growth <= limits.rss_growth_mib and workers_kept
    detail = (
        f"{growth:+.1f} MiB at the peak: {rss.before_kib / 1024:.1f} MiB before, "
        f"{rss.peak_kib / 1024:.1f} at the peak, {rss.after_kib / 1024:.1f} after, "
        f"summed over {len(rss.per_worker)} workers"
    )
    return Check(name, ok, detail + ("" if workers_kept else REPLACED))


def worker_rss_check(rss: RssFigures | None, workers_kept: bool, limit_mib: float) -> Check:
    """Each worker's RSS at its peak during the attack, over its own before."""
    name = f"each gateway worker's RSS grows by at most {limit_mib:g} MiB"
    if rss is None:
        return Check(name, False, "no RSS reading before and during the attack")
    growth = {
        pid: ((w["peak_kib"] or 0) - (w["before_kib"] or 0)) / 1024
        for pid, w in rss.per_worker.items()
    }
    ok = workers_kept and bool(growth) and max(growth.values()) <= limit_mib
    detail = ", ".join(
        f"worker {pid}: {rss.per_worker[pid]['before_kib'] / 1024:.1f} MiB before, "
        f"{g:+.1f} at the peak"
        for pid, g in growth.items()
        if rss.per_worker[pid]["before_kib"]
    )
    return Check(name, ok, detail + ("" if workers_kept else REPLACED))


# ---- reads in a window -----------------------------------------------------------------
def reads_check(window: Figures | None, what: str, p95_limit_ms: float | None = None) -> Check:
    """Some reads answered, none dropped or failed and, given a limit, p95 within it."""
    name = f"reads {what}: none dropped or failed" + (
        f", p95 <= {p95_limit_ms:g} ms" if p95_limit_ms is not None else ""
    )
    if not window or not window.get("reads"):
        return Check(name, False, "no read was answered in the window")
    p95 = window["p95_ms"]
    ok = window["dropped"] == 0 and window["failed"] == 0
    if p95_limit_ms is not None:
        ok = ok and p95 is not None and p95 <= p95_limit_ms
    times = ", ".join(f"{k} {fmt_ms_unit(window[f'{k}_ms'])}" for k in ("p50", "p95", "p99", "max"))
    counts = f"{window['dropped']} dropped, {window['failed']} failed"
    return Check(name, ok, f"{window['reads']} reads, {times}; {counts}")


def reuse_check(window: Figures | None) -> Check:
    """Old connections only: the experiment measures the event loop, not the connection bound."""
    name = "reads used connections opened before the attack"
    if not window:
        return Check(name, False, "no read was recorded in the window")
    fresh = int(window.get("new_connections", 0))
    detail = f"{fresh} new connections opened by the load driver during the attack"
    return Check(name, fresh == 0, detail)


# ---- the query counter after the flood ---------------------------------------------------
def last_rise(readings: Sequence[Reading]) -> float | None:
    found = None
    for (_, before), (at, value) in itertools.pairwise(readings):
        if value > before:
            found = at
    return found


def still_for(readings: Sequence[Reading], quiet_s: float) -> bool:
    if not readings:
        return False
    since = last_rise(readings) or readings[0][0]
    return readings[-1][0] - since >= quiet_s


def settle_figures(readings: Sequence[Reading], flood_end: float, quiet_s: float) -> Figures:
    """Queries after the flood's end and when the counter last rose (0: never; unsettled: still)."""
    if not readings:
        return {"settled": False, "last_rise_after_s": None, "queries_after": None}
    rise = last_rise(readings)
    return {
        "settled": still_for(readings, quiet_s),
        "last_rise_after_s": round(max(rise - flood_end, 0.0), 3) if rise else 0.0,
        "queries_after": readings[-1][1] - readings[0][1],
        "readings": len(readings),
    }


def settle_check(settle: Figures, limits: Limits) -> Check:
    name = f"database query counter stops rising within {limits.settle_s:g} s of the flood's end"
    after = settle.get("last_rise_after_s")
    if not settle.get("settled") or after is None:
        return Check(name, False, "the counter was still rising when the polling ended")
    queries = f"{settle['queries_after']:.0f} queries after it"
    return Check(
        name, after <= limits.settle_s, f"last rise {after:.2f} s after the flood's end; {queries}"
    )
