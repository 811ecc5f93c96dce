"""A write the core does not answer: 504 write_outcome_unknown once the request
went out (it may have been applied), 503 core_unavailable when it never did; and
the gateway's CORE_TIMEOUT_MS outlasts the core's own worst case
(contracts/timeouts.json).

The real core with its lab test hooks holds a write's answer after the write
committed (X-Test-Delay-Ms), which is exactly a write the gateway gives up on.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Callable

import psycopg
import pytest
import requests
from aside_gateway.backends.core_client import unanswered
from aside_gateway.config.settings import load_settings
from gateway_helpers import (
    Proc,
    contract,
    sample,
    scrape,
    unique_email,
    unique_username,
    wait_until,
)
from urllib3.exceptions import (
    ConnectTimeoutError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
)

USERS = "/api/v1/users"
BY_ID_ROUTE = "/api/v1/users/:id"  # the core's route label
RESET = ProtocolError("Connection aborted.", ConnectionResetError())
DELAY = "X-Test-Delay-Ms"
# The test gateway gives up on the core after this; the core holds longer.
SHORT_TIMEOUT_MS = 1000
HOLD_MS = 3000


# ---- the budget ------------------------------------------------------------------


def test_core_timeout_outlasts_the_cores_worst_case_for_a_write():
    timeouts = contract("timeouts.json")
    parts = {p["part"]: p["ms"] for p in timeouts["core_write_worst_case"]}
    assert set(parts) == {"pool_acquire", "statements", "client_grace", "invalidation"}
    gateway = timeouts["gateway"]
    env = {"DATABASE_URL": "postgresql://a@h/d", "REDIS_URL": "redis://h/0", "CORE_URL": "http://h"}
    default = load_settings({**env, "ASIDE_PROFILE": "lab"}).core_timeout_ms
    assert gateway["variable"] == "CORE_TIMEOUT_MS"
    assert default == gateway["default_ms"]
    assert default >= sum(parts.values()) + gateway["min_margin_ms"], (
        f"CORE_TIMEOUT_MS {default} ms does not outlast the core's {sum(parts.values())} ms "
        f"by {gateway['min_margin_ms']} ms"
    )


# ---- which failure is which (pure) -----------------------------------------------


@pytest.mark.parametrize(
    ("exc", "write", "code"),
    [
        (ReadTimeoutError(None, "/api/v1/users", "read timed out"), True, "write_outcome_unknown"),
        (
            ProtocolError("Connection aborted.", ConnectionResetError()),
            True,
            "write_outcome_unknown",
        ),
        (NewConnectionError(None, "refused"), True, "core_unavailable"),
        (ConnectTimeoutError(None, "connect timed out"), True, "core_unavailable"),
        # Compute changes nothing: a timeout there is the core being unavailable.
        (ReadTimeoutError(None, "/api/v1/compute", "read timed out"), False, "core_unavailable"),
        (RESET, False, "core_unavailable"),
    ],
)
def test_a_write_sent_but_unanswered_is_of_unknown_outcome(exc, write, code):
    error = unanswered(exc, write, "POST", USERS)
    assert error.code == code
    if code == "write_outcome_unknown":
        assert error.status == 504 and error.headers == {"Retry-After": "1"}
        assert "Idempotency-Key" in error.message
    else:
        assert error.status == 503


# ---- against the real core -------------------------------------------------------


@pytest.fixture(scope="module")
def held_core(start_core: Callable[..., Proc]) -> Proc:
    """A core of its own whose lab test hooks can hold an answer."""
    return start_core(ASIDE_TEST_HOOKS="1")


@pytest.fixture(scope="module")
def impatient_gateway(start_gateway: Callable[..., Proc], held_core: Proc) -> Proc:
    return start_gateway(
        CORE_URL=held_core.url, CORE_TIMEOUT_MS=str(SHORT_TIMEOUT_MS), GATEWAY_WORKERS="1"
    )


def core_answered(core: Proc, method: str, route: str, status: str) -> float:
    return sample(
        scrape(core.url),
        "aside_core_http_requests_total",
        route=route,
        method=method,
        status=status,
    )


def rows_named(db: psycopg.Connection, username: str) -> list[tuple]:
    return db.execute("SELECT id, email FROM users WHERE username = %s", (username,)).fetchall()


def assert_outcome_unknown(answer: requests.Response, elapsed: float) -> None:
    assert answer.status_code == 504, answer.text
    assert answer.json()["error"]["code"] == "write_outcome_unknown"
    assert answer.headers["Retry-After"] == "1"
    assert answer.headers["Content-Type"].startswith("application/json")
    assert elapsed < HOLD_MS / 1000, f"{elapsed:.2f} s: the gateway waited out the core's hold"


def test_a_create_the_core_does_not_answer_is_504_and_its_retry_replays_it(
    held_core: Proc, impatient_gateway: Proc, db: psycopg.Connection
):
    key = {"Idempotency-Key": f"outcome-{uuid.uuid4().hex}"}
    body = {"username": unique_username(), "email": unique_email()}
    answered_before = core_answered(held_core, "POST", USERS, "201")

    started = time.monotonic()
    first = requests.post(
        impatient_gateway.url + USERS,
        json=body,
        headers={**key, DELAY: str(HOLD_MS)},
        timeout=10,
    )
    assert_outcome_unknown(first, time.monotonic() - started)

    # The core finishes on its own: the write was applied.
    wait_until(
        lambda: core_answered(held_core, "POST", USERS, "201") > answered_before,
        10,
        "the core to finish the held create",
    )
    retry = requests.post(impatient_gateway.url + USERS, json=body, headers=key, timeout=10)
    assert retry.status_code == 201, retry.text
    assert retry.headers.get("Idempotent-Replayed") == "true"
    rows = rows_named(db, body["username"])
    assert rows == [(retry.json()["id"], body["email"])], "exactly one row, the replayed one"
    assert retry.json()["username"] == body["username"]
    assert retry.headers["Location"] == f"{USERS}/{rows[0][0]}"
    # The cache knows of it too: the create's invalidation ran though nobody heard the 201.
    count = requests.get(
        impatient_gateway.url + USERS + "/count", params={"email": body["email"]}, timeout=10
    )
    assert count.json()["count"] == 1


def test_an_update_and_a_delete_the_core_does_not_answer_are_504(
    held_core: Proc, impatient_gateway: Proc, db: psycopg.Connection
):
    created = requests.post(
        impatient_gateway.url + USERS,
        json={"username": unique_username(), "email": unique_email()},
        timeout=10,
    )
    assert created.status_code == 201, created.text
    path = f"{USERS}/{created.json()['id']}"
    renamed = unique_username()
    for method, json_body in (("PATCH", {"username": renamed}), ("DELETE", None)):
        started = time.monotonic()
        answer = requests.request(
            method,
            impatient_gateway.url + path,
            json=json_body,
            headers={DELAY: str(HOLD_MS)},
            timeout=10,
        )
        assert_outcome_unknown(answer, time.monotonic() - started)
        status = "200" if method == "PATCH" else "204"
        wait_until(
            lambda m=method, s=status: core_answered(held_core, m, BY_ID_ROUTE, s),
            10,
            f"the core to finish the held {method}",
        )
    assert rows_named(db, renamed) == [], "the delete was applied too"


def test_compute_the_core_does_not_answer_stays_503(impatient_gateway: Proc):
    answer = requests.post(
        impatient_gateway.url + "/api/v1/compute",
        json={"complexity": 1},
        headers={DELAY: str(HOLD_MS)},
        timeout=10,
    )
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "core_unavailable"


def test_a_core_killed_mid_write_is_504_and_a_core_down_before_it_is_503(
    start_core: Callable[..., Proc], start_gateway: Callable[..., Proc], db: psycopg.Connection
):
    core = start_core(ASIDE_TEST_HOOKS="1")
    gw = start_gateway(CORE_URL=core.url, GATEWAY_WORKERS="1")
    body = {"username": unique_username(), "email": unique_email()}
    outcome: list[requests.Response] = []

    def send() -> None:
        outcome.append(
            requests.post(gw.url + USERS, json=body, headers={DELAY: "8000"}, timeout=15)
        )

    sender = threading.Thread(target=send)
    sender.start()
    # Committed, and its answer held: now the connection breaks.
    wait_until(lambda: rows_named(db, body["username"]), 5, "the held create to commit")
    core.send(signal.SIGKILL)
    sender.join(timeout=15)
    assert outcome, "the gateway never answered"
    assert outcome[0].status_code == 504, outcome[0].text
    assert outcome[0].json()["error"]["code"] == "write_outcome_unknown"
    assert len(rows_named(db, body["username"])) == 1

    # Nothing listens any more: the next write cannot have been sent.
    core.wait()
    again = requests.post(
        gw.url + USERS,
        json={"username": unique_username(), "email": unique_email()},
        headers={"Idempotency-Key": uuid.uuid4().hex},
        timeout=10,
    )
    assert again.status_code == 503, again.text
    assert again.json()["error"]["code"] == "core_unavailable"
