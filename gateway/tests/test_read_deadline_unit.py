"""A miss's own deadline (misses/read_deadline.py) and the PostgreSQL breaker's
base (door/circuit.py), without services."""

from __future__ import annotations

import time

import pytest
from aside_gateway.door.circuit import Breaker
from aside_gateway.misses import read_deadline
from aside_gateway.misses.coalesce import BatchTimeout, MissBatcher


def test_an_enclosing_deadline_is_kept_and_cleared_on_leaving():
    assert read_deadline.remaining() is None
    with read_deadline.bounded(10.0) as outer:
        with read_deadline.bounded(60.0) as inner:
            assert inner == outer  # a nested miss keeps the read's deadline
        left = read_deadline.remaining()
        assert left is not None and 9.0 < left <= 10.0
        assert read_deadline.within(1.0) == 1.0
        assert read_deadline.within(None) <= left
    assert read_deadline.remaining() is None
    assert read_deadline.within(2.5) == 2.5


def test_a_passed_deadline_is_a_503_with_retry_after():
    with read_deadline.bounded(0.0):
        assert read_deadline.passed()
        error = read_deadline.past_deadline()
    assert (error.status, error.code) == (503, "database_unavailable")
    assert error.headers["Retry-After"] == "1"


def test_a_batched_get_waits_no_longer_than_its_timeout():
    batcher: MissBatcher[str, int] = MissBatcher(
        lambda keys: time.sleep(1.0) or {}, 0, max_batch=10, max_in_flight=1, wait_s=30
    )
    started = time.monotonic()
    with pytest.raises(BatchTimeout):
        batcher.get("k", timeout_s=0.1)
    assert time.monotonic() - started < 0.5
    batcher.close()


def test_a_tripped_breaker_refuses_then_lets_one_probe_through(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("aside_gateway.door.circuit.time.monotonic", lambda: now[0])
    breaker = Breaker(1.0)
    breaker.trip()
    assert breaker.is_open and not breaker.allow()
    now[0] += 1.0
    assert breaker.allow()  # the probe
    assert not breaker.allow()  # the others wait for its verdict
    breaker.record_success()
    assert not breaker.is_open and breaker.allow()
    off = Breaker(0.0)
    off.trip()
    assert off.allow()  # 0: never opens
