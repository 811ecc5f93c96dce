"""User writes forwarded to the core on the event loop (GATEWAY_WRITES=loop, the
default): POST /api/v1/users, PATCH and DELETE /api/v1/users/<id>.

Through Flask a write holds a thread for its whole round trip to the core and
costs the worker 1.5-1.8 ms of CPU and about 25 thread switches (a2wsgi hands
the request and each part of its answer between the loop and the thread);
every switch is a turn the event loop, and with it the L1 tier's invalidation
subscription, waits for the GIL. On the loop the same write is one more task
awaiting the core (docs/decisions/038-writes-on-the-event-loop.md).

The loop takes a write in its plain shape only, judged from the request head
alone, since once the loop reads the body the request can no longer go to
Flask: a valid id, no query string, no Transfer-Encoding, a Content-Length (if
any) within the body limit and, where they apply, a valid bearer token
(WRITE_TOKEN) and one valid Idempotency-Key. Anything else goes to Flask,
whose checks are the same functions, so every error of the request itself is
Flask's answer; the loop answers with the core's answer, or the error of a
core that gave none (backends/core_client.py). As on the Flask side, the write's keys
leave this worker's L1 tier before the answer (tiers/strategies.py).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from aside_gateway.backends.core_client import AsyncCoreClient, CoreRequest
from aside_gateway.config import metrics
from aside_gateway.config.settings import Settings
from aside_gateway.contracts.errors import ApiError, error_body
from aside_gateway.contracts.routes import (
    CLIENT_GONE_KEY,
    CORE_DELAY_HEADER,
    IDEMPOTENCY_KEY,
    MAX_BODY_BYTES,
    START_KEY,
    USER_ROUTE,
    USERS_PATH,
    USERS_PREFIX,
    USERS_ROUTE,
    Receive,
    Scope,
    Send,
)
from aside_gateway.contracts.validation import id_or_none, idempotency_key
from aside_gateway.tiers.strategies import TieredCache
from aside_gateway.web.auth import refusal

log = logging.getLogger("aside_gateway")

Head = dict[str, list[str]]

JSON_TYPE = "application/json"
# Answers that carry no Content-Length (RFC 9110, 8.6).
NO_CONTENT = frozenset({204, 304})


@dataclass(frozen=True, slots=True)
class Write:
    """A user write the loop forwards: what the core is sent besides the body."""

    method: str
    route: str  # Flask's rule: the `route` label of the request metrics
    user_id: int | None
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def core_path(self) -> str:
        return USERS_PATH if self.user_id is None else f"{USERS_PATH}/{self.user_id}"


def head_of(raw: list[tuple[bytes, bytes]]) -> Head:
    """An ASGI request's headers by lower-case name, values as WSGI has them (latin-1)."""
    head: Head = {}
    for name, value in raw:
        head.setdefault(name.decode("latin-1"), []).append(value.decode("latin-1"))
    return head


def _first(head: Head, name: str) -> str | None:
    values = head.get(name)
    return values[0] if values else None


def _plain_body(head: Head) -> bool:
    """A body the loop may read: none, or one Content-Length within the limit."""
    if "transfer-encoding" in head:
        return False
    lengths = head.get("content-length", [])
    if not lengths:
        return True
    return len(lengths) == 1 and lengths[0].isdigit() and int(lengths[0]) <= MAX_BODY_BYTES


def write_of(
    method: str, path: str, query: bytes, head: Head, write_token: bytes | None, hooks: bool
) -> Write | None:
    """The write the loop forwards for this request head, or None: Flask answers it."""
    if query or not _plain_body(head):
        return None
    if method == "POST" and path == USERS_PATH:
        route, user_id = USERS_ROUTE, None
    elif method in ("PATCH", "DELETE") and path.startswith(USERS_PREFIX):
        route, user_id = USER_ROUTE, id_or_none(path[len(USERS_PREFIX) :])
        if user_id is None:
            return None
    else:
        return None
    if write_token is not None and refusal(_first(head, "authorization"), write_token) is not None:
        return None
    headers: dict[str, str] = {}
    if user_id is None:
        try:
            key = idempotency_key(head.get(IDEMPOTENCY_KEY.lower(), []))
        except ApiError:
            return None
        if key is not None:
            headers[IDEMPOTENCY_KEY] = key
    delay = _first(head, CORE_DELAY_HEADER.lower()) if hooks else None
    if delay is not None:
        headers[CORE_DELAY_HEADER] = delay
    return Write(method, route, user_id, _first(head, "content-type"), headers)


async def read_body(receive: Receive) -> bytes | None:
    """The request body (its length checked by write_of and enforced by the
    server's parser), or None when the client left before it was whole."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


Answer = tuple[int, bytes, dict[str, str]]


class LoopWrites:
    """The writes the worker's event loop forwards (see the module's doc)."""

    def __init__(self, settings: Settings, tiers: TieredCache, core: AsyncCoreClient):
        self._tiers = tiers
        self._core = core
        token = settings.write_token
        self._write_token = token.encode("ascii") if token else None
        self._hooks = settings.test_hooks
        # The lab's worker header (Settings.worker_header), on every answer.
        worker = settings.worker_header
        self._extra = [] if worker is None else [(worker[0].lower().encode(), worker[1].encode())]

    def take(self, scope: Scope) -> Write | None:
        head = head_of(scope["headers"])
        return write_of(
            scope["method"], scope["path"], scope["query_string"], head,
            self._write_token, self._hooks,
        )  # fmt: skip

    async def answer(self, write: Write, scope: Scope, receive: Receive, send: Send) -> None:
        started = scope.get(START_KEY) or time.perf_counter()
        body = await read_body(receive)
        gone = scope.get(CLIENT_GONE_KEY)
        if body is None or (gone is not None and gone()):
            metrics.shed("client_gone")  # nobody waits for it: nothing is forwarded
            return
        try:
            status, payload, headers = await self._forward(write, body)
        except ApiError as error:
            status, payload = error.status, error_body(error.code, error.message)
            headers = {"Content-Type": JSON_TYPE, **error.headers}
        except Exception:  # as Flask's last handler: a 500 without the traceback
            log.exception("unhandled error")
            status, payload = 500, error_body("internal", "internal error")
            headers = {"Content-Type": JSON_TYPE}
        raw = _raw(status, headers, payload)
        raw.extend(self._extra)
        # Counted before it is written (see front/hot_path.py's answers).
        metrics.observe_request(write.route, write.method, status, time.perf_counter() - started)
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": payload})

    async def _forward(self, write: Write, body: bytes) -> Answer:
        previous = self._tiers.before_write(write.user_id)
        answer = await self._core.forward(
            CoreRequest(
                write.method, write.core_path, body or None, write.content_type, write.headers, True
            )
        )
        self._tiers.after_write(write.method, write.user_id, answer.status, answer.body, previous)
        return answer.status, answer.body, answer.headers

    async def close(self) -> None:
        await self._core.close()


def _raw(status: int, headers: dict[str, str], body: bytes) -> list[tuple[bytes, bytes]]:
    raw = [
        (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()
    ]
    if status not in NO_CONTENT:
        raw.append((b"content-length", b"%d" % len(body)))
    return raw
