"""Input rules of contracts/validation.json and contracts/compute.json.

Every function raises `ApiError` with the contract's code; lengths count
Unicode code points, as the contract says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from aside_gateway.contracts import tolerance
from aside_gateway.contracts.errors import ApiError

# The tolerance's bounds, as the OpenAPI document and the tests read them here.
from aside_gateway.contracts.tolerance import TOLERANCE_LADDER as TOLERANCE_LADDER
from aside_gateway.contracts.tolerance import TOLERANCE_MAX as TOLERANCE_MAX
from aside_gateway.contracts.tolerance import TOLERANCE_MAX_LENGTH as TOLERANCE_MAX_LENGTH
from aside_gateway.contracts.tolerance import TOLERANCE_MIN as TOLERANCE_MIN

EMAIL_MAX = 254
EMAIL_LOCAL_MAX = 64
EMAIL_DOMAIN_MAX = 253
EMAIL_FORBIDDEN = frozenset('"(),:;<>[\\]')

# Checked by the core; the gateway publishes it in its OpenAPI document.
USERNAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")

ID_MAX = 9223372036854775807  # PostgreSQL bigint
ID_MAX_DIGITS = len(str(ID_MAX))

IDEMPOTENCY_KEY_MAX = 255

COMPLEXITY_MIN = 1
COMPLEXITY_MAX = 1000
COMPUTE_ENGINES = ("go", "python")
# contracts/compute.json: the kinds of work, the fields each may carry, their bounds.
KIND_CHECKSUM, KIND_PBKDF2, KIND_BCRYPT = "checksum", "pbkdf2", "bcrypt"
COMPUTE_KINDS = (KIND_CHECKSUM, KIND_PBKDF2, KIND_BCRYPT)
KIND_FIELDS = {
    KIND_CHECKSUM: frozenset({"kind", "engine", "complexity"}),
    KIND_PBKDF2: frozenset({"kind", "engine", "password", "salt", "iterations"}),
    KIND_BCRYPT: frozenset({"kind", "engine", "password", "cost", "hash"}),
}
COMPUTE_FIELDS = frozenset().union(*KIND_FIELDS.values())
PASSWORD_MAX_BYTES = 72  # bcrypt's own limit, for both kinds
SALT_MAX_BYTES = 64
PBKDF2_ITERATIONS_MIN = 1
PBKDF2_ITERATIONS_MAX = 1_000_000
PBKDF2_ITERATIONS_DEFAULT = 600_000  # OWASP's figure for PBKDF2-HMAC-SHA256
BCRYPT_COST_MIN = 4
BCRYPT_COST_MAX = 12
BCRYPT_COST_DEFAULT = 10
# Canonical modular crypt only: the last character of the salt and of the hash
# carry unused bits that must be zero (the Go engine would ignore them, the
# python engine refuses them).
BCRYPT_HASH_RE = re.compile(
    r"\$2[aby]\$([0-9]{2})\$[./A-Za-z0-9]{21}[.Oeu][./A-Za-z0-9]{30}[.CGKOSWaeimquy26]"
)


def _bad_char(ch: str) -> bool:
    code = ord(ch)
    return (
        code < 0x20
        or 0x7F <= code <= 0x9F  # DEL and C1 controls
        or 0xD800 <= code <= 0xDFFF  # lone surrogates cannot be stored as UTF-8
        or ch.isspace()
        or ch in EMAIL_FORBIDDEN
    )


def email_problem(email: str) -> str | None:
    """Why `email` breaks the contract's rules, or None when it is valid."""
    if not email:
        return "email must not be empty"
    if len(email) > EMAIL_MAX:
        return f"email must be at most {EMAIL_MAX} characters"
    if any(_bad_char(ch) for ch in email):
        return 'email contains whitespace, a control character or one of "(),:;<>[\\]'
    if email.count("@") != 1:
        return "email must contain exactly one '@'"
    local, domain = email.split("@")
    if not 1 <= len(local) <= EMAIL_LOCAL_MAX:
        return f"the part before '@' must be 1 to {EMAIL_LOCAL_MAX} characters"
    if not 1 <= len(domain) <= EMAIL_DOMAIN_MAX:
        return f"the domain must be 1 to {EMAIL_DOMAIN_MAX} characters"
    labels = domain.split(".")
    if len(labels) < 2 or any(label == "" for label in labels):
        return "the domain needs at least two non-empty labels separated by '.'"
    return None


def validate_email(value: str | None) -> str:
    if value is None:
        raise ApiError("invalid_email", "query parameter 'email' is required")
    problem = email_problem(value)
    if problem:
        raise ApiError("invalid_email", problem)
    return value


def parse_id(value: str) -> int:
    """A user id from a path segment: ASCII digits only, 1 to 2^63-1."""
    if not (value.isascii() and value.isdigit()):
        raise ApiError("invalid_id", "id must be a positive decimal integer")
    digits = value.lstrip("0")
    # Check the length before int(): huge digit strings are slow (and limited) to convert.
    if not digits or len(digits) > ID_MAX_DIGITS or int(digits) > ID_MAX:
        raise ApiError("invalid_id", f"id must be from 1 to {ID_MAX}")
    return int(digits)


def id_or_none(value: str) -> int | None:
    """parse_id's user id, or None where it would refuse the segment."""
    try:
        return parse_id(value)
    except ApiError:
        return None


def idempotency_key(values: list[str]) -> str | None:
    """The Idempotency-Key header's value (None when absent): one header of
    1 to 255 printable ASCII characters (space to '~'), as the core requires."""
    if not values:
        return None
    if len(values) > 1:
        raise ApiError("invalid_request", "give one Idempotency-Key header, not several")
    key = values[0]
    if not 1 <= len(key) <= IDEMPOTENCY_KEY_MAX or not all(" " <= ch <= "~" for ch in key):
        raise ApiError(
            "invalid_request",
            f"Idempotency-Key must be 1 to {IDEMPOTENCY_KEY_MAX} printable ASCII characters",
        )
    return key


def validate_complexity(value: Any) -> int:
    """A JSON integer from 1 to 1000; booleans, floats and strings are refused."""
    if type(value) is not int or not COMPLEXITY_MIN <= value <= COMPLEXITY_MAX:
        raise ApiError(
            "invalid_complexity",
            f"complexity must be an integer from {COMPLEXITY_MIN} to {COMPLEXITY_MAX}",
        )
    return value


@dataclass(frozen=True)
class ComputeJob:
    """A validated POST /api/v1/compute: the kind, the engine and that kind's
    parameters (the others keep their defaults). bcrypt verifies when `hash`
    is set, else hashes at `cost`."""

    kind: str
    engine: str
    complexity: int = 0
    password: bytes = b""
    salt: bytes = b""
    iterations: int = 0
    cost: int = 0
    hash: str | None = None


def _secret(body: dict[str, Any], name: str, max_bytes: int) -> bytes:
    """A password or salt: a string of 1 to max_bytes bytes of UTF-8 without
    U+0000 (bcrypt implementations disagree on it); a lone surrogate has no
    UTF-8 form."""
    rule = f"{name} must be a string of 1 to {max_bytes} bytes of UTF-8 without U+0000"
    if name not in body:
        raise ApiError("invalid_request", f"{name} is required: {rule}")
    value = body[name]
    try:
        encoded = value.encode("utf-8") if isinstance(value, str) else None
    except UnicodeEncodeError:
        encoded = None
    if encoded is None or not 1 <= len(encoded) <= max_bytes or b"\0" in encoded:
        raise ApiError("invalid_request", rule)
    return encoded


def _work(body: dict[str, Any], name: str, low: int, high: int, default: int) -> int:
    """An optional integer work parameter (iterations, cost): absent means default."""
    if name not in body:
        return default
    value = body[name]
    if type(value) is not int or not low <= value <= high:
        raise ApiError("invalid_cost", f"{name} must be an integer from {low} to {high}")
    return value


def bcrypt_hash_cost(value: Any) -> int:
    """The cost a bcrypt hash names; 400 invalid_request unless it is a
    canonical hash, 400 invalid_cost when its cost is out of range (verifying
    costs what hashing did)."""
    match = BCRYPT_HASH_RE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ApiError(
            "invalid_request",
            "hash must be a bcrypt hash: $2a$, $2b$ or $2y$, two cost digits, "
            "53 characters of ./A-Za-z0-9",
        )
    cost = int(match.group(1))
    if not BCRYPT_COST_MIN <= cost <= BCRYPT_COST_MAX:
        raise ApiError(
            "invalid_cost", f"the hash's cost must be from {BCRYPT_COST_MIN} to {BCRYPT_COST_MAX}"
        )
    return cost


def _parameters(kind: str, body: dict[str, Any], engine: str) -> ComputeJob:
    if kind == KIND_CHECKSUM:
        if "complexity" not in body:
            raise ApiError("invalid_complexity", "complexity is required")
        return ComputeJob(kind, engine, complexity=validate_complexity(body["complexity"]))
    password = _secret(body, "password", PASSWORD_MAX_BYTES)
    if kind == KIND_PBKDF2:
        salt = _secret(body, "salt", SALT_MAX_BYTES)
        iterations = _work(
            body, "iterations", PBKDF2_ITERATIONS_MIN, PBKDF2_ITERATIONS_MAX,
            PBKDF2_ITERATIONS_DEFAULT,
        )  # fmt: skip
        return ComputeJob(kind, engine, password=password, salt=salt, iterations=iterations)
    if "hash" not in body:
        cost = _work(body, "cost", BCRYPT_COST_MIN, BCRYPT_COST_MAX, BCRYPT_COST_DEFAULT)
        return ComputeJob(kind, engine, password=password, cost=cost)
    if "cost" in body:
        raise ApiError("invalid_request", "give cost to hash or hash to verify, not both")
    cost = bcrypt_hash_cost(body["hash"])
    return ComputeJob(kind, engine, password=password, cost=cost, hash=body["hash"])


def validate_compute_body(body: Any) -> ComputeJob:
    """The job of a decoded POST /api/v1/compute body. Checked in the core's
    order: the object, unknown fields, the kind, fields of another kind, the
    kind's parameters, then the engine."""
    if not isinstance(body, dict):
        raise ApiError("invalid_request", "the body must be a JSON object")
    unknown = sorted(set(body) - COMPUTE_FIELDS)
    if unknown:
        raise ApiError("unknown_field", f"unknown field {unknown[0]!r}")
    kind = body.get("kind", KIND_CHECKSUM)
    if kind not in COMPUTE_KINDS:
        raise ApiError("invalid_request", f"kind must be one of {', '.join(COMPUTE_KINDS)}")
    foreign = sorted(set(body) - KIND_FIELDS[kind])
    if foreign:
        raise ApiError("unknown_field", f"field {foreign[0]!r} does not belong to kind {kind}")
    engine = body.get("engine", "go")
    job = _parameters(kind, body, engine)
    if engine not in COMPUTE_ENGINES:
        raise ApiError("invalid_request", "engine must be 'go' or 'python'")
    return job


def parse_tolerance(raw: str) -> str:
    """A request's tolerance at its ladder level, in canonical text
    (tolerance.canonical)."""
    try:
        return tolerance.canonical(raw)
    except ValueError as exc:
        raise ApiError("invalid_tolerance", str(exc)) from None
