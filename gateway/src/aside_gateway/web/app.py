"""The Flask application factory: the part of the gateway that runs in threads.

`create_app(settings, services)` registers the /api/v1 blueprint, the
operational routes (/healthz, /readyz, /metrics), the error handlers and the
request metrics around the services built by `services.build_services`.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

from flask import Flask, Response, request

from aside_gateway.backends.redis_errors import REDIS_ERRORS
from aside_gateway.config import metrics
from aside_gateway.config.settings import Settings
from aside_gateway.contracts.errors import ApiError
from aside_gateway.contracts.routes import (
    HEALTHZ_BODY,
    HEALTHZ_PATH,
    MAX_BODY_BYTES,
    START_KEY,
)
from aside_gateway.services import Services, Verdict
from aside_gateway.web.api import create_api
from aside_gateway.web.auth import write_token_check
from aside_gateway.web.error_handlers import register_error_handlers
from aside_gateway.web.parts import RouteParts
from aside_gateway.web.tracks import create_tracks_api

READY_DB_TIMEOUT_S = 0.5
EMAIL_INDEX_MISSING = (
    "the users table has no index on email: every count miss would scan it "
    "(production needs one: aside-seed --index, or CREATE INDEX ON users (email))"
)
log = logging.getLogger("aside_gateway.readiness")


@dataclass
class _IndexSeen:
    """Whether this worker last found the email index (None: not looked yet)."""

    present: bool | None = None


_index_seen = _IndexSeen()


def _email_index_state(services: Services) -> str:
    """The state of the email index: ok, or the one line saying why not; logged
    when the index is first found missing (not at every probe)."""
    try:
        present = services.db.has_email_index(READY_DB_TIMEOUT_S)
    except ApiError as exc:
        return exc.message
    if not present and _index_seen.present is not False:
        log.error("not ready: %s", EMAIL_INDEX_MISSING)
    _index_seen.present = present
    return "ok" if present else EMAIL_INDEX_MISSING


def _readiness(services: Services) -> Verdict:
    metrics.READINESS_CHECKS.inc()
    checks: dict[str, str] = {}
    try:
        services.db.ping(READY_DB_TIMEOUT_S)
        checks["postgres"] = "ok"
    except ApiError as exc:
        checks["postgres"] = exc.message
    try:
        services.cache.ping()
        checks["redis"] = "ok"
    except REDIS_ERRORS as exc:
        checks["redis"] = f"unreachable: {type(exc).__name__}"
    if services.settings.require_email_index and checks["postgres"] == "ok":
        checks["email_index"] = _email_index_state(services)
    failed = [name for name, state in checks.items() if state != "ok"]
    if not failed:
        body = json.dumps({"status": "ready", "checks": checks}).encode()
        return Verdict(200, body, time.monotonic())
    # The index's line says what to do; the other checks are named.
    named = [checks[name] if name == "email_index" else name for name in failed]
    error = {"code": "unavailable", "message": "not ready: " + ", ".join(named)}
    body = json.dumps({"error": error, "checks": checks}).encode()
    return Verdict(503, body, time.monotonic())


def _register_ops_routes(app: Flask, services: Services) -> None:
    settings = services.settings
    if not settings.is_lab and not settings.require_email_index:
        log.warning("GATEWAY_REQUIRE_EMAIL_INDEX=0: ready without an index on users.email")

    @app.get(HEALTHZ_PATH)
    def healthz() -> Response:
        return Response(HEALTHZ_BODY, mimetype="application/json")

    @app.get("/readyz")
    def readyz() -> Response:
        verdict = services.readiness.verdict(lambda: _readiness(services))
        return Response(verdict.body, status=verdict.status, mimetype="application/json")

    if not settings.metrics_on_app:
        return  # production: the gunicorn master serves them on METRICS_BIND

    @app.get("/metrics")
    def metrics_page() -> Response:
        body, content_type = metrics.render(settings.prometheus_multiproc_dir)
        return Response(body, content_type=content_type)


def _require_utf8_query() -> None:
    # werkzeug decodes the raw query string strictly and would raise a 500 otherwise.
    try:
        request.args  # noqa: B018 - parses (and caches) the query here
    except UnicodeDecodeError:
        raise ApiError("invalid_request", "the query string is not valid UTF-8") from None


def _install_worker_header(app: Flask, header: tuple[str, str] | None) -> None:
    """The lab's header naming the worker that answered (Settings.worker_header)."""
    if header is None:
        return
    name, value = header

    @app.after_request
    def name_the_worker(response: Response) -> Response:
        response.headers[name] = value
        return response


def _install_request_metrics(app: Flask) -> None:
    @app.after_request
    def observe(response: Response) -> Response:
        rule = request.url_rule
        # Stamped by the hot path when the request arrived, so the time
        # queued for a thread of the Flask pool is counted too.
        started = request.environ.get(START_KEY)
        elapsed = time.perf_counter() - started if started else 0.0
        route = rule.rule if rule is not None else "unmatched"
        metrics.observe_request(route, request.method, response.status_code, elapsed)
        return response


def create_app(settings: Settings, services: Services) -> Flask:
    """A ready-to-serve gateway around `services` (built once per worker)."""
    app = Flask("aside_gateway", static_folder=None)  # no /static route
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    logging.getLogger("aside_gateway").setLevel(logging.INFO)
    register_error_handlers(app)
    if settings.write_token:
        app.before_request(write_token_check(settings.write_token))
    app.before_request(_require_utf8_query)
    parts = RouteParts(
        services.settings,
        services.db,
        services.core,
        services.bypass_slots,
        services.miss_budget,
    )
    app.register_blueprint(create_api(parts, services.tiers, services.python_compute))
    app.register_blueprint(create_tracks_api(parts, services.cache))
    _register_ops_routes(app, services)
    _install_request_metrics(app)
    _install_worker_header(app, settings.worker_header)
    return app
