"""What the async hot path and the Flask app share: route names, paths, and
the hand-off of a request the hot path began but did not answer.

Both layers import this module (and front/loop_writes.py, the writes the event
loop forwards) and neither imports the other, so the read path runs one way:
front/asgi -> front/hot_path -> (a2wsgi) -> web/api -> tiers/strategies -> tiers/l2.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aside_gateway.contracts.cache_keys import encode_json

# ASGI's three arguments, as both event-loop modules take them.
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Flask's rules for the cached reads; also the `route` label of their metrics.
COUNT_ROUTE = "/api/v1/users/count"
USER_ROUTE = "/api/v1/users/<id>"

# Flask's rules for the user writes, the same labels.
USERS_ROUTE = "/api/v1/users"

COUNT_PATH = "/api/v1/users/count"
USERS_PATH = "/api/v1/users"
USERS_PREFIX = "/api/v1/users/"
HEALTHZ_PATH = "/healthz"
HEALTHZ_BODY = b'{"status":"ok"}'

# Write and compute bodies are a few hundred bytes; refuse more early (413).
MAX_BODY_BYTES = 16 * 1024

# Request headers the core reads: a create's key, and (lab test hooks) a hold on its answer.
IDEMPOTENCY_KEY = "Idempotency-Key"
CORE_DELAY_HEADER = "X-Test-Delay-Ms"

# Keys of the ASGI scope, copied to the WSGI environ by front/asgi.py.
START_KEY = "aside.start"  # perf_counter() when the request arrived
EARLY_GET_KEY = "aside.early_get"  # the EarlyGet of a hit attempt that fell through
# Set by the worker's protocol (front/worker.py) when the request head is complete.
ARRIVED_KEY = "aside.arrived"  # time.monotonic() then
CLIENT_GONE_KEY = "aside.client_gone"  # a callable: True once the connection is closing


def count_body(email: str, value: bytes) -> bytes:
    """The body of GET /api/v1/users/count for the cached count `value`, as
    either layer answers it."""
    return encode_json({"email": email, "count": int(value)})


@dataclass(frozen=True, slots=True)
class EarlyGet:
    """The Redis GET the hot path already did for this request: Flask goes on
    from its outcome instead of asking Redis again, and counts its failure."""

    key: str
    value: bytes | None
    failed: bool
    # The L1 token (l1.L1Cache.token) taken before this GET, for a hybrid read
    # that may store its value in L1; None when the read does not use L1.
    l1_token: tuple[int, int] | None = None
    # CACHE_EXPIRY=early: the hot path's XFetch draw said to recompute this value
    # (tiers/expiry.py); Flask then tries the lease instead of drawing again.
    refresh: bool = False
