"""ASGI entry point: what gunicorn's uvicorn workers serve (`aside_gateway.front.asgi:app`).

Each worker builds its services once (`services.build_services`) and hands
them to both layers:

* every request passes the event loop's door first (door/loop_admission.py), which
  answers 503 at once past the worker's capacity;
* the async hot path (front/hot_path.py) answers `/healthz` and valid cache hits on
  the event loop, and with GATEWAY_WRITES=loop (the default) forwards the
  user writes to the core there too (front/loop_writes.py);
* `/readyz` and `/metrics` go to the Flask app in a pool of their own
  (OPS_THREADS threads), so an overloaded worker still answers them;
* everything else goes to the Flask app (web/app.py), run in a thread pool of
  GATEWAY_THREADS per worker by a2wsgi, with what the hot path learnt (the
  request's start, its GET's outcome) carried over from the ASGI scope;
  door/admission.py first drops work whose client left or that waited too long
  for a thread;
* with CACHE_L1_SUBSCRIBER=loop (the default), the L1 tier's invalidation
  subscription runs on the same event loop, started and stopped by the ASGI
  lifespan (tiers/invalidations.py).

Once built, the worker's objects are frozen out of the garbage collector's
walks and its collections made rare (front/collector.py): a collection stops the
event loop.

Why this split: see docs/decisions/001-asgi-hot-path.md.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from a2wsgi import WSGIMiddleware

from aside_gateway.backends.core_client import AsyncCoreClient
from aside_gateway.config import metrics
from aside_gateway.config.settings import ConfigError, Settings, load_settings
from aside_gateway.contracts import cache_keys
from aside_gateway.contracts.routes import (
    CLIENT_GONE_KEY,
    EARLY_GET_KEY,
    START_KEY,
    AsgiApp,
)
from aside_gateway.door.admission import Admission
from aside_gateway.door.loop_admission import LoopAdmission
from aside_gateway.front import collector
from aside_gateway.front.hot_path import OPS_THREADS, AsyncHotPath, EarlyGetClient
from aside_gateway.front.loop_writes import LoopWrites
from aside_gateway.front.refresh_behind import RefreshBehind, refresher
from aside_gateway.services import build_services
from aside_gateway.tiers.invalidations import LoopInvalidationSubscriber
from aside_gateway.tiers.tracking import TrackingSubscriber
from aside_gateway.web.app import create_app

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

APP_LOAD_ERROR = 4


def _with_scope_state(app: WsgiApp) -> WsgiApp:
    """Carry what the async layer learnt (request start, the GET's outcome) from
    the ASGI scope, which a2wsgi exposes as environ["asgi.scope"], to the environ."""

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        scope = environ.get("asgi.scope", {})
        # a2wsgi's body stream ends where the request's does; saying so lets
        # werkzeug read a chunked body (no Content-Length) and apply its limit.
        environ["wsgi.input_terminated"] = True
        for key in (START_KEY, EARLY_GET_KEY, CLIENT_GONE_KEY):
            if key in scope:
                environ[key] = scope[key]
        return app(environ, start_response)

    return wsgi


def create_asgi_app(settings: Settings) -> AsgiApp:
    """The gateway as gunicorn's uvicorn workers serve it; call once per worker."""
    # How long a thread runs before one waiting for the GIL may take it
    # (docs/decisions/033-invalidation-lag-the-subscription-on-the-event-loop.md).
    sys.setswitchinterval(settings.switch_interval_us / 1_000_000)
    services = build_services(settings)
    metrics.CONNECTIONS_MAX.set(settings.max_connections)
    flask_app = create_app(settings, services)
    admitted = Admission(_with_scope_state(flask_app), settings.queue_timeout_ms)
    bridge = WSGIMiddleware(admitted, workers=settings.threads)
    # The operational routes' own small pool, not behind the reads' queue.
    ops = WSGIMiddleware(_with_scope_state(flask_app), workers=OPS_THREADS)
    redis_get = EarlyGetClient(settings, services.breaker)
    on_loop = settings.l1_subscribes and settings.cache_l1_subscriber == "loop"
    subscriber = LoopInvalidationSubscriber(settings, services.tiers.l1) if on_loop else None
    tracked = services.tiers.tracked
    tracker = TrackingSubscriber(settings, tracked) if tracked is not None else None
    writes = None
    if settings.writes == "loop":
        writes = LoopWrites(settings, services.tiers, AsyncCoreClient(settings))
    admission = LoopAdmission.from_settings(settings)
    services.loop_lag.on_tick = admission.on_tick
    refresh_behind = None
    if settings.cache_expiry == cache_keys.EXPIRY_SWR:
        refresh_behind = RefreshBehind(
            refresher(services.cache, services.db),
            settings.cache_expiry_refresh_gather_ms / 1000,
            settings.miss_batch_max,
        )
    return AsyncHotPath(
        bridge,
        redis_get,
        services.tiers.l1,
        settings,
        subscriber,
        writes,
        admission,
        services.loop_lag,
        tracked,
        tracker,
        ops,
        refresh_behind,
        services.readiness,
    )


def _load() -> AsgiApp:
    """Imported by each gunicorn worker after the fork, so every worker builds its
    own pools. A bad setting prints one line and exits with gunicorn's "app load
    error" status, which makes the master stop instead of respawning workers."""
    try:
        settings = load_settings(os.environ)
    except ConfigError as exc:
        print(f"aside-gateway: {exc}", file=sys.stderr)
        sys.exit(APP_LOAD_ERROR)
    app = create_asgi_app(settings)
    collector.settle(settings)
    return app


app = _load()
