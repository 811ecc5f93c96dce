"""Which requests the hot path may answer, and with what body.

On this 2-core machine a cache hit that goes through Flask costs about three
times the CPU of the hit itself (request context, URL map, Response object,
after_request), which bounds the benchmark's ceiling. The hot path (asgi.py)
recognises the one shape the benchmark hammers — `GET /api/v1/users/count?email=E`
or `GET /api/v1/users/<id>` with valid input and the cache on — does the Redis
GET, and answers a hit itself with the same body, headers and metrics as the
Flask route would. This module is its pure part: parsing and validating exactly
as Flask does, the cache key, the body.

Everything else goes to Flask unchanged: misses, negative entries, Redis
errors, cache=off, bad input, every other route.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl

import werkzeug.urls  # noqa: F401 - registers the "werkzeug.url_quote" codec error handler

from aside_gateway import cache_keys
from aside_gateway.api import COUNT_ROUTE, USER_ROUTE
from aside_gateway.validation import ID_MAX, ID_MAX_DIGITS, email_problem

START_KEY = "aside.start"
COUNT_PATH = "/api/v1/users/count"
USERS_PREFIX = "/api/v1/users/"
HEALTHZ_PATH = "/healthz"
HEALTHZ_BODY = b'{"status":"ok"}'


def _query(raw: str) -> dict[str, str] | None:
    """First value of each parameter, decoded exactly as werkzeug's request.args does."""
    if not raw:
        return {}
    try:
        pairs = parse_qsl(
            raw.encode("latin-1").decode(), keep_blank_values=True, errors="werkzeug.url_quote"
        )
    except (UnicodeError, ValueError):
        return None
    params: dict[str, str] = {}
    for name, value in pairs:
        params.setdefault(name, value)
    return params


def _cached_path(params: dict[str, str], allowed: frozenset[str]) -> bool:
    return params.keys() <= allowed and params.get("cache", "on") == "on"


def _user_id(segment: str) -> int | None:
    if not (segment.isascii() and segment.isdigit()):
        return None
    digits = segment.lstrip("0")
    if not digits or len(digits) > ID_MAX_DIGITS or int(digits) > ID_MAX:
        return None
    return int(digits)


_COUNT_PARAMS = frozenset({"email", "cache"})
_USER_PARAMS = frozenset({"cache"})


@dataclass(frozen=True, slots=True)
class Lookup:
    """A request the hot path may answer: its route, its cache key and, for a
    count, the email the body repeats."""

    route: str
    key: str
    email: str | None = None

    def body(self, value: bytes) -> bytes | None:
        """The response body for cached `value`, or None if Flask must answer
        (a negative or malformed entry)."""
        if self.email is not None:
            if not value.isdigit():
                return None
            return cache_keys.encode_json({"email": self.email, "count": int(value)})
        return value if value != cache_keys.NEGATIVE else None


def lookup(method: str, path: str, query: str, held: bool) -> Lookup | None:
    """The cache lookup a GET of `path?query` amounts to, or None when it is not
    a valid cached read (Flask then answers, with its validation errors).
    `held`: the request carries the lab's X-Test-Hold header, which Flask handles."""
    if method != "GET" or held or not path.startswith(USERS_PREFIX):
        return None
    params = _query(query)
    if params is None:
        return None
    if path == COUNT_PATH:
        email = params.get("email")
        if email is None or not _cached_path(params, _COUNT_PARAMS) or email_problem(email):
            return None
        return Lookup(COUNT_ROUTE, cache_keys.count_key(email), email)
    user_id = _user_id(path[len(USERS_PREFIX) :])
    if user_id is None or not _cached_path(params, _USER_PARAMS):
        return None
    return Lookup(USER_ROUTE, cache_keys.user_key(user_id))
