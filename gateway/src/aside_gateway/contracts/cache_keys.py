"""Cache key names, value formats, lease timings and invalidation sets.

The one place in Python that spells contracts/cache.json; tests/test_unit.py
checks every vector of that file against this module. The Go core has its own
copy (core-go/internal/cache/keys.go), checked against the same file. The
gateway applies the invalidation sets only to its own L1 tier, for the writes
it forwarded (the core invalidates Redis).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

PREFIX = "aside:v1"
TTL_SECONDS_DEFAULT = 60
LEASE_SUFFIX = ":lease"
LEASE_TTL_MS = 5000  # a holder that died costs at most this much before another may fill
LEASE_POLL_MS = 5
# A failed holder's mark in place of its lease (a token is hex, never this).
LEASE_FAILURE_PREFIX = "!fail:"
LEASE_FAILURE_MS = 1000

# Cache tiers (cache.json `tiers`): where a cached route's reads are answered from.
STRATEGY_L2 = "l2"  # Redis only
STRATEGY_L1 = "l1"  # the worker's own memory only; the L1 TTL bounds staleness
STRATEGY_HYBRID = "hybrid"  # L1, then Redis
# L1, then Redis, the L1 kept by Redis's own invalidations (CLIENT TRACKING, tiers/tracking.py)
STRATEGY_TRACKING = "tracking"
STRATEGIES = (STRATEGY_L2, STRATEGY_L1, STRATEGY_HYBRID, STRATEGY_TRACKING)
DEFAULT_STRATEGY = STRATEGY_L2
L1_TTL_SECONDS_DEFAULT = 30
INVALIDATION_CHANNEL = f"{PREFIX}:invalidations"  # the core publishes each write's stale keys
# Where Redis sends a RESP2 client's tracking invalidations (CLIENT TRACKING ... REDIRECT).
TRACKING_CHANNEL = "__redis__:invalidate"

# How a cacheable read was answered: the X-Cache header's values and the
# outcome the metrics count it under.
HIT = "HIT"
MISS = "MISS"
BYPASS = "BYPASS"
# Answered with a value past its expiry while another reader refreshes it
# (CACHE_EXPIRY=swr, tiers/expiry.py).
STALE = "STALE"

NEGATIVE = b"null"  # the value of user:<id> (and track:<id>:...) when there is no such row

# Expiry handling (cache.json `expiry`): how a stored value's end is spread,
# anticipated or outlived. `plain` and `jitter` store the value as it is;
# `early` and `swr` store it in an envelope (below) carrying its logical expiry
# and the measured cost of computing it. Every mode reads every form.
EXPIRY_PLAIN = "plain"  # the key lives the TTL, and ends with it
EXPIRY_JITTER = "jitter"  # the TTL drawn uniformly from [ttl * (1 - jitter), ttl]
EXPIRY_EARLY = "early"  # XFetch: a read may recompute before the expiry
EXPIRY_SWR = "swr"  # stale-while-revalidate: an expired value answered, bounded, while refreshed
EXPIRY_MODES = (EXPIRY_PLAIN, EXPIRY_JITTER, EXPIRY_EARLY, EXPIRY_SWR)
DEFAULT_EXPIRY = EXPIRY_SWR  # docs/decisions/060-the-default-expiry-by-the-figures.md
EXPIRY_JITTER_DEFAULT = 0.1
EXPIRY_EARLY_BETA_DEFAULT = 1.0
EXPIRY_STALE_MAX_SECONDS_DEFAULT = 10
# The envelope: ENVELOPE_MAGIC, the logical expiry in unix ms, ":", the
# recomputation's measured time in ms, ":", then the value itself.
# No value of any kind begins with "~" (digits, JSON, null, codec frames, "!").
ENVELOPE_MAGIC = b"~x1:"

# Large values (cache.json `large_values`): what a track value above the
# threshold is stored as; tiers/largevalues.py applies it.
POLICY_COMPRESS = "compress"
POLICY_SIMPLIFY = "simplify"
POLICY_SKIP = "skip"
POLICY_RAW = "raw"
POLICIES = (POLICY_COMPRESS, POLICY_SIMPLIFY, POLICY_SKIP, POLICY_RAW)
DEFAULT_POLICY = POLICY_COMPRESS
CODEC_ZSTD = "zstd"
CODEC_GZIP = "gzip"
CODECS = (CODEC_ZSTD, CODEC_GZIP)
DEFAULT_CODEC = CODEC_ZSTD
CODEC_MAGIC = {CODEC_ZSTD: b"\x28\xb5\x2f\xfd", CODEC_GZIP: b"\x1f\x8b"}
LARGE_THRESHOLD_BYTES_DEFAULT = 65536
SIMPLIFY_TOLERANCE_DEFAULT = "0.0001"
TOO_LARGE = b"!too-large"  # the value was not stored: read the database
# A decoded value may not exceed this, so a corrupt or hostile frame cannot
# make the gateway allocate without limit (the largest seeded track is ~1.1 MB).
DECODED_MAX_BYTES = 64 * 1024 * 1024


# Keys put their identity in braces, a Redis Cluster hash tag (cache.json
# `hash_tag`): only the first {...} is hashed, and a lease is its key plus a
# suffix, so a key and its lease always share a slot, as the lease scripts need.


def count_key(email: str) -> str:
    """Key of the count of users with exactly this email (case kept)."""
    return f"{PREFIX}:{{count:{email}}}"


def user_key(user_id: int) -> str:
    return f"{PREFIX}:{{user:{user_id}}}"


def track_key(track_id: int, tolerance: str | None, tag: str) -> str:
    """Key of a track's answer: whole (tolerance None) or simplified at the
    canonical tolerance, stored under the large-value policy named by `tag`."""
    simplified = f":dp:{tolerance}" if tolerance is not None else ""
    return f"{PREFIX}:{{track:{track_id}}}{simplified}:{tag}"


def track_json(track_id: int, name: str, distance_m: int, path: str) -> bytes:
    """The answer to GET /api/v1/tracks/<id> (contracts/tracks.json `track_json`):
    the stored path's text spliced in as it is, never parsed."""
    head = encode_json({"id": track_id, "name": name, "distance_m": distance_m})
    return head[:-1] + b',"path":' + path.encode() + b"}"


def codec_of(stored: bytes) -> str | None:
    for codec, magic in CODEC_MAGIC.items():
        if stored.startswith(magic):
            return codec
    return None


def is_track_value(value: bytes) -> bool:
    """A cheap check on a hit (no parsing of megabytes): a JSON object, the
    negative entry, a codec frame or the marker. A frame that then fails to
    decode is caught by largevalues.decode."""
    return value[:1] == b"{" or value in (NEGATIVE, TOO_LARGE) or codec_of(value) is not None


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


_COUNT_PREFIX = f"{PREFIX}:{{count:"
_USER_PREFIX = f"{PREFIX}:{{user:"
_TRACK_PREFIX = f"{PREFIX}:{{track:"
# The key prefixes the tracking tier asks Redis to broadcast (cache.json
# `tiers.tracking_prefixes`): the kinds an L1 tier holds.
TRACKING_PREFIXES = (_COUNT_PREFIX, _USER_PREFIX)


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
    if key.startswith(_TRACK_PREFIX):
        return is_track_value(value)
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


def user_value(row: tuple[int, str, str, datetime] | None) -> bytes:
    """The cached value of a user's row: its API JSON, or NEGATIVE for no row."""
    if row is None:
        return NEGATIVE
    return encode_json(user_json(*row))


@dataclass(frozen=True, slots=True)
class Envelope:
    """A value stored with its logical expiry (unix ms) and the time its
    recomputation took (ms): the stored form under `early` and `swr`."""

    value: bytes
    expires_ms: int
    delta_ms: int


def wrap(value: bytes, expires_ms: int, delta_ms: int) -> bytes:
    return b"%s%d:%d:%s" % (ENVELOPE_MAGIC, expires_ms, delta_ms, value)


def unwrap(stored: bytes) -> Envelope | None:
    """The envelope of `stored`, None for a bare value. A value that begins like an
    envelope but does not parse is returned with expiry 0 (expired: a miss)."""
    if not stored.startswith(ENVELOPE_MAGIC):
        return None
    parts = stored[len(ENVELOPE_MAGIC) :].split(b":", 2)
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return Envelope(b"", 0, 0)
    return Envelope(parts[2], int(parts[0]), int(parts[1]))
