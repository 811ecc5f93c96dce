"""Readers of a key that another request of the same worker is filling wait for
that fill on the event loop (hot_path.py), not in a Flask thread.

Integration tests through a real gunicorn gateway, PostgreSQL and Redis like
the rest of the suite: a fill is paused with the lab's X-Test-Hold header.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import redis
import requests
from gateway_helpers import (
    COUNT_SQL_TEXT,
    Proc,
    sample,
    scrape,
    unique_email,
    wait_until,
)

COUNT = "/api/v1/users/count"
COUNT_ROUTE = "/api/v1/users/count"
BATCH_SQL_TEXT = "SELECT email, count(*) FROM users WHERE email = ANY($1) GROUP BY email"
HOLD_DEADLINE_S = 15
FOLLOWERS = 20
FOLLOWED = "aside_gateway_loop_followers_total"
WAITING = "aside_gateway_loop_followers_waiting"


@pytest.fixture(scope="module")
def narrow_worker(start_gateway) -> Proc:
    """One worker with two Flask threads: a held fill takes one, so a reader
    that waited in a thread would take the last."""
    return start_gateway(GATEWAY_WORKERS="1", GATEWAY_THREADS="2")


class Read:
    """A GET in a thread of its own; `response` once it answered."""

    def __init__(self, url: str, email: str, headers: dict[str, str] | None = None):
        self.response: requests.Response | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(url, email, headers or {}))
        self.thread.start()

    def _run(self, url: str, email: str, headers: dict[str, str]) -> None:
        try:
            self.response = requests.get(
                url + COUNT, params={"email": email}, headers=headers, timeout=30
            )
        except BaseException as exc:  # the test inspects it
            self.error = exc

    def result(self) -> requests.Response:
        self.thread.join(HOLD_DEADLINE_S + 5)
        assert not self.thread.is_alive(), "no answer"
        assert self.error is None, self.error
        assert self.response is not None
        return self.response


def start_held(url: str, email: str, hold: str, rdb: redis.Redis) -> Read:
    """A read of `email` that pauses after its database read, before its store."""
    read = Read(url, email, {"X-Test-Hold": hold})
    assert rdb.blpop([f"aside:test:{hold}:reached"], timeout=HOLD_DEADLINE_S), "never held"
    return read


def release(rdb: redis.Redis, hold: str) -> None:
    rdb.rpush(f"aside:test:{hold}:release", "go")


def get_calls(rdb: redis.Redis) -> int:
    """GETs Redis has run so far (every hot-path read of a missing key does one)."""
    return int(rdb.info("commandstats").get("cmdstat_get", {}).get("calls", 0))


def sql_calls(query_calls: Callable[[str], int]) -> int:
    return query_calls(COUNT_SQL_TEXT) + query_calls(BATCH_SQL_TEXT)


def delta(before: dict, after: dict, name: str, **labels: str) -> float:
    return sample(after, name, **labels) - sample(before, name, **labels)


def test_readers_of_a_key_being_filled_take_no_flask_thread(
    narrow_worker, insert_user, rdb, query_calls
):
    """A held fill takes one of the worker's two Flask threads and twenty readers
    of its key arrive meanwhile: a request only Flask answers still gets the
    other thread at once, and the twenty are answered from the one fill."""
    url = narrow_worker.url
    email = unique_email("loop")
    insert_user(email)
    before = scrape(url)
    sql_before = sql_calls(query_calls)
    hold = f"loop-lead-{time.monotonic_ns()}"
    leader = start_held(url, email, hold, rdb)
    try:
        gets_before = get_calls(rdb)
        readers = [Read(url, email) for _ in range(FOLLOWERS)]
        wait_until(
            lambda: get_calls(rdb) - gets_before >= FOLLOWERS, 10, "every reader's GET of the key"
        )
        try:
            refused = requests.get(url + COUNT, params={"email": "no-at-sign"}, timeout=5)
        except requests.Timeout:
            pytest.fail("a request only Flask answers waited 5 s: readers hold the Flask threads")
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == "invalid_email"
        # Still held: the readers are waiting, and not in a thread.
        assert leader.thread.is_alive()
        assert all(read.thread.is_alive() for read in readers)
        assert sample(scrape(url), WAITING) == FOLLOWERS
    finally:
        release(rdb, hold)

    led = leader.result()
    assert led.status_code == 200, led.text
    assert led.json() == {"email": email, "count": 1}
    assert led.headers["X-Cache"] == "MISS"
    for read in readers:
        response = read.result()
        assert response.status_code == 200, response.text
        assert response.json() == {"email": email, "count": 1}
        assert (response.headers["X-Cache"], response.headers["X-Cache-Tier"]) == ("HIT", "l2")
    after = scrape(url)
    assert sql_calls(query_calls) - sql_before == 1
    assert delta(before, after, FOLLOWED, route=COUNT_ROUTE, outcome="hit") == FOLLOWERS
    assert delta(before, after, FOLLOWED, route=COUNT_ROUTE, outcome="fallback") == 0
    assert delta(before, after, "aside_gateway_cache_hits_total", route=COUNT_ROUTE) == FOLLOWERS
    assert delta(before, after, "aside_gateway_cache_misses_total", route=COUNT_ROUTE) == 1
    assert sample(after, WAITING) == 0
