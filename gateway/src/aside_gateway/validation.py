"""Input rules of contracts/validation.json and contracts/compute.json.

Every function raises `ApiError` with the contract's code; lengths count
Unicode code points, as the contract says.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from aside_gateway.errors import ApiError

EMAIL_MAX = 254
EMAIL_LOCAL_MAX = 64
EMAIL_DOMAIN_MAX = 253
EMAIL_FORBIDDEN = frozenset('"(),:;<>[\\]')

# Checked by the core; the gateway publishes it in its OpenAPI document.
USERNAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")

ID_MAX = 9223372036854775807  # PostgreSQL bigint
ID_MAX_DIGITS = len(str(ID_MAX))

IDEMPOTENCY_KEY_MAX = 255

# contracts/tracks.json "tolerance": degrees, a plain decimal.
TOLERANCE_MIN = Decimal("0.000001")
TOLERANCE_MAX = Decimal("0.01")
TOLERANCE_MAX_LENGTH = 16
_TOLERANCE_RE = re.compile(r"[0-9]+(?:\.[0-9]+)?")

COMPLEXITY_MIN = 1
COMPLEXITY_MAX = 1000
COMPUTE_ENGINES = ("go", "python")
COMPUTE_FIELDS = frozenset({"complexity", "engine"})


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


def validate_compute_body(body: Any) -> tuple[int, str]:
    """(complexity, engine) from a decoded POST /api/v1/compute body."""
    if not isinstance(body, dict):
        raise ApiError("invalid_request", "the body must be a JSON object")
    unknown = sorted(set(body) - COMPUTE_FIELDS)
    if unknown:
        raise ApiError("unknown_field", f"unknown field {unknown[0]!r}")
    if "complexity" not in body:
        raise ApiError("invalid_complexity", "complexity is required")
    complexity = validate_complexity(body["complexity"])
    engine = body.get("engine", "go")
    if engine not in COMPUTE_ENGINES:
        raise ApiError("invalid_request", "engine must be 'go' or 'python'")
    return complexity, engine


def tolerance_problem(raw: str) -> str | None:
    """Why `raw` is not a tolerance of contracts/tracks.json, or None."""
    bounds = f"{TOLERANCE_MIN:f} to {TOLERANCE_MAX:f}"
    # [0-9], not \d: other scripts' digits are not decimals here.
    if len(raw) > TOLERANCE_MAX_LENGTH or not _TOLERANCE_RE.fullmatch(raw):
        return f"simplify must be a plain decimal from {bounds} (degrees)"
    if not TOLERANCE_MIN <= Decimal(raw) <= TOLERANCE_MAX:
        return f"simplify must be from {bounds} (degrees)"
    return None


def parse_tolerance(raw: str) -> str:
    """The canonical text of a tolerance (no leading zeros before the point,
    no trailing zeros after it): the cache key's and the answer's."""
    problem = tolerance_problem(raw)
    if problem:
        raise ApiError("invalid_tolerance", problem)
    return format(Decimal(raw).normalize(), "f")
