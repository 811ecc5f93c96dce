"""Admission to the Flask thread pool: work nobody waits for is not started.

a2wsgi queues every request for a thread without a bound, and runs it even
when its client hung up long before a thread was free; under a flood of cold
reads the database would then scan for answers nobody reads, for as long as
the backlog lasts. `Admission` runs first in the thread that takes a request:

* its client gone (the worker's protocol says the connection is closing):
  nothing runs; the answer goes nowhere;
* it waited for a thread longer than GATEWAY_QUEUE_TIMEOUT_MS: 503
  `unavailable` with `Retry-After: 1` at once, as a retry then has a better
  chance than the request had.

Both read what the worker's protocol put in the ASGI scope (front/worker.py); a
request without it (another server) is simply run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from aside_gateway.config import metrics
from aside_gateway.contracts.errors import error_body
from aside_gateway.contracts.routes import ARRIVED_KEY, CLIENT_GONE_KEY

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class Admission:
    def __init__(self, app: WsgiApp, queue_timeout_ms: int):
        self.app = app
        self.queue_timeout_s = queue_timeout_ms / 1000

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        scope = environ.get("asgi.scope", {})
        gone = scope.get(CLIENT_GONE_KEY)
        if gone is not None and gone():
            metrics.shed("client_gone")
            return _unavailable(start_response, "the client went away")
        arrived = scope.get(ARRIVED_KEY)
        if arrived is not None and time.monotonic() - arrived > self.queue_timeout_s:
            metrics.shed("queue_timeout")
            return _unavailable(start_response, "the gateway is overloaded; try again")
        return self.app(environ, start_response)


def _unavailable(start_response: Callable[..., Any], message: str) -> list[bytes]:
    body = error_body("unavailable", message)
    start_response(
        "503 Service Unavailable",
        [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            ("Retry-After", "1"),
        ],
    )
    return [body]
