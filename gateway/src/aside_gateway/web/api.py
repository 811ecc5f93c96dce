"""The /api/v1 blueprint: cached reads, and writes and compute forwarded to the core."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from flask import Blueprint, Response, current_app, request

from aside_gateway.backends import compute
from aside_gateway.backends.compute import Slots
from aside_gateway.backends.core_client import CoreRequest
from aside_gateway.config import metrics
from aside_gateway.contracts import cache_keys, openapi
from aside_gateway.contracts.errors import ApiError
from aside_gateway.contracts.routes import (
    CLIENT_GONE_KEY,
    CORE_DELAY_HEADER,
    COUNT_ROUTE,
    EARLY_GET_KEY,
    IDEMPOTENCY_KEY,
    USER_ROUTE,
    count_body,
)
from aside_gateway.contracts.validation import (
    idempotency_key,
    parse_id,
    validate_compute_body,
    validate_email,
)
from aside_gateway.tiers.l2 import BYPASS, STALE, CacheRead
from aside_gateway.tiers.strategies import TieredCache
from aside_gateway.web.parts import RouteParts

HOLD_NAME_RE = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
JSON = "application/json"
READ_CHUNK = 64 * 1024
BYPASS_MODE = "off"
# Uncached too, over a new PostgreSQL connection per read: what the pool saves.
NOPOOL_MODE = "nopool"
UNCACHED_MODES = (BYPASS_MODE, NOPOOL_MODE)
# Uncached, with the cache arm's miss path: a count waits for the worker's next
# batched scan (the miss batcher, shared with every email pending), and nothing
# is stored. What coalescing the misses buys without any cache.
COALESCE_MODE = "coalesce"
# ?cache= values: "on" is the configured CACHE_STRATEGY; the others are lab only.
CACHE_MODES = ("on", BYPASS_MODE, NOPOOL_MODE, COALESCE_MODE, *cache_keys.STRATEGIES)


def _json_response(
    body: bytes, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(body, status=status, headers=headers, mimetype=JSON)


def _cache_headers(read: CacheRead) -> dict[str, str]:
    headers = {"X-Cache": read.outcome}
    if read.tier is not None:
        headers["X-Cache-Tier"] = read.tier
    if read.error:
        headers["X-Cache-Error"] = "1"
    if read.outcome == STALE:
        headers["X-Cache-Stale-Ms"] = str(read.stale_ms)  # how long past its expiry
    return headers


def create_api(parts: RouteParts, tiers: TieredCache, python_compute: Slots) -> Blueprint:
    """The users' and compute routes over `parts`, reading through `tiers`; the
    lab's python engine runs in `python_compute`'s slots."""
    settings, db, core = parts.settings, parts.db, parts.core
    bp = Blueprint("api", __name__, url_prefix="/api/v1")

    def cache_mode() -> str:
        """The strategy of this read, or "off" / "nopool" / "coalesce" for the
        uncached arms of the benchmark. Anything but the configured strategy ("on") is a lab-only
        choice."""
        mode = request.args.get("cache")
        if mode is None or mode == "on":
            return settings.cache_strategy
        if mode not in CACHE_MODES:
            raise ApiError("invalid_request", f"cache must be one of {'|'.join(CACHE_MODES)}")
        if not settings.is_lab:
            raise ApiError("lab_disabled", f"cache={mode} is only available in the lab profile")
        return mode

    def hold_name() -> str | None:
        if not settings.test_hooks:
            return None
        name = request.headers.get("X-Test-Hold")
        if name is not None and not HOLD_NAME_RE.fullmatch(name):
            raise ApiError("invalid_request", "X-Test-Hold must be 1 to 100 of A-Z a-z 0-9 _ . : -")
        return name

    def read(route: str, key: str, load: Callable[[], bytes], mode: str) -> CacheRead:
        if mode == COALESCE_MODE:
            # Bounded by the miss batcher's own queue (batch_queue_full), as the
            # cache arm's misses are: a bypass slot each would cap a batch at 8.
            result = CacheRead(load(), BYPASS)
        elif mode in UNCACHED_MODES:
            # Bounded so an overloaded database sheds load at once instead of
            # queueing, and so nopool's connections stay far below max_connections.
            if not parts.bypass_slots.acquire(blocking=False):
                metrics.shed("uncached_busy")
                raise ApiError(
                    "unavailable", "too many uncached reads in flight", {"Retry-After": "1"}
                )
            try:
                result = CacheRead(load(), BYPASS)
            finally:
                parts.bypass_slots.release()
        else:
            early_get = request.environ.get(EARLY_GET_KEY)
            # Production's miss budget: charged only when this read does the fill.
            load = parts.miss_budget.guarded(route, request.environ, load)
            result = tiers.read_through(route, key, load, mode, hold_name(), early_get)
        metrics.cache_outcome(route, result.outcome, result.stale_ms)
        return result

    @bp.get("/users/count")
    def count_users() -> Response:
        mode = cache_mode()
        email = validate_email(request.args.get("email"))
        result = read(
            COUNT_ROUTE,
            cache_keys.count_key(email),
            lambda: cache_keys.encode_count(
                db.count_by_email(
                    email,
                    mode not in UNCACHED_MODES,  # cached misses and coalesce: batched
                    request.environ.get(CLIENT_GONE_KEY),
                    pooled=mode != NOPOOL_MODE,
                )
            ),
            mode,
        )
        return _json_response(count_body(email, result.value), headers=_cache_headers(result))

    @bp.get("/users/<id>")
    def get_user(id: str) -> Response:
        mode = cache_mode()
        if mode == COALESCE_MODE:
            mode = BYPASS_MODE  # no batcher for a primary-key read: coalesce reads it as off
        user_id = parse_id(id)
        key = cache_keys.user_key(user_id)
        pooled = mode != NOPOOL_MODE
        result = read(
            USER_ROUTE, key, lambda: cache_keys.user_value(db.user_by_id(user_id, pooled)), mode
        )
        if result.value == cache_keys.NEGATIVE:
            raise ApiError("not_found", f"no user with id {user_id}", _cache_headers(result))
        # The cached text is already the API JSON: serve it without re-encoding.
        return _json_response(result.value, headers=_cache_headers(result))

    def forward(
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        user_id: int | None = None,
        user_write: bool = False,
    ) -> Response:
        if body is None:
            body = read_body() or None
        if settings.test_hooks and CORE_DELAY_HEADER in request.headers:
            headers = {**(headers or {}), CORE_DELAY_HEADER: request.headers[CORE_DELAY_HEADER]}
        previous = tiers.before_write(user_id)
        answer = core.forward(
            CoreRequest(
                method, path, body, request.headers.get("Content-Type"), headers, user_write
            )
        )
        if user_write:
            tiers.after_write(method, user_id, answer.status, answer.body, previous)
        response = Response(answer.body, status=answer.status, headers=answer.headers)
        if "Content-Type" not in answer.headers:
            del response.headers["Content-Type"]  # no default text/html on the core's 204
        return response

    @bp.post("/users")
    def create_user() -> Response:
        # Checked here too, so a bad key costs no trip to the core; the core
        # stores the key with the user it creates and replays its answer.
        key = idempotency_key(request.headers.getlist(IDEMPOTENCY_KEY))
        return forward(
            "POST",
            "/api/v1/users",
            headers={IDEMPOTENCY_KEY: key} if key else None,
            user_write=True,
        )

    @bp.patch("/users/<id>")
    def update_user(id: str) -> Response:
        user_id = parse_id(id)
        return forward("PATCH", f"/api/v1/users/{user_id}", user_id=user_id, user_write=True)

    @bp.delete("/users/<id>")
    def delete_user(id: str) -> Response:
        user_id = parse_id(id)
        return forward("DELETE", f"/api/v1/users/{user_id}", user_id=user_id, user_write=True)

    @bp.post("/compute")
    def run_compute() -> Response:
        if request.mimetype != JSON:
            raise ApiError("unsupported_media_type", "Content-Type must be application/json")
        raw = read_body()
        job = validate_compute_body(_decode_json(raw))
        if job.engine == "go":
            return forward("POST", "/api/v1/compute", raw)
        if not settings.is_lab:
            raise ApiError("lab_disabled", "the python engine is only available in the lab profile")
        compute.check_caps(job, settings)
        return _json_response(cache_keys.encode_json(python_compute.run(job)))

    openapi_body = openapi.encoded()

    @bp.get("/openapi.json")
    def openapi_document() -> Response:
        return _json_response(openapi_body)

    return bp


def read_body() -> bytes:
    """The request body, at most MAX_CONTENT_LENGTH bytes, else 413 payload_too_large.

    With a Content-Length werkzeug refuses an oversized body before reading it.
    A chunked body has none, and werkzeug's limited stream then stops quietly
    at the limit (it cannot tell "exactly the limit" from "more to come"), so
    such a body would be forwarded cut short: it is read here instead, one
    byte past the limit, to tell the two apart.
    """
    limit = current_app.config["MAX_CONTENT_LENGTH"]
    if request.content_length is not None or "wsgi.input_terminated" not in request.environ:
        return request.get_data(cache=False)
    stream = request.environ["wsgi.input"]
    chunks: list[bytes] = []
    size = 0
    while chunk := stream.read(min(READ_CHUNK, limit + 1 - size)):
        size += len(chunk)
        if size > limit:
            raise ApiError("payload_too_large", f"request body must be at most {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _decode_json(raw: bytes) -> object:
    try:
        # Strict UTF-8 like the core: json.loads(bytes) would also guess UTF-16/32.
        return json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise ApiError("invalid_json", "the body is not valid JSON") from None
