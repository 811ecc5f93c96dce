"""End to end through the real core: writes, compute, and cache coherence."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest
import requests
from gateway_helpers import AUTH, contract, unique_email, unique_username

COUNT = "/api/v1/users/count"
COMPUTE = contract("compute.json")
HOLD_DEADLINE_S = 10


def read_count(base: str, email: str, **headers: str) -> requests.Response:
    return requests.get(base + COUNT, params={"email": email}, headers=headers, timeout=20)


def create(base: str, email: str, username: str | None = None) -> requests.Response:
    body = {"username": username or unique_username(), "email": email}
    return requests.post(base + "/api/v1/users", json=body, timeout=10)


# ---- writes ----------------------------------------------------------------------------


def test_create_update_delete_keep_reads_fresh(gateway, db_count):
    old_email, new_email = unique_email("old"), unique_email("new")
    username = unique_username()
    assert read_count(gateway.url, old_email).json()["count"] == 0  # cached 0
    assert read_count(gateway.url, new_email).json()["count"] == 0

    created = create(gateway.url, old_email, username)
    assert created.status_code == 201, created.text
    user = created.json()
    assert user["username"] == username and user["email"] == old_email
    assert created.headers["Location"] == f"/api/v1/users/{user['id']}"
    assert read_count(gateway.url, old_email).json()["count"] == 1
    fetched = requests.get(f"{gateway.url}/api/v1/users/{user['id']}", timeout=5)
    assert fetched.json() == user
    assert requests.get(f"{gateway.url}/api/v1/users/{user['id']}", timeout=5).headers[
        "X-Cache"
    ] == ("HIT")

    updated = requests.patch(
        f"{gateway.url}/api/v1/users/{user['id']}", json={"email": new_email}, timeout=10
    )
    assert updated.status_code == 200, updated.text
    assert updated.json()["email"] == new_email
    assert read_count(gateway.url, old_email).json()["count"] == 0
    assert read_count(gateway.url, new_email).json()["count"] == 1
    after_update = requests.get(f"{gateway.url}/api/v1/users/{user['id']}", timeout=5)
    assert after_update.json()["email"] == new_email

    deleted = requests.delete(f"{gateway.url}/api/v1/users/{user['id']}", timeout=10)
    assert deleted.status_code == 204
    assert deleted.content == b""
    assert "Content-Type" not in deleted.headers
    assert read_count(gateway.url, new_email).json()["count"] == db_count(new_email) == 0
    gone = requests.get(f"{gateway.url}/api/v1/users/{user['id']}", timeout=5)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "code"),
    [
        ("POST", "/api/v1/users", {"json": {"username": "ok_name"}}, 400, "invalid_email"),
        ("POST", "/api/v1/users", {"json": {"username": "_x", "email": "a@b.co"}}, 400,
         "invalid_username"),
        ("POST", "/api/v1/users", {"json": {"username": "a", "email": "a@b.co", "x": 1}}, 400,
         "unknown_field"),
        ("POST", "/api/v1/users", {"data": "{nope", "headers": {"Content-Type":
         "application/json"}}, 400, "invalid_json"),
        ("POST", "/api/v1/users", {"data": "username=a"}, 415, "unsupported_media_type"),
        ("POST", "/api/v1/users", {"data": "x" * 70000, "headers": {"Content-Type":
         "application/json"}}, 413, "payload_too_large"),
        ("PATCH", "/api/v1/users/abc", {"json": {"username": "a"}}, 400, "invalid_id"),
        ("PATCH", "/api/v1/users/0", {"json": {"username": "a"}}, 400, "invalid_id"),
        ("DELETE", "/api/v1/users/-1", {}, 400, "invalid_id"),
        ("PATCH", "/api/v1/users/999999999", {"json": {"username": "zz"}}, 404, "not_found"),
        ("DELETE", "/api/v1/users/999999999", {}, 404, "not_found"),
    ],
)  # fmt: skip
def test_write_errors_pass_through_as_json(gateway, method, path, kwargs, status, code):
    response = requests.request(method, gateway.url + path, timeout=10, **kwargs)
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    assert response.json()["error"]["code"] == code


def test_duplicate_username_is_a_conflict(gateway):
    username = unique_username()
    assert create(gateway.url, unique_email(), username).status_code == 201
    again = create(gateway.url, unique_email(), username)
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "conflict"


# ---- compute ---------------------------------------------------------------------------


def compute(base: str, body: object, headers: dict[str, str] | None = None) -> requests.Response:
    return requests.post(base + "/api/v1/compute", json=body, headers=headers, timeout=30)


@pytest.mark.parametrize("vector", COMPUTE["vectors"], ids=lambda v: str(v["complexity"]))
def test_go_and_python_checksums_agree_with_the_contract(gateway, vector):
    n = vector["complexity"]
    go = compute(gateway.url, {"complexity": n, "engine": "go"})
    assert go.status_code == 200, go.text
    assert go.json()["checksum"] == vector["checksum"]
    assert go.json()["engine"] == "go"
    if n <= 20:  # PYTHON_COMPUTE_MAX_COMPLEXITY's default
        python = compute(gateway.url, {"complexity": n, "engine": "python"})
        assert python.status_code == 200, python.text
        body = python.json()
        assert body["checksum"] == go.json()["checksum"]
        assert body["engine"] == "python" and body["complexity"] == n
        assert body["elapsed_ms"] > 0
    else:
        python = compute(gateway.url, {"complexity": n, "engine": "python"})
        assert python.status_code == 400
        assert python.json()["error"]["code"] == "invalid_complexity"


def test_engine_defaults_to_go(gateway):
    answer = compute(gateway.url, {"complexity": 1})
    assert answer.status_code == 200
    assert answer.json()["engine"] == "go"


@pytest.mark.parametrize("engine", ["go", "python"])
@pytest.mark.parametrize("value", COMPUTE["invalid"], ids=repr)
def test_invalid_complexity_is_refused_before_anything_runs(gateway, engine, value):
    response = compute(gateway.url, {"complexity": value, "engine": engine})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_complexity"


@pytest.mark.parametrize(
    ("data", "content_type", "status", "code"),
    [
        ("{", "application/json", 400, "invalid_json"),
        ("", "application/json", 400, "invalid_json"),
        ('{"complexity": NaN}', "application/json", 400, "invalid_json"),
        ('{"complexity": 1}', "text/plain", 415, "unsupported_media_type"),
        ('{"complexity": 1, "engine": "rust"}', "application/json", 400, "invalid_request"),
        ('{"complexity": 1, "speed": 2}', "application/json", 400, "unknown_field"),
        ("[1]", "application/json", 400, "invalid_request"),
        ('{"complexity": 1}'.encode("utf-16"), "application/json", 400, "invalid_json"),
    ],
)
def test_bad_compute_bodies(gateway, data, content_type, status, code):
    response = requests.post(
        gateway.url + "/api/v1/compute",
        data=data,
        headers={"Content-Type": content_type},
        timeout=10,
    )
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


def test_python_engine_is_lab_only(production_gateway):
    response = compute(production_gateway.url, {"complexity": 1, "engine": "python"}, AUTH)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "lab_disabled"
    assert compute(production_gateway.url, {"complexity": 1}, AUTH).status_code == 200


PBKDF2 = COMPUTE["pbkdf2"]
BCRYPT = COMPUTE["bcrypt"]
ENGINES = ("go", "python")


def answer_of(response: requests.Response, engine: str, kind: str) -> dict:
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["engine"] == engine and body["kind"] == kind and body["elapsed_ms"] > 0
    return body


@pytest.mark.parametrize("vector", PBKDF2["vectors"], ids=lambda v: str(v["iterations"]))
def test_both_engines_agree_with_the_pbkdf2_vectors(gateway, vector):
    fields = {key: vector[key] for key in ("password", "salt", "iterations")}
    for engine in ENGINES:
        body = answer_of(compute(gateway.url, {"kind": "pbkdf2", **fields, "engine": engine}),
                         engine, "pbkdf2")  # fmt: skip
        assert set(body) == {"kind", "engine", "iterations", "derived_key", "elapsed_ms"}
        assert body["derived_key"] == vector["derived_key"]
        assert body["iterations"] == vector["iterations"]


@pytest.mark.parametrize("vector", BCRYPT["verify_vectors"], ids=lambda v: v["hash"][:10])
def test_both_engines_agree_with_the_bcrypt_verify_vectors(gateway, vector):
    request = {"kind": "bcrypt", "password": vector["password"], "hash": vector["hash"]}
    for engine in ENGINES:
        body = answer_of(compute(gateway.url, {**request, "engine": engine}), engine, "bcrypt")
        assert set(body) == {"kind", "engine", "cost", "match", "elapsed_ms"}
        assert body["match"] is vector["match"]
        assert body["cost"] == int(vector["hash"][4:6])


def test_a_bcrypt_hash_of_either_engine_verifies_in_both(gateway):
    """Hashing is random (a fresh salt): what both engines must agree on is
    the format, the cost, and the verdict of either engine on either's hash."""
    pattern = re.compile(BCRYPT["hash_pattern"])
    hashes = []
    for engine in ENGINES:
        request = {"kind": "bcrypt", "password": "p\u00e4ss \u2615", "cost": 5, "engine": engine}
        body = answer_of(compute(gateway.url, request), engine, "bcrypt")
        assert set(body) == {"kind", "engine", "cost", "hash", "elapsed_ms"}
        assert pattern.match(body["hash"]) and body["hash"][3:7] == "$05$" and body["cost"] == 5
        hashes.append(body["hash"])
    assert hashes[0] != hashes[1]
    for hashed in hashes:
        for engine in ENGINES:
            for password, match in (("p\u00e4ss \u2615", True), ("p\u00e4ss \u2614", False)):
                request = {"kind": "bcrypt", "password": password, "hash": hashed, "engine": engine}
                body = answer_of(compute(gateway.url, request), engine, "bcrypt")
                assert body["match"] is match, (engine, hashed, password)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_default_costs_are_the_contracts(gateway, engine):
    pbkdf2 = {"kind": "pbkdf2", "password": "password", "salt": "salt", "engine": engine}
    assert compute(gateway.url, pbkdf2).json()["iterations"] == PBKDF2["iterations_default"]
    bcrypt = {"kind": "bcrypt", "password": "password", "engine": engine}
    body = answer_of(compute(gateway.url, bcrypt), engine, "bcrypt")
    assert body["cost"] == BCRYPT["cost_default"]
    assert body["hash"][3:7] == f"${BCRYPT['cost_default']:02d}$"


def _bad_bodies() -> list[tuple[dict, str]]:
    bodies: list[tuple[dict, str]] = [
        ({"kind": "scrypt", "password": "p"}, "invalid_request"),
        ({"kind": "pbkdf2", "password": "p", "salt": "s", "cost": 5}, "unknown_field"),
        ({"kind": "bcrypt", "password": "p", "salt": "s"}, "unknown_field"),
        ({"complexity": 1, "password": "p"}, "unknown_field"),
        ({"kind": "pbkdf2", "password": "p"}, "invalid_request"),
        ({"kind": "bcrypt", "password": "p", "cost": 5,
          "hash": BCRYPT["verify_vectors"][0]["hash"]}, "invalid_request"),
    ]  # fmt: skip
    bodies += [({"kind": "pbkdf2", "password": "p", "salt": "s", "iterations": value},
                "invalid_cost") for value in PBKDF2["invalid_iterations"]]  # fmt: skip
    bodies += [({"kind": "bcrypt", "password": "p", "cost": value}, "invalid_cost")
               for value in BCRYPT["invalid_costs"]]  # fmt: skip
    bodies += [({"kind": "bcrypt", "password": "p", "hash": value}, "invalid_request")
               for value in BCRYPT["invalid_hashes"]]  # fmt: skip
    bodies += [({"kind": "bcrypt", "password": "p", "hash": value}, "invalid_cost")
               for value in BCRYPT["out_of_range_hashes"]]  # fmt: skip
    for value in COMPUTE["secrets"]["invalid_passwords"]:
        bodies.append(({"kind": "bcrypt", "password": value, "cost": 4}, "invalid_request"))
        bodies.append(({"kind": "pbkdf2", "password": "p", "salt": value}, "invalid_request"))
    return bodies


@pytest.mark.parametrize("engine", ENGINES)
def test_bad_kinds_and_parameters_are_4xx_json(gateway, engine):
    for body, code in _bad_bodies():
        # json.dumps escapes a lone surrogate, which requests' json= would too.
        data = json.dumps({**body, "engine": engine})
        response = requests.post(
            gateway.url + "/api/v1/compute",
            data=data,
            headers={"Content-Type": "application/json"},
            timeout=10,
        )
        assert response.status_code == 400, (data, response.text)
        assert response.headers["Content-Type"].startswith("application/json")
        assert response.json()["error"]["code"] == code, data


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"kind": "pbkdf2", "password": "p", "salt": "s", "iterations": 600_001}, "invalid_cost"),
        ({"kind": "bcrypt", "password": "p", "cost": 12}, "invalid_cost"),
    ],
    ids=("pbkdf2", "bcrypt"),
)
def test_python_caps_refuse_what_go_accepts(start_gateway, body, code):
    gw = start_gateway(PYTHON_COMPUTE_MAX_BCRYPT_COST="11", GATEWAY_WORKERS="1")
    refused = compute(gw.url, {**body, "engine": "python"})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == code
    assert "PYTHON_COMPUTE_MAX_" in refused.json()["error"]["message"]
    assert compute(gw.url, {**body, "engine": "go"}).status_code == 200


def test_python_engine_runs_one_computation_at_a_time_per_worker(start_gateway):
    """PYTHON_COMPUTE_MAX_CONCURRENCY: bcrypt releases the GIL, so without the
    bound every Flask thread of a worker could hash at once."""
    gw = start_gateway(
        GATEWAY_WORKERS="1", PYTHON_COMPUTE_MAX_CONCURRENCY="1", PYTHON_COMPUTE_QUEUE_WAIT_MS="0"
    )
    request = {"kind": "bcrypt", "password": "p", "cost": 11, "engine": "python"}
    barrier = threading.Barrier(4)
    answers: list[requests.Response] = []

    def send() -> None:
        barrier.wait()
        answers.append(compute(gw.url, request))

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    statuses = sorted(answer.status_code for answer in answers)
    assert len(statuses) == 4 and 200 in statuses, statuses
    refused = [answer for answer in answers if answer.status_code != 200]
    assert refused, f"four concurrent hashes all ran: {statuses}"
    for answer in refused:
        assert answer.status_code == 503 and answer.headers["Retry-After"] == "1"
        assert answer.json()["error"]["code"] == "unavailable"


def test_python_kinds_are_lab_only(production_gateway):
    for body in ({"kind": "pbkdf2", "password": "p", "salt": "s", "iterations": 1},
                 {"kind": "bcrypt", "password": "p", "cost": 4}):  # fmt: skip
        refused = compute(production_gateway.url, {**body, "engine": "python"}, AUTH)
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "lab_disabled"
        assert compute(production_gateway.url, body, AUTH).status_code == 200


# ---- coherence ---------------------------------------------------------------------------


def _held_read(rdb, url: str, hold: str) -> tuple[threading.Thread, dict]:
    """Start a read that pauses after its DB read, before its cache store."""
    result: dict[str, requests.Response] = {}
    thread = threading.Thread(
        target=lambda: result.update(
            response=requests.get(url, headers={"X-Test-Hold": hold}, timeout=30)
        )
    )
    thread.start()
    reached = rdb.blpop([f"aside:test:{hold}:reached"], timeout=HOLD_DEADLINE_S)
    assert reached is not None, "the reader never reached its hold point"
    return thread, result


def _release(rdb, hold: str, thread: threading.Thread) -> None:
    rdb.rpush(f"aside:test:{hold}:release", "go")
    thread.join(timeout=HOLD_DEADLINE_S + 5)
    assert not thread.is_alive()


@pytest.mark.parametrize("mode", ["lease", "naive"])
def test_stale_set_race_on_count(mode, gateway, naive_gateway, rdb, db_count):
    gw = gateway if mode == "lease" else naive_gateway
    email = unique_email("race")
    hold = f"count-{mode}-{time.monotonic_ns()}"
    thread, result = _held_read(rdb, f"{gw.url}{COUNT}?email={email}", hold)

    created = create(gw.url, email)  # commits, then the core drops key and lease
    assert created.status_code == 201, created.text
    _release(rdb, hold, thread)
    assert result["response"].json()["count"] == 0  # read before the write: old value

    after = read_count(gw.url, email)
    assert db_count(email) == 1
    if mode == "lease":
        # The late store found its lease gone and stored nothing.
        assert after.json()["count"] == 1
        assert after.headers["X-Cache"] == "MISS"
    else:
        # Without leases the late store wins: a stale value for a whole TTL.
        assert after.json()["count"] == 0
        assert after.headers["X-Cache"] == "HIT"


@pytest.mark.parametrize("mode", ["lease", "naive"])
def test_stale_set_race_on_user(mode, gateway, naive_gateway, rdb):
    gw = gateway if mode == "lease" else naive_gateway
    created = create(gw.url, unique_email("user-race"))
    assert created.status_code == 201
    user_id = created.json()["id"]
    hold = f"user-{mode}-{time.monotonic_ns()}"
    thread, result = _held_read(rdb, f"{gw.url}/api/v1/users/{user_id}", hold)

    new_name = unique_username("renamed")
    updated = requests.patch(
        f"{gw.url}/api/v1/users/{user_id}", json={"username": new_name}, timeout=10
    )
    assert updated.status_code == 200, updated.text
    _release(rdb, hold, thread)
    assert result["response"].json()["username"] == created.json()["username"]

    after = requests.get(f"{gw.url}/api/v1/users/{user_id}", timeout=10).json()
    if mode == "lease":
        assert after["username"] == new_name
    else:
        assert after["username"] == created.json()["username"]


def test_reads_equal_the_database_after_concurrent_writes(gateway, db_count):
    email = unique_email("hot")
    stop = threading.Event()
    read_errors: list[str] = []
    write_errors: list[str] = []

    def reader() -> None:
        session = requests.Session()
        while not stop.is_set():
            response = session.get(gateway.url + COUNT, params={"email": email}, timeout=10)
            if response.status_code != 200:
                read_errors.append(response.text)

    def writer() -> None:
        session = requests.Session()
        for _ in range(12):
            made = session.post(
                gateway.url + "/api/v1/users",
                json={"username": unique_username(), "email": email},
                timeout=10,
            )
            if made.status_code != 201:
                write_errors.append(made.text)
                continue
            if made.json()["id"] % 2 == 0:  # delete about half again
                gone = session.delete(f"{gateway.url}/api/v1/users/{made.json()['id']}", timeout=10)
                if gone.status_code != 204:
                    write_errors.append(gone.text)

    readers = [threading.Thread(target=reader) for _ in range(6)]
    writers = [threading.Thread(target=writer) for _ in range(3)]
    for thread in readers + writers:
        thread.start()
    for thread in writers:
        thread.join(timeout=60)
    stop.set()
    for thread in readers:
        thread.join(timeout=10)
    assert write_errors == [] and read_errors == []

    expected = db_count(email)
    assert expected > 0
    # New connections, so both workers answer.
    answers = [read_count(gateway.url, email).json()["count"] for _ in range(20)]
    assert answers == [expected] * 20
