"""ASGI entry point: what gunicorn's uvicorn workers serve (`aside_gateway.asgi:app`).

Why ASGI in front of a Flask app: on the 2-core bench machine a cache hit
through gunicorn's threaded worker cost ~0.9 ms of CPU, most of it in the
worker's own request handling (thread hand-offs, the Python HTTP parser), so
the warm-cache sweep saturated the cores at 1000 requests/s. Under uvicorn's
C parser and event loop the same hit costs ~0.4 ms (bench figures in README).

The shape is the WSGI hot path's, one level up:

* `AsyncHotPath` answers `/healthz` and valid cache hits on the event loop,
  with the same bodies, headers and metrics as the Flask routes;
* everything else (misses, bypasses, errors, writes, compute, metrics) goes to
  the unchanged Flask app, run in a thread pool of GATEWAY_THREADS per worker
  by a2wsgi. A hit attempt's GET is handed over so Flask does not repeat it,
  and a Redis error is counted once, by Flask, exactly as before.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import redis.asyncio
from a2wsgi import WSGIMiddleware
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from aside_gateway import metrics
from aside_gateway.cache import HIT, PREFETCH_KEY, REDIS_ERRORS, CircuitBreaker, Prefetch
from aside_gateway.config import ConfigError, Settings, load_settings
from aside_gateway.hot_path import HEALTHZ_BODY, HEALTHZ_PATH, START_KEY, lookup

log = logging.getLogger("aside_gateway")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

TEST_HOLD_HEADER = b"x-test-hold"
APP_LOAD_ERROR = 4


class AsyncPrefetcher:
    """The hot path's GET on an asyncio Redis client, behind the same circuit
    breaker as the Flask side's client (cache.Cache)."""

    def __init__(self, settings: Settings, breaker: CircuitBreaker):
        self._settings = settings
        self._timeout_s = settings.redis_timeout_ms / 1000
        self._breaker = breaker
        self._client: redis.asyncio.Redis | None = None

    def _redis(self) -> redis.asyncio.Redis:
        # Built on first use, inside the worker's event loop that it belongs to.
        # No socket timeout and no pool timeout: the one deadline in prefetch()
        # bounds connection wait, send and reply together.
        if self._client is None:
            pool = redis.asyncio.BlockingConnectionPool.from_url(
                self._settings.redis_url,
                max_connections=self._settings.redis_pool_max,
                timeout=None,
                socket_connect_timeout=self._settings.redis_connect_timeout_ms / 1000,
                retry=Retry(NoBackoff(), 0),
                health_check_interval=0,
            )
            self._client = redis.asyncio.Redis(connection_pool=pool)
        return self._client

    async def prefetch(self, key: str) -> Prefetch | None:
        """GET `key`. None leaves the read to Flask without a verdict on Redis:
        the breaker is open, or the deadline passed.

        A deadline passing on the event loop says little about Redis: under a
        burst the loop itself runs late, and treating that as a Redis failure
        opened the breaker and sent every read to PostgreSQL (measured: the
        sweep collapsed at 1000/s). Flask's threaded client then asks again
        with a real socket timeout, and only its failure opens the breaker. A
        refused or broken connection is a verdict, handed over as a failed GET.
        """
        if not self._breaker.allow():
            return None
        try:
            async with asyncio.timeout(self._timeout_s):
                value = await self._redis().get(key)
        except TimeoutError:
            self._breaker.return_probe()  # if this was the probe, Flask's GET makes it
            return None
        except REDIS_ERRORS:
            return Prefetch(key, None, True)
        self._breaker.record_success()
        return Prefetch(key, value, False)


def _headers(body: bytes, hit: bool) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if hit:
        headers.append((b"x-cache", HIT.encode()))
    return headers


class AsyncHotPath:
    """ASGI app: hits and /healthz on the event loop, the rest to `fallback`."""

    def __init__(self, fallback: AsgiApp, prefetcher: AsyncPrefetcher, test_hooks: bool):
        self.fallback = fallback
        self.prefetcher = prefetcher
        self.test_hooks = test_hooks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET":
            return await self.fallback(scope, receive, send)
        started = time.perf_counter()
        scope[START_KEY] = started
        try:
            answer = await self._answer(scope)
        except Exception:  # never worse than Flask: let it answer (and log) instead
            log.exception("hot path failed; falling back to Flask")
            scope.pop(PREFETCH_KEY, None)
            answer = None
        if answer is None:
            return await self.fallback(scope, receive, send)
        route, body, hit = answer
        await send({"type": "http.response.start", "status": 200, "headers": _headers(body, hit)})
        await send({"type": "http.response.body", "body": body})
        metrics.observe_request(route, "GET", 200, time.perf_counter() - started)

    async def _answer(self, scope: Scope) -> tuple[str, bytes, bool] | None:
        path, query = scope["path"], scope["query_string"]
        if path == HEALTHZ_PATH and not query:
            return HEALTHZ_PATH, HEALTHZ_BODY, False
        held = self.test_hooks and any(name == TEST_HOLD_HEADER for name, _ in scope["headers"])
        found = lookup("GET", path, query.decode("latin-1"), held)
        if found is None:
            return None
        prefetch = await self.prefetcher.prefetch(found.key)
        if prefetch is None:
            return None
        body = None if prefetch.failed or prefetch.value is None else found.body(prefetch.value)
        if body is None:
            scope[PREFETCH_KEY] = prefetch  # Flask goes on from this GET's outcome
            return None
        metrics.cache_outcome(found.route, HIT)
        return found.route, body, True


def _with_scope_state(app: WsgiApp) -> WsgiApp:
    """Carry what the async layer learnt (request start, the GET's outcome) from
    the ASGI scope, which a2wsgi exposes as environ["asgi.scope"], to the environ."""

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        scope = environ.get("asgi.scope", {})
        # a2wsgi's body stream ends where the request's does; saying so lets
        # werkzeug read a chunked body (no Content-Length) and apply its limit.
        environ["wsgi.input_terminated"] = True
        for key in (START_KEY, PREFETCH_KEY):
            if key in scope:
                environ[key] = scope[key]
        return app(environ, start_response)

    return wsgi


def create_asgi_app(settings: Settings) -> AsgiApp:
    """The gateway as gunicorn's uvicorn workers serve it; call once per worker."""
    from aside_gateway.app import create_app

    flask_app = create_app(settings)
    services = flask_app.extensions["aside"]
    bridge = WSGIMiddleware(_with_scope_state(flask_app), workers=settings.threads)
    prefetcher = AsyncPrefetcher(settings, services.cache.breaker)
    return AsyncHotPath(bridge, prefetcher, settings.test_hooks)


def _load() -> AsgiApp:
    """Imported by each gunicorn worker after the fork, so every worker builds its
    own pools. A bad setting prints one line and exits with gunicorn's "app load
    error" status, which makes the master stop instead of respawning workers."""
    try:
        settings = load_settings(os.environ)
    except ConfigError as exc:
        print(f"aside-gateway: {exc}", file=sys.stderr)
        sys.exit(APP_LOAD_ERROR)
    return create_asgi_app(settings)


app = _load()
