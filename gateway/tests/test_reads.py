"""The read API through a real gunicorn (two workers), PostgreSQL and Redis."""

from __future__ import annotations

import json
import socket
import threading
import time
from datetime import UTC

import pytest
import requests
from aside_gateway.config.settings import load_settings
from aside_gateway.services import build_services
from aside_gateway.web.app import create_app
from gateway_helpers import (
    CORE_TOKEN,
    COUNT_SQL_TEXT,
    USER_SQL_TEXT,
    WRITE_TOKEN,
    cached,
    contract,
    fresh_for,
    reads_waiting_on_a_lock,
    sample,
    scrape,
    unique_email,
    wait_until,
)
from werkzeug.test import EnvironBuilder

COUNT = "/api/v1/users/count"
COUNT_ROUTE = "/api/v1/users/count"
USER_ROUTE = "/api/v1/users/<id>"
VALIDATION = contract("validation.json")


def count(base: str, email: str, **params: str) -> requests.Response:
    return requests.get(base + COUNT, params={"email": email, **params}, timeout=10)


def assert_error(response: requests.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) >= {"error"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert "Traceback" not in response.text


# ---- cache-aside --------------------------------------------------------------------


def test_count_miss_then_hit(gateway, insert_user, rdb):
    email = unique_email()
    insert_user(email)
    insert_user(email)
    first = count(gateway.url, email)
    assert first.status_code == 200
    assert first.json() == {"email": email, "count": 2}
    assert first.headers["X-Cache"] == "MISS"
    second = count(gateway.url, email)
    assert second.json() == {"email": email, "count": 2}
    assert second.headers["X-Cache"] == "HIT"
    key = f"aside:v1:{{count:{email}}}"
    assert cached(rdb, key) == b"2"
    assert 0 < fresh_for(rdb, key) <= 60
    assert not rdb.exists(key + ":lease")  # the holder dropped its lease on store


def test_count_keeps_case_and_unicode(gateway, insert_user, rdb):
    email = "Jürgen.Müller+" + unique_email("X")
    insert_user(email)
    assert count(gateway.url, email).json() == {"email": email, "count": 1}
    assert count(gateway.url, email.lower()).json()["count"] == 0
    assert cached(rdb, f"aside:v1:{{count:{email}}}") == b"1"


MALFORMED_COUNTS = [b"abc", b"12x", b"", b"-1", b"\xff\xfe", b"9" * 5000]
MALFORMED_USERS = [b"not json", b'{"id": 1', b"[1, 2]", b"", b"\xff\xfe"]


@pytest.mark.parametrize("path", ["hot", "flask"])
def test_a_malformed_cached_value_is_a_miss_and_is_refilled(gateway, insert_user, rdb, path):
    """Garbage under a key (another writer, a bad restore) is deleted and refilled,
    never a 500: on the hot path, and in Flask (a held read skips the hot path)."""
    email = unique_email()
    user_id = insert_user(email)
    good_user = requests.get(f"{gateway.url}/api/v1/users/{user_id}", timeout=10).json()
    count_key, user_key = f"aside:v1:{{count:{email}}}", f"aside:v1:{{user:{user_id}}}"
    hold = f"malformed-{user_id}"
    headers = {"X-Test-Hold": hold} if path == "flask" else {}
    cases = [(count_key, bad, COUNT, {"email": email}) for bad in MALFORMED_COUNTS] + [
        (user_key, bad, f"/api/v1/users/{user_id}", {}) for bad in MALFORMED_USERS
    ]
    for key, bad, route, params in cases:
        rdb.set(key, bad)
        if headers:
            rdb.rpush(f"aside:test:{hold}:release", 1)  # the fill's hold returns at once
        response = requests.get(gateway.url + route, params=params, headers=headers, timeout=10)
        assert response.status_code == 200, (bad, response.text)
        if key == count_key:
            assert response.json() == {"email": email, "count": 1}
            assert cached(rdb, key) == b"1"
        else:
            assert response.json() == good_user
            assert json.loads(cached(rdb, key)) == good_user
    rdb.delete(f"aside:test:{hold}:release", f"aside:test:{hold}:reached")


def test_user_by_id_miss_then_hit(gateway, insert_user, db):
    email = unique_email()
    user_id = insert_user(email, "ada_" + email[2:10])
    row = db.execute("SELECT username, created_at FROM users WHERE id = %s", (user_id,)).fetchone()
    first = requests.get(f"{gateway.url}/api/v1/users/{user_id}", timeout=10)
    assert first.status_code == 200
    assert first.headers["X-Cache"] == "MISS"
    body = first.json()
    assert body["id"] == user_id
    assert body["username"] == row[0]
    assert body["email"] == email
    assert body["created_at"] == row[1].astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    second = requests.get(f"{gateway.url}/api/v1/users/{user_id}", timeout=10)
    assert second.headers["X-Cache"] == "HIT"
    assert second.json() == body


def test_missing_user_is_cached_as_a_negative_entry(gateway, rdb, query_calls):
    user_id = 9_000_000_000 + int(time.time_ns() % 1_000_000)
    first = requests.get(f"{gateway.url}/api/v1/users/{user_id}", timeout=10)
    assert_error(first, 404, "not_found")
    assert first.headers["X-Cache"] == "MISS"
    assert cached(rdb, f"aside:v1:{{user:{user_id}}}") == b"null"
    before = query_calls(USER_SQL_TEXT)
    for _ in range(5):
        again = requests.get(f"{gateway.url}/api/v1/users/{user_id}", timeout=10)
        assert_error(again, 404, "not_found")
        assert again.headers["X-Cache"] == "HIT"
    assert query_calls(USER_SQL_TEXT) == before


def test_ttl_expiry(start_gateway, insert_user):
    short = start_gateway(CACHE_TTL_SECONDS="1", GATEWAY_WORKERS="1")
    email = unique_email()
    insert_user(email)
    assert count(short.url, email).headers["X-Cache"] == "MISS"
    assert count(short.url, email).headers["X-Cache"] == "HIT"
    # Poll: once the one-second TTL has run out the next read is no hit: under
    # the default (swr) it answers the value STALE and refreshes it behind.
    expired = wait_until(
        lambda: count(short.url, email).headers["X-Cache"] in ("STALE", "MISS"),
        5,
        "the key to expire",
    )
    assert expired
    wait_until(lambda: count(short.url, email).headers["X-Cache"] == "HIT", 5, "the refill")


# ---- single flight and metrics ----------------------------------------------------------


def test_the_tests_own_count_keeps_apart_from_the_gateways_query(
    gateway, insert_user, db, db_count, query_calls
):
    # pg_stat_statements keeps the text of the first statement of a parse tree:
    # were the test's own count parsed like the gateway's, running it first
    # would hide every query of the gateway from query_calls.
    db.execute("SELECT pg_stat_statements_reset()")
    email = unique_email("apart")
    insert_user(email)
    assert db_count(email) == 1
    assert count(gateway.url, email).headers["X-Cache"] == "MISS"
    assert query_calls(COUNT_SQL_TEXT) == 1


def test_fifty_concurrent_reads_of_a_cold_key_query_once(gateway, insert_user, query_calls):
    email = unique_email("cold")
    insert_user(email)
    before = query_calls(COUNT_SQL_TEXT)
    barrier = threading.Barrier(50)
    answers: list[requests.Response] = []
    lock = threading.Lock()

    def reader() -> None:
        barrier.wait(timeout=10)
        response = count(gateway.url, email)
        with lock:
            answers.append(response)

    threads = [threading.Thread(target=reader) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(answers) == 50
    assert all(a.status_code == 200 and a.json()["count"] == 1 for a in answers)
    assert sorted(a.headers["X-Cache"] for a in answers).count("MISS") == 1
    assert query_calls(COUNT_SQL_TEXT) - before == 1


def test_every_worker_settled_its_garbage_collector(gateway):
    # collector.settle's own full collection, observed once in each worker.
    samples = scrape(gateway.url)
    assert sample(samples, "aside_gateway_gc_pause_seconds_count", generation="2") >= 2


def test_counters_are_exact_across_workers(gateway, insert_user):
    email = unique_email("metrics")
    insert_user(email)
    before = scrape(gateway.url)
    sent = 40
    # New connection per request so both workers answer some of them.
    threads = [threading.Thread(target=count, args=(gateway.url, email)) for _ in range(sent)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    bad = requests.get(gateway.url + COUNT, params={"email": "nope"}, timeout=10)
    assert bad.status_code == 400
    after = scrape(gateway.url)

    def delta(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    labels = {"route": COUNT_ROUTE, "method": "GET", "status": "200"}
    assert delta("aside_gateway_http_requests_total", **labels) == sent
    assert delta("aside_gateway_http_request_duration_seconds_count", **labels) == sent
    assert delta("aside_gateway_http_requests_total", **{**labels, "status": "400"}) == 1
    hits = delta("aside_gateway_cache_hits_total", route=COUNT_ROUTE)
    misses = delta("aside_gateway_cache_misses_total", route=COUNT_ROUTE)
    assert hits + misses == sent
    assert misses == 1
    assert delta("aside_gateway_db_queries_total", query="count_by_email") == 1
    # Both workers wrote their own counter files, and /metrics summed them.
    files = list(gateway.extra["multiproc_dir"].glob("counter_*.db"))
    assert len(files) >= 2
    assert sample(after, "aside_gateway_db_pool_max") == 2 * 16


def test_unmatched_routes_are_labelled_unmatched(gateway):
    before = scrape(gateway.url)
    requests.get(gateway.url + "/no/such/thing", timeout=10)
    after = scrape(gateway.url)
    labels = {"route": "unmatched", "method": "GET", "status": "404"}
    got = sample(after, "aside_gateway_http_requests_total", **labels)
    assert got - sample(before, "aside_gateway_http_requests_total", **labels) == 1


# ---- the uncached arm ------------------------------------------------------------------


def test_cache_off_reads_the_database_and_touches_no_redis(gateway, insert_user, rdb):
    email = unique_email()
    insert_user(email)
    response = count(gateway.url, email, cache="off")
    assert response.status_code == 200
    assert response.json()["count"] == 1
    assert response.headers["X-Cache"] == "BYPASS"
    assert rdb.exists(f"aside:v1:{{count:{email}}}") == 0
    user = requests.get(f"{gateway.url}/api/v1/users/1?cache=off", timeout=10)
    assert user.headers["X-Cache"] == "BYPASS"
    assert count(gateway.url, email, cache="on").headers["X-Cache"] == "MISS"


def test_cache_off_is_refused_in_production(production_gateway):
    assert_error(count(production_gateway.url, "a@b.co", cache="off"), 403, "lab_disabled")
    assert_error(count(production_gateway.url, "a@b.co", cache="coalesce"), 403, "lab_disabled")
    user = requests.get(f"{production_gateway.url}/api/v1/users/1?cache=off", timeout=10)
    assert_error(user, 403, "lab_disabled")
    assert count(production_gateway.url, unique_email()).status_code == 200


@pytest.mark.parametrize("value", ["", "OFF", "no", "1", "off "])
def test_other_cache_values_are_invalid(gateway, value):
    assert_error(count(gateway.url, "a@b.co", cache=value), 400, "invalid_request")


def test_bypass_reads_are_bounded_per_worker(start_gateway, insert_user, database_url):
    import psycopg

    bounded = start_gateway(LAB_MAX_CONCURRENT_BYPASS="1", GATEWAY_WORKERS="1")
    email = unique_email()
    insert_user(email)
    result: dict[str, requests.Response] = {}
    # An exclusive lock makes the first bypass read wait inside PostgreSQL, holding its slot.
    with psycopg.connect(database_url) as locker:
        locker.execute("LOCK TABLE users IN ACCESS EXCLUSIVE MODE")
        first = threading.Thread(
            target=lambda: result.update(first=count(bounded.url, email, cache="off"))
        )
        first.start()

        wait_until(
            lambda: reads_waiting_on_a_lock(locker) >= 1,
            10,
            "the first bypass read to wait on the lock",
        )
        before = scrape(bounded.url)
        started = time.monotonic()
        second = count(bounded.url, email, cache="off")
        assert time.monotonic() - started < 1
        assert_error(second, 503, "unavailable")
        assert second.headers["Retry-After"] == "1"
        # Counted with the gateway's other sheds.
        shed = sample(scrape(bounded.url), "aside_gateway_shed_total", reason="uncached_busy")
        assert shed - sample(before, "aside_gateway_shed_total", reason="uncached_busy") == 1
        locker.rollback()
    first.join(timeout=10)
    assert result["first"].status_code == 200
    assert result["first"].json()["count"] == 1


# ---- the arm without a pool (cache=nopool) ----------------------------------------------

NOPOOL_APP = "aside-gateway-nopool"


def nopool_backends(conn) -> int:
    sql = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
    return int(conn.execute(sql, (NOPOOL_APP,)).fetchone()[0])


def test_nopool_answers_what_nocache_answers_over_a_connection_each(gateway, insert_user, rdb, db):
    email, absent = unique_email(), unique_email("absent")
    insert_user(email)
    user_id = insert_user(email)
    paths = [
        (COUNT, {"email": email}),
        (COUNT, {"email": absent}),
        (f"/api/v1/users/{user_id}", {}),
        ("/api/v1/users/999999999", {}),
    ]
    before = scrape(gateway.url)
    for path, params in paths:
        off = requests.get(gateway.url + path, params={**params, "cache": "off"}, timeout=10)
        nopool = requests.get(gateway.url + path, params={**params, "cache": "nopool"}, timeout=10)
        assert nopool.status_code == off.status_code and nopool.content == off.content, path
        assert nopool.headers["X-Cache"] == off.headers["X-Cache"] == "BYPASS"
    assert count(gateway.url, email, cache="nopool").json()["count"] == 2
    assert rdb.exists(f"aside:v1:{{count:{absent}}}") == 0
    after = scrape(gateway.url)
    name = "aside_gateway_db_unpooled_connections_total"
    # One connection per nopool read, none for cache=off.
    assert sample(after, name) - sample(before, name) == len(paths) + 1
    # Each closed after its read: no backend of the arm outlives it.
    wait_until(lambda: nopool_backends(db) == 0, 5, "the nopool connections to close")


def test_nopool_is_refused_in_production(production_gateway):
    assert_error(count(production_gateway.url, "a@b.co", cache="nopool"), 403, "lab_disabled")
    user = requests.get(f"{production_gateway.url}/api/v1/users/1?cache=nopool", timeout=10)
    assert_error(user, 403, "lab_disabled")


def test_nopool_connections_are_bounded_per_worker(start_gateway, insert_user, database_url):
    """However many nopool reads arrive, a worker holds at most
    LAB_MAX_CONCURRENT_BYPASS connections of its own: the rest are refused at
    once, so the arm cannot exhaust PostgreSQL's max_connections."""
    import psycopg

    bound, sent = 3, 12
    gw = start_gateway(LAB_MAX_CONCURRENT_BYPASS=str(bound), GATEWAY_WORKERS="1")
    email = unique_email()
    insert_user(email)
    answers: list[requests.Response] = []
    peak = 0
    with (
        psycopg.connect(database_url, autocommit=True) as watcher,
        psycopg.connect(database_url) as locker,
    ):
        # The lock keeps every admitted read waiting inside PostgreSQL, holding its connection.
        locker.execute("LOCK TABLE users IN ACCESS EXCLUSIVE MODE")
        threads = [
            threading.Thread(target=lambda: answers.append(count(gw.url, email, cache="nopool")))
            for _ in range(sent)
        ]
        for thread in threads:
            thread.start()

        def over_bound_answered() -> bool:
            nonlocal peak
            peak = max(peak, nopool_backends(watcher))
            return len(answers) >= sent - bound

        wait_until(over_bound_answered, 10, "the reads over the bound to answer")
        wait_until(lambda: nopool_backends(watcher) >= bound, 10, "the admitted reads to connect")
        assert peak <= bound, f"{peak} nopool connections at once, bound {bound}"
        assert nopool_backends(watcher) == bound and len(answers) == sent - bound
        for refused in answers:
            assert_error(refused, 503, "unavailable")
            assert refused.headers["Retry-After"] == "1"
        locker.rollback()
        for thread in threads:
            thread.join(timeout=10)
        admitted = answers[sent - bound :]
        assert [a.status_code for a in admitted] == [200] * bound
        assert all(a.json()["count"] == 1 for a in admitted)
        wait_until(lambda: nopool_backends(watcher) == 0, 5, "the nopool connections to close")


# ---- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize("email", VALIDATION["email_invalid"], ids=repr)
def test_invalid_emails_get_400(gateway, email):
    assert_error(count(gateway.url, email), 400, "invalid_email")


@pytest.mark.parametrize("email", VALIDATION["email_valid"], ids=repr)
def test_valid_emails_get_an_answer(gateway, email):
    response = count(gateway.url, email)
    assert response.status_code == 200
    assert response.json()["email"] == email


@pytest.mark.parametrize(
    "email",
    [
        "robert'); DROP TABLE users;--@x.com",
        "x@y.z' OR '1'='1",
        "a" * 255 + "@example.com",
        "a" * 3000,
        "🙂@example.com",
        "\u202eevil@example.com",
        "a\u200bb@example.com",
    ],
    ids=repr,
)
def test_hostile_emails_get_a_4xx_or_a_correct_answer(gateway, email, db_count):
    response = count(gateway.url, email)
    assert response.status_code in (200, 400), response.text
    if response.status_code == 200:
        assert response.json() == {"email": email, "count": db_count(email)}
    else:
        assert_error(response, 400, "invalid_email")


def test_invalid_utf8_in_the_query_is_answered(gateway, db_count):
    # Percent-encoded invalid bytes stay percent-encoded (werkzeug's rule): a literal answer.
    response = requests.get(gateway.url + COUNT + "?email=%ff%fe@example.com", timeout=10)
    assert response.status_code == 200
    assert response.json() == {"email": "%FF%FE@example.com", "count": 0}


def test_raw_non_utf8_bytes_in_the_query_are_a_400(gateway, database_url, redis_url, core):
    # The HTTP parser (httptools) refuses a request line with raw non-ASCII bytes (a plain 400) ...
    host, port = gateway.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"GET /api/v1/users/count?email=\xff@x.co HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 400")
    # ... and behind a server that lets them through the app answers a JSON 400, not a 500.
    settings = load_settings(
        {
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "CORE_URL": core.url,
            "WRITE_TOKEN": WRITE_TOKEN,  # production, the default, requires one
            "CORE_TOKEN": CORE_TOKEN,  # and this one too
        }
    )
    services = build_services(settings)
    app = create_app(settings, services)
    try:
        environ = EnvironBuilder(path=COUNT).get_environ()
        environ["QUERY_STRING"] = "email=\xff@x.co"  # WSGI strings carry raw bytes as latin-1
        response = app.response_class.from_app(app.wsgi_app, environ)
        assert response.status_code == 400
        assert response.get_json()["error"]["code"] == "invalid_request"
    finally:
        services.close()


def _raw_exchange(url: str, head: bytes, pieces: int = 1) -> bytes:
    """Send `head` in `pieces` writes; the start of the answer ('' if closed first)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        size = len(head) // pieces + 1
        try:
            for start in range(0, len(head), size):
                sock.sendall(head[start : start + size])
        except OSError:
            pass  # the gateway may close before the client has sent everything
        return sock.recv(4096)


@pytest.mark.parametrize(
    "head",
    [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 2_000_000 + b"\r\n\r\n",
        b"GET /healthz?" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
        + b"".join(b"X-%d: 1\r\n" % i for i in range(150))
        + b"\r\n",
    ],
    ids=["2-MB-header", "9-KB-url", "150-headers"],
)
def test_an_oversized_request_head_is_refused(gateway, head):
    # Bounded like gunicorn's own parser (front/worker.py): memory cannot be grown by one request.
    answer = _raw_exchange(gateway.url, head, pieces=40)
    assert answer.startswith(b"HTTP/1.1 400")
    assert b"content-type: application/json" in answer
    normal = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Ok: " + b"a" * 4000 + b"\r\n\r\n"
    assert _raw_exchange(gateway.url, normal).startswith(b"HTTP/1.1 200")


def test_hits_and_misses_answer_byte_for_byte_alike(gateway, insert_user):
    """A hit is answered before Flask (front/hot_path.py); it must not differ from the miss."""
    email = unique_email()
    user_id = insert_user(email)
    for path, params in ((COUNT, {"email": email}), (f"/api/v1/users/{user_id}", {})):
        miss = requests.get(gateway.url + path, params=params, timeout=10)
        hit = requests.get(gateway.url + path, params=params, timeout=10)
        assert (miss.headers["X-Cache"], hit.headers["X-Cache"]) == ("MISS", "HIT")
        assert hit.content == miss.content
        assert hit.headers["Content-Type"] == miss.headers["Content-Type"]
        assert hit.headers["Content-Length"] == miss.headers["Content-Length"]
        # Extra parameters skip the hot path; Flask answers the same hit.
        other = requests.get(gateway.url + path, params={**params, "x": "1"}, timeout=10)
        assert other.headers["X-Cache"] == "HIT" and other.content == miss.content


@pytest.mark.parametrize("query", ["", "?email=", "?mail=a@b.co"])
def test_missing_or_empty_email(gateway, query):
    assert_error(requests.get(gateway.url + COUNT + query, timeout=10), 400, "invalid_email")


@pytest.mark.parametrize("raw", [v for v in VALIDATION["id_invalid"] if v], ids=repr)
def test_invalid_ids_get_400(gateway, raw):
    response = requests.get(
        f"{gateway.url}/api/v1/users/{requests.utils.quote(raw, safe='')}", timeout=10
    )
    assert_error(response, 400, "invalid_id")


@pytest.mark.parametrize("raw", ["99999999999999999999999999", "1;DROP TABLE users", "0x10"])
def test_more_invalid_ids(gateway, raw):
    response = requests.get(
        f"{gateway.url}/api/v1/users/{requests.utils.quote(raw, safe='')}", timeout=10
    )
    assert_error(response, 400, "invalid_id")


@pytest.mark.parametrize("raw", VALIDATION["id_valid"])
def test_valid_ids_answer_200_or_404(gateway, raw):
    response = requests.get(f"{gateway.url}/api/v1/users/{raw}", timeout=10)
    assert response.status_code in (200, 404)
    if response.status_code == 404:
        assert_error(response, 404, "not_found")


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/nope", 404, "not_found"),
        ("GET", "/api/v1/users/", 404, "not_found"),
        ("GET", "/api/v1/users/1/extra", 404, "not_found"),
        ("PUT", "/api/v1/users/1", 405, "method_not_allowed"),
        ("POST", "/api/v1/users/count", 405, "method_not_allowed"),
        ("GET", "/api/v1/users", 405, "method_not_allowed"),
        ("DELETE", "/healthz", 405, "method_not_allowed"),
        ("GET", "/api/v1/compute", 405, "method_not_allowed"),
    ],
)
def test_unknown_routes_and_methods_are_json(gateway, method, path, status, code):
    response = requests.request(method, gateway.url + path, timeout=10)
    assert_error(response, status, code)
    if status == 405:
        assert "Allow" in response.headers


def test_health_and_readiness(gateway):
    health = requests.get(gateway.url + "/healthz", timeout=5)
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    ready = requests.get(gateway.url + "/readyz", timeout=5)
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"postgres": "ok", "redis": "ok"}


def test_test_hold_header_is_validated(gateway):
    response = requests.get(
        gateway.url + COUNT, params={"email": "a@b.co"}, headers={"X-Test-Hold": "a b"}, timeout=5
    )
    assert_error(response, 400, "invalid_request")
