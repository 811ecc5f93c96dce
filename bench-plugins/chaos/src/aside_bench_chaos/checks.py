"""The four kills' verdicts from the driver's samples and the gateway's counters (pure)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

from aside_bench.stack.gateway_metrics import RequestKey
from aside_bench_suite import samples as cs
from aside_bench_suite.samples import CLOCK_SLACK_S, READS, ROUTES, Check, Sample, first_after

# ---- the limits the checks hold the stack to (docs/bench/suites.md, "Chaos") --------------------
# The load driver's request timeout; a read "hangs" when it takes more than half of it.
REQUEST_TIMEOUT_S = 3
READ_MAX_MS = REQUEST_TIMEOUT_S * 1000 / 2
# A failure must be fast: the core down (connect refused) within 1 s; PostgreSQL down within
# the gateway's pool wait (DB_POOL_TIMEOUT_MS, 1 s, the first miss of an outage per worker;
# later ones wait 0.1 s) plus a margin for a loaded 2-core machine.
CORE_DOWN_MAX_MS = 1000
DB_DOWN_MAX_MS = 1500
# After the service is back: hits, writes and misses resume within this.
RECOVER_S = 5.0
# "Hit ratio back": a one-second window whose hit share is this share of the one before.
HIT_RATIO_BACK = 0.8
# Gunicorn replaces a killed worker within this.
REPLACE_S = 10.0
# The limits above as report.json records them.
LIMITS: dict[str, float] = {
    "read_max_ms": READ_MAX_MS,
    "core_down_max_ms": CORE_DOWN_MAX_MS,
    "db_down_max_ms": DB_DOWN_MAX_MS,
    "recover_s": RECOVER_S,
    "hit_ratio_back": HIT_RATIO_BACK,
    "replace_s": REPLACE_S,
}


def rereads(samples: list[Sample], instant: float) -> list[Sample]:
    """The answered reads from `instant` on of a key an earlier such read had asked for and
    ended: after a flush every first read misses, so only these measure the cache."""
    answered = sorted(
        (s for s in samples if s.kind in READS and s.status == 200 and s.start >= instant),
        key=lambda s: s.start,
    )
    first_end: dict[tuple[str, str], float] = {}
    found = []
    for read in answered:
        key = (read.kind, read.tag("key"))
        if first_end.get(key, float("inf")) <= read.start:
            found.append(read)
        first_end[key] = min(first_end.get(key, float("inf")), read.end)
    return found


def first_good_window(
    samples: list[Sample], instant: float, good: Callable[[list[Sample]], bool]
) -> float | None:
    """Seconds from `instant` to the first one-second window (sliding by 0.1 s) that is `good`."""
    if not samples:
        return None
    offset, last = 0.0, samples[-1].start
    while instant + offset + 1.0 <= last + 1e-9:
        window = cs.started_between(samples, instant + offset, instant + offset + 1.0)
        if window and good(window):
            return offset
        offset += 0.1
    return None


def hit_ratio_back(samples: list[Sample], instant: float, baseline: float) -> float | None:
    """When the re-reads' HIT share is back to HIT_RATIO_BACK x `baseline`."""
    enough = HIT_RATIO_BACK * baseline
    reads = rereads(samples, instant)
    return first_good_window(reads, instant, lambda window: (cs.hit_share(window) or 0) >= enough)


def within(value: float | None, limit: float) -> bool:
    """Seen, and no later or longer than `limit`."""
    return value is not None and value <= limit


def examples(label: str, bad: list[Sample]) -> str:
    """A check's detail's tail: some of the samples that broke it, if any did."""
    return f"; {label}: {cs.summarize(bad)}" if bad else ""


def writes_within(
    name: str, writes: list[Sample], bad: list[Sample], max_ms: float, label: str
) -> Check:
    """Writes held to a bound: some were sent, and none broke it."""
    return Check(
        name,
        bool(writes) and not bad,
        f"{len(writes)} writes, max {max_ms:.0f} ms" + examples(label, bad),
    )


# ---- checks shared by every case ------------------------------------------------------
def common_checks(
    samples: list[Sample], dropped: int, lost_ok: bool, tallied: int | None, read_max_ms: float
) -> list[Check]:
    """`tallied`: what the driver counted (None: unchecked); a read past `read_max_ms` hangs."""
    reads = [s for s in samples if s.kind in READS]
    slow = [s for s in reads if s.ms > read_max_ms]
    lost = [s for s in samples if s.status == 0]
    bad_body = [s for s in samples if s.status in (200, 201) and s.tag("ok") == "0"]
    not_json = [s for s in samples if s.tag("code") == "not_json"]
    max_read = max((s.ms for s in reads), default=0)
    checks = [
        Check(
            "every request has its sample",
            tallied == len(samples),
            f"{len(samples)} samples, the driver's summary counted {tallied} requests",
        ),
        Check(
            "reads never hang",
            not slow,
            f"max read {max_read:.0f} ms (limit {read_max_ms:.0f} ms)" + examples("slow", slow),
        ),
        Check(
            "every request answered",
            not lost,
            cs.summarize(lost) if lost else "no request without an answer",
        ),
        Check(
            "bodies are right, errors are JSON",
            not bad_body and not not_json,
            f"{len(bad_body)} wrong 2xx bodies, {len(not_json)} non-JSON errors",
        ),
        Check(
            "no dropped iterations", dropped == 0, f"the load driver dropped {dropped} iterations"
        ),
    ]
    wanted = (tallied is not None, True, not lost_ok, True, True)
    return [check for check, want in zip(checks, wanted, strict=True) if want]


# ---- the four cases -------------------------------------------------------------------
# A case's figures, report.json's "figures": counts, seconds, ms (None: none seen), by kind.
CaseFigures = dict[str, float | dict[str, float] | None]


def redis_checks(
    samples: list[Sample], events: dict[str, float]
) -> tuple[list[Check], CaseFigures]:
    """Redis killed: reads answer 200 from PostgreSQL (or 503 with Retry-After), writes
    succeed, hits come back without a gateway restart."""
    fault, ready = events["fault"], events["ready"]
    # Down for certain only until the restart began: the new Redis may answer before `ready`.
    restore = events.get("restore", ready)
    reads = [s for s in samples if s.kind in READS]
    odd_reads = [
        s for s in reads if s.status != 200 and not (s.status == 503 and s.tag("retry_after"))
    ]
    outage = [
        s for s in reads if s.start >= fault + CLOCK_SLACK_S and s.end <= restore - CLOCK_SLACK_S
    ]
    bypassed = [s for s in outage if s.status == 200 and s.tag("xcache") == "BYPASS"]
    writes = [s for s in samples if s.kind == "create"]
    failed_writes = [s for s in writes if not s.ok]
    baseline = cs.hit_share(cs.started_between(samples, 0, fault)) or 0.0
    first_hit = first_after(reads, ready, lambda s: s.tag("xcache") == "HIT")
    ratio_back = hit_ratio_back(samples, ready, baseline)
    figures: CaseFigures = {
        "reads_during_outage": len(outage),
        "reads_during_outage_bypass": len(bypassed),
        "reads_during_outage_503": sum(1 for s in outage if s.status == 503),
        "writes_invalidation_failed": sum(1 for s in writes if s.tag("invalidation") == "failed"),
        "hit_share_before": round(baseline, 3),
        "first_hit_after_ready_s": first_hit,
        "hit_ratio_back_after_ready_s": ratio_back,
    }
    checks = [
        Check(
            "reads: only 200, or 503 with Retry-After",
            not odd_reads,
            f"{len(reads)} reads, {len(outage)} while Redis was down "
            f"({len(bypassed)} served from PostgreSQL as BYPASS)" + examples("other", odd_reads),
        ),
        Check(
            "writes succeed without Redis",
            not failed_writes,
            f"{len(writes)} writes, {figures['writes_invalidation_failed']} with "
            "X-Cache-Invalidation: failed" + examples("failed", failed_writes),
        ),
        Check(
            f"hits resume within {RECOVER_S:g} s of Redis being back",
            within(first_hit, RECOVER_S),
            f"first HIT {cs.fmt_seconds(first_hit)} after ready",
        ),
        Check(
            f"hit ratio back within {RECOVER_S:g} s",
            within(ratio_back, RECOVER_S),
            f"{HIT_RATIO_BACK:.0%} of the {baseline:.0%} before the fault, among re-reads, after "
            f"{cs.fmt_seconds(ratio_back)}",
        ),
    ]
    return checks, figures


def core_checks(samples: list[Sample], events: dict[str, float]) -> tuple[list[Check], CaseFigures]:
    """The core killed: writes answer 503 core_unavailable fast while it is down (504
    write_outcome_unknown if in flight), reads are unaffected, writes succeed once it is back."""
    fault, restore, ready = events["fault"], events["restore"], events["ready"]
    reads = [s for s in samples if s.kind in READS]
    writes = [s for s in samples if s.kind == "create"]
    bad_reads = [s for s in reads if s.status != 200]
    down = cs.started_between(writes, fault + CLOCK_SLACK_S, restore)

    def unavailable(s: Sample) -> bool:
        return s.status == 503 and s.tag("code") == "core_unavailable"

    def in_flight_unknown(s: Sample) -> bool:
        in_flight = s.start < fault + CLOCK_SLACK_S and s.end > fault - CLOCK_SLACK_S
        return s.status == 504 and s.tag("code") == "write_outcome_unknown" and in_flight

    down_wrong = [s for s in down if not unavailable(s) or s.ms > CORE_DOWN_MAX_MS]
    other = [s for s in writes if not (s.ok or unavailable(s) or in_flight_unknown(s))]
    after = cs.started_between(writes, ready + CLOCK_SLACK_S, math.inf)
    after_failed = [s for s in after if not s.ok]
    first_ok = first_after(writes, ready, lambda s: s.ok)
    figures: CaseFigures = {
        "writes_while_down": len(down),
        "max_ms_while_down": max((s.ms for s in down), default=None),
        "writes_after_ready": len(after),
        "first_2xx_write_after_ready_s": first_ok,
    }
    checks = [
        Check(
            "reads unaffected",
            not bad_reads,
            f"{len(reads)} reads, {len(bad_reads)} not 200"
            + (f": {cs.summarize(bad_reads)}" if bad_reads else ""),
        ),
        writes_within(
            f"writes while down: 503 core_unavailable within {CORE_DOWN_MAX_MS} ms",
            down,
            down_wrong,
            figures["max_ms_while_down"] or 0,
            "wrong",
        ),
        Check(
            "writes fail only with core_unavailable (or, in flight, write_outcome_unknown)",
            not other,
            "every failed write is 503 core_unavailable, or 504 write_outcome_unknown in flight"
            if not other
            else f"other failures: {cs.summarize(other)}",
        ),
        Check(
            "writes succeed once the core is back",
            bool(after) and not after_failed,
            f"{len(after)} writes after ready, first 2xx {cs.fmt_seconds(first_ok)} after ready"
            + examples("failed", after_failed),
        ),
    ]
    return checks, figures


DB_DOWN_CODES = {"database_unavailable", "timeout", "unavailable"}


def postgres_checks(
    samples: list[Sample], events: dict[str, float], redis_errors: float = 0
) -> tuple[list[Check], CaseFigures]:
    """PostgreSQL restarted: cached reads keep answering, misses and writes fail fast, both
    pools recover within RECOVER_S. After one of the gateway's `redis_errors` a worker's
    breaker sends reads to PostgreSQL: only then may a cached read fail (fast, Retry-After)."""
    fault, ready = events["fault"], events["ready"]
    users = [s for s in samples if s.kind == "user"]  # prewarmed, never invalidated: all cached
    counts = [s for s in samples if s.kind == "count"]
    writes = [s for s in samples if s.kind == "create"]

    def fast(s: Sample, statuses: tuple[int, ...], codes: set[str]) -> bool:
        return s.status in statuses and s.tag("code") in codes and s.ms <= DB_DOWN_MAX_MS

    failed_users = [s for s in users if s.status != 200]
    shed = [
        s
        for s in failed_users
        if redis_errors and fast(s, (503,), {"database_unavailable"}) and s.tag("retry_after")
    ]
    bad_users = [s for s in failed_users if s not in shed]
    failures = [s for s in counts + writes if not s.ok]
    wrong = [s for s in failures if not fast(s, (503, 504), DB_DOWN_CODES)]
    outage_reads = cs.started_between(users, fault + CLOCK_SLACK_S, ready)
    first_write = first_after(writes, ready, lambda s: s.ok)
    first_miss = first_after(counts, ready, lambda s: s.status == 200 and s.tag("xcache") == "MISS")
    late = [s for s in failures if s.start >= ready + RECOVER_S]
    figures: CaseFigures = {
        "cached_reads_while_down": len(outage_reads),
        "gateway_redis_errors": redis_errors,
        "cached_reads_failed_after_redis_errors": len(shed),
        "failed_misses": sum(1 for s in failures if s.kind == "count"),
        "failed_writes": sum(1 for s in failures if s.kind == "create"),
        "max_failure_ms": max((s.ms for s in failures), default=None),
        "first_2xx_write_after_ready_s": first_write,
        "first_miss_after_ready_s": first_miss,
        "last_failure_after_ready_s": max((s.start - ready for s in failures), default=None),
    }
    breaker_note = (
        f"; {len(shed)} failed fast while the gateway's Redis breaker was open "
        f"({redis_errors:g} Redis errors in the gateway)"
    )
    checks = [
        Check(
            "cached reads keep answering 200",
            bool(outage_reads) and not bad_users,
            f"{len(users)} cached user reads ({len(outage_reads)} while PostgreSQL was down), "
            f"{len(bad_users)} not 200"
            + (f": {cs.summarize(bad_users)}" if bad_users else "")
            + (breaker_note if shed else ""),
        ),
        Check(
            f"misses and writes fail fast: 503/504 JSON within {DB_DOWN_MAX_MS} ms",
            bool(failures) and not wrong,
            f"{figures['failed_misses']} misses and {figures['failed_writes']} writes failed, "
            f"max {figures['max_failure_ms'] or 0:.0f} ms" + examples("wrong", wrong),
        ),
        Check(
            f"pools recover within {RECOVER_S:g} s of PostgreSQL being ready",
            within(first_write, RECOVER_S) and within(first_miss, RECOVER_S) and not late,
            f"first 2xx write {cs.fmt_seconds(first_write)}, first answered miss "
            f"{cs.fmt_seconds(first_miss)} after ready; {len(late)} failures later than "
            f"{RECOVER_S:g} s",
        ),
    ]
    return checks, figures


def worker_checks(
    samples: list[Sample], events: dict[str, float], counters_delta: dict[RequestKey, float]
) -> tuple[list[Check], CaseFigures]:
    """A gunicorn worker killed: it is replaced, only requests in flight on it go unanswered, and
    the gateway's counters match the answered requests, plus per route at most the unanswered."""
    fault, replaced = events["fault"], events.get("replaced")
    lost = [s for s in samples if s.status == 0]
    not_in_flight = [
        s for s in lost if not (s.start <= fault + CLOCK_SLACK_S and s.end >= fault - CLOCK_SLACK_S)
    ]
    others = [s for s in samples if s.status != 0 and not s.ok]
    answered = Counter((*ROUTES[s.kind], str(s.status)) for s in samples if s.status != 0)
    lost_by_route = Counter(ROUTES[s.kind] for s in lost)
    mismatches = []
    surplus_by_route: Counter[tuple[str, str]] = Counter()
    for key in sorted(set(answered) | set(counters_delta)):
        got, want = counters_delta.get(key, 0.0), answered.get(key, 0)
        surplus = got - want
        if surplus < 0 or surplus != int(surplus):
            mismatches.append(f"{key}: gateway {got:g}, the driver {want}")
        else:
            surplus_by_route[key[:2]] += int(surplus)
    for route, surplus in surplus_by_route.items():
        if surplus > lost_by_route[route]:
            mismatches.append(
                f"{route}: gateway counted {surplus} more than the driver saw answered, "
                f"but only {lost_by_route[route]} went unanswered"
            )
    replace_s = None if replaced is None else replaced - fault
    never_delivered = sum(surplus_by_route.values())
    figures: CaseFigures = {
        "worker_replaced_after_s": replace_s,
        "unanswered": len(lost),
        "unanswered_by_kind": dict(Counter(s.kind for s in lost)),
        "counted_not_delivered": never_delivered,
        "requests_compared": sum(answered.values()),
    }
    killed_counted = f" ({never_delivered} counted by the killed worker, never delivered)"
    checks = [
        Check(
            f"worker replaced within {REPLACE_S:g} s",
            within(replace_s, REPLACE_S),
            f"new worker {cs.fmt_seconds(replace_s)} after the kill",
        ),
        Check(
            "only requests in flight on the killed worker go unanswered",
            not not_in_flight and not others,
            f"{len(lost)} unanswered, all in flight at the kill"
            if not not_in_flight and not others
            else f"unexplained: {cs.summarize(not_in_flight + others)}",
        ),
        Check(
            "gateway counters exact",
            not mismatches and bool(answered),
            "; ".join(mismatches[:4])
            or f"{sum(answered.values())} answered requests match aside_gateway_http_requests_total"
            f" per route and status{killed_counted if never_delivered else ''}",
        ),
    ]
    return checks, figures


def loaded_route_increase(
    before: dict[RequestKey, float], after: dict[RequestKey, float]
) -> dict[RequestKey, float]:
    routes = set(ROUTES.values())
    loaded = (key for key in set(before) | set(after) if key[:2] in routes)
    changes = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in loaded}
    return {key: change for key, change in changes.items() if change}
