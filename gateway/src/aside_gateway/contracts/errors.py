"""The one error shape (contracts/errors.json) for every error the gateway answers.

`ApiError` carries a code of that contract; every layer raises it, and the
Flask app turns it into an answer (web/error_handlers.py). Nothing here depends
on Flask, so the cache, the database and the hot path do not either.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

# Mirrors contracts/errors.json; tests/test_unit.py checks they agree.
STATUS_BY_CODE: dict[str, int] = {
    "invalid_request": 400,
    "invalid_email": 400,
    "invalid_id": 400,
    "invalid_username": 400,
    "invalid_complexity": 400,
    "invalid_tolerance": 400,
    "invalid_cost": 400,
    "unknown_field": 400,
    "invalid_json": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "lab_disabled": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "conflict": 409,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "idempotency_key_reused": 422,
    "too_many_requests": 429,
    "internal": 500,
    "core_unavailable": 503,
    "database_unavailable": 503,
    "unavailable": 503,
    "seeding": 503,
    "timeout": 504,
    "write_outcome_unknown": 504,
}


class ApiError(Exception):
    """An error answer: a code from errors.json and a message for people."""

    def __init__(self, code: str, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = STATUS_BY_CODE[code]
        self.headers = dict(headers or {})


def error_body(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


class ClientGone(ApiError):
    """The client hung up while its read waited: the wait is abandoned. Nobody
    reads the answer; a thread waiting for the same fill goes round again."""

    def __init__(self) -> None:
        super().__init__("unavailable", "the client went away", {"Retry-After": "1"})
