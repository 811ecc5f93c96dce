"""Idempotency-Key on POST /api/v1/users, end to end: gateway, real core, real PostgreSQL."""

from __future__ import annotations

import threading
import uuid

import pytest
import requests
from gateway_helpers import unique_email, unique_username

USERS = "/api/v1/users"


def create(base: str, body: dict[str, str], key: str | None) -> requests.Response:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return requests.post(base + USERS, json=body, headers=headers, timeout=10)


def count_of(base: str, email: str) -> int:
    answer = requests.get(base + USERS + "/count", params={"email": email}, timeout=10)
    return answer.json()["count"]


def rows_named(db, username: str) -> int:
    return db.execute("SELECT count(*) FROM users WHERE username = %s", (username,)).fetchone()[0]


def test_a_retry_gets_the_first_answer_and_creates_nothing(gateway, db):
    key = str(uuid.uuid4())
    email = unique_email("idem")
    body = {"username": unique_username(), "email": email}
    # The count is cached before the write; the first create must still drop it.
    assert count_of(gateway.url, email) == 0

    first = create(gateway.url, body, key)
    assert first.status_code == 201, first.text
    assert "Idempotent-Replayed" not in first.headers
    retry = create(gateway.url, {"email": email, "username": body["username"]}, key)
    assert retry.status_code == 201, retry.text
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.json() == first.json()
    assert retry.headers["Location"] == first.headers["Location"] == f"{USERS}/{first.json()['id']}"
    assert rows_named(db, body["username"]) == 1
    assert count_of(gateway.url, email) == 1


def test_the_same_key_with_another_body_is_422(gateway, db):
    key = str(uuid.uuid4())
    username = unique_username()
    assert create(gateway.url, {"username": username, "email": unique_email()}, key).ok
    other = create(gateway.url, {"username": unique_username(), "email": unique_email()}, key)
    assert other.status_code == 422, other.text
    assert other.headers["Content-Type"].startswith("application/json")
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert "Idempotent-Replayed" not in other.headers


@pytest.mark.parametrize("key", ["k" * 256, "cl\xe9"], ids=["256 chars", "non-ASCII"])
def test_bad_keys_are_400_and_write_nothing(gateway, db, key):
    username = unique_username()
    response = create(gateway.url, {"username": username, "email": unique_email()}, key)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_request"
    assert "Idempotency-Key" in response.json()["error"]["message"]
    assert rows_named(db, username) == 0


@pytest.mark.parametrize("key", ["a\x01b", "a\x7fb"], ids=["C0", "DEL"])
def test_control_characters_never_reach_the_app(gateway, db, key):
    # The HTTP parser refuses such a header value (the JSON 400 of any malformed
    # request, front/worker.py); the app and the core would refuse it too.
    username = unique_username()
    response = create(gateway.url, {"username": username, "email": unique_email()}, key)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert rows_named(db, username) == 0


def test_keys_at_the_limits_are_accepted(gateway):
    tag = uuid.uuid4().hex
    for key in (tag.ljust(255, "~"), f"with inner spaces {tag}", f"!#$%&'*+-.^_`|~{tag}"):
        body = {"username": unique_username(), "email": unique_email()}
        answer = create(gateway.url, body, key)
        assert answer.status_code == 201, (key, answer.text)


def test_simultaneous_duplicates_create_one_row(gateway, db):
    key = str(uuid.uuid4())
    body = {"username": unique_username(), "email": unique_email("burst")}
    start = threading.Barrier(10)
    answers: list[requests.Response] = []
    lock = threading.Lock()

    def send() -> None:
        session = requests.Session()
        session.get(gateway.url + "/healthz", timeout=10)  # connect before the barrier
        start.wait(timeout=10)
        response = session.post(
            gateway.url + USERS, json=body, headers={"Idempotency-Key": key}, timeout=20
        )
        with lock:
            answers.append(response)

    threads = [threading.Thread(target=send) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert [a.status_code for a in answers] == [201] * 10, [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
    assert sum("Idempotent-Replayed" not in a.headers for a in answers) == 1
    assert rows_named(db, body["username"]) == 1


def test_without_a_key_a_retry_is_a_new_request(gateway):
    body = {"username": unique_username(), "email": unique_email()}
    assert create(gateway.url, body, None).status_code == 201
    again = create(gateway.url, body, None)
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
