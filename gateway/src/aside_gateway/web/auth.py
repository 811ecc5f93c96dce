"""The bearer token that guards writes (WRITE_TOKEN).

Required in production, optional in the lab (checked whenever it is set).
The check runs before the view, so a refused request forwards nothing to the
core and reads no body. It covers every method that is not GET/HEAD/OPTIONS
on a route that exists: an unknown route still answers 404, a wrong method 405.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from flask import request

from aside_gateway.contracts.errors import ApiError

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CHALLENGE = 'Bearer realm="aside"'
INVALID_TOKEN_CHALLENGE = 'Bearer realm="aside", error="invalid_token"'


def bearer_token(header: str | None) -> bytes | None:
    """The token of an `Authorization: Bearer <token>` header (scheme in any case), or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    # WSGI header values are latin-1 text; compare bytes, as compare_digest needs.
    return token.encode("latin-1", "replace")


def refusal(header: str | None, expected: bytes) -> ApiError | None:
    """The 401 for a write with this Authorization header, None if its token is `expected`."""
    given = bearer_token(header)
    if given is None:
        return ApiError(
            "unauthorized",
            "writes need the header Authorization: Bearer <token>",
            {"WWW-Authenticate": CHALLENGE},
        )
    # Constant time: how much of the token matched must not show in the timing.
    if not hmac.compare_digest(given, expected):
        return ApiError(
            "unauthorized",
            "the bearer token is not valid",
            {"WWW-Authenticate": INVALID_TOKEN_CHALLENGE},
        )
    return None


def write_token_check(expected: str) -> Callable[[], None]:
    """A before_request hook refusing writes without the expected token (401)."""
    expected_bytes = expected.encode("ascii")

    def check() -> None:
        if request.method in SAFE_METHODS or request.url_rule is None:
            return
        error = refusal(request.headers.get("Authorization"), expected_bytes)
        if error is not None:
            raise error

    return check
