"""ASIDE_PROFILE=production through a real gunicorn: the bearer token on writes,
the core's own token (CORE_TOKEN) on what the gateway forwards, the body limit,
/metrics only on METRICS_BIND, no lab switches, no tracebacks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from aside_gateway.config.settings import load_settings
from aside_gateway.services import build_services
from aside_gateway.web.app import create_app
from gateway_helpers import (
    AUTH,
    CORE_TOKEN,
    REPO,
    WRITE_TOKEN,
    Proc,
    free_port,
    sample,
    scrape,
    unique_email,
    unique_username,
    wait_until,
)

USERS = "/api/v1/users"
COUNT = "/api/v1/users/count"
INTERNAL_BODY = {"error": {"code": "internal", "message": "internal error"}}


def core_requests(core: Proc) -> float:
    """Every request the core's public listener has answered (any route, method,
    status); read from its separate metrics listener, so reading adds none."""
    samples = scrape(core.extra["metrics_base"])
    return sum(v for (name, _), v in samples.items() if name == "aside_core_http_requests_total")


def assert_unauthorized(response: requests.Response, invalid_token: bool) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "unauthorized"
    challenge = response.headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer ")
    assert ('error="invalid_token"' in challenge) is invalid_token


WRITES = [
    ("POST", USERS, {"username": "never_created", "email": "never@example.com"}),
    ("PATCH", USERS + "/1", {"username": "never_renamed"}),
    ("DELETE", USERS + "/1", None),
    ("POST", "/api/v1/compute", {"complexity": 1}),
]
BAD_AUTH = [
    ({}, False),
    ({"Authorization": ""}, False),
    ({"Authorization": f"Basic {WRITE_TOKEN}"}, False),
    ({"Authorization": "Bearer"}, False),
    ({"Authorization": "Bearer wrong-token-0123456789abcdef"}, True),
    ({"Authorization": f"Bearer {WRITE_TOKEN[:-1]}"}, True),  # a prefix is not the token
    ({"Authorization": f"Bearer {WRITE_TOKEN}x"}, True),
    ({"Authorization": f"Bearer {WRITE_TOKEN.upper()}"}, True),
]


@pytest.mark.parametrize(("method", "path", "body"), WRITES, ids=lambda v: str(v)[:24])
def test_writes_without_the_token_are_401_and_forward_nothing(
    production_gateway, production_core, db, method, path, body
):
    before = core_requests(production_core)
    for headers, invalid_token in BAD_AUTH:
        response = requests.request(
            method, production_gateway.url + path, json=body, headers=headers, timeout=10
        )
        assert_unauthorized(response, invalid_token)
    assert core_requests(production_core) == before  # nothing was forwarded
    taken = db.execute("SELECT count(*) FROM users WHERE username LIKE 'never_%'").fetchone()
    assert taken == (0,)


def test_writes_with_the_token_go_through(production_gateway):
    base = production_gateway.url
    email = unique_email("prod")
    created = requests.post(
        base + USERS, json={"username": unique_username(), "email": email}, headers=AUTH, timeout=10
    )
    assert created.status_code == 201, created.text
    user_id = created.json()["id"]
    # The scheme is case-insensitive (RFC 7235).
    renamed = requests.patch(
        f"{base}{USERS}/{user_id}",
        json={"username": unique_username("renamed")},
        headers={"Authorization": f"bearer {WRITE_TOKEN}"},
        timeout=10,
    )
    assert renamed.status_code == 200, renamed.text
    assert requests.delete(f"{base}{USERS}/{user_id}", headers=AUTH, timeout=10).status_code == 204
    # Reads need no token.
    count = requests.get(base + COUNT, params={"email": email}, timeout=10)
    assert count.status_code == 200 and count.json()["count"] == 0


def test_unknown_routes_and_wrong_methods_are_not_hidden_behind_the_token(production_gateway):
    nope = requests.post(production_gateway.url + "/api/v1/nope", json={}, timeout=10)
    assert nope.status_code == 404 and nope.json()["error"]["code"] == "not_found"
    wrong = requests.post(production_gateway.url + COUNT, json={}, timeout=10)
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_bodies_over_16_kib_are_413(production_gateway, production_core, chunked):
    raw = b'{"username": "big", "email": "' + b"x" * (16 * 1024) + b'"}'
    data = iter([raw[:8000], raw[8000:]]) if chunked else raw
    before = core_requests(production_core)
    response = requests.post(
        production_gateway.url + USERS,
        data=data,
        headers={**AUTH, "Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "payload_too_large"
    assert core_requests(production_core) == before


def test_a_body_at_the_limit_is_read(production_gateway):
    head, tail = b'{"username": "_", "email": "', b'"}'
    raw = head + b"x" * (16 * 1024 - len(head) - len(tail)) + tail
    assert len(raw) == 16 * 1024
    response = requests.post(
        production_gateway.url + USERS,
        data=raw,
        headers={**AUTH, "Content-Type": "application/json"},
        timeout=10,
    )
    # Read and forwarded: the core refuses the username, not the size.
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_username"


def test_metrics_are_served_by_the_master_on_metrics_bind_only(production_gateway):
    public = requests.get(production_gateway.url + "/metrics", timeout=10)
    assert public.status_code == 404
    assert public.json()["error"]["code"] == "not_found"

    metrics_base = production_gateway.extra["metrics_url"].removesuffix("/metrics")

    def counted() -> float:
        return sample(
            scrape(metrics_base),
            "aside_gateway_http_requests_total",
            route="/api/v1/users/count",
            method="GET",
            status="400",
        )

    before = counted()
    for _ in range(20):  # a new connection each: both workers answer some
        bad = requests.get(production_gateway.url + COUNT, params={"email": "nope"}, timeout=10)
        assert bad.status_code == 400
    # Exact across workers: the master merges every worker's files.
    assert counted() == before + 20


def test_lab_switches_are_off(production_gateway):
    off = requests.get(production_gateway.url + COUNT, params={"email": "a@b.co", "cache": "off"})
    assert off.status_code == 403 and off.json()["error"]["code"] == "lab_disabled"
    python = requests.post(
        production_gateway.url + "/api/v1/compute",
        json={"complexity": 1, "engine": "python"},
        headers=AUTH,
        timeout=10,
    )
    assert python.status_code == 403 and python.json()["error"]["code"] == "lab_disabled"
    # No test hooks: the hold header is ignored, not validated (it would be a 400 in the lab).
    held = requests.get(
        production_gateway.url + COUNT,
        params={"email": unique_email()},
        headers={"X-Test-Hold": "not a valid name!"},
        timeout=10,
    )
    assert held.status_code == 200


def test_an_unexpected_error_is_a_bare_500(database_url, redis_url, core, caplog):
    # No request reaches an unexpected error through the real gateway any more
    # (a malformed cached value is a miss), so the production app is built here
    # and its database read made to fail with an error nothing expects.
    settings = load_settings(
        {
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "CORE_URL": core.url,
            "WRITE_TOKEN": WRITE_TOKEN,
            "CORE_TOKEN": CORE_TOKEN,
        }
    )
    services = build_services(settings)
    try:

        def broken(*_args: object, **_kwargs: object) -> int:
            raise ValueError("boom: not-a-number")

        services.db.count_by_email = broken  # type: ignore[method-assign]
        client = create_app(settings, services).test_client()
        response = client.get(COUNT, query_string={"email": unique_email("corrupt")})
    finally:
        services.close()
    assert response.status_code == 500
    assert response.headers["Content-Type"] == "application/json"
    assert response.get_json() == INTERNAL_BODY
    for leak in ("Traceback", "ValueError", ".py", "not-a-number"):
        assert leak not in response.get_data(as_text=True)
    # The traceback goes to the log instead.
    assert any("ValueError" in (record.exc_text or "") for record in caplog.records) or any(
        record.exc_info and record.exc_info[0] is ValueError for record in caplog.records
    )


def test_a_taken_metrics_port_stops_the_gateway_with_one_line(database_url, redis_url, core):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        env.update(
            DATABASE_URL=database_url,
            REDIS_URL=redis_url,
            CORE_URL=core.url,
            ASIDE_PROFILE="production",
            WRITE_TOKEN=WRITE_TOKEN,
            CORE_TOKEN=CORE_TOKEN,
            GATEWAY_BIND="127.0.0.1:1",  # never reached: the metrics port fails first
            METRICS_BIND=f"127.0.0.1:{port}",
        )
        result = subprocess.run(
            [str(Path(sys.executable).parent / "gunicorn"), "--config", "gateway/gunicorn.conf.py"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(f"aside-gateway: METRICS_BIND: cannot listen on 127.0.0.1:{port}")
    )
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("missing", ["WRITE_TOKEN", "CORE_TOKEN"])
def test_production_without_a_token_refuses_to_start(database_url, redis_url, core, missing):
    dropped = (missing, "PROMETHEUS_MULTIPROC_DIR")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        CORE_URL=core.url,
        ASIDE_PROFILE="production",
        GATEWAY_BIND="127.0.0.1:1",
        **{"WRITE_TOKEN": WRITE_TOKEN, "CORE_TOKEN": CORE_TOKEN},
    )
    del env[missing]
    result = subprocess.run(
        [str(Path(sys.executable).parent / "gunicorn"), "--config", "gateway/gunicorn.conf.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert result.stderr.strip() == (
        f"aside-gateway: {missing} is required when ASIDE_PROFILE=production"
    )


# ---- the core behind the same door: CORE_TOKEN ------------------------------------


def test_the_core_refuses_writes_that_do_not_come_through_the_gateway(
    production_gateway, production_core, db_count
):
    email = unique_email("direct")
    body = {"username": unique_username(), "email": email}
    for headers in ({}, AUTH, {"Authorization": "Bearer wrong-token-0123456789abcdef"}):
        direct = requests.post(production_core.url + USERS, json=body, headers=headers, timeout=10)
        assert direct.status_code == 401, direct.text
        assert direct.headers["Content-Type"].startswith("application/json")
        assert direct.json()["error"]["code"] == "unauthorized"
    assert db_count(email) == 0
    # The same write through the gateway, with only the client's WRITE_TOKEN:
    # the gateway adds CORE_TOKEN itself.
    through = requests.post(production_gateway.url + USERS, json=body, headers=AUTH, timeout=10)
    assert through.status_code == 201, through.text
    assert db_count(email) == 1
    computed = requests.post(
        production_gateway.url + "/api/v1/compute", json={"complexity": 1}, headers=AUTH, timeout=10
    )
    assert computed.status_code == 200, computed.text


def test_a_wrong_core_token_is_a_500_for_the_client_not_a_401(
    start_gateway, production_core, db_count
):
    # The client's WRITE_TOKEN is right: a 401 would blame it for our mistake.
    gateway = start_gateway(
        ASIDE_PROFILE="production",
        ASIDE_TEST_HOOKS="0",
        CORE_URL=production_core.url,
        WRITE_TOKEN=WRITE_TOKEN,
        CORE_TOKEN="wrong-core-token-0123456789abcdef",
        METRICS_BIND=f"127.0.0.1:{free_port()}",
    )
    email = unique_email("wrongcore")
    response = requests.post(
        gateway.url + USERS,
        json={"username": unique_username(), "email": email},
        headers=AUTH,
        timeout=10,
    )
    assert response.status_code == 500, response.text
    assert response.json() == INTERNAL_BODY
    assert "WWW-Authenticate" not in response.headers
    assert db_count(email) == 0
    wait_until(lambda: "CORE_TOKEN" in gateway.log(), 5, "the cause in the gateway's log")
    assert "wrong-core-token" not in gateway.log()


# ---- what an anonymous client can make it do ------------------------------------------

BUDGET_PER_S = 5
OTHER_CLIENT = "198.51.100.7"


@pytest.fixture(scope="module")
def budget_gateway(start_gateway, production_core):
    """One production worker with a small miss budget a client, behind a trusted
    proxy (the suite's own address), so X-Forwarded-For names a second client."""
    metrics_port = free_port()
    proc = start_gateway(
        ASIDE_PROFILE="production",
        ASIDE_TEST_HOOKS="0",
        GATEWAY_WORKERS="1",
        CORE_URL=production_core.url,
        WRITE_TOKEN=WRITE_TOKEN,
        CORE_TOKEN=CORE_TOKEN,
        METRICS_BIND=f"127.0.0.1:{metrics_port}",
        GATEWAY_MISS_BUDGET_CLIENT_PER_S=str(BUDGET_PER_S),
        GATEWAY_MISS_BUDGET_ROUTE_PER_S="0",
        GATEWAY_TRUSTED_PROXIES="127.0.0.1",
    )
    proc.extra["metrics_base"] = f"http://127.0.0.1:{metrics_port}"
    return proc


def _misses_refused(base: str, forwarded_for: Callable[[int], str], count: int = 40) -> int:
    """Misses sent at once with a forwarding header of the sender's choice; how many got 429."""
    session = requests.Session()
    statuses = [
        session.get(
            base + COUNT,
            params={"email": unique_email("forged")},
            headers={"X-Forwarded-For": forwarded_for(i)},
            timeout=10,
        ).status_code
        for i in range(count)
    ]
    assert set(statuses) <= {200, 429}, statuses
    return statuses.count(429)


def test_a_forwarding_header_from_an_untrusted_peer_names_no_new_client(start_gateway):
    """No GATEWAY_TRUSTED_PROXIES: the peer (127.0.0.1 here) is the client,
    whatever X-Forwarded-For says, so rotating it buys no budget."""
    gateway = start_gateway(
        ASIDE_PROFILE="production",
        ASIDE_TEST_HOOKS="0",
        GATEWAY_WORKERS="1",
        WRITE_TOKEN=WRITE_TOKEN,
        CORE_TOKEN=CORE_TOKEN,
        METRICS_BIND=f"127.0.0.1:{free_port()}",
        GATEWAY_MISS_BUDGET_CLIENT_PER_S=str(BUDGET_PER_S),
        GATEWAY_MISS_BUDGET_ROUTE_PER_S="0",
    )
    assert _misses_refused(gateway.url, lambda i: f"198.51.100.{i + 1}") > 0


def test_the_miss_budget_answers_429_past_its_rate_and_serves_hits_meanwhile(
    budget_gateway, insert_user
):
    base = budget_gateway.url
    session = requests.Session()
    hot = unique_email("hot")
    insert_user(hot)
    assert session.get(base + COUNT, params={"email": hot}, timeout=10).json()["count"] == 1
    start = time.monotonic()
    statuses = []
    refusal = None
    for _ in range(40):
        response = session.get(base + COUNT, params={"email": unique_email("miss")}, timeout=10)
        statuses.append(response.status_code)
        if response.status_code == 429 and refusal is None:
            refusal = response
            # The budget is spent: a hit is still served, and another client still misses.
            hit = session.get(base + COUNT, params={"email": hot}, timeout=10)
            assert (hit.status_code, hit.headers["X-Cache"]) == (200, "HIT"), hit.text
            other = session.get(
                base + COUNT,
                params={"email": unique_email("other")},
                headers={"X-Forwarded-For": OTHER_CLIENT},
                timeout=10,
            )
            assert (other.status_code, other.headers["X-Cache"]) == (200, "MISS"), other.text
    elapsed = time.monotonic() - start
    assert refusal is not None, statuses
    assert refusal.json()["error"]["code"] == "too_many_requests"
    assert 1 <= int(refusal.headers["Retry-After"]) <= 2
    assert set(statuses) <= {200, 429}
    # A sliding window: at most twice the rate in the first second, the rate after it.
    assert statuses.count(200) <= BUDGET_PER_S * (elapsed + 2), (statuses, elapsed)
    refused = sample(
        scrape(budget_gateway.extra["metrics_base"]),
        "aside_gateway_miss_budget_refused_total",
        route=COUNT,
        scope="client",
    )
    assert refused == statuses.count(429)


def test_a_client_ignoring_retry_after_is_held_not_refused_again_at_once(budget_gateway):
    """Misses sent one after another, each as soon as the last answer came: after
    a 429, the client's next miss waits out its Retry-After on the event loop
    (door/miss_hold.py), so it gets about one 429 a window, not one per request."""
    base = budget_gateway.url
    session = requests.Session()
    held_before = sample(
        scrape(budget_gateway.extra["metrics_base"]), "aside_gateway_miss_held_total"
    )
    start = time.monotonic()
    statuses = [
        session.get(base + COUNT, params={"email": unique_email("eager")}, timeout=10).status_code
        for _ in range(30)
    ]
    elapsed = time.monotonic() - start
    assert set(statuses) <= {200, 429} and 429 in statuses, statuses
    # At most one refusal per second of the run (Retry-After is 1 or 2 s), and a window's slack.
    assert statuses.count(429) <= elapsed + 2, (statuses, round(elapsed, 2))
    held = sample(scrape(budget_gateway.extra["metrics_base"]), "aside_gateway_miss_held_total")
    assert held - held_before >= statuses.count(429) - 1, (held, held_before, statuses)


def test_the_addresses_of_one_ipv6_64_are_one_client(budget_gateway):
    """Behind the trusted proxy, every address of 2001:db8:1:2::/64 spends one budget."""
    assert _misses_refused(budget_gateway.url, lambda i: f"2001:db8:1:2::{i + 1:x}") > 0


def test_a_production_gateway_is_not_ready_without_the_email_index(start_gateway, db):
    gateway = start_gateway(
        ready_path="/healthz",
        ASIDE_PROFILE="production",
        ASIDE_TEST_HOOKS="0",
        GATEWAY_WORKERS="1",
        WRITE_TOKEN=WRITE_TOKEN,
        CORE_TOKEN=CORE_TOKEN,
        METRICS_BIND=f"127.0.0.1:{free_port()}",
        GATEWAY_REQUIRE_EMAIL_INDEX="1",  # production's default; the suite turns it off
    )
    ready = requests.get(gateway.url + "/readyz", timeout=10)
    assert ready.status_code == 503, ready.text
    message = ready.json()["error"]["message"]
    assert "no index on email" in message and "\n" not in message
    wait_until(lambda: "no index on email" in gateway.log(), 5, "the log line")
    db.execute("CREATE INDEX readiness_email_idx ON users (email)")
    try:
        wait_until(
            lambda: requests.get(gateway.url + "/readyz", timeout=10).status_code == 200,
            10,
            "ready once the index exists",
        )
    finally:
        db.execute("DROP INDEX readiness_email_idx")
    # Within GATEWAY_READY_CACHE_MS (1 s) of the last check, its verdict stands.
    wait_until(
        lambda: requests.get(gateway.url + "/readyz", timeout=10).status_code == 503,
        10,
        "not ready once the index is gone",
    )
