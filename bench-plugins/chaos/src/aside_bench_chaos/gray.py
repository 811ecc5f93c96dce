"""The chaos suite's gray failures: a hop that is slow, silent, throttled or cut
mid-reply rather than down, made by toxics on the proxies between the services
(stack/toxiproxy.py) while the gateway and the core run through them.

Each case names the proxies it poisons (a Redis fault is on the gateway's hop
and the core's alike: one server), its toxics, and the budgets clients are held
to over the fault: docs/bench/suites.md, "Chaos: gray failures". The verdicts
are pure, from the driver's samples, beside the checks of checks.py."""

from __future__ import annotations

import math
import resource
import time
from dataclasses import dataclass
from typing import Any

from aside_bench.stack import procs
from aside_bench.stack.toxiproxy import DOWNSTREAM, Toxic, Toxiproxy
from aside_bench_suite.samples import (
    CLOCK_SLACK_S,
    READS,
    Check,
    Sample,
    fmt_seconds,
    started_between,
    summarize,
)

from aside_bench_chaos.checks import READ_MAX_MS, RECOVER_S

SLOW_MS = 200
# A trickle: at 4 KB/s the suite's 60 requests/s fit through and nothing is
# tested; at 1 KB/s the replies owed on a connection queue up past
# REDIS_TIMEOUT_MS, which alone keeps reads within their budget.
THROTTLE_KB_S = 1
# A reply cut after this many bytes: within the first reply of a connection.
CUT_AFTER_BYTES = 24
# Steady again: a one-second window after the fault whose read p95 is within
# this factor of the p95 before it (or STEADY_SLACK_MS above it: a 1 ms p95
# doubles on a busy machine's noise).
STEADY_FACTOR = 1.5
STEADY_SLACK_MS = 5.0


@dataclass(frozen=True)
class GrayCase:
    name: str
    description: str
    proxies: tuple[str, ...]
    toxics: tuple[Toxic, ...]
    # What clients see over the fault (docs/bench/suites.md): the p99 of reads,
    # and the longest a write may take, in ms.
    read_p99_ms: float
    write_max_ms: float
    read_max_ms: float = READ_MAX_MS  # past it a read hangs
    # Where a breaker should take most reads off the faulty hop: their median
    # over the fault, in ms (None: no such claim).
    read_p50_ms: float | None = None
    # The load driver's timeout: past every budget, so a request over its
    # budget is measured, not cut.
    driver_timeout_s: int = 3


def _one(kind: str, **attributes: int) -> tuple[Toxic, ...]:
    return (Toxic(f"gray-{kind}", kind, DOWNSTREAM, dict(attributes)),)


# The gateway's deadline on a miss (DB_POOL_TIMEOUT_MS + DB_STATEMENT_TIMEOUT_MS,
# 6000 ms) and a margin: a miss cut at its deadline still has its 503 to send.
DB_READ_MAX_MS = 6500.0
REDIS = ("redis", "core-redis")
POSTGRES = ("postgres", "core-postgres")


def _redis_case(
    name: str, description: str, toxics: tuple[Toxic, ...], read_p50_ms: float | None = None
) -> GrayCase:
    """A fault on Redis: on the gateway's hop and the core's (one server), reads
    held to the suite's hang limit, writes to the core's invalidation deadline."""
    return GrayCase(
        name,
        description,
        REDIS,
        toxics,
        read_p99_ms=READ_MAX_MS,
        write_max_ms=1500,
        read_p50_ms=read_p50_ms,
    )


def _postgres_case(name: str, description: str, toxics: tuple[Toxic, ...]) -> GrayCase:
    """A fault on PostgreSQL, on both hops: reads and writes held to the
    gateway's own deadlines and a margin, the driver waiting past them."""
    return GrayCase(
        name,
        description,
        POSTGRES,
        toxics,
        read_p99_ms=DB_READ_MAX_MS,
        read_max_ms=DB_READ_MAX_MS,
        write_max_ms=6500,
        driver_timeout_s=8,
    )


# Budgets: a read over a Redis fault within the suite's "hang" limit
# (checks.READ_MAX_MS, half the driver's timeout): each Redis call of a read may
# take up to REDIS_TIMEOUT_MS (200) before the breaker opens, and a miss makes
# several. A read over a PostgreSQL fault within the gateway's own bound on a
# miss, wherever it waits (gateway/src/aside_gateway/misses/read_deadline.py):
# its pool wait (DB_POOL_TIMEOUT_MS, 1000) plus its statement timeout
# (DB_STATEMENT_TIMEOUT_MS, 5000); after one failed read a worker's breaker
# (DB_BREAKER_MS) and a failed lease's mark answer the misses after it at once.
# A read over a core fault, which it never reaches, within 500 ms. A write over
# a Redis fault waits
# at most the core's invalidation deadline (CORE_INVALIDATION_DEADLINE_MS, 300)
# before the outbox takes the invalidation over; PostgreSQL's and the core's
# faults are bounded by the gateway's pool wait (DB_POOL_TIMEOUT_MS, 1000) and
# its wait for the core (CORE_TIMEOUT_MS, 6000). Each with a margin for a
# loaded 2-core machine.
GRAY_CASES: dict[str, GrayCase] = {
    case.name: case
    for case in (
        _redis_case(
            "redis-slow",
            f"Redis {SLOW_MS} ms slower on every reply",
            _one("latency", latency=SLOW_MS, jitter=0),
            read_p50_ms=SLOW_MS,
        ),
        _redis_case(
            "redis-blackhole",
            "Redis accepts and never answers",
            _one("timeout", timeout=0),
            read_p50_ms=SLOW_MS,
        ),
        _redis_case(
            "redis-throttled",
            f"Redis's replies throttled to {THROTTLE_KB_S} KB/s",
            _one("bandwidth", rate=THROTTLE_KB_S),
        ),
        _redis_case(
            "redis-reset",
            f"every Redis connection cut after {CUT_AFTER_BYTES} bytes of reply",
            _one("limit_data", bytes=CUT_AFTER_BYTES),
        ),
        _postgres_case(
            "postgres-slow",
            f"PostgreSQL {SLOW_MS} ms slower on every reply",
            _one("latency", latency=SLOW_MS, jitter=0),
        ),
        _postgres_case(
            "postgres-blackhole", "PostgreSQL accepts and never answers", _one("timeout", timeout=0)
        ),
        GrayCase(
            "core-slow",
            f"the core {SLOW_MS} ms slower on every reply",
            ("core",),
            _one("latency", latency=SLOW_MS, jitter=0),
            read_p99_ms=500,
            write_max_ms=1500,
        ),
        GrayCase(
            "core-blackhole",
            "the core accepts and never answers",
            ("core",),
            _one("timeout", timeout=0),
            read_p99_ms=500,
            write_max_ms=6500,
            driver_timeout_s=8,
        ),
    )
}


@dataclass(frozen=True)
class CpuMeter:
    """The load driver's and the proxy's CPU over one case's load, in cores:
    they share the machine's cores with the services they measure. The driver
    is read from this process's reaped children (a gray case starts no other
    process meanwhile), the proxy from its process tree."""

    began: float
    children_s: float
    proxy_pid: int | None
    proxy_ticks: int | None

    @classmethod
    def start(cls, proxy_pid: int | None) -> CpuMeter:
        ticks = None if proxy_pid is None else procs.tree_cpu_ticks(proxy_pid)
        return cls(time.monotonic(), _children_cpu_s(), proxy_pid, ticks)

    def shares(self) -> dict[str, float | None]:
        """Once the driver has been waited for."""
        wall = max(time.monotonic() - self.began, 1e-9)
        proxy = None
        if self.proxy_pid is not None and self.proxy_ticks is not None:
            now = procs.tree_cpu_ticks(self.proxy_pid)
            if now is not None:
                proxy = (now - self.proxy_ticks) / procs.clock_ticks_per_s() / wall
        return {
            "driver_cpu_cores": round((_children_cpu_s() - self.children_s) / wall, 3),
            "proxy_cpu_cores": None if proxy is None else round(proxy, 3),
        }


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def inject(api: Toxiproxy, case: GrayCase) -> None:
    for proxy in case.proxies:
        api.replace(proxy, list(case.toxics))


def heal(api: Toxiproxy, case: GrayCase) -> None:
    for proxy in case.proxies:
        api.replace(proxy, [])


# ---- the verdicts (pure) ---------------------------------------------------------------
def _p(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def steady_again(
    reads: list[Sample], instant: float, steady_p95: float, window_s: float = 1.0
) -> float | None:
    """Seconds from `instant` to the start of the first `window_s` window (sliding
    by 0.1 s) whose reads' p95 is back within STEADY_FACTOR of `steady_p95`."""
    limit = max(steady_p95 * STEADY_FACTOR, steady_p95 + STEADY_SLACK_MS)
    after = [s for s in reads if s.start >= instant]
    if not after:
        return None
    offset, last = 0.0, after[-1].start
    while instant + offset + window_s <= last + 1e-9:
        lo, hi = instant + offset, instant + offset + window_s
        window = [s.ms for s in after if lo <= s.start < hi]
        p95 = _p(window, 0.95)
        if p95 is not None and p95 <= limit:
            return offset
        offset += 0.1
    return None


def _clear_answer(s: Sample) -> bool:
    """A 2xx, or a 503/504 whose body is the API's JSON error with its code;
    a read's 503 says when to come back (Retry-After)."""
    if s.ok or s.status == 200:
        return True
    if s.status not in (503, 504) or not s.tag("code"):
        return False
    return s.kind not in READS or s.status != 503 or bool(s.tag("retry_after"))


def gray_checks(
    case: GrayCase, samples: list[Sample], events: dict[str, float]
) -> tuple[list[Check], dict[str, Any]]:
    fault, healed = events["fault"], events["ready"]
    reads = [s for s in samples if s.kind in READS and s.status != 0]
    writes = [s for s in samples if s.kind == "create"]
    before = started_between(reads, events["load_start"] + 1.0, fault)
    during = started_between(samples, fault + CLOCK_SLACK_S, healed)
    during_reads = [s for s in during if s.kind in READS]
    unclear = [s for s in samples if not _clear_answer(s)]
    steady_p95 = _p([s.ms for s in before], 0.95) or 0.0
    read_p99 = _p([s.ms for s in during_reads], 0.99)
    read_p50 = _p([s.ms for s in during_reads], 0.50)
    slow_writes = [s for s in writes if s.ms > case.write_max_ms]
    back = steady_again(reads, healed, steady_p95)
    figures = {
        "fault_s": round(healed - fault, 1),
        "steady_read_p95_ms": round(steady_p95, 1),
        "reads_during_fault": len(during_reads),
        "read_p50_during_fault_ms": None if read_p50 is None else round(read_p50, 1),
        "read_p99_during_fault_ms": None if read_p99 is None else round(read_p99, 1),
        "read_503_during_fault": sum(1 for s in during_reads if s.status == 503),
        "bypass_during_fault": sum(1 for s in during_reads if s.tag("xcache") == "BYPASS"),
        "writes": len(writes),
        "write_max_ms": round(max((s.ms for s in writes), default=0.0), 1),
        "writes_not_2xx": sum(1 for s in writes if not s.ok),
        "steady_p95_again_after_s": back,
    }
    checks = [
        Check(
            "every answer a 2xx or a clear 503/504 (reads' 503 with Retry-After)",
            bool(samples) and not unclear,
            f"{len(samples)} requests, {len(during)} during the fault"
            + (f"; unclear: {summarize(unclear)}" if unclear else ""),
        ),
        Check(
            f"read p99 over the fault within {case.read_p99_ms:g} ms",
            read_p99 is not None and read_p99 <= case.read_p99_ms,
            f"p99 {figures['read_p99_during_fault_ms']} ms over {len(during_reads)} reads "
            f"({figures['bypass_during_fault']} BYPASS, {figures['read_503_during_fault']} 503)",
        ),
        Check(
            f"no write past {case.write_max_ms:g} ms",
            bool(writes) and not slow_writes,
            f"{len(writes)} writes, max {figures['write_max_ms']:.0f} ms"
            + (f"; slow: {summarize(slow_writes)}" if slow_writes else ""),
        ),
        Check(
            f"steady p95 again within {RECOVER_S:g} s of the hop healing",
            back is not None and back <= RECOVER_S,
            f"read p95 {steady_p95:.1f} ms before the fault; a window within "
            f"{STEADY_FACTOR:g}x again {fmt_seconds(back)} after",
        ),
    ]
    if case.read_p50_ms is not None:
        checks.insert(2, _median_check(case.read_p50_ms, read_p50, len(during_reads)))
    return checks, figures


def _median_check(limit_ms: float, read_p50: float | None, reads: int) -> Check:
    """Most reads around the fault: a breaker that opens leaves only the reads
    that find it closed to wait on the hop."""
    shown = "none" if read_p50 is None else f"{read_p50:.1f} ms"
    return Check(
        f"most reads around the fault: read p50 within {limit_ms:g} ms",
        read_p50 is not None and read_p50 <= limit_ms,
        f"p50 {shown} over {reads} reads",
    )
