"""Which requests the hot path may answer, parsed exactly as Flask does (pure).

`lookup` turns a GET into the cache lookup it amounts to (its route, key and
strategy), or None when Flask must answer; `remembered_lookup` keeps the hot
keys' answers. `Miss` and `Meanwhile` are what front/hot_path.py hands on when
no tier answered.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from urllib.parse import parse_qsl

import werkzeug.urls  # noqa: F401 - registers the "werkzeug.url_quote" codec error handler

from aside_gateway.contracts import cache_keys
from aside_gateway.contracts.routes import (
    COUNT_PATH,
    COUNT_ROUTE,
    USER_ROUTE,
    USERS_PREFIX,
    count_body,
)
from aside_gateway.contracts.validation import email_problem, id_or_none

# Requests whose parsing and rendering are remembered (per worker, least
# recently used dropped first): parsing a URL costs more than an L1 hit, and
# the hot keys' URLs repeat (docs/decisions/036-an-l1-hits-own-cost.md).
MEMO_SIZE = 4096


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


def _strategy(
    params: dict[str, str], allowed: frozenset[str], default: str, lab: bool
) -> str | None:
    """The cache strategy of a cached read, or None when Flask must answer (an
    unknown parameter, cache=off, a lab-only choice outside the lab)."""
    if not params.keys() <= allowed:
        return None
    mode = params.get("cache", "on")
    if mode == "on":
        return default
    return mode if lab and mode in cache_keys.STRATEGIES else None


_COUNT_PARAMS = frozenset({"email", "cache"})
_USER_PARAMS = frozenset({"cache"})


@dataclass(frozen=True, slots=True)
class Lookup:
    """A request the hot path may answer: its route, its cache key and what the
    key names (a count's email, which its body repeats, or a user's id)."""

    route: str
    key: str
    strategy: str
    email: str | None = None
    user_id: int | None = None

    def body(self, value: bytes) -> bytes | None:
        """The response body for cached `value`, or None if Flask must answer
        (a negative or malformed entry)."""
        if self.email is not None:
            if not cache_keys.is_count_value(value):
                return None
            return _count_body(self.email, value)
        if value == cache_keys.NEGATIVE or not cache_keys.is_user_value(value):
            return None
        return value


def lookup(
    method: str,
    path: str,
    query: str,
    default: str = cache_keys.DEFAULT_STRATEGY,
    lab: bool = True,
) -> Lookup | None:
    """The cache lookup a GET of `path?query` amounts to, or None when it is not
    a valid cached read (Flask then answers, with its validation errors).
    `default`: CACHE_STRATEGY; `lab`: whether ?cache= may choose another."""
    if method != "GET" or not path.startswith(USERS_PREFIX):
        return None
    params = _query(query)
    if params is None:
        return None
    if path == COUNT_PATH:
        email = params.get("email")
        strategy = _strategy(params, _COUNT_PARAMS, default, lab)
        if email is None or strategy is None or email_problem(email):
            return None
        return Lookup(COUNT_ROUTE, cache_keys.count_key(email), strategy, email)
    user_id = id_or_none(path[len(USERS_PREFIX) :])
    strategy = _strategy(params, _USER_PARAMS, default, lab)
    if user_id is None or strategy is None:
        return None
    return Lookup(USER_ROUTE, cache_keys.user_key(user_id), strategy, user_id=user_id)


@functools.lru_cache(maxsize=MEMO_SIZE)
def _count_body(email: str, value: bytes) -> bytes:
    return count_body(email, value)


@functools.lru_cache(maxsize=MEMO_SIZE)
def remembered_lookup(path: str, query: bytes, default: str, lab: bool) -> Lookup | None:
    """lookup() of a GET, remembered: it is pure, and its Lookup immutable."""
    return lookup("GET", path, query.decode("latin-1"), default, lab)


@dataclass(frozen=True, slots=True)
class Meanwhile:
    """What a read answers while its key is refreshed (tiers/expiry.py): the
    value it read, fresh (early) or past its expiry by `stale_ms` (swr)."""

    route: str
    body: bytes
    stale_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Miss:
    """A valid cached read that no tier answered: Flask fills its key. `held`: it
    carries the lab's X-Test-Hold header, which only Flask handles, so it never
    waits for another fill (it may still lead one). `meanwhile`: a value to
    refresh, answered instead of waiting when the worker is already filling the key."""

    found: Lookup
    held: bool = False
    meanwhile: Meanwhile | None = None

    @property
    def flight(self) -> tuple[str, str]:
        # With its strategy: a fill stores only into the tiers of its own.
        return self.found.key, self.found.strategy


# The route, the body and the tier of an answer (None: not a cache read).
Answer = tuple[str, bytes, str | None]
