"""The cluster cases' pure parts (bench/src/aside_bench/suites/chaos/cluster.py):
the windows cut from the mixed scenario's samples, the verdicts on fixed
instants, the probe key's slot. The cases themselves run on the stack's
cluster (`make chaos CASES="cluster-failover cluster-reshard"`)."""

from __future__ import annotations

from aside_bench_chaos import cluster
from aside_bench_chaos import run as chaos
from aside_bench_chaos.cases import CLUSTER_CASES
from redis.crc import key_slot

EVENTS = {"load_start": 100.0, "event": 105.0, "event_end": 112.0, "load_end": 130.0}


def _line(t: float, name: str = "count", status: int = 200, ok: bool = True, ms: float = 2.0):
    return {"t": t, "name": name, "status": status, "ok": ok, "ms": ms}


def _steady(errors_at: tuple[float, ...] = ()) -> list[dict]:
    lines = [_line(100 + i / 10) for i in range(300)]
    lines += [_line(t, status=0, ok=False, ms=3000.0) for t in errors_at]
    return lines


def test_the_cases_are_chaos_cases() -> None:
    assert chaos.parse_cases("cluster-failover cluster-reshard") == CLUSTER_CASES


def test_a_failover_served_by_its_new_owner_without_errors_passes() -> None:
    checks, figures = cluster.judge(cluster.FAILOVER, _steady((106.0,)), EVENTS, 114.0, 113.0, 105)
    assert all(c.ok for c in checks), [c.detail for c in checks]
    assert figures["served_by_new_owner_after_s"] == 9.0
    assert figures["over_event"]["count"]["errors"] == 1
    assert figures["over_event"]["count"]["p99_ms"] == 3000.0


def test_errors_after_the_event_reads_never_served_and_no_resubscription_fail() -> None:
    checks, _ = cluster.judge(cluster.FAILOVER, _steady((120.0,)), EVENTS, None, None, 105)
    failed = {c.name for c in checks if not c.ok}
    assert failed == {
        "reads served from the new owner",
        "errors over the event bounded, none after",
        "every L1 subscribed again",
    }
    # A migration must be served by its new owner sooner than a promotion.
    checks, _ = cluster.judge(cluster.RESHARD, _steady(), EVENTS, 112.0 + 6, 113.0, 112.0)
    assert [c.ok for c in checks] == [False, True, True]


def test_a_stale_checkers_verdict_is_not_a_request_error() -> None:
    lines = [_line(106.0, name="stale_count", ok=False), _line(107.0, status=503, ok=False)]
    over = cluster.window_figures(lines, 105.0, 113.0)
    assert over["stale_count"]["errors"] == 0
    assert over["count"] == {"requests": 1, "errors": 1, "statuses": {"503": 1}, "p99_ms": 2.0}


def test_the_probe_email_lands_in_the_slots_that_move() -> None:
    slots = set(range(5461, 10923))
    email = cluster.probe_email("r1", slots)
    assert key_slot(f"count:{email}".encode()) in slots
    assert cluster.count_key(email) == f"aside:v1:{{count:{email}}}"
