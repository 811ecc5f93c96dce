"""Pure logic against the shared contracts: keys, values, validation, compute, config."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
import redis.sentinel
from aside_gateway.backends import compute, redis_clients
from aside_gateway.backends.breaker import CircuitBreaker
from aside_gateway.config import metrics
from aside_gateway.config.settings import ConfigError, Settings, load_settings, split_host_port
from aside_gateway.contracts import cache_keys, validation
from aside_gateway.contracts.errors import STATUS_BY_CODE, ApiError
from aside_gateway.contracts.openapi import IDEMPOTENCY_KEY_PARAMETER
from aside_gateway.contracts.routes import ARRIVED_KEY, CLIENT_GONE_KEY
from aside_gateway.door.admission import Admission
from aside_gateway.front.collector import PauseMeter, settle
from aside_gateway.misses.db import Database
from aside_gateway.web.auth import bearer_token
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from redis.crc import key_slot

CONTRACTS = Path(__file__).resolve().parents[2] / "contracts"
REPO = CONTRACTS.parent
CACHE = json.loads((CONTRACTS / "cache.json").read_text())
VALIDATION = json.loads((CONTRACTS / "validation.json").read_text())
COMPUTE = json.loads((CONTRACTS / "compute.json").read_text())
ERRORS = json.loads((CONTRACTS / "errors.json").read_text())

BASE_ENV = {
    "DATABASE_URL": "postgresql://aside@127.0.0.1:25432/aside",
    "REDIS_URL": "redis://127.0.0.1:26379/0",
    "CORE_URL": "http://127.0.0.1:28080",
    "WRITE_TOKEN": "unit-test-token-0123456789",  # production (the default) requires one
    "CORE_TOKEN": "unit-test-core-token-0123456789",  # and this one too
}


def stale_keys(
    write: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> set[str]:
    """Keys a committed write makes stale, spelt with cache_keys (the core deletes
    them; the gateway never writes, so only this test needs the sets).

    `before`/`after` hold the row's `id` and `email` before and after the write.
    """
    count_key, user_key = cache_keys.count_key, cache_keys.user_key
    if write == "create" and after is not None:
        return {count_key(after["email"]), user_key(after["id"])}
    if write == "update" and before is not None and after is not None:
        keys = {user_key(before["id"])}
        if before["email"] != after["email"]:
            keys |= {count_key(before["email"]), count_key(after["email"])}
        return keys
    if write == "delete" and before is not None:
        return {count_key(before["email"]), user_key(before["id"])}
    raise ValueError(f"unknown write {write!r} or missing row")


def username_problem(username: str) -> str | None:
    """Why `username` breaks the contract (the core checks it; the gateway
    only publishes validation.USERNAME_RE in its OpenAPI document)."""
    if validation.USERNAME_RE.fullmatch(username):
        return None
    return "username must be 1 to 64 of A-Z a-z 0-9 _ . - and start with a letter or digit"


# ---- cache.json ----------------------------------------------------------------


def test_prefix_ttl_and_lease_timings_match_the_contract():
    assert CACHE["prefix"] == cache_keys.PREFIX
    assert CACHE["ttl_seconds_default"] == cache_keys.TTL_SECONDS_DEFAULT
    assert Settings("d", "r", "c").cache_ttl_seconds == CACHE["ttl_seconds_default"]
    assert CACHE["lease"]["suffix"] == cache_keys.LEASE_SUFFIX
    assert CACHE["lease"]["ttl_ms"] == cache_keys.LEASE_TTL_MS
    assert CACHE["lease"]["poll_ms"] == cache_keys.LEASE_POLL_MS
    assert CACHE["lease"]["failure_prefix"] == cache_keys.LEASE_FAILURE_PREFIX
    assert CACHE["lease"]["failure_ms"] == cache_keys.LEASE_FAILURE_MS


@pytest.mark.parametrize("vector", CACHE["keys"], ids=lambda v: v["key"])
def test_key_names(vector):
    if vector["kind"] == "count_by_email":
        key = cache_keys.count_key(vector["email"])
    else:
        key = cache_keys.user_key(vector["id"])
    assert key == vector["key"]
    assert cache_keys.lease_key(key) == vector["key"] + CACHE["lease"]["suffix"]


def _slot(name: str) -> int:
    return key_slot(name.encode())


@pytest.mark.parametrize("vector", CACHE["keys"], ids=lambda v: v["key"])
def test_a_key_and_its_lease_share_a_cluster_slot(vector):
    key = vector["key"]
    assert _slot(cache_keys.lease_key(key)) == _slot(key)


@pytest.mark.parametrize("vector", CACHE["track_keys"], ids=lambda v: v["key"])
def test_a_track_key_and_its_lease_share_a_cluster_slot(vector):
    key = vector["key"]
    assert _slot(cache_keys.lease_key(key)) == _slot(key)
    assert _slot(key) == _slot(cache_keys.track_key(vector["id"], None, "raw"))


@hypothesis_settings(max_examples=300, deadline=None, database=None)
@given(st.text(alphabet="{}ab@.", min_size=1, max_size=12) | st.text(min_size=1, max_size=40))
def test_any_email_and_its_lease_share_a_cluster_slot(email):
    """Only the first {...} counts: braces inside the email never split a key from its lease."""
    key = cache_keys.count_key(email)
    assert _slot(cache_keys.lease_key(key)) == _slot(key)


def test_without_the_hash_tag_a_key_and_its_lease_would_part():
    """What the braces buy: untagged, most keys and their leases land in different slots."""
    emails = [f"user{i}@example.com" for i in range(50)]
    parted = sum(_slot(f"aside:v1:count:{e}") != _slot(f"aside:v1:count:{e}:lease") for e in emails)
    assert parted > 40


@pytest.mark.parametrize("vector", CACHE["user_json"], ids=lambda v: v["row"]["username"])
def test_user_json(vector):
    row = vector["row"]
    created = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
        microseconds=row["created_at_unix_micros"]
    )
    got = cache_keys.user_json(row["id"], row["username"], row["email"], created)
    assert got == vector["json"]
    assert json.loads(cache_keys.encode_json(got)) == vector["json"]


def test_created_at_is_converted_to_utc():
    plus_one = timezone(timedelta(hours=1))
    local = datetime(2023, 11, 15, 0, 13, 20, 123456, tzinfo=plus_one)
    assert cache_keys.format_created_at(local) == "2023-11-14T23:13:20.123456Z"


@pytest.mark.parametrize("case", CACHE["invalidation"], ids=lambda c: c["name"])
def test_invalidation_sets(case):
    assert stale_keys(case["write"], case["before"], case["after"]) == set(case["keys"])


def test_value_encodings():
    assert cache_keys.encode_count(42) == b"42"
    assert cache_keys.NEGATIVE == b"null"
    assert json.loads(cache_keys.NEGATIVE) is None
    assert cache_keys.encode_json({"e": "jürgen"}) == '{"e":"jürgen"}'.encode()


# ---- validation.json -------------------------------------------------------------


@pytest.mark.parametrize("email", VALIDATION["email_valid"])
def test_valid_emails(email):
    assert validation.validate_email(email) == email


@pytest.mark.parametrize("email", VALIDATION["email_invalid"], ids=repr)
def test_invalid_emails(email):
    with pytest.raises(ApiError) as err:
        validation.validate_email(email)
    assert err.value.code == "invalid_email"
    assert err.value.status == 400


@pytest.mark.parametrize(
    "email",
    ["\ud800@example.com", "a\u2028b@example.com", "a\tb@example.com", "a\u3000@example.com"],
    ids=repr,
)
def test_more_invalid_emails(email):
    with pytest.raises(ApiError):
        validation.validate_email(email)


def test_missing_email_is_invalid_email():
    with pytest.raises(ApiError) as err:
        validation.validate_email(None)
    assert err.value.code == "invalid_email"


@pytest.mark.parametrize("username", VALIDATION["username_valid"])
def test_valid_usernames(username):
    assert username_problem(username) is None


@pytest.mark.parametrize("username", VALIDATION["username_invalid"], ids=repr)
def test_invalid_usernames(username):
    assert username_problem(username) is not None


@pytest.mark.parametrize("raw", VALIDATION["id_valid"])
def test_valid_ids(raw):
    assert validation.parse_id(raw) == int(raw)


@pytest.mark.parametrize("raw", [*VALIDATION["id_invalid"], "9" * 5000, "00", "1 "], ids=repr)
def test_invalid_ids(raw):
    with pytest.raises(ApiError) as err:
        validation.parse_id(raw)
    assert err.value.code == "invalid_id"


def test_leading_zeros_name_the_same_id():
    assert validation.parse_id("007") == 7


# ---- compute.json ----------------------------------------------------------------


CAP = Settings("d", "r", "c").python_compute_max_complexity
PBKDF2 = COMPUTE["pbkdf2"]
BCRYPT = COMPUTE["bcrypt"]
SECRETS = COMPUTE["secrets"]
CHECKSUM = validation.KIND_CHECKSUM
A_HASH = BCRYPT["verify_vectors"][0]["hash"]


@pytest.mark.parametrize(
    "vector", [v for v in COMPUTE["vectors"] if v["complexity"] <= CAP], ids=str
)
def test_python_checksum_matches_vectors(vector):
    assert compute.checksum(vector["complexity"]) == vector["checksum"]


def test_python_arm_answer_shape():
    answer = compute.run(validation.ComputeJob(CHECKSUM, "python", complexity=1))
    assert list(answer) == ["kind", "engine", "complexity", "checksum", "elapsed_ms"]
    assert answer["kind"] == CHECKSUM and answer["complexity"] == 1
    assert answer["engine"] == "python"
    assert answer["checksum"] == COMPUTE["vectors"][0]["checksum"]
    assert answer["elapsed_ms"] > 0


@pytest.mark.parametrize("vector", PBKDF2["vectors"], ids=lambda v: str(v["iterations"]))
def test_python_pbkdf2_matches_vectors(vector):
    job = validation.validate_compute_body({"kind": "pbkdf2", **_pbkdf2_fields(vector)})
    answer = compute.run(job)
    assert answer["derived_key"] == vector["derived_key"]
    assert answer["iterations"] == vector["iterations"] and answer["kind"] == "pbkdf2"


def _pbkdf2_fields(vector: dict[str, Any]) -> dict[str, Any]:
    return {key: vector[key] for key in ("password", "salt", "iterations")}


@pytest.mark.parametrize("vector", BCRYPT["verify_vectors"], ids=lambda v: v["hash"][:10])
def test_python_bcrypt_verify_vectors(vector):
    body = {"kind": "bcrypt", "password": vector["password"], "hash": vector["hash"]}
    answer = compute.run(validation.validate_compute_body(body))
    assert answer["match"] is vector["match"]
    assert answer["cost"] == int(vector["hash"][4:6])


@pytest.mark.parametrize(
    "vector", [v for v in BCRYPT["verify_vectors"] if v["match"]], ids=lambda v: v["hash"][:10]
)
def test_bcrypt_with_the_hashs_salt_is_deterministic(vector):
    """What verifying relies on: hashing again with a hash's own salt and cost
    gives that hash (the bcrypt package takes a whole hash as the salt)."""
    rehashed = compute.bcrypt.hashpw(vector["password"].encode(), vector["hash"].encode())
    assert rehashed.decode() == vector["hash"]


def test_python_bcrypt_hash_is_random_has_its_cost_and_verifies():
    job = validation.validate_compute_body({"kind": "bcrypt", "password": "hunter2", "cost": 4})
    first, second = compute.run(job), compute.run(job)
    pattern = BCRYPT["hash_pattern"]
    for answer in (first, second):
        assert validation.BCRYPT_HASH_RE.fullmatch(answer["hash"]), pattern
        assert answer["hash"][3:7] == "$04$" and answer["cost"] == 4
        assert compute.bcrypt_verify(b"hunter2", answer["hash"])
        assert not compute.bcrypt_verify(b"hunter3", answer["hash"])
    assert first["hash"] != second["hash"]


def test_compute_constants():
    assert COMPUTE["iterations_per_complexity"] == compute.ITERATIONS_PER_COMPLEXITY
    assert COMPUTE["complexity_min"] == validation.COMPLEXITY_MIN
    assert COMPUTE["complexity_max"] == validation.COMPLEXITY_MAX
    assert COMPUTE["default_kind"] == validation.KIND_CHECKSUM
    assert tuple(COMPUTE["kinds"]) == validation.COMPUTE_KINDS
    assert {k: frozenset(v) for k, v in COMPUTE["fields"].items()} == validation.KIND_FIELDS
    assert SECRETS["password_max_bytes"] == validation.PASSWORD_MAX_BYTES
    assert SECRETS["salt_max_bytes"] == validation.SALT_MAX_BYTES
    assert (PBKDF2["hash"], PBKDF2["key_bytes"]) == ("sha256", compute.PBKDF2_KEY_BYTES)
    assert (PBKDF2["iterations_min"], PBKDF2["iterations_max"], PBKDF2["iterations_default"]) == (
        validation.PBKDF2_ITERATIONS_MIN,
        validation.PBKDF2_ITERATIONS_MAX,
        validation.PBKDF2_ITERATIONS_DEFAULT,
    )
    assert (BCRYPT["cost_min"], BCRYPT["cost_max"], BCRYPT["cost_default"]) == (
        validation.BCRYPT_COST_MIN,
        validation.BCRYPT_COST_MAX,
        validation.BCRYPT_COST_DEFAULT,
    )
    plain = validation.BCRYPT_HASH_RE.pattern.replace("([0-9]{2})", "[0-9]{2}")  # the cost group
    assert BCRYPT["hash_pattern"] == f"^{plain}$"


def test_compute_defaults():
    pbkdf2 = validation.validate_compute_body({"kind": "pbkdf2", "password": "p", "salt": "s"})
    assert pbkdf2.iterations == PBKDF2["iterations_default"]
    hashing = validation.validate_compute_body({"kind": "bcrypt", "password": "p"})
    assert hashing.cost == BCRYPT["cost_default"] and hashing.hash is None


def _refused(body: Any) -> str:
    with pytest.raises(ApiError) as err:
        validation.validate_compute_body(body)
    return err.value.code


@pytest.mark.parametrize("value", COMPUTE["invalid"], ids=repr)
def test_invalid_complexities(value):
    assert _refused({"complexity": value}) == "invalid_complexity"


@pytest.mark.parametrize("value", PBKDF2["invalid_iterations"], ids=repr)
def test_invalid_iterations(value):
    body = {"kind": "pbkdf2", "password": "p", "salt": "s", "iterations": value}
    assert _refused(body) == "invalid_cost"


@pytest.mark.parametrize("value", BCRYPT["invalid_costs"], ids=repr)
def test_invalid_costs(value):
    assert _refused({"kind": "bcrypt", "password": "p", "cost": value}) == "invalid_cost"


@pytest.mark.parametrize("value", BCRYPT["invalid_hashes"], ids=repr)
def test_invalid_hashes(value):
    assert _refused({"kind": "bcrypt", "password": "p", "hash": value}) == "invalid_request"


@pytest.mark.parametrize("value", BCRYPT["out_of_range_hashes"], ids=repr)
def test_hashes_whose_cost_is_out_of_range(value):
    assert _refused({"kind": "bcrypt", "password": "p", "hash": value}) == "invalid_cost"


@pytest.mark.parametrize("value", SECRETS["invalid_passwords"], ids=repr)
def test_invalid_passwords_and_salts(value):
    assert _refused({"kind": "bcrypt", "password": value, "cost": 4}) == "invalid_request"
    assert _refused({"kind": "pbkdf2", "password": value, "salt": "s"}) == "invalid_request"
    assert _refused({"kind": "pbkdf2", "password": "p", "salt": value}) == "invalid_request"


def test_secret_limits_count_bytes_and_are_inclusive():
    job = validation.validate_compute_body(
        {"kind": "pbkdf2", "password": "\u00e9" * 36, "salt": "s" * 64, "iterations": 1}
    )
    assert len(job.password) == 72 and len(job.salt) == 64
    assert _refused({"kind": "pbkdf2", "password": "p", "salt": "s" * 65}) == "invalid_request"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({}, "invalid_complexity"),
        ({"complexity": 1, "engine": "rust"}, "invalid_request"),
        ({"complexity": 1, "engine": None}, "invalid_request"),
        ({"complexity": 1, "extra": 1}, "unknown_field"),
        ({"kind": "scrypt", "password": "p"}, "invalid_request"),
        ({"kind": None, "complexity": 1}, "invalid_request"),
        ({"kind": ["pbkdf2"], "complexity": 1}, "invalid_request"),
        ({"kind": "checksum", "complexity": 1, "cost": 5}, "unknown_field"),
        ({"complexity": 1, "password": "p"}, "unknown_field"),
        ({"kind": "pbkdf2", "password": "p", "salt": "s", "cost": 5}, "unknown_field"),
        ({"kind": "bcrypt", "password": "p", "salt": "s"}, "unknown_field"),
        ({"kind": "pbkdf2", "salt": "s"}, "invalid_request"),
        ({"kind": "pbkdf2", "password": "p"}, "invalid_request"),
        ({"kind": "bcrypt"}, "invalid_request"),
        ({"kind": "bcrypt", "password": "p", "cost": 5, "hash": A_HASH}, "invalid_request"),
        ({"kind": "bcrypt", "password": "p", "cost": 4, "engine": "rust"}, "invalid_request"),
        ([1], "invalid_request"),
        ("x", "invalid_request"),
    ],
    ids=repr,
)  # fmt: skip
def test_compute_body_errors(body, code):
    assert _refused(body) == code


def test_compute_body_defaults_to_go_and_checksum():
    assert validation.validate_compute_body({"complexity": 3}) == validation.ComputeJob(
        CHECKSUM, "go", complexity=3
    )
    python = validation.validate_compute_body({"complexity": 3, "engine": "python"})
    assert python == validation.ComputeJob(CHECKSUM, "python", complexity=3)


@pytest.mark.parametrize(
    ("body", "code", "variable"),
    [
        ({"complexity": 21}, "invalid_complexity", "PYTHON_COMPUTE_MAX_COMPLEXITY"),
        ({"kind": "pbkdf2", "password": "p", "salt": "s", "iterations": 600_001},
         "invalid_cost", "PYTHON_COMPUTE_MAX_PBKDF2_ITERATIONS"),
        ({"kind": "bcrypt", "password": "p", "cost": 12}, "invalid_cost",
         "PYTHON_COMPUTE_MAX_BCRYPT_COST"),
        ({"kind": "bcrypt", "password": "p", "hash": BCRYPT["verify_vectors"][5]["hash"]},
         "invalid_cost", "PYTHON_COMPUTE_MAX_BCRYPT_COST"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)  # fmt: skip
def test_python_caps(body, code, variable):
    settings = load_settings({**BASE_ENV, "PYTHON_COMPUTE_MAX_BCRYPT_COST": "9"})
    job = validation.validate_compute_body({**body, "engine": "python"})
    with pytest.raises(ApiError) as err:
        compute.check_caps(job, settings)
    assert err.value.code == code and variable in err.value.message
    at_cap = load_settings(BASE_ENV)
    if variable != "PYTHON_COMPUTE_MAX_BCRYPT_COST":
        return
    compute.check_caps(job, at_cap)  # 12 and the hash's 10 are within the default cap


def test_python_compute_slots_bound_concurrency():
    slots = compute.Slots(1, 0.05)
    job = validation.ComputeJob(CHECKSUM, "python", complexity=1)
    assert slots._slots.acquire(blocking=False)  # the one slot, taken
    started = time.monotonic()
    with pytest.raises(ApiError) as err:
        slots.run(job)
    waited = time.monotonic() - started
    assert err.value.code == "unavailable" and err.value.headers == {"Retry-After": "1"}
    assert 0.04 <= waited < 1
    slots._slots.release()
    assert slots.run(job)["checksum"] == COMPUTE["vectors"][0]["checksum"]


# ---- errors.json -----------------------------------------------------------------


def test_error_codes_match_the_contract():
    assert ERRORS["codes"] == STATUS_BY_CODE


# ---- config ----------------------------------------------------------------------


def test_defaults():
    settings = load_settings(BASE_ENV)
    assert settings.profile == "production"  # safe when unset; infra/env.sh sets lab
    assert settings.cache_ttl_seconds == 60
    assert settings.workers == 2
    assert settings.test_hooks is False
    assert settings.cache_coherence == "lease"


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
        ({"DATABASE_URL": ""}, "DATABASE_URL"),
        ({"DATABASE_URL": "mysql://x/y"}, "DATABASE_URL"),
        ({"REDIS_URL": "http://x"}, "REDIS_URL"),
        ({"REDIS_URL": "redis://127.0.0.1:6379/abc"}, "REDIS_URL"),
        ({"CORE_URL": "127.0.0.1:28080"}, "CORE_URL"),
        ({"CORE_URL": "http://host:99999"}, "CORE_URL"),
        ({"ASIDE_PROFILE": "staging"}, "ASIDE_PROFILE"),
        ({"CACHE_TTL_SECONDS": "abc"}, "CACHE_TTL_SECONDS"),
        ({"CACHE_TTL_SECONDS": "0"}, "CACHE_TTL_SECONDS"),
        ({"CACHE_TTL_SECONDS": "--5"}, "CACHE_TTL_SECONDS"),
        ({"GATEWAY_WORKERS": "1.5"}, "GATEWAY_WORKERS"),
        ({"GATEWAY_THREADS": "0"}, "GATEWAY_THREADS"),
        ({"GATEWAY_BIND": "nohost"}, "GATEWAY_BIND"),
        ({"DB_POOL_MIN": "9", "DB_POOL_MAX": "4"}, "DB_POOL_MIN"),
        ({"REDIS_TIMEOUT_MS": "5"}, "REDIS_TIMEOUT_MS"),
        ({"LAB_MAX_CONCURRENT_BYPASS": "x\ny"}, "LAB_MAX_CONCURRENT_BYPASS"),
        ({"PYTHON_COMPUTE_MAX_COMPLEXITY": "1001"}, "PYTHON_COMPUTE_MAX_COMPLEXITY"),
        ({"PYTHON_COMPUTE_MAX_PBKDF2_ITERATIONS": "0"}, "PYTHON_COMPUTE_MAX_PBKDF2_ITERATIONS"),
        ({"PYTHON_COMPUTE_MAX_BCRYPT_COST": "13"}, "PYTHON_COMPUTE_MAX_BCRYPT_COST"),
        ({"PYTHON_COMPUTE_MAX_CONCURRENCY": "0"}, "PYTHON_COMPUTE_MAX_CONCURRENCY"),
        ({"PYTHON_COMPUTE_QUEUE_WAIT_MS": "-1"}, "PYTHON_COMPUTE_QUEUE_WAIT_MS"),
        ({"ASIDE_TEST_HOOKS": "yes"}, "ASIDE_TEST_HOOKS"),
        ({"ASIDE_TEST_HOOKS": "1"}, "ASIDE_TEST_HOOKS"),  # refused in production
        ({"ASIDE_PROFILE": "lab", "ASIDE_CACHE_COHERENCE": "naive"}, "ASIDE_CACHE_COHERENCE"),
        ({"ASIDE_CACHE_COHERENCE": "loose"}, "ASIDE_CACHE_COHERENCE"),
        ({"WRITE_TOKEN": ""}, "WRITE_TOKEN"),  # required in production
        ({"WRITE_TOKEN": "short"}, "WRITE_TOKEN"),
        ({"WRITE_TOKEN": "has a space in the middle"}, "WRITE_TOKEN"),
        ({"METRICS_BIND": "28009"}, "METRICS_BIND"),
        ({"METRICS_BIND": "127.0.0.1:0"}, "METRICS_BIND"),
        ({"METRICS_BIND": "unix:/tmp/m.sock"}, "METRICS_BIND"),
        ({"GATEWAY_HEAD_TIMEOUT_S": "0"}, "GATEWAY_HEAD_TIMEOUT_S"),
        ({"GATEWAY_BODY_TIMEOUT_S": "x"}, "GATEWAY_BODY_TIMEOUT_S"),
        ({"GATEWAY_KEEPALIVE_S": "-1"}, "GATEWAY_KEEPALIVE_S"),
        ({"GATEWAY_MAX_CONNECTIONS": "0"}, "GATEWAY_MAX_CONNECTIONS"),
        ({"GATEWAY_QUEUE_TIMEOUT_MS": "5"}, "GATEWAY_QUEUE_TIMEOUT_MS"),
        ({"MISS_BATCH_MAX_PENDING": "0"}, "MISS_BATCH_MAX_PENDING"),
        ({"DB_KEEPALIVES_IDLE_S": "0"}, "DB_KEEPALIVES_IDLE_S"),
        ({"DB_KEEPALIVES_INTERVAL_S": "1.5"}, "DB_KEEPALIVES_INTERVAL_S"),
        ({"DB_KEEPALIVES_COUNT": "101"}, "DB_KEEPALIVES_COUNT"),
        ({"DB_TCP_USER_TIMEOUT_MS": "-5"}, "DB_TCP_USER_TIMEOUT_MS"),
        ({"REDIS_KEEPALIVE_IDLE_S": "0"}, "REDIS_KEEPALIVE_IDLE_S"),
        ({"REDIS_KEEPALIVE_COUNT": "101"}, "REDIS_KEEPALIVE_COUNT"),
        ({"REDIS_TCP_USER_TIMEOUT_MS": "-5"}, "REDIS_TCP_USER_TIMEOUT_MS"),
        ({"CACHE_L1_SUBSCRIBER": "process"}, "CACHE_L1_SUBSCRIBER"),
        ({"GATEWAY_WRITES": "thread"}, "GATEWAY_WRITES"),
        ({"GATEWAY_SWITCH_INTERVAL_US": "0"}, "GATEWAY_SWITCH_INTERVAL_US"),
        ({"GATEWAY_GC_FREEZE": "yes"}, "GATEWAY_GC_FREEZE"),
        ({"GATEWAY_GC_GEN0": "99"}, "GATEWAY_GC_GEN0"),
        ({"REDIS_MODE": "sharded"}, "REDIS_MODE"),
        ({"REDIS_MODE": "cluster", "CACHE_L1_SUBSCRIBER": "loop"}, "CACHE_L1_SUBSCRIBER"),
        ({"REDIS_MODE": "sentinel"}, "REDIS_SENTINEL_MASTER"),
        ({"CACHE_STRATEGY": "tracked"}, "CACHE_STRATEGY"),
        ({"REDIS_MODE": "cluster", "CACHE_STRATEGY": "tracking"}, "CACHE_STRATEGY"),
        ({"CACHE_L1_TRACKING": "off"}, "CACHE_L1_TRACKING"),  # refused in production
        ({"ASIDE_PROFILE": "lab", "CACHE_L1_TRACKING": "no"}, "CACHE_L1_TRACKING"),
        ({"REDIS_MODE": "cluster", "REDIS_URL": "redis://127.0.0.1:7000/2"}, "REDIS_URL"),
        ({"REDIS_MODE": "cluster", "REDIS_URL": "unix:///tmp/redis.sock"}, "REDIS_URL"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_config_errors_are_one_line_naming_the_variable(overrides, variable):
    with pytest.raises(ConfigError) as err:
        load_settings({**BASE_ENV, **overrides})
    message = str(err.value)
    assert variable in message
    assert "\n" not in message


def test_who_keeps_a_tracking_connection():
    lab = {**BASE_ENV, "ASIDE_PROFILE": "lab"}
    assert load_settings({**BASE_ENV, "CACHE_STRATEGY": "tracking"}).l1_tracks
    assert not load_settings({**BASE_ENV, "CACHE_STRATEGY": "hybrid"}).l1_tracks
    assert load_settings(lab).l1_tracks  # the lab may ask ?cache=tracking
    # On a cluster the lab's ?cache=tracking has no L1 (Redis answers) ...
    assert not load_settings({**lab, "REDIS_MODE": "cluster"}).l1_tracks
    # ... and a tracking gateway follows no channel of the core's.
    assert not load_settings({**BASE_ENV, "CACHE_STRATEGY": "tracking"}).l1_subscribes
    off = load_settings({**lab, "CACHE_L1_TRACKING": "off"})
    assert off.l1_tracks and not off.cache_l1_tracking


def test_redis_modes():
    assert load_settings(BASE_ENV).redis_mode == "standalone"
    cluster = load_settings({**BASE_ENV, "REDIS_MODE": "cluster"})
    assert (cluster.redis_mode, cluster.redis_sentinel_master) == ("cluster", None)
    sentinel = load_settings(
        {**BASE_ENV, "REDIS_MODE": "sentinel", "REDIS_SENTINEL_MASTER": " aside "}
    )
    assert (sentinel.redis_mode, sentinel.redis_sentinel_master) == ("sentinel", "aside")


def test_the_standalone_client_keeps_its_pool_bound_and_timeouts():
    settings = load_settings({**BASE_ENV, "REDIS_URL": "redis://:pw@127.0.0.1:6399/3"})
    client = redis_clients.sync_client(
        settings, socket_timeout=0.2, connect_timeout=0.1, max_connections=7, pool_timeout=0.2
    )
    pool = redis_clients.single_pool(client)
    assert isinstance(pool, redis.BlockingConnectionPool)
    assert (pool.max_connections, pool.timeout) == (7, 0.2)
    kwargs = pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (0.2, 0.1)
    assert (kwargs["db"], kwargs["password"], kwargs["retry"].get_retries()) == (3, "pw", 0)


def test_the_sentinel_client_asks_the_sentinel_for_the_master():
    """Built without connecting: the Sentinel is asked on the first command."""
    settings = load_settings(
        {
            **BASE_ENV,
            "REDIS_URL": "redis://:pw@10.1.2.3:26380/2",
            "REDIS_MODE": "sentinel",
            "REDIS_SENTINEL_MASTER": "aside",
        }
    )
    client = redis_clients.sync_client(
        settings, socket_timeout=0.2, connect_timeout=0.1, max_connections=5, pool_timeout=0.2
    )
    pool = redis_clients.single_pool(client)
    assert isinstance(pool, redis.sentinel.SentinelConnectionPool)
    assert pool.service_name == "aside" and pool.max_connections == 5
    assert [
        c.connection_pool.connection_kwargs["host"] for c in pool.sentinel_manager.sentinels
    ] == ["10.1.2.3"]
    kwargs = pool.connection_kwargs
    assert (kwargs["db"], kwargs["password"], kwargs["socket_timeout"]) == (2, "pw", 0.2)
    sentinel_kwargs = pool.sentinel_manager.sentinels[0].connection_pool.connection_kwargs
    assert sentinel_kwargs["port"] == 26380 and sentinel_kwargs.get("password") is None
    asynchronous = redis_clients.async_client(settings, connect_timeout=0.1, max_connections=5)
    assert asynchronous.connection_pool.service_name == "aside"


def test_production_has_no_reads_without_the_pool():
    """cache=nopool is refused before it reaches the database in production;
    should a call get through anyway, the database object has no way to open
    a connection of its own."""
    env = {**BASE_ENV, "DATABASE_URL": "postgresql://aside@127.0.0.1:1/aside"}
    for profile, refused in (("production", True), ("lab", False)):
        database = Database(load_settings({**env, "ASIDE_PROFILE": profile}))
        try:
            with pytest.raises(ApiError) as err:
                database.count_by_email("a@b.co", pooled=False)
            # The lab tries (and finds nothing on port 1); production never connects.
            assert (err.value.code == "lab_disabled") is refused, err.value.code
        finally:
            database.close()


def test_database_connections_carry_tcp_keepalives():
    # An unreachable port: the pool only has to be built, not to connect.
    env = {**BASE_ENV, "DATABASE_URL": "postgresql://aside@127.0.0.1:1/aside"}
    settings = load_settings({**env, "DB_KEEPALIVES_IDLE_S": "7", "DB_TCP_USER_TIMEOUT_MS": "9000"})
    database = Database(settings)
    try:
        kwargs = database.pool.kwargs
        assert kwargs["keepalives"] == 1
        assert kwargs["keepalives_idle"] == 7
        assert kwargs["keepalives_interval"] == 2
        assert kwargs["keepalives_count"] == 3
        assert kwargs["tcp_user_timeout"] == 9000
        # libpq accepts them all: the conninfo it would connect with carries them.
        libpq = {k: v for k, v in kwargs.items() if k != "autocommit"}  # psycopg's own
        conninfo = psycopg.conninfo.make_conninfo(database.pool.conninfo, **libpq)
        parsed = psycopg.conninfo.conninfo_to_dict(conninfo)
        assert parsed["keepalives"] == "1"
        assert parsed["tcp_user_timeout"] == "9000"
    finally:
        database.close()


def test_lab_test_hooks_and_naive_mode_are_accepted_together():
    settings = load_settings(
        {
            **BASE_ENV,
            "ASIDE_PROFILE": "lab",
            "ASIDE_TEST_HOOKS": "1",
            "ASIDE_CACHE_COHERENCE": "naive",
        }
    )
    assert settings.is_lab and settings.test_hooks and settings.cache_coherence == "naive"


def _bad_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PROMETHEUS_MULTIPROC_DIR",)}
    env.update(BASE_ENV, CACHE_TTL_SECONDS="abc", GATEWAY_BIND="127.0.0.1:1")
    return env


def test_asgi_app_refuses_bad_config_with_one_line_and_no_traceback():
    result = subprocess.run(
        [sys.executable, "-c", "import aside_gateway.front.asgi"],
        env=_bad_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 4
    assert result.stderr.strip().count("\n") == 0
    assert "CACHE_TTL_SECONDS" in result.stderr
    assert "Traceback" not in result.stderr


def test_gunicorn_refuses_bad_config_with_one_line_and_no_traceback():
    gunicorn = Path(sys.executable).parent / "gunicorn"
    result = subprocess.run(
        [str(gunicorn), "--config", "gateway/gunicorn.conf.py", "aside_gateway.front.asgi:app"],
        cwd=REPO,
        env=_bad_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0
    assert "CACHE_TTL_SECONDS" in result.stderr
    assert "Traceback" not in result.stderr


# ---- circuit breaker -------------------------------------------------------------


def test_breaker_skips_then_lets_one_probe_through(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("aside_gateway.door.circuit.time.monotonic", lambda: now[0])
    breaker = CircuitBreaker(1.0)
    assert breaker.allow()
    breaker.record_failure()
    assert breaker.is_open
    assert not breaker.allow()
    now[0] += 1.01
    assert breaker.allow()  # the probe
    assert not breaker.allow()  # everyone else keeps skipping while it runs
    breaker.record_success()
    assert breaker.allow() and not breaker.is_open


def test_a_probe_given_back_without_a_verdict_goes_to_the_next_caller(monkeypatch):
    # The async hot path's deadline says nothing about Redis: Flask's GET probes instead.
    now = [100.0]
    monkeypatch.setattr("aside_gateway.door.circuit.time.monotonic", lambda: now[0])
    breaker = CircuitBreaker(1.0)
    breaker.record_failure()
    now[0] += 1.01
    assert breaker.allow()  # the async path takes the probe ...
    breaker.return_probe()  # ... and its deadline passes
    assert breaker.allow()  # the next caller probes at once
    assert not breaker.allow()
    closed = CircuitBreaker(1.0)
    closed.return_probe()  # a closed breaker stays closed
    assert not closed.is_open and closed.allow()


# ---- hot path ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "",
        "email=a%40b.co",
        "email=a+b@c.d",
        "email=%ff%fe@x.co",
        "email=x@y.z&email=second",
        "email=&cache=on",
        "cache=off&email=j%C3%BCrgen@b.de",
        "email=a@b.co&extra",
        "a=1&&b=2;c=3",
    ],
)
def test_hot_path_reads_the_query_exactly_like_flask(query):
    from aside_gateway.front.lookup import _query
    from werkzeug.wrappers import Request

    environ = {"QUERY_STRING": query, "REQUEST_METHOD": "GET", "wsgi.url_scheme": "http"}
    args = Request(environ).args
    assert _query(query) == {name: args.get(name) for name in args}


def test_hot_path_declines_a_query_that_is_not_utf8():
    from aside_gateway.front.lookup import _query

    assert _query("email=\xff@x.co") is None


@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("/api/v1/users/count", b"email=a%40b.co"),
        ("/api/v1/users/count", b"email=a%40b.co&cache=hybrid"),
        ("/api/v1/users/count", b"email=a%40b.co&cache=off"),
        ("/api/v1/users/count", b"email=not-an-email"),
        ("/api/v1/users/42", b""),
        ("/api/v1/users/0042", b"cache=l1"),
        ("/api/v1/users/x", b""),
    ],
)
def test_a_remembered_lookup_is_the_lookup_itself(path, query):
    from aside_gateway.front.lookup import lookup, remembered_lookup

    for default, lab in (("l2", True), ("hybrid", False)):
        expected = lookup("GET", path, query.decode("latin-1"), default, lab)
        assert remembered_lookup(path, query, default, lab) == expected
        assert remembered_lookup(path, query, default, lab) == expected  # from the memo


def test_the_remembered_lookups_are_bounded():
    from aside_gateway.front.lookup import MEMO_SIZE, remembered_lookup

    for n in range(MEMO_SIZE + 10):
        remembered_lookup("/api/v1/users/count", b"email=u%d@x.co" % n, "l2", True)
    assert remembered_lookup.cache_info().currsize == MEMO_SIZE


def test_a_count_body_is_rendered_once_per_email_and_value():
    from aside_gateway.front.lookup import lookup

    found = lookup("GET", "/api/v1/users/count", "email=a%40b.co")
    assert found.body(b"7") == b'{"email":"a@b.co","count":7}'
    assert found.body(b"7") is found.body(b"7")
    assert found.body(b"8") == b'{"email":"a@b.co","count":8}'
    assert found.body(b"-1") is None


# ---- production profile: write token, metrics bind -------------------------------


def test_write_token_is_required_in_production_and_never_shown():
    with pytest.raises(ConfigError) as err:
        load_settings({**BASE_ENV, "WRITE_TOKEN": ""})
    assert str(err.value) == "WRITE_TOKEN is required when ASIDE_PROFILE=production"
    secret = "not valid because of spaces"
    with pytest.raises(ConfigError) as err:
        load_settings({**BASE_ENV, "WRITE_TOKEN": secret})
    assert "WRITE_TOKEN" in str(err.value) and secret not in str(err.value)
    settings = load_settings(BASE_ENV)
    assert settings.write_token == BASE_ENV["WRITE_TOKEN"]
    assert BASE_ENV["WRITE_TOKEN"] not in repr(settings)


def test_core_token_is_required_in_production_and_never_shown():
    with pytest.raises(ConfigError) as err:
        load_settings({**BASE_ENV, "CORE_TOKEN": ""})
    assert str(err.value) == "CORE_TOKEN is required when ASIDE_PROFILE=production"
    for secret in ("not valid because of spaces", "short", "x" * 513):
        with pytest.raises(ConfigError) as err:
            load_settings({**BASE_ENV, "CORE_TOKEN": secret})
        assert str(err.value).startswith("CORE_TOKEN ") and secret not in str(err.value)
    settings = load_settings(BASE_ENV)
    assert settings.core_token == BASE_ENV["CORE_TOKEN"]
    assert BASE_ENV["CORE_TOKEN"] not in repr(settings)
    lab = {**BASE_ENV, "ASIDE_PROFILE": "lab"}
    assert load_settings({**lab, "CORE_TOKEN": ""}).core_token is None


def test_lab_needs_no_write_token_but_honours_one():
    lab = {**BASE_ENV, "ASIDE_PROFILE": "lab"}
    assert load_settings({**lab, "WRITE_TOKEN": ""}).write_token is None
    assert load_settings(lab).write_token == BASE_ENV["WRITE_TOKEN"]


def test_metrics_bind_default_and_split():
    settings = load_settings(BASE_ENV)
    assert settings.metrics_bind == "127.0.0.1:28009"
    assert not settings.metrics_on_app
    assert load_settings({**BASE_ENV, "ASIDE_PROFILE": "lab"}).metrics_on_app
    assert split_host_port("127.0.0.1:28009") == ("127.0.0.1", 28009)
    assert split_host_port("[::1]:9") == ("::1", 9)
    assert split_host_port(":9") == ("", 9)


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("", None),
        ("Bearer", None),
        ("Bearer   ", None),
        ("Basic abc", None),
        ("Bearer abc", b"abc"),
        ("bearer abc", b"abc"),
        ("BEARER  abc ", b"abc"),
        ("Bearer caf\xe9", b"caf\xe9"),
    ],
)
def test_bearer_token_parsing(header, token):
    assert bearer_token(header) == token


@pytest.mark.parametrize(
    "key", ["a", "k" * 255, "a b", "~!@#$%^&*()_+{}|:<>?", "550e8400-e29b-41d4-a716-446655440000"]
)
def test_valid_idempotency_keys(key):
    assert validation.idempotency_key([key]) == key


@pytest.mark.parametrize("values", [[""], ["k" * 256], ["cl\xe9"], ["a\tb"], ["a\x7f"], ["a", "b"]])
def test_invalid_idempotency_keys(values):
    with pytest.raises(ApiError) as err:
        validation.idempotency_key(values)
    assert err.value.code == "invalid_request"


def test_absent_idempotency_key():
    assert validation.idempotency_key([]) is None


def _admit(scope: dict[str, Any]) -> tuple[list[Any], bytes, bool]:
    called = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        called.append(True)
        start_response("200 OK", [])
        return [b"ran"]

    answered: list[Any] = []
    body = b"".join(
        Admission(app, queue_timeout_ms=100)(
            {"asgi.scope": scope}, lambda status, headers: answered.extend([status, headers])
        )
    )
    return answered, body, bool(called)


def test_admission_sheds_work_that_waited_too_long_or_lost_its_client():
    now = time.monotonic()
    answered, body, ran = _admit({ARRIVED_KEY: now - 0.5, CLIENT_GONE_KEY: lambda: False})
    assert not ran and answered[0].startswith("503")
    assert ("Retry-After", "1") in answered[1]
    assert json.loads(body)["error"]["code"] == "unavailable"
    _, _, ran = _admit({ARRIVED_KEY: now, CLIENT_GONE_KEY: lambda: True})
    assert not ran
    _, body, ran = _admit({ARRIVED_KEY: now, CLIENT_GONE_KEY: lambda: False})
    assert ran and body == b"ran"
    assert _admit({})[2]  # no scope keys (another server): run


def test_the_api_description_promises_the_cores_key_lifetime():
    idempotency = json.loads((CONTRACTS / "idempotency.json").read_text())
    hours = idempotency["ttl"]["default_seconds"] / 3600
    assert IDEMPOTENCY_KEY_PARAMETER["name"] == idempotency["header"]
    assert f"within {hours:g} h" in IDEMPOTENCY_KEY_PARAMETER["description"]


@pytest.fixture
def collector_restored():
    """The test process's collector as it was, whatever `settle` changed."""
    threshold, callbacks = gc.get_threshold(), list(gc.callbacks)
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    gc.callbacks[:] = callbacks


def test_a_settled_worker_walks_none_of_its_startup_objects_and_collects_seldom(
    collector_restored,
):
    gc.unfreeze()
    settle(load_settings(BASE_ENV))
    assert gc.get_freeze_count() > 1000  # the modules and everything built before
    assert gc.get_threshold()[0] == 50000
    # Settling twice (a second app in one process) adds no second meter.
    settle(load_settings({**BASE_ENV, "GATEWAY_GC_FREEZE": "0", "GATEWAY_GC_GEN0": "700"}))
    assert gc.get_threshold()[0] == 700
    assert sum(isinstance(c, PauseMeter) for c in gc.callbacks) == 1


def test_without_the_freeze_nothing_is_frozen(collector_restored):
    gc.unfreeze()
    settle(load_settings({**BASE_ENV, "GATEWAY_GC_FREEZE": "0"}))
    assert gc.get_freeze_count() == 0


def _gc_pauses(generation: str) -> float:
    (family,) = metrics.GC_PAUSE.collect()
    return sum(
        s.value
        for s in family.samples
        if s.name.endswith("_count") and s.labels["generation"] == generation
    )


def test_every_collection_is_observed_by_generation(collector_restored):
    before = _gc_pauses("1")
    settle(load_settings(BASE_ENV))
    gc.collect(1)
    gc.collect(1)
    assert _gc_pauses("1") == before + 2
