"""Dependencies failing: Redis down or slow, PostgreSQL down, the core stopped."""

from __future__ import annotations

import secrets
import threading
import time
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis
import requests
from gateway_helpers import (
    TcpProxy,
    free_port,
    sample,
    scrape,
    unique_email,
    unique_username,
    wait_until,
)

COUNT = "/api/v1/users/count"
COUNT_ROUTE = "/api/v1/users/count"


def timed_get(url: str, **params: str) -> tuple[requests.Response, float]:
    started = time.monotonic()
    response = requests.get(url, params=params, timeout=10)
    return response, time.monotonic() - started


def test_reads_survive_redis_going_away_and_recover_when_it_returns(
    start_gateway, redis_server, insert_user
):
    server = redis_server()
    gw = start_gateway(REDIS_URL=f"redis://127.0.0.1:{redis_server.port}/0", GATEWAY_WORKERS="1")
    email = unique_email()
    insert_user(email)
    assert requests.get(gw.url + COUNT, params={"email": email}, timeout=5).headers["X-Cache"] == (
        "MISS"
    )
    before = scrape(gw.url)

    server.terminate()
    server.wait(timeout=10)
    for _ in range(10):
        response, elapsed = timed_get(gw.url + COUNT, email=email)
        assert response.status_code == 200
        assert response.json() == {"email": email, "count": 1}
        assert response.headers["X-Cache"] == "BYPASS"
        assert response.headers["X-Cache-Error"] == "1"
        assert elapsed < 1.0
    after = scrape(gw.url)
    errors = sum(
        value - before.get(key, 0.0)
        for key, value in after.items()
        if key[0] == "aside_gateway_cache_errors_total" and ("route", COUNT_ROUTE) in key[1]
    )
    assert errors >= 10  # one failed op, then breaker_open skips, all counted
    bypass_delta = sample(after, "aside_gateway_cache_bypass_total", route=COUNT_ROUTE) - sample(
        before, "aside_gateway_cache_bypass_total", route=COUNT_ROUTE
    )
    assert bypass_delta == 10
    # The verdict checked at the start stands GATEWAY_READY_CACHE_MS (1 s).
    wait_until(
        lambda: requests.get(gw.url + "/readyz", timeout=5).status_code == 503,
        10,
        "not ready without Redis",
    )
    ready = requests.get(gw.url + "/readyz", timeout=5)
    assert ready.status_code == 503
    assert ready.json()["error"]["code"] == "unavailable"
    assert ready.json()["checks"]["postgres"] == "ok"
    assert ready.json()["checks"]["redis"] != "ok"

    redis_server()  # the same port again, empty
    recovered = wait_until(
        lambda: (
            requests.get(gw.url + COUNT, params={"email": email}, timeout=5).headers["X-Cache"]
            in ("MISS", "HIT")
        ),
        5,
        "reads to use Redis again",
    )
    assert recovered
    again = requests.get(gw.url + COUNT, params={"email": email}, timeout=5)
    assert again.headers["X-Cache"] == "HIT"
    assert "X-Cache-Error" not in again.headers


def test_a_stalled_redis_costs_at_most_its_timeout(start_gateway, redis_server, insert_user):
    redis_server()
    gw = start_gateway(REDIS_URL=f"redis://127.0.0.1:{redis_server.port}/0", GATEWAY_WORKERS="1")
    email = unique_email()
    insert_user(email)
    requests.get(gw.url + COUNT, params={"email": email}, timeout=5)  # warm the key
    control = redis.Redis(port=redis_server.port, socket_timeout=5)
    control.execute_command("CLIENT", "PAUSE", "1500", "ALL")  # every command now stalls
    try:
        for _ in range(5):
            response, elapsed = timed_get(gw.url + COUNT, email=email)
            assert response.status_code == 200
            assert response.json()["count"] == 1
            assert response.headers["X-Cache"] == "BYPASS"
            assert elapsed < 0.8  # REDIS_TIMEOUT_MS is 200, then the breaker skips Redis
    finally:
        control.execute_command("CLIENT", "UNPAUSE")
    wait_until(
        lambda: (
            requests.get(gw.url + COUNT, params={"email": email}, timeout=5).headers["X-Cache"]
            == "HIT"
        ),
        5,
        "reads to hit Redis again",
    )


def test_database_down_answers_503_quickly(start_gateway, rdb):
    closed = free_port()
    gw = start_gateway(
        ready_path="/healthz",
        DATABASE_URL=f"postgresql://aside@127.0.0.1:{closed}/aside",
        GATEWAY_WORKERS="1",
    )
    for path in (COUNT + "?email=" + unique_email(), "/api/v1/users/12345"):
        for _ in range(2):
            response, elapsed = timed_get(gw.url + path)
            assert response.status_code == 503, response.text
            assert response.json()["error"]["code"] == "database_unavailable"
            assert elapsed < 2.0
    ready, elapsed = timed_get(gw.url + "/readyz")
    assert ready.status_code == 503
    assert ready.json()["checks"]["redis"] == "ok"
    assert ready.json()["checks"]["postgres"] != "ok"
    assert elapsed < 2.0
    # A warm key still answers: the cache shields readers from the outage.
    email = unique_email()
    rdb.set(f"aside:v1:{{count:{email}}}", "3", ex=60)
    warm = requests.get(gw.url + COUNT, params={"email": email}, timeout=5)
    assert warm.status_code == 200 and warm.json()["count"] == 3
    assert warm.headers["X-Cache"] == "HIT"


def test_once_the_database_is_known_down_misses_fail_at_once(start_gateway):
    """A pool that cannot connect (its reconnects are refused) is not waited out:
    every miss, the first included, answers 503 at once, and says when to retry."""
    closed = free_port()
    gw = start_gateway(
        ready_path="/healthz",
        DATABASE_URL=f"postgresql://aside@127.0.0.1:{closed}/aside",
        GATEWAY_WORKERS="1",
        DB_POOL_TIMEOUT_MS="1000",
    )
    timings = []
    for n in range(6):
        # Ids no other test cached (Redis DB 1 is shared): a cached 404 needs no database.
        user_id = secrets.randbelow(10**12) + 10**12
        path = COUNT + "?email=" + unique_email() if n % 2 else f"/api/v1/users/{user_id}"
        response, elapsed = timed_get(gw.url + path)
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "database_unavailable"
        assert response.headers["Retry-After"] == "1"
        timings.append(elapsed)
    assert max(timings) < 0.5, timings


def test_a_worker_whose_database_went_away_fails_its_first_miss_fast(start_gateway, database_url):
    """PostgreSQL goes away under a worker that was using it: its idle connections
    are broken, and the retry's pool wait ends as soon as a reconnect is refused,
    not after DB_POOL_TIMEOUT_MS. (Another worker's lease handed over to this one
    used to add that whole wait to the first's: a miss took two pool timeouts.)"""
    parts = urlsplit(database_url)
    proxy = TcpProxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    userinfo = parts.netloc.rpartition("@")[0]
    via_proxy = urlunsplit(parts._replace(netloc=f"{userinfo}@127.0.0.1:{proxy.port}"))
    try:
        gw = start_gateway(DATABASE_URL=via_proxy, GATEWAY_WORKERS="1", DB_POOL_TIMEOUT_MS="3000")
        user_id = secrets.randbelow(10**12) + 10**12
        assert timed_get(f"{gw.url}/api/v1/users/{user_id}")[0].status_code == 404
        proxy.cut()
        response, elapsed = timed_get(gw.url + COUNT, email=unique_email())
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "database_unavailable"
        assert response.headers["Retry-After"] == "1"
        assert elapsed < 1.0, f"{elapsed:.2f} s: the pool's 3 s wait was waited out"
    finally:
        proxy.close()


def test_core_stopped_writes_503_quickly_and_reads_keep_working(
    start_core, start_gateway, insert_user
):
    own_core = start_core()
    gw = start_gateway(CORE_URL=own_core.url, GATEWAY_WORKERS="1")
    email = unique_email()
    created = requests.post(
        gw.url + "/api/v1/users", json={"username": unique_username(), "email": email}, timeout=5
    )
    assert created.status_code == 201, created.text
    user_id = created.json()["id"]

    own_core.stop()
    attempts = [
        ("POST", "/api/v1/users", {"username": unique_username(), "email": email}),
        ("PATCH", f"/api/v1/users/{user_id}", {"username": unique_username()}),
        ("DELETE", f"/api/v1/users/{user_id}", None),
        ("POST", "/api/v1/compute", {"complexity": 1}),
    ]
    for method, path, body in attempts:
        started = time.monotonic()
        response = requests.request(method, gw.url + path, json=body, timeout=10)
        assert time.monotonic() - started < 1.5
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "core_unavailable"

    read = requests.get(gw.url + COUNT, params={"email": email}, timeout=5)
    assert read.status_code == 200 and read.json()["count"] == 1
    user = requests.get(f"{gw.url}/api/v1/users/{user_id}", timeout=5)
    assert user.status_code == 200 and user.json()["email"] == email
    python = requests.post(
        gw.url + "/api/v1/compute", json={"complexity": 1, "engine": "python"}, timeout=10
    )
    assert python.status_code == 200  # the in-process arm needs no core


def test_parallel_reads_stay_correct_while_redis_flaps(start_gateway, redis_server, insert_user):
    """Readers keep getting the right answer through a Redis stop and restart."""
    server = redis_server()
    gw = start_gateway(REDIS_URL=f"redis://127.0.0.1:{redis_server.port}/0", GATEWAY_WORKERS="2")
    email = unique_email()
    insert_user(email)
    insert_user(email)
    stop = threading.Event()
    failures: list[str] = []
    seen: list[str] = []  # X-Cache of every answer, in order

    def reader() -> None:
        session = requests.Session()
        while not stop.is_set():
            response = session.get(gw.url + COUNT, params={"email": email}, timeout=5)
            if response.status_code != 200 or response.json()["count"] != 2:
                failures.append(response.text)
            seen.append(response.headers.get("X-Cache", ""))

    def more_answers(after: int, outcome: str | None = None) -> bool:
        fresh = seen[after:]
        return len(fresh) >= 20 and (outcome is None or outcome in fresh)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: more_answers(0, "HIT"), 10, "hits from a healthy Redis")
        server.terminate()
        server.wait(timeout=10)
        mark = len(seen)
        wait_until(lambda: more_answers(mark, "BYPASS"), 10, "answers without Redis")
        redis_server()
        mark = len(seen)
        wait_until(lambda: more_answers(mark, "HIT"), 10, "hits again after the restart")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
    assert failures == []


def test_statement_timeout_is_a_504_and_marks_the_lease_failed(start_gateway, database_url, rdb):
    gw = start_gateway(DB_STATEMENT_TIMEOUT_MS="300", GATEWAY_WORKERS="1")
    email = unique_email()
    with psycopg.connect(database_url) as locker:
        # The exclusive lock makes the count wait until statement_timeout cancels it.
        locker.execute("LOCK TABLE users IN ACCESS EXCLUSIVE MODE")
        response, elapsed = timed_get(gw.url + COUNT, email=email)
        assert response.status_code == 504, response.text
        assert response.json()["error"]["code"] == "timeout"
        assert elapsed < 2.0
        locker.rollback()
    # The failed holder left a failure mark in its lease's place: a reader within
    # its second answers 503 at once instead of waiting it out or scanning again.
    lease = f"aside:v1:{{count:{email}}}:lease"
    assert rdb.get(lease) == b"!fail:timeout"
    assert 0 < rdb.pttl(lease) <= 1000
    response, elapsed = timed_get(gw.url + COUNT, email=email)
    if rdb.exists(lease):
        assert response.status_code == 503, response.text
        assert response.headers["Retry-After"] == "1"
        assert elapsed < 0.5
    # Once the mark is gone, the next reader fills the key.
    wait_until(lambda: not rdb.exists(lease), 5, "the failure mark to expire")
    response, elapsed = timed_get(gw.url + COUNT, email=email)
    assert response.status_code == 200 and response.headers["X-Cache"] == "MISS"
    assert elapsed < 1.0


def test_reads_survive_killed_database_connections(start_gateway, database_url, insert_user):
    gw = start_gateway(GATEWAY_WORKERS="1", DB_POOL_MIN="4")
    email = unique_email()
    insert_user(email)
    for _ in range(4):  # use the pooled connections
        assert timed_get(gw.url + COUNT, email=email, cache="off")[0].status_code == 200
    with psycopg.connect(database_url, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = 'aside-gateway' AND datname = current_database()"
        ).fetchone()[0]
    assert killed >= 1
    for _ in range(4):
        response, _ = timed_get(gw.url + COUNT, email=email, cache="off")
        assert response.status_code == 200, response.text
        assert response.json()["count"] == 1
