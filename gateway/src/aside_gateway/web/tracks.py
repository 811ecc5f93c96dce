"""GET /api/v1/tracks/<id> and GET /api/v1/tracks/<id>?simplify=T: GPS tracks,
cached in Redis (no L1 tier) under the large-value policy of tiers/largevalues.py.

A whole track is read from PostgreSQL and served as stored (the path's text is
spliced in, never parsed); a simplified one is asked of the core, which runs
Douglas-Peucker. Either answer is cached with the lease protocol of tiers/l2.py,
under a key that names the id, the tolerance and the policy's tag.

The lab may choose the policy per request (`large=`) and read without the
cache (`cache=off`): the arms of the tracks bench. Without the cache the
policy does not apply: the whole track is read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from flask import Blueprint, Response, request

from aside_gateway.config import metrics
from aside_gateway.contracts import cache_keys
from aside_gateway.contracts.errors import ApiError
from aside_gateway.contracts.validation import parse_id, parse_tolerance
from aside_gateway.tiers import largevalues
from aside_gateway.tiers.l2 import BYPASS, HIT, MISS, Cache, CacheRead
from aside_gateway.web.parts import RouteParts

TRACK_ROUTE = "/api/v1/tracks/<id>"
JSON = "application/json"
# ?cache= of a track: tracks have no L1 tier, so `on` is Redis (`l2` says the same).
CACHE_MODES = ("on", "off", "l2")


@dataclass
class TrackFill:
    """One request's fill, handed to the cache as its `load`: remembers the
    answer it loaded beside the form it offered to Redis, so the request that
    filled answers without decoding what it has just encoded."""

    load_answer: Callable[[], bytes]
    policy: str
    codec: str
    threshold: int
    answer: bytes | None = None
    stored: bytes | None = None

    def __call__(self) -> bytes:
        self.answer = self.load_answer()
        self.stored = largevalues.stored_form(self.answer, self.policy, self.codec, self.threshold)
        metrics.value_bytes(TRACK_ROUTE, "stored", len(self.stored))
        codec = cache_keys.codec_of(self.stored)
        if codec is not None:
            metrics.compression_ratio(codec, len(self.answer), len(self.stored))
        return self.stored


def _headers(outcome: str, error: bool) -> dict[str, str]:
    headers = {"X-Cache": outcome}
    if outcome == HIT:
        headers["X-Cache-Tier"] = "l2"
    if error:
        headers["X-Cache-Error"] = "1"
    return headers


def create_tracks_api(parts: RouteParts, cache: Cache) -> Blueprint:
    """The tracks' route over `parts`, reading through the Redis tier `cache`."""
    settings, db, core = parts.settings, parts.db, parts.core
    bp = Blueprint("tracks", __name__, url_prefix="/api/v1")

    def lab_choice(name: str, choices: tuple[str, ...], default: str) -> str:
        value = request.args.get(name)
        if value is None or value == default:
            return default
        if value not in choices:
            raise ApiError("invalid_request", f"{name} must be one of {'|'.join(choices)}")
        if not settings.is_lab:
            raise ApiError("lab_disabled", f"{name}={value} is only available in the lab profile")
        return value

    def load_whole(track_id: int) -> bytes:
        row = db.track_by_id(track_id)
        return cache_keys.NEGATIVE if row is None else cache_keys.track_json(track_id, *row)

    def load_simplified(track_id: int, tolerance: str) -> bytes:
        return core.simplified(track_id, tolerance) or cache_keys.NEGATIVE

    def loader(track_id: int, tolerance: str | None, policy: str) -> Callable[[], bytes]:
        if tolerance is not None:
            return lambda: load_simplified(track_id, tolerance)
        if policy != cache_keys.POLICY_SIMPLIFY:
            return lambda: load_whole(track_id)

        def whole_unless_large() -> bytes:
            whole = load_whole(track_id)
            if len(whole) <= settings.cache_large_value_bytes or whole == cache_keys.NEGATIVE:
                return whole
            return load_simplified(track_id, settings.cache_simplify_tolerance)

        return whole_unless_large

    def uncached(load: Callable[[], bytes]) -> CacheRead:
        # Bounded like every uncached read: an overloaded database sheds at once.
        if not parts.bypass_slots.acquire(blocking=False):
            raise ApiError("unavailable", "too many uncached reads in flight", {"Retry-After": "1"})
        try:
            return CacheRead(load(), BYPASS)
        finally:
            parts.bypass_slots.release()

    def cached(key: str, fill: TrackFill) -> CacheRead:
        result = cache.read_through(TRACK_ROUTE, key, fill)
        if fill.stored is not None and result.value is fill.stored:
            return CacheRead(fill.answer or b"", result.outcome, result.error)
        if result.outcome == HIT:
            metrics.value_bytes(TRACK_ROUTE, "fetched", len(result.value))
        try:
            answer = largevalues.decode(result.value)
        except largevalues.MalformedValue:
            cache.discard(TRACK_ROUTE, key, result.value)  # the next read fills it again
            return CacheRead(fill.load_answer(), MISS, result.error)
        if answer is None:  # the too-large marker: never stored, read it here
            return CacheRead(fill.load_answer(), MISS, result.error)
        return CacheRead(answer, result.outcome, result.error)

    @bp.get("/tracks/<id>")
    def get_track(id: str) -> Response:
        track_id = parse_id(id)
        raw_tolerance = request.args.get("simplify")
        tolerance = None if raw_tolerance is None else parse_tolerance(raw_tolerance)
        mode = lab_choice("cache", CACHE_MODES, "on")
        policy = lab_choice("large", cache_keys.POLICIES, settings.cache_large_values)
        if mode == "off":
            result = uncached(loader(track_id, tolerance, cache_keys.POLICY_RAW))
        else:
            tag = largevalues.policy_tag(policy, settings.cache_codec)
            # Production's miss budget: charged only when this read does the fill.
            load = parts.miss_budget.guarded(
                TRACK_ROUTE, request.environ, loader(track_id, tolerance, policy)
            )
            fill = TrackFill(
                load,
                policy,
                settings.cache_codec,
                settings.cache_large_value_bytes,
            )
            result = cached(cache_keys.track_key(track_id, tolerance, tag), fill)
        metrics.cache_outcome(TRACK_ROUTE, result.outcome, result.stale_ms)
        headers = _headers(result.outcome, result.error)
        if result.value == cache_keys.NEGATIVE:
            raise ApiError("not_found", f"no track with id {track_id}", headers)
        metrics.value_bytes(TRACK_ROUTE, "served", len(result.value))
        return Response(result.value, headers=headers, mimetype=JSON)

    return bp
