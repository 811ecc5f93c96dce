"""The gray failures: a hop slow, silent, throttled or cut mid-reply (toxics), and their budgets."""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import NotRequired, TypedDict

from aside_bench.stack import procs
from aside_bench.stack.toxiproxy import DOWNSTREAM, Toxic, Toxiproxy
from aside_bench_suite import samples as cs
from aside_bench_suite.samples import CLOCK_SLACK_S, READS, Check, Sample

from aside_bench_chaos import checks as cc

SLOW_MS = 200
# A trickle: at 4 KB/s the suite's 60 requests/s fit through and nothing is tested; at
# 1 KB/s the replies owed on a connection queue past REDIS_TIMEOUT_MS.
THROTTLE_KB_S = 1
# A reply cut after this many bytes: within the first reply of a connection.
CUT_AFTER_BYTES = 24
# Steady again: a one-second window whose read p95 is within this factor of the one before
# the fault (or STEADY_SLACK_MS above it: a 1 ms p95 doubles on a busy machine's noise).
STEADY_FACTOR = 1.5
STEADY_SLACK_MS = 5.0


@dataclass(frozen=True)
class GrayCase:  # one gray failure: its toxics, the proxies it poisons, what clients may see
    name: str
    description: str
    toxics: tuple[Toxic, ...]
    proxies: tuple[str, ...]
    read_p99_ms: float
    write_max_ms: float  # the longest a write may take
    read_max_ms: float = cc.READ_MAX_MS  # past it a read hangs
    # Where a breaker should take most reads off the faulty hop: their median (None: no claim).
    read_p50_ms: float | None = None
    # The load driver's timeout: past every budget, so a request over its budget is measured.
    driver_timeout_s: int = 3


def _one(kind: str, **attributes: int) -> tuple[Toxic, ...]:
    return (Toxic(f"gray-{kind}", kind, DOWNSTREAM, dict(attributes)),)


SLOW = _one("latency", latency=SLOW_MS, jitter=0)
BLACKHOLE = _one("timeout", timeout=0)
# The gateway's deadline on a miss (DB_POOL_TIMEOUT_MS + DB_STATEMENT_TIMEOUT_MS,
# 6000 ms) and a margin: a miss cut at its deadline still has its 503 to send.
DB_READ_MAX_MS = 6500.0

# Budgets, each with a margin for a loaded 2-core machine. Over a Redis fault (on the
# gateway's hop and the core's alike: one server) a read within the hang limit (each Redis
# call may take REDIS_TIMEOUT_MS, 200, before the breaker opens), a write within the core's
# CORE_INVALIDATION_DEADLINE_MS (300) before the outbox takes over. Over a PostgreSQL fault
# a read within the gateway's bound on a miss (pool wait plus statement timeout). Over a
# core fault, which reads never reach, a read within 500 ms; writes within the gateway's
# DB_POOL_TIMEOUT_MS (1000) and CORE_TIMEOUT_MS (6000).
_redis = partial(
    GrayCase, proxies=("redis", "core-redis"), read_p99_ms=cc.READ_MAX_MS, write_max_ms=1500
)
_postgres = partial(
    GrayCase,
    proxies=("postgres", "core-postgres"),
    read_p99_ms=DB_READ_MAX_MS,
    read_max_ms=DB_READ_MAX_MS,
    write_max_ms=6500,
    driver_timeout_s=8,
)
_core = partial(GrayCase, proxies=("core",), read_p99_ms=500)
GRAY_CASES: dict[str, GrayCase] = {
    case.name: case
    for case in (
        _redis("redis-slow", f"Redis {SLOW_MS} ms slower on every reply", SLOW,
               read_p50_ms=SLOW_MS),
        _redis("redis-blackhole", "Redis accepts and never answers", BLACKHOLE,
               read_p50_ms=SLOW_MS),
        _redis("redis-throttled", f"Redis's replies throttled to {THROTTLE_KB_S} KB/s",
               _one("bandwidth", rate=THROTTLE_KB_S)),
        _redis("redis-reset", f"every Redis connection cut after {CUT_AFTER_BYTES} bytes of reply",
               _one("limit_data", bytes=CUT_AFTER_BYTES)),
        _postgres("postgres-slow", f"PostgreSQL {SLOW_MS} ms slower on every reply", SLOW),
        _postgres("postgres-blackhole", "PostgreSQL accepts and never answers", BLACKHOLE),
        _core("core-slow", f"the core {SLOW_MS} ms slower on every reply", SLOW,
              write_max_ms=1500),
        _core("core-blackhole", "the core accepts and never answers", BLACKHOLE,
              write_max_ms=6500, driver_timeout_s=8),
    )
}  # fmt: skip


class CpuShares(TypedDict):
    driver_cpu_cores: float | None
    proxy_cpu_cores: float | None


@dataclass(frozen=True)
class CpuMeter:
    """The driver's and the proxy's CPU over a case's load, in cores (they share the machine)."""

    began: float
    proxy_pid: int | None
    proxy_ticks: int | None

    @classmethod
    def start(cls, proxy_pid: int | None) -> CpuMeter:
        ticks = None if proxy_pid is None else procs.tree_cpu_ticks(proxy_pid)
        return cls(time.monotonic(), proxy_pid, ticks)

    def shares(self, driver_cpu_s: float | None) -> CpuShares:
        """Once the driver has been waited for (its DriverProcess.cpu_seconds)."""
        wall = max(time.monotonic() - self.began, 1e-9)
        now = None if self.proxy_pid is None else procs.tree_cpu_ticks(self.proxy_pid)
        proxy = None
        if now is not None and self.proxy_ticks is not None:
            proxy = round((now - self.proxy_ticks) / procs.clock_ticks_per_s() / wall, 3)
        return {
            "driver_cpu_cores": None if driver_cpu_s is None else round(driver_cpu_s / wall, 3),
            "proxy_cpu_cores": proxy,
        }


def poison(api: Toxiproxy, case: GrayCase, on: bool) -> None:
    """The case's toxics on each of its proxies, or (`on` false) none."""
    for proxy in case.proxies:
        api.replace(proxy, list(case.toxics) if on else [])


# ---- the verdicts (pure) ---------------------------------------------------------------
def _p95(values: list[float]) -> float:
    return cs.nearest_rank(values, 95) or 0.0


def steady_again(reads: list[Sample], instant: float, steady_p95: float) -> float | None:
    """Seconds from `instant` to the first window whose read p95 is back near `steady_p95`."""
    limit = max(steady_p95 * STEADY_FACTOR, steady_p95 + STEADY_SLACK_MS)
    after = [s for s in reads if s.start >= instant]
    return cc.first_good_window(after, instant, lambda w: _p95([s.ms for s in w]) <= limit)


def _clear_answer(s: Sample) -> bool:
    """A 2xx, or a 503/504 JSON error with its code (a read's 503 with its Retry-After)."""
    if s.ok:
        return True
    if s.status not in (503, 504) or not s.tag("code"):
        return False
    return s.kind not in READS or s.status != 503 or bool(s.tag("retry_after"))


class GrayFigures(TypedDict):  # report.json's "figures" of a gray case
    fault_s: float
    steady_read_p95_ms: float
    reads_during_fault: int
    read_p50_during_fault_ms: float | None
    read_p99_during_fault_ms: float | None
    read_503_during_fault: int
    bypass_during_fault: int
    writes: int
    write_max_ms: float
    writes_not_2xx: int
    steady_p95_again_after_s: float | None
    driver_cpu_cores: NotRequired[float | None]  # the CpuMeter's, once the load is over
    proxy_cpu_cores: NotRequired[float | None]


def gray_checks(
    case: GrayCase, samples: list[Sample], events: dict[str, float]
) -> tuple[list[Check], GrayFigures]:
    fault, healed = events["fault"], events["ready"]
    reads = [s for s in samples if s.kind in READS and s.status != 0]
    writes = [s for s in samples if s.kind == "create"]
    before = cs.started_between(reads, events["load_start"] + 1.0, fault)
    during = cs.started_between(samples, fault + CLOCK_SLACK_S, healed)
    during_reads = [s for s in during if s.kind in READS]
    unclear = [s for s in samples if not _clear_answer(s)]
    steady_p95 = _p95([s.ms for s in before])
    read_p99 = cs.nearest_rank([s.ms for s in during_reads], 99)
    read_p50 = cs.nearest_rank([s.ms for s in during_reads], 50)
    back = steady_again(reads, healed, steady_p95)
    slow = [s for s in writes if s.ms > case.write_max_ms]
    figures: GrayFigures = {
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
            + cc.examples("unclear", unclear),
        ),
        Check(
            f"read p99 over the fault within {case.read_p99_ms:g} ms",
            cc.within(read_p99, case.read_p99_ms),
            f"p99 {figures['read_p99_during_fault_ms']} ms over {len(during_reads)} reads "
            f"({figures['bypass_during_fault']} BYPASS, {figures['read_503_during_fault']} 503)",
        ),
        cc.writes_within(
            f"no write past {case.write_max_ms:g} ms", writes, slow, figures["write_max_ms"], "slow"
        ),
        Check(
            f"steady p95 again within {cc.RECOVER_S:g} s of the hop healing",
            cc.within(back, cc.RECOVER_S),
            f"read p95 {steady_p95:.1f} ms before the fault; a window within "
            f"{STEADY_FACTOR:g}x again {cs.fmt_seconds(back)} after",
        ),
    ]
    if case.read_p50_ms is not None:
        # A breaker that opens leaves only the reads that find it closed to wait on the hop.
        shown = "none" if read_p50 is None else f"{read_p50:.1f} ms"
        name = f"most reads around the fault: read p50 within {case.read_p50_ms:g} ms"
        detail = f"p50 {shown} over {len(during_reads)} reads"
        checks.insert(2, Check(name, cc.within(read_p50, case.read_p50_ms), detail))
    return checks, figures
