"""Readers of a key that another request of the same worker is filling wait for
that fill on the event loop (front/hot_path.py), not in a Flask thread.

Unit tests drive `coalesce.LoopFlights`, and `AsyncHotPath` with strategy l1
(no Redis) in front of a stand-in for Flask; integration tests go through a
real gunicorn gateway, PostgreSQL and Redis like the rest of the suite, a fill
paused with the lab's X-Test-Hold header.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import redis
import requests
from aside_gateway.backends.breaker import CircuitBreaker
from aside_gateway.config.settings import load_settings
from aside_gateway.contracts import cache_keys
from aside_gateway.contracts.routes import ARRIVED_KEY
from aside_gateway.front.hot_path import AsyncHotPath, EarlyGetClient
from aside_gateway.misses.coalesce import LoopFlights
from aside_gateway.tiers.l1 import L1Cache
from gateway_helpers import (
    COUNT_SQL_TEXT,
    Proc,
    Read,
    release,
    sample,
    scrape,
    start_held,
    unique_email,
    unique_username,
    wait_until,
)
from prometheus_client import REGISTRY

COUNT = "/api/v1/users/count"
COUNT_ROUTE = "/api/v1/users/count"
BATCH_SQL_TEXT = "SELECT email, count(*) FROM users WHERE email = ANY($1) GROUP BY email"
FOLLOWERS = 20
FOLLOWED = "aside_gateway_loop_followers_total"
WAITING = "aside_gateway_loop_followers_waiting"


def run(scenario: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(scenario, 10))


async def until(predicate: Callable[[], bool], what: str, deadline_s: float = 5.0) -> None:
    """Let the loop run until `predicate()` holds; fail after the deadline."""
    deadline = time.monotonic() + deadline_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {deadline_s}s waiting for {what}")
        await asyncio.sleep(0.001)


async def still_running(task: asyncio.Task, for_s: float = 0.05) -> bool:
    done, _ = await asyncio.wait({task}, timeout=for_s)
    return not done


# ---- unit: LoopFlights -----------------------------------------------------------------


def test_followers_wait_for_the_leader_and_a_later_miss_starts_a_new_flight():
    async def scenario() -> None:
        flights: LoopFlights[str] = LoopFlights()
        release = asyncio.Event()

        async def fill() -> str:
            await release.wait()
            return "filled"

        leader = asyncio.create_task(flights.lead("k", fill()))
        await until(lambda: flights.busy("k"), "the flight")
        follower = asyncio.create_task(flights.follow("k", 5))
        assert await flights.follow("other", 5)  # nothing in flight: at once
        assert await still_running(follower)
        release.set()
        assert await leader == "filled"
        assert await follower
        assert not flights.busy("k") and len(flights) == 0

    run(scenario())


def test_a_follower_gives_up_after_its_timeout_and_the_flight_stays():
    async def scenario() -> None:
        flights: LoopFlights[str] = LoopFlights()
        release = asyncio.Event()
        leader = asyncio.create_task(flights.lead("k", release.wait()))
        await until(lambda: flights.busy("k"), "the flight")
        assert not await flights.follow("k", 0.05)
        assert flights.busy("k")  # the fill still runs: later misses wait for it
        release.set()
        await leader
        assert not flights.busy("k")

    run(scenario())


def test_a_failed_fill_lands_its_flight_and_wakes_its_followers():
    async def scenario() -> None:
        flights: LoopFlights[str] = LoopFlights()
        release = asyncio.Event()

        async def failing_fill() -> None:
            await release.wait()
            raise RuntimeError("the database is unreachable")

        leader = asyncio.create_task(flights.lead("k", failing_fill()))
        await until(lambda: flights.busy("k"), "the flight")
        follower = asyncio.create_task(flights.follow("k", 5))
        assert await still_running(follower)
        release.set()
        with pytest.raises(RuntimeError):
            await leader
        assert await follower  # woken at once, to look again
        assert not flights.busy("k")

    run(scenario())


def test_a_cancelled_fill_lands_its_flight_and_wakes_its_followers():
    async def scenario() -> None:
        flights: LoopFlights[str] = LoopFlights()
        leader = asyncio.create_task(flights.lead("k", asyncio.Event().wait()))
        await until(lambda: flights.busy("k"), "the flight")
        follower = asyncio.create_task(flights.follow("k", 5))
        assert await still_running(follower)
        leader.cancel()  # the server dropped the request
        with pytest.raises(asyncio.CancelledError):
            await leader
        assert await follower
        assert not flights.busy("k") and len(flights) == 0

    run(scenario())


# ---- unit: the hot path's followers, before a stand-in for Flask -----------------------


EMAIL = "loop-unit@example.com"


class FakeFlask:
    """Stands for Flask behind the hot path. The first request (the leader)
    waits for `release`, then raises `error` or stores `value` in L1 under the
    token it took first, as a fill does; every request is answered "flask"."""

    def __init__(self) -> None:
        self.requests = 0
        self.arrived: list[float] = []  # what door/admission.py would see, per request
        self.release = asyncio.Event()
        self.value: bytes | None = b"3"
        self.error: Exception | None = None
        self.l1: L1Cache | None = None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        self.requests += 1
        self.arrived.append(scope[ARRIVED_KEY])
        if self.requests == 1:
            assert self.l1 is not None
            token = self.l1.token(cache_keys.count_key(EMAIL))
            await self.release.wait()
            if self.error is not None:
                raise self.error
            if self.value is not None:
                self.l1.put(cache_keys.count_key(EMAIL), self.value, token)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"flask"})


def l1_hot_path(
    flask: FakeFlask,
    strategy: str = "l1",
    redis_port: int = 6379,
    breaker: CircuitBreaker | None = None,
) -> AsyncHotPath:
    settings = load_settings(
        {
            "DATABASE_URL": "postgresql://a@127.0.0.1:5432/a",
            "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
            "REDIS_TIMEOUT_MS": "50",
            "CORE_URL": "http://127.0.0.1:1",
            "ASIDE_PROFILE": "lab",
            "CACHE_STRATEGY": strategy,
        }
    )
    flask.l1 = L1Cache(100, 1 << 20, 60, needs_subscription=False)
    # Strategy l1 asks Redis nothing: then this client never connects.
    redis_get = EarlyGetClient(settings, breaker or CircuitBreaker(1))
    return AsyncHotPath(flask, redis_get, flask.l1, settings)


async def silent_server() -> asyncio.Server:
    """Accepts connections and never answers: a GET to it runs out its deadline."""

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(65536):
            pass
        writer.close()

    return await asyncio.start_server(swallow, "127.0.0.1", 0)


async def no_body() -> dict:
    return {"type": "http.request", "body": b"", "more_body": False}


def count_scope() -> dict:
    """The ASGI scope of a GET of EMAIL's count."""
    return {
        "type": "http",
        "method": "GET",
        "path": COUNT,
        "query_string": f"email={EMAIL}".encode(),
        "headers": [],
        ARRIVED_KEY: time.monotonic() - 60,  # long ago, as door/admission.py reads it
    }


async def get_count(app: AsyncHotPath) -> tuple[int, bytes]:
    """One GET of EMAIL's count through `app`: (status, body)."""
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    await app(count_scope(), no_body, send)
    return sent[0]["status"], sent[1]["body"]


def waiting() -> float:
    return REGISTRY.get_sample_value(WAITING) or 0.0


def followed(outcome: str) -> float:
    return REGISTRY.get_sample_value(FOLLOWED, {"route": COUNT_ROUTE, "outcome": outcome}) or 0.0


async def leader_and_followers(
    app: AsyncHotPath, flask: FakeFlask, followers: int
) -> tuple[asyncio.Task, list[asyncio.Task]]:
    """A leader held inside FakeFlask and `followers` readers waiting for it on the loop."""
    waiting_before = waiting()
    leader = asyncio.create_task(get_count(app))
    await until(lambda: flask.requests == 1, "the leader in Flask")
    tasks = [asyncio.create_task(get_count(app)) for _ in range(followers)]
    await until(lambda: waiting() == waiting_before + followers, "the followers waiting")
    assert flask.requests == 1
    return leader, tasks


def test_followers_answer_the_leaders_fill_without_flask():
    async def scenario() -> None:
        flask = FakeFlask()
        app = l1_hot_path(flask)
        hits_before = followed("hit")
        leader, followers = await leader_and_followers(app, flask, 5)
        flask.release.set()
        assert await leader == (200, b"flask")
        answer = cache_keys.encode_json({"email": EMAIL, "count": 3})
        assert await asyncio.gather(*followers) == [(200, answer)] * 5
        assert flask.requests == 1
        assert followed("hit") - hits_before == 5
        assert len(app.flights) == 0

    run(scenario())


@pytest.mark.parametrize("ending", ["error", "cancelled", "invalidated"])
def test_followers_of_a_fill_that_stored_nothing_ask_flask(ending):
    """The leader fails, is cancelled, or its store is refused because an
    invalidation came in during its read: every follower falls back to Flask,
    and no flight is left behind."""

    async def scenario() -> None:
        flask = FakeFlask()
        app = l1_hot_path(flask)
        fallbacks_before = followed("fallback")
        leader, followers = await leader_and_followers(app, flask, 5)
        if ending == "error":
            flask.error = RuntimeError("the database is unreachable")
        elif ending == "invalidated":
            app.l1.evict([cache_keys.count_key(EMAIL)])
        if ending == "cancelled":
            leader.cancel()
        else:
            flask.release.set()
        (led,) = await asyncio.gather(leader, return_exceptions=True)
        expected = {
            "error": RuntimeError,
            "cancelled": asyncio.CancelledError,
            "invalidated": tuple,  # answered: its own read, not kept
        }
        assert isinstance(led, expected[ending]), led
        assert await asyncio.gather(*followers) == [(200, b"flask")] * 5
        assert flask.requests == 1 + 5
        # Their wait for a thread starts now: the wait on the loop was for no thread.
        assert all(arrived > time.monotonic() - 5 for arrived in flask.arrived[1:])
        assert followed("fallback") - fallbacks_before == 5
        assert len(app.flights) == 0

    run(scenario())


def test_a_get_past_its_deadline_waits_for_the_fill_in_flight():
    """A late event loop lets the GET's deadline pass (no verdict on Redis): the
    read is still a miss its worker may be filling, so it waits, holding no thread."""

    async def scenario() -> None:
        server = await silent_server()
        async with server:
            flask = FakeFlask()
            port = server.sockets[0].getsockname()[1]
            app = l1_hot_path(flask, "l2", port)
            fallbacks_before = followed("fallback")
            leader, followers = await leader_and_followers(app, flask, 3)
            flask.release.set()
            assert await leader == (200, b"flask")
            # The second GET runs out too: no hit, so Flask answers.
            assert await asyncio.gather(*followers) == [(200, b"flask")] * 3
            assert flask.requests == 1 + 3
            assert followed("fallback") - fallbacks_before == 3

    run(scenario())


def test_with_redis_skipped_nobody_waits_for_a_fill():
    """The breaker is open: every read goes to PostgreSQL, none is worth waiting for."""

    async def scenario() -> None:
        flask = FakeFlask()
        breaker = CircuitBreaker(60)
        breaker.record_failure()
        app = l1_hot_path(flask, "l2", breaker=breaker)
        leader = asyncio.create_task(get_count(app))
        await until(lambda: flask.requests == 1, "the first read in Flask")
        assert len(app.flights) == 0
        assert await asyncio.gather(*(get_count(app) for _ in range(3))) == [(200, b"flask")] * 3
        flask.release.set()
        await leader

    run(scenario())


def test_a_hit_answered_on_the_loop_is_counted_before_it_is_written():
    """A worker killed between the count and the write may count an answer it
    never delivered, which the chaos suite allows; the reverse (an answer
    delivered and never counted) would make the counters disagree with clients."""
    requests_total = "aside_gateway_http_requests_total"
    labels = {"route": COUNT_ROUTE, "method": "GET", "status": "200"}

    async def scenario() -> None:
        flask = FakeFlask()
        app = l1_hot_path(flask)
        assert flask.l1 is not None
        key = cache_keys.count_key(EMAIL)
        flask.l1.put(key, b"3", flask.l1.token(key))
        before = REGISTRY.get_sample_value(requests_total, labels) or 0.0
        counted_at_write: list[float] = []

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                counted_at_write.append(REGISTRY.get_sample_value(requests_total, labels) or 0.0)

        await app(count_scope(), no_body, send)
        assert flask.requests == 0  # answered on the loop, from L1
        assert counted_at_write == [before + 1]

    run(scenario())


# ---- integration: through gunicorn -------------------------------------------------------


@pytest.fixture(scope="module")
def narrow_worker(start_gateway) -> Proc:
    """One worker with two Flask threads: a held fill takes one, so a reader
    that waited in a thread would take the last."""
    return start_gateway(GATEWAY_WORKERS="1", GATEWAY_THREADS="2")


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
        wait_until(lambda: sample(scrape(url), WAITING) == FOLLOWERS, 10, "readers waiting")
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


def test_a_loop_follower_never_gets_a_fill_read_before_a_finished_write(narrow_worker, rdb):
    """The leader read before a write; a reader that starts waiting for its fill
    after the write returned must not be answered that old value (the leader
    itself may be)."""
    url = narrow_worker.url
    email = unique_email("loop-race")
    before = scrape(url)
    hold = f"loop-race-{time.monotonic_ns()}"
    leader = start_held(url, email, hold, rdb)  # read 0
    try:
        created = requests.post(
            url + "/api/v1/users",
            json={"username": unique_username(), "email": email},
            timeout=10,
        )
        assert created.status_code == 201, created.text
        follower = Read(url, email)
        wait_until(lambda: sample(scrape(url), WAITING) == 1, 10, "the follower waiting")
    finally:
        release(rdb, hold)
    assert leader.result().json()["count"] == 0  # read before the write: allowed
    followed_answer = follower.result()
    assert followed_answer.status_code == 200, followed_answer.text
    assert followed_answer.json() == {"email": email, "count": 1}
    # The leader's store found its lease gone: the follower filled the key itself.
    assert followed_answer.headers["X-Cache"] == "MISS"
    after = scrape(url)
    assert delta(before, after, FOLLOWED, route=COUNT_ROUTE, outcome="fallback") == 1
    assert delta(before, after, FOLLOWED, route=COUNT_ROUTE, outcome="hit") == 0
