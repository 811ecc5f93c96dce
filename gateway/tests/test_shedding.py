"""Bounded work behind the event loop (door/admission.py, misses/coalesce.py): a flood of
cold reads whose clients give up at once leaves no backlog of database work,
and cached reads are answered meanwhile."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
import requests
from gateway_helpers import CONTRACTS, TEST_DB, unique_email, with_path
from prometheus_client.parser import text_string_to_metric_families

COUNT = "/api/v1/users/count"
FLOOD_REQUESTS = 2000
FLOOD_THREADS = 16
CLIENT_TIMEOUT_S = 0.05
# How long the query counter must stay still to count as stopped, and how late
# after the flood its last rise may come.
QUIET_S = 2.0
SETTLE_S = 1.5
FLOOD_DB = f"{TEST_DB}_flood"
# Enough rows that every cold count is a real scan (tens of ms), as in the lab,
# so the gateway cannot keep up with the flood and work queues behind it.
FLOOD_ROWS = 200_000


@pytest.fixture(scope="module")
def slow_database_url(database_url: str) -> Iterator[str]:
    """A database of its own with a large users table, so the other tests'
    scans stay fast."""
    admin = with_path(database_url, "/postgres")
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {FLOOD_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {FLOOD_DB}")
    url = with_path(database_url, f"/{FLOOD_DB}")
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute((CONTRACTS / "schema.sql").read_text())
        conn.execute(
            "INSERT INTO users (username, email) SELECT 'flood_' || g, 'flood-' || g || "
            "'@example.com' FROM generate_series(1, %s) g",
            (FLOOD_ROWS,),
        )
        conn.execute("VACUUM ANALYZE users")
    yield url
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {FLOOD_DB} WITH (FORCE)")


def db_queries(base: str) -> float:
    # /metrics is a Flask route, so it waits behind whatever queued for a thread.
    text = requests.get(base + "/metrics", timeout=60).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "aside_gateway_db_queries_total"
    )


def _impatient_read(base: str, email: str) -> None:
    # The client gives up: the point of the flood.
    with contextlib.suppress(requests.RequestException):
        requests.get(base + COUNT, params={"email": email}, timeout=CLIENT_TIMEOUT_S)


def _last_rise_after(base: str, since: float, deadline_s: float) -> tuple[float, float]:
    """Poll the query counter until it stayed still for QUIET_S; return how long
    after `since` it last rose, and its value then."""
    value, changed = db_queries(base), time.monotonic()
    while time.monotonic() - changed < QUIET_S:
        assert time.monotonic() - since < deadline_s, "the query counter never settled"
        time.sleep(0.1)  # the polling pace
        now_value = db_queries(base)
        if now_value != value:
            value, changed = now_value, time.monotonic()
    return max(changed - since, 0.0), value


def test_a_flood_of_abandoned_cold_reads_leaves_no_backlog(start_gateway, slow_database_url):
    # Few threads: misses queue for a thread, as they would with 64 threads
    # against a flood 16 times as large.
    gateway = start_gateway(DATABASE_URL=slow_database_url, GATEWAY_THREADS="4")
    hot_email = "flood-1@example.com"
    hot = requests.get(gateway.url + COUNT, params={"email": hot_email}, timeout=10)
    assert hot.json()["count"] == 1
    before = db_queries(gateway.url)

    stop = threading.Event()
    hot_answers: list[tuple[int, float]] = []

    def read_hot() -> None:
        while not stop.is_set():
            started = time.monotonic()
            answer = requests.get(gateway.url + COUNT, params={"email": hot_email}, timeout=10)
            hot_answers.append((answer.status_code, time.monotonic() - started))
            stop.wait(0.1)

    reader = threading.Thread(target=read_hot)
    reader.start()
    try:
        emails = [unique_email("cold") for _ in range(FLOOD_REQUESTS)]
        with ThreadPoolExecutor(FLOOD_THREADS) as pool:
            list(pool.map(lambda e: _impatient_read(gateway.url, e), emails))
        flood_ended = time.monotonic()
        at_end = db_queries(gateway.url)
        last_rise_s, final = _last_rise_after(gateway.url, flood_ended, 90)
    finally:
        stop.set()
        reader.join()
    print(
        f"queries: {at_end - before:.0f} during the flood, {final - at_end:.0f} after it, "
        f"last rise {last_rise_s:.2f} s after it; cached reads: {len(hot_answers)}, "
        f"slowest {max(t for _, t in hot_answers):.3f} s"
    )
    assert hot_answers and all(status == 200 for status, _ in hot_answers)
    assert last_rise_s <= SETTLE_S
