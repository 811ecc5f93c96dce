"""User writes forwarded on the event loop (front/loop_writes.py): which requests the
loop takes, that it answers them without a Flask thread, and that its answers
are the Flask side's, status, headers and body, against the real core."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
import redis
import requests
from aside_gateway.backends.core_client import unanswered_error
from aside_gateway.contracts.routes import MAX_BODY_BYTES
from aside_gateway.front.loop_writes import Write, head_of, write_of
from gateway_helpers import Proc, release, start_held, unique_email, unique_username

USERS = "/api/v1/users"
TOKEN = b"s3cret-token"
JSON_HEAD = [(b"content-type", b"application/json"), (b"content-length", b"40")]


def head(*pairs: tuple[str, str]) -> dict[str, list[str]]:
    return head_of([(name.encode(), value.encode()) for name, value in pairs])


# ---- which requests the loop takes (pure) ----------------------------------------


def test_a_plain_create_update_and_delete_are_taken():
    json_head = head_of(JSON_HEAD)
    create = write_of("POST", USERS, b"", json_head, None, False)
    assert create == Write("POST", USERS, None, "application/json", {})
    assert create.core_path == USERS
    update = write_of("PATCH", USERS + "/0042", b"", json_head, None, False)
    assert update == Write("PATCH", USERS + "/<id>", 42, "application/json", {})
    assert update.core_path == USERS + "/42"
    delete = write_of("DELETE", USERS + "/7", b"", {}, None, False)
    assert delete == Write("DELETE", USERS + "/<id>", 7, None, {})


@pytest.mark.parametrize(
    ("method", "path", "query", "pairs"),
    [
        ("POST", USERS + "/", b"", ()),  # not the route: Flask's 404
        ("PUT", USERS + "/1", b"", ()),  # Flask's 405
        ("PATCH", USERS + "/count", b"", ()),
        ("DELETE", USERS + "/abc", b"", ()),  # Flask's 400 invalid_id
        ("DELETE", USERS + "/0", b"", ()),
        ("DELETE", USERS + "/99999999999999999999", b"", ()),
        ("DELETE", USERS + "/1/2", b"", ()),
        ("POST", "/api/v1/compute", b"", ()),
        ("POST", USERS, b"x=1", ()),  # a query string: Flask checks its encoding
        ("POST", USERS, b"", (("transfer-encoding", "chunked"),)),  # Flask reads it to its limit
        ("POST", USERS, b"", (("content-length", str(MAX_BODY_BYTES + 1)),)),  # Flask's 413
        ("POST", USERS, b"", (("content-length", "10"), ("content-length", "10"))),
        ("POST", USERS, b"", (("content-length", "-1"),)),
        ("POST", USERS, b"", (("idempotency-key", "a"), ("idempotency-key", "b"))),
        ("POST", USERS, b"", (("idempotency-key", "ü"),)),
        ("POST", USERS, b"", (("idempotency-key", "x" * 256),)),
    ],
)
def test_anything_but_the_plain_shape_is_left_to_flask(method, path, query, pairs):
    assert write_of(method, path, query, head(*pairs), None, False) is None


def test_a_valid_idempotency_key_goes_with_a_create_only():
    key_head = head(("idempotency-key", "k-1"))
    assert write_of("POST", USERS, b"", key_head, None, False).headers == {"Idempotency-Key": "k-1"}
    # The core reads it on creates only, as Flask forwards it.
    assert write_of("DELETE", USERS + "/1", b"", key_head, None, False).headers == {}


@pytest.mark.parametrize(
    ("authorization", "taken"),
    [
        (None, False),
        ("Bearer wrong", False),
        ("Basic " + TOKEN.decode(), False),
        ("Bearer " + TOKEN.decode(), True),
        ("bearer " + TOKEN.decode(), True),
    ],
)
def test_with_a_write_token_only_a_valid_one_is_taken(authorization, taken):
    pairs = (("authorization", authorization),) if authorization else ()
    assert (write_of("POST", USERS, b"", head(*pairs), TOKEN, False) is not None) == taken


def test_the_core_delay_test_hook_is_forwarded_only_with_test_hooks_on():
    delay = head(("x-test-delay-ms", "300"))
    assert write_of("DELETE", USERS + "/1", b"", delay, None, True).headers == {
        "X-Test-Delay-Ms": "300"
    }
    assert write_of("DELETE", USERS + "/1", b"", delay, None, False).headers == {}


@pytest.mark.parametrize(
    ("sent", "write", "code", "status"),
    [
        (True, True, "write_outcome_unknown", 504),
        (False, True, "core_unavailable", 503),
        (True, False, "core_unavailable", 503),
    ],
)
def test_an_unanswered_request_is_504_only_for_a_write_that_went_out(sent, write, code, status):
    error = unanswered_error(sent, write, "POST", USERS, "SocketTimeoutError")
    assert (error.code, error.status) == (code, status)


# ---- against the real core ---------------------------------------------------------


@pytest.fixture(scope="module")
def one_thread_gateway(start_gateway: Callable[..., Proc]) -> Proc:
    """One worker with one Flask thread: a held fill takes it."""
    return start_gateway(GATEWAY_WORKERS="1", GATEWAY_THREADS="1")


def test_writes_are_answered_while_every_flask_thread_is_busy(
    one_thread_gateway: Proc, insert_user, rdb: redis.Redis
):
    """A fill held in the worker's only Flask thread: a create, an update and a
    delete still get their answers (with GATEWAY_WRITES=flask each would wait
    for that thread, and this test fail on its timeout)."""
    url = one_thread_gateway.url
    email = unique_email("busy")
    insert_user(email)
    hold = f"loop-writes-{time.monotonic_ns()}"
    held = start_held(url, email, hold, rdb)
    try:
        try:
            body = {"username": unique_username(), "email": unique_email("busy")}
            created = requests.post(url + USERS, json=body, timeout=5)
            assert created.status_code == 201, created.text
            user = url + created.headers["Location"]
            renamed = requests.patch(user, json={"username": unique_username()}, timeout=5)
            assert renamed.status_code == 200, renamed.text
            deleted = requests.delete(user, timeout=5)
            assert deleted.status_code == 204, deleted.text
        except requests.Timeout:
            pytest.fail("a write waited 5 s for the Flask thread the held fill takes")
        assert held.thread.is_alive(), "the fill was released before the writes answered"
    finally:
        release(rdb, hold)
    assert held.result().status_code == 200


@pytest.fixture(scope="module")
def flask_writes_gateway(start_gateway: Callable[..., Proc]) -> Proc:
    return start_gateway(GATEWAY_WRITES="flask")


def exchange(base: str, tag: str) -> list[tuple[int, list[str], object]]:
    """A sequence of writes, each answer as (status, header names, body with the
    values that differ between two runs, ids and times, left out)."""
    key = {"Idempotency-Key": f"{tag}-{uuid.uuid4().hex}"}
    body = {"username": unique_username(tag), "email": unique_email(tag)}
    answers = [
        requests.post(base + USERS, json=body, headers=key, timeout=10),
        requests.post(base + USERS, json=body, headers=key, timeout=10),  # replayed
        requests.post(base + USERS, json=body, timeout=10),  # username taken
        requests.post(base + USERS, data=b"{not json", timeout=10),  # no Content-Type
        requests.post(
            base + USERS, data=b"{not json", headers={"Content-Type": "application/json"}
        ),
        requests.post(base + USERS, json={"username": "x", "extra": 1}, timeout=10),
    ]
    user = base + answers[0].headers["Location"]
    answers += [
        requests.patch(user, json={"username": unique_username(tag)}, timeout=10),
        requests.patch(user, json={"email": "not-an-email"}, timeout=10),
        requests.delete(user, timeout=10),
        requests.delete(user, timeout=10),
        requests.patch(user, json={"username": unique_username(tag)}, timeout=10),
    ]
    return [(a.status_code, names(a), shape(a)) for a in answers]


def names(answer: requests.Response) -> list[str]:
    return sorted(name.lower() for name in answer.headers if name.lower() != "date")


def shape(answer: requests.Response) -> object:
    if not answer.content:
        return None
    body = answer.json()
    if "error" in body:
        return body["error"]["code"]
    return sorted(body)


def test_the_loop_answers_writes_as_flask_does(gateway: Proc, flask_writes_gateway: Proc):
    on_loop = exchange(gateway.url, "loopw")
    in_flask = exchange(flask_writes_gateway.url, "flaskw")
    statuses = [status for status, _, _ in on_loop]
    assert statuses == [201, 201, 409, 415, 400, 400, 200, 400, 204, 404, 404], on_loop
    assert on_loop == in_flask
