"""Cache key names, value formats, lease timings and invalidation sets.

The one place in Python that spells contracts/cache.json; tests/test_unit.py
checks every vector of that file against this module. The Go core has its own
copy (core-go/internal/cache/keys.go), checked against the same file. The
gateway applies the invalidation sets only to its own L1 tier, for the writes
it forwarded (the core invalidates Redis).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

PREFIX = "aside:v1"
TTL_SECONDS_DEFAULT = 60
LEASE_SUFFIX = ":lease"
LEASE_TTL_MS = 5000  # a holder that died costs at most this much before another may fill
LEASE_POLL_MS = 5

# Cache tiers (cache.json `tiers`): where a cached route's reads are answered from.
STRATEGY_L2 = "l2"  # Redis only
STRATEGY_L1 = "l1"  # the worker's own memory only; the L1 TTL bounds staleness
STRATEGY_HYBRID = "hybrid"  # L1, then Redis
STRATEGIES = (STRATEGY_L2, STRATEGY_L1, STRATEGY_HYBRID)
DEFAULT_STRATEGY = STRATEGY_L2
L1_TTL_SECONDS_DEFAULT = 30
INVALIDATION_CHANNEL = f"{PREFIX}:invalidations"  # the core publishes each write's stale keys

NEGATIVE = b"null"  # the value of user:<id> when there is no such user


def count_key(email: str) -> str:
    """Key of the count of users with exactly this email (case kept)."""
    return f"{PREFIX}:count:{email}"


def user_key(user_id: int) -> str:
    return f"{PREFIX}:user:{user_id}"


def stale_after_create(user_id: int, email: str) -> list[str]:
    return [count_key(email), user_key(user_id)]


def stale_after_update(user_id: int, email_before: str, email_after: str) -> list[str]:
    """The user, and both counts when the email changed (exact comparison)."""
    keys = [user_key(user_id)]
    if email_before != email_after:
        keys += [count_key(email_before), count_key(email_after)]
    return keys


def stale_after_delete(user_id: int, email: str) -> list[str]:
    return [count_key(email), user_key(user_id)]


_COUNT_PREFIX = f"{PREFIX}:count:"
_USER_PREFIX = f"{PREFIX}:user:"


COUNT_MAX_DIGITS = 19  # a bigint count; longer is garbage (and int() refuses 4300+)


def is_count_value(value: bytes) -> bool:
    """A cached count is 1 to 19 ASCII digits (bytes.isdigit is ASCII only)."""
    return len(value) <= COUNT_MAX_DIGITS and value.isdigit()


def is_user_value(value: bytes) -> bool:
    """A cached user is the negative entry or a JSON object (user_json)."""
    if value == NEGATIVE:
        return True
    if value[:1] != b"{":
        return False
    try:
        return isinstance(json.loads(value), dict)
    except ValueError:  # UnicodeDecodeError included
        return False


def value_is_valid(key: str, value: bytes) -> bool:
    """Whether `value` has the format of `key`'s kind. Anything else in Redis
    (a bad restore, a foreign writer) is a miss, never an answer."""
    if key.startswith(_COUNT_PREFIX):
        return is_count_value(value)
    if key.startswith(_USER_PREFIX):
        return is_user_value(value)
    return True


def lease_key(key: str) -> str:
    return key + LEASE_SUFFIX


def encode_count(count: int) -> bytes:
    return str(count).encode()


def format_created_at(created_at: datetime) -> str:
    """RFC 3339 in UTC with exactly six fraction digits, as the core writes it."""
    return created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def user_json(user_id: int, username: str, email: str, created_at: datetime) -> dict[str, Any]:
    """The user's API JSON object (contracts/cache.json `user_json`)."""
    return {
        "id": user_id,
        "username": username,
        "email": email,
        "created_at": format_created_at(created_at),
    }


def encode_json(value: Any) -> bytes:
    """Compact UTF-8 JSON, the form stored in Redis and served as is on a hit."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
