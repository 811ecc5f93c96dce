"""A worker past its capacity (door/loop_admission.py): the excess is answered 503
at once, in the error shape with Retry-After, the Redis breaker stays closed,
and once the load is gone the worker answers hits again within 2 s.

The worker is filled deterministically: one read held at its fill by the
lab's test hooks (in Flask, which the door does not count), and readers of
the same key that wait for that fill on the event loop, in flight on the loop
as long as the test wants. With GATEWAY_ADMISSION=off the same excess is
served (the control test)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

import aiohttp
import pytest
import requests
from gateway_helpers import (
    Read,
    release,
    sample,
    scrape,
    start_held,
    unique_email,
    unique_username,
    wait_until,
)

COUNT = "/api/v1/users/count"
LIMIT = 4  # requests in flight the worker's event loop admits
# An answer refused at the door takes a few ms; this bound holds on a busy
# 2-core machine and stays far below the wait the bound saves (seconds).
FAST_S = 0.5
RECOVERY_S = 2.0
NORMAL_S = 0.25  # a hit's answer time taken as normal on a busy machine
BURST_CLIENTS = 48
BURST_REQUESTS = 15


@dataclass
class Answer:
    status: int
    seconds: float
    headers: Mapping[str, str]  # case-insensitive: requests' or aiohttp's
    body: dict


def ask(session: requests.Session, base: str, email: str, cache: str | None = None) -> Answer:
    started = time.monotonic()
    params = {"email": email} if cache is None else {"email": email, "cache": cache}
    response = session.get(base + COUNT, params=params, timeout=30)
    seconds = time.monotonic() - started
    try:
        body = response.json()
    except ValueError:
        body = {}
    return Answer(response.status_code, seconds, response.headers, body)


def door_gateway(start_gateway, mode: str):
    return start_gateway(
        GATEWAY_WORKERS="1",
        GATEWAY_ADMISSION=mode,
        GATEWAY_ADMISSION_MIN_INFLIGHT=str(LIMIT),
        GATEWAY_ADMISSION_MAX_INFLIGHT=str(LIMIT),
    )


@pytest.fixture(scope="module")
def small_door(start_gateway):
    return door_gateway(start_gateway, "aimd")


def warm(base: str, email: str) -> None:
    session = requests.Session()
    wait_until(
        lambda: ask(session, base, email).headers.get("X-Cache") == "HIT", 10, "a cached hit"
    )


def followers_waiting(base: str) -> float:
    return sample(scrape(base), "aside_gateway_loop_followers_waiting")


@contextmanager
def full_loop(base: str, rdb, tag: str) -> Iterator[None]:
    """The worker's loop holding LIMIT readers that wait for a held fill, until
    the block ends: the fill is released and every reader answered."""
    cold, hold = unique_email(tag), f"{tag}-fill"
    held = start_held(base, cold, hold, rdb)
    followers: list[Read] = []
    try:
        for _ in range(LIMIT):
            followers.append(Read(base, cold))
        wait_until(lambda: followers_waiting(base) == LIMIT, 5, "readers waiting on the loop")
        yield
    finally:
        release(rdb, hold)
        for read in [held, *followers]:
            assert read.result().status_code == 200


def excess_while_full(base: str, rdb, hot: str, tag: str) -> list[Answer]:
    """Fill the worker's loop, then ask for a hit and a miss several times;
    return the excess answers."""
    with full_loop(base, rdb, tag):
        session = requests.Session()
        answers = []
        for _ in range(3):
            answers.append(ask(session, base, hot))
            answers.append(ask(session, base, unique_email(tag)))
        return answers


def assert_refused_at_the_door(answer: Answer) -> None:
    assert answer.status == 503, answer
    assert answer.headers["Retry-After"] == "1"
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.body["error"]["code"] == "unavailable"
    assert isinstance(answer.body["error"]["message"], str)
    assert answer.seconds < FAST_S, f"refused after {answer.seconds:.3f} s"


def recovered(base: str, email: str) -> bool:
    """Hits are answered again, at a normal pace."""
    session = requests.Session()
    for _ in range(5):
        answer = ask(session, base, email)
        if answer.status != 200 or answer.headers.get("X-Cache") != "HIT":
            return False
        if answer.seconds > NORMAL_S:
            return False
    return True


def breaker_closed(samples: dict, before: dict) -> None:
    opened = sample(samples, "aside_gateway_redis_errors_judged_total", verdict="redis")
    assert opened == sample(before, "aside_gateway_redis_errors_judged_total", verdict="redis")
    skipped = sample(
        samples, "aside_gateway_cache_errors_total", route=COUNT, op="breaker_open"
    ) - sample(before, "aside_gateway_cache_errors_total", route=COUNT, op="breaker_open")
    assert skipped == 0
    assert sample(samples, "aside_gateway_redis_breaker_open") == 0


def refused_since(base: str, before: float) -> float:
    return sample(scrape(base), "aside_gateway_shed_total", reason="admission_limit") - before


def test_past_its_limit_a_worker_answers_503_at_once_and_recovers(small_door, rdb, insert_user):
    hot = unique_email("door")
    insert_user(hot)
    warm(small_door.url, hot)
    before = scrape(small_door.url)

    answers = excess_while_full(small_door.url, rdb, hot, "door")
    ended = time.monotonic()
    for answer in answers:
        assert_refused_at_the_door(answer)

    wait_until(lambda: recovered(small_door.url, hot), RECOVERY_S, "hits at a normal pace")
    print(f"recovered {time.monotonic() - ended:.3f} s after the load ended")
    refused_before = sample(before, "aside_gateway_shed_total", reason="admission_limit")
    wait_until(
        lambda: refused_since(small_door.url, refused_before) >= len(answers),
        5,
        "the refusals counted",
    )
    after = scrape(small_door.url)
    breaker_closed(after, before)
    assert refused_since(small_door.url, refused_before) == len(answers)
    assert sample(after, "aside_gateway_admission_limit") == LIMIT


def test_a_hit_from_the_workers_memory_passes_a_full_door(small_door, rdb, insert_user):
    """A read the worker answers from its L1 tier waits for nothing but the
    loop: the door lets it in past a full limit, uncounted, while a hit that
    waits for Redis and a miss are refused."""
    hot = unique_email("memory")
    insert_user(hot)
    session = requests.Session()
    wait_until(
        lambda: ask(session, small_door.url, hot, "hybrid").headers.get("X-Cache-Tier") == "l1",
        10,
        "an L1 hit",
    )
    warm(small_door.url, hot)
    with full_loop(small_door.url, rdb, "memory"):
        from_memory = [ask(session, small_door.url, hot, "hybrid") for _ in range(3)]
        from_redis = ask(session, small_door.url, hot, "l2")
        missed = ask(session, small_door.url, unique_email("memory"), "hybrid")
    for answer in from_memory:
        assert (answer.status, answer.headers.get("X-Cache-Tier")) == (200, "l1"), answer
    assert_refused_at_the_door(from_redis)
    assert_refused_at_the_door(missed)


async def burst(base: str, email: str) -> list[Answer]:
    """BURST_CLIENTS clients on their own connections, each asking BURST_REQUESTS
    times back to back from one event loop: the timings are the gateway's, not
    those of test threads waiting for the interpreter's lock."""
    url = base + COUNT
    connector = aiohttp.TCPConnector(limit=BURST_CLIENTS)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        # Every client's connection is opened (and used once) before the burst.
        async def opened() -> None:
            async with session.get(base + "/healthz") as response:
                await response.read()

        await asyncio.gather(*(opened() for _ in range(BURST_CLIENTS)))

        async def one() -> Answer:
            started = time.monotonic()
            async with session.get(url, params={"email": email}) as response:
                raw = await response.read()
            seconds = time.monotonic() - started
            try:
                body = json.loads(raw)
            except ValueError:
                body = {}
            return Answer(response.status, seconds, response.headers, body)

        async def client() -> list[Answer]:
            return [await one() for _ in range(BURST_REQUESTS)]

        batches = await asyncio.gather(*(client() for _ in range(BURST_CLIENTS)))
    return [answer for batch in batches for answer in batch]


def test_a_burst_of_hits_gets_200s_or_fast_503s_and_the_breaker_stays_closed(
    small_door, insert_user
):
    hot = unique_email("burst")
    insert_user(hot)
    warm(small_door.url, hot)
    before = scrape(small_door.url)
    answers = asyncio.run(burst(small_door.url, hot))
    ended = time.monotonic()
    refused = [a for a in answers if a.status != 200]
    assert refused and len(refused) < len(answers), "the burst passed the door's limit"
    for answer in refused:
        assert_refused_at_the_door(answer)
    assert all(a.headers.get("X-Cache") == "HIT" for a in answers if a.status == 200)

    wait_until(lambda: recovered(small_door.url, hot), RECOVERY_S, "hits at a normal pace")
    print(
        f"{len(refused)} of {len(answers)} refused, the slowest refusal "
        f"{max(a.seconds for a in refused) * 1000:.1f} ms; recovered "
        f"{time.monotonic() - ended:.3f} s after the burst"
    )
    breaker_closed(scrape(small_door.url), before)


def read_response(stream: BinaryIO) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length from a connection's stream."""
    status = int(stream.readline().split()[1])
    headers = {}
    while (line := stream.readline().rstrip(b"\r\n")) != b"":
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, stream.read(int(headers["content-length"]))


def test_a_refused_request_keeps_its_connection_and_writes_nothing(small_door, rdb, insert_user):
    """The door answers in the HTTP protocol, before any app: a refused write
    with a body and a read pipelined behind it get their 503s on one
    connection, the body is discarded (nothing is created), and the same
    connection is served once the worker has room again."""
    hot, created = unique_email("keep"), unique_email("keep-new")
    insert_user(hot)
    warm(small_door.url, hot)
    before = scrape(small_door.url)
    address = urlsplit(small_door.url)
    body = json.dumps({"email": created, "username": unique_username("keep")}).encode()
    write = (
        b"POST /api/v1/users HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    read = b"GET " + COUNT.encode() + b"?email=" + hot.encode() + b" HTTP/1.1\r\nHost: gw\r\n\r\n"
    with socket.create_connection((address.hostname, address.port), timeout=10) as conn:
        stream = conn.makefile("rb")
        cold, hold = unique_email("keep-cold"), "keep-fill"
        held = start_held(small_door.url, cold, hold, rdb)
        followers = [Read(small_door.url, cold) for _ in range(LIMIT)]
        try:
            wait_until(lambda: followers_waiting(small_door.url) == LIMIT, 5, "a full loop")
            started = time.monotonic()
            conn.sendall(write + read)
            refused = [read_response(stream) for _ in range(2)]
            seconds = time.monotonic() - started
        finally:
            release(rdb, hold)
            for pending in [held, *followers]:
                assert pending.result().status_code == 200
        for status, headers, answer in refused:
            assert (status, headers["retry-after"]) == (503, "1"), (status, headers)
            assert json.loads(answer)["error"]["code"] == "unavailable"
            assert headers.get("connection") != "close"
        assert seconds < FAST_S
        # The door writes its count to the metrics at the next tick of the loop.
        refused_before = sample(before, "aside_gateway_shed_total", reason="admission_limit")
        wait_until(
            lambda: refused_since(small_door.url, refused_before) >= 2, 5, "the refusals counted"
        )
        assert refused_since(small_door.url, refused_before) == 2
        wait_until(lambda: recovered(small_door.url, hot), RECOVERY_S, "hits at a normal pace")
        conn.sendall(read)
        status, headers, answer = read_response(stream)
        assert (status, headers.get("x-cache")) == (200, "HIT"), (status, answer)
    session = requests.Session()
    assert ask(session, small_door.url, created).body["count"] == 0


def test_the_pie_door_keeps_the_same_bound_on_requests_in_flight(start_gateway, rdb, insert_user):
    """GATEWAY_ADMISSION=pie refuses by the loop's lag, and still caps the
    requests in flight at GATEWAY_ADMISSION_MAX_INFLIGHT: a full loop refuses
    the excess at once, and recovers."""
    gateway = door_gateway(start_gateway, "pie")
    hot = unique_email("pie")
    insert_user(hot)
    warm(gateway.url, hot)
    for answer in excess_while_full(gateway.url, rdb, hot, "pie"):
        assert_refused_at_the_door(answer)
    wait_until(lambda: recovered(gateway.url, hot), RECOVERY_S, "hits at a normal pace")


def test_without_the_bound_the_excess_waits_or_is_served(start_gateway, rdb, insert_user):
    """The control: with GATEWAY_ADMISSION=off the same excess is not refused at
    the door: the hits and the misses are served."""
    gateway = door_gateway(start_gateway, "off")
    hot = unique_email("nodoor")
    insert_user(hot)
    warm(gateway.url, hot)
    answers = excess_while_full(gateway.url, rdb, hot, "nodoor")
    with pytest.raises(AssertionError):
        for answer in answers:
            assert_refused_at_the_door(answer)
    assert all(a.status == 200 for a in answers)


# ---- the limit recovers -----------------------------------------------------------

RECOVERY_MIN, RECOVERY_MAX = 2, 64
RECOVERY_LATE_MS = 50  # far above what the light load's waves cost the loop
STALL_MS = 150  # each stall makes the loop's next tick late by its own work
STALLS = 3
WAVE = 40  # a light load's requests, sent at once, every WAVE_EVERY_S
WAVE_EVERY_S = 0.2
LIGHT_FOR_S = 3.2


@pytest.fixture(scope="module")
def recovering_door(start_gateway):
    return start_gateway(
        GATEWAY_WORKERS="1",
        GATEWAY_ADMISSION="aimd",
        GATEWAY_ADMISSION_MIN_INFLIGHT=str(RECOVERY_MIN),
        GATEWAY_ADMISSION_MAX_INFLIGHT=str(RECOVERY_MAX),
        GATEWAY_ADMISSION_LATE_MS=str(RECOVERY_LATE_MS),
        # Every late tick is the loop's own: on a busy machine the stall's
        # thread may run for less than half of it, which would hold the limit.
        GATEWAY_ADMISSION_BUSY_PCT="0",
    )


def stall_the_loop(base: str, email: str) -> None:
    """Make the worker's loop late by its own work, tick after tick (the lab's
    X-Test-Stall-Ms hook), so that its door cuts the limit to its floor."""
    with requests.Session() as session:
        for _ in range(STALLS):
            response = session.get(
                base + COUNT,
                params={"email": email},
                headers={"X-Test-Stall-Ms": str(STALL_MS)},
                timeout=10,
            )
            assert response.status_code == 200, response.text


async def overload_then_light_load(base: str, email: str) -> list[tuple[float, list[int]]]:
    """An overload episode, then waves of WAVE reads every WAVE_EVERY_S for
    LIGHT_FOR_S: each wave's start (seconds after the episode) and statuses."""
    connector = aiohttp.TCPConnector(limit=WAVE)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def status(path: str, params: dict[str, str] | None = None) -> int:
            async with session.get(base + path, params=params) as response:
                await response.read()
                return response.status

        # Every connection opened before the episode: the waves cost no connect.
        await asyncio.gather(*(status("/healthz") for _ in range(WAVE)))
        await asyncio.to_thread(stall_the_loop, base, email)
        ended = time.monotonic()
        waves = []
        while (started := time.monotonic()) - ended < LIGHT_FOR_S:
            statuses = await asyncio.gather(*(status(COUNT, {"email": email}) for _ in range(WAVE)))
            waves.append((started - ended, list(statuses)))
            # Pacing the load, not waiting for a state: the next wave's time.
            await asyncio.sleep(max(0.0, WAVE_EVERY_S - (time.monotonic() - started)))
    return waves


def test_after_an_overload_a_light_load_is_not_refused_after_2_s(recovering_door, insert_user):
    """The loop late by its own work cuts the limit to its floor; a light load
    (which never half uses the limit between its waves) then finds it back at
    its maximum within 2 s: no refusal of a wave that starts 2 s after."""
    base = recovering_door.url
    hot = unique_email("recover")
    insert_user(hot)
    warm(base, hot)
    waves = asyncio.run(overload_then_light_load(base, hot))
    for at, statuses in waves:
        print(f"{at:.2f} s: {statuses.count(503)} of {len(statuses)} refused")
    first = [s for at, s in waves if at < 0.1]
    assert first and 503 in first[0], "the episode never cut the limit"
    late = [(at, s) for at, s in waves if at >= RECOVERY_S]
    assert late, waves
    for at, statuses in late:
        assert set(statuses) == {200}, f"{statuses.count(503)} refused {at:.2f} s after"
    assert sample(scrape(base), "aside_gateway_admission_limit") == RECOVERY_MAX


# ---- the operational routes during overload ----------------------------------------

FLASK_THREADS = 4


@pytest.fixture(scope="module")
def busy_door(start_gateway):
    return start_gateway(
        GATEWAY_WORKERS="1",
        GATEWAY_THREADS=str(FLASK_THREADS),
        GATEWAY_ADMISSION="aimd",
        GATEWAY_ADMISSION_MIN_INFLIGHT=str(LIMIT),
        GATEWAY_ADMISSION_MAX_INFLIGHT=str(LIMIT),
    )


def test_ops_routes_are_answered_while_the_door_refuses_reads(busy_door, rdb, insert_user):
    """Every Flask thread held and the loop's door full: reads are refused at
    the door, and /readyz and /metrics are still answered at once (their own
    pool), not queued behind the reads for a Flask thread."""
    base = busy_door.url
    hot = unique_email("ops")
    insert_user(hot)
    warm(base, hot)
    holds = [f"ops-fill-{n}-{time.monotonic_ns()}" for n in range(FLASK_THREADS - 1)]
    held = [start_held(base, unique_email("ops-held"), hold, rdb) for hold in holds]
    try:
        with full_loop(base, rdb, "ops"):  # the last Flask thread, and the door full
            assert_refused_at_the_door(ask(requests.Session(), base, hot))
            started = time.monotonic()
            ready = requests.get(base + "/readyz", timeout=FAST_S * 4)
            page = requests.get(base + "/metrics", timeout=FAST_S * 4)
            seconds = time.monotonic() - started
    finally:
        for hold in holds:
            release(rdb, hold)
        for read in held:
            assert read.result().status_code == 200
    assert ready.status_code == 200 and ready.json()["status"] == "ready", ready.text
    assert page.status_code == 200
    assert "aside_gateway_admission_limit" in page.text
    assert seconds < FAST_S * 4


# ---- the worker's name on every answer ---------------------------------------------


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def test_every_answer_of_the_lab_names_its_worker(small_door, rdb, insert_user):
    """The hot path's hit and health, Flask's miss, error and readiness, the
    loop's write and the door's refusal all name the one worker (a child of
    the gunicorn master) that answered."""
    base = small_door.url
    hot = unique_email("named")
    insert_user(hot)
    warm(base, hot)
    session = requests.Session()
    body = {"email": unique_email("named-new"), "username": unique_username("named")}
    answers = {
        "a hit": session.get(base + COUNT, params={"email": hot}, timeout=10),
        "/healthz": session.get(base + "/healthz", timeout=10),
        "a miss": session.get(base + COUNT, params={"email": unique_email("n")}, timeout=10),
        "Flask's 400": session.get(base + COUNT, params={"email": "no"}, timeout=10),
        "/readyz": session.get(base + "/readyz", timeout=10),
        "a write": session.post(base + "/api/v1/users", json=body, timeout=10),
    }
    with full_loop(base, rdb, "named"):
        answers["a refusal"] = session.get(base + COUNT, params={"email": hot}, timeout=10)
    assert answers["a hit"].headers["X-Cache"] == "HIT"
    assert answers["a miss"].headers["X-Cache"] == "MISS"
    assert answers["a write"].status_code == 201
    assert answers["a refusal"].status_code == 503
    pids = {what: response.headers.get("X-Aside-Worker") for what, response in answers.items()}
    assert len(set(pids.values())) == 1, pids
    pid = next(iter(pids.values()))
    assert pid is not None and pid.isdigit(), pids
    assert parent_of(int(pid)) == small_door.popen.pid


def test_production_names_no_worker(production_gateway, insert_user):
    base = production_gateway.url
    email = unique_email("unnamed")
    insert_user(email)
    session = requests.Session()
    answers = [session.get(base + COUNT, params={"email": email}, timeout=10) for _ in range(3)]
    answers.append(session.get(base + COUNT, params={"email": "no"}, timeout=10))
    answers.append(session.get(base + "/healthz", timeout=10))
    answers.append(session.get(base + "/readyz", timeout=10))
    assert answers[2].headers.get("X-Cache") == "HIT"
    assert answers[3].status_code == 400
    for response in answers:
        assert "X-Aside-Worker" not in response.headers, response.headers
