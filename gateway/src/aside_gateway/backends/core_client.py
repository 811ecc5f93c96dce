"""Forwards writes and Go compute to the core over pooled keep-alive connections.

Two clients with one behaviour: `CoreClient` (urllib3) for the Flask threads,
one pool per worker sized to its threads, and `AsyncCoreClient` (aiohttp) for
the user writes answered on the event loop (front/loop_writes.py), one connector
per worker of the same size. Both have a connect and a read timeout and send
a request once: a POST is not safe to resend, and a core that is down must
answer 503 core_unavailable at once, not after retries. (aiohttp resends an
idempotent request, a DELETE, once when a reused keep-alive connection turns
out closed before any answer: HTTP allows it, and the core keeps its idle
connections 120 s, far past aiohttp's 15 s.)

A write the core never got (no connection) is 503 core_unavailable: nothing
happened. A write the core got but did not answer (the read timeout ran out,
or the connection broke after the request went out) may have been applied:
504 write_outcome_unknown, retry with the same Idempotency-Key. The default
CORE_TIMEOUT_MS outlasts the core's own worst case for a write
(contracts/timeouts.json), so that answer means a sick core, not a slow one.

Every forwarded request carries `Authorization: Bearer <CORE_TOKEN>` when
CORE_TOKEN is set (required in production, where the core refuses writes and
compute without it). The client's own Authorization (WRITE_TOKEN) is checked
here and never forwarded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
import urllib3
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from aside_gateway.config.settings import Settings
from aside_gateway.contracts.errors import ApiError

log = logging.getLogger("aside_gateway")

# Core answer headers the gateway passes on to its client.
PASSED_HEADERS = (
    "Content-Type",
    "Location",
    "X-Cache-Invalidation",
    "Retry-After",
    "Idempotent-Replayed",
)


@dataclass(frozen=True, slots=True)
class CoreRequest:
    """One request forwarded to the core; `write` marks one that changes data,
    whose outcome is unknown if the core does not answer it."""

    method: str
    path: str
    body: bytes | None = None
    content_type: str | None = None
    extra_headers: dict[str, str] | None = None
    write: bool = False


@dataclass(slots=True)
class CoreResponse:
    status: int
    body: bytes
    headers: dict[str, str]


class RequestHeaders:
    """The headers of every forwarded request, and the core's path prefix."""

    def __init__(self, settings: Settings):
        token = settings.core_token
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}
        self.prefix = urlsplit(settings.core_url).path.rstrip("/")

    def of(self, request: CoreRequest) -> dict[str, str]:
        headers = {"Accept": "application/json", **(request.extra_headers or {}), **self._auth}
        if request.content_type:
            headers["Content-Type"] = request.content_type
        return headers


def answered(status: int, body: bytes, headers: Mapping[str, str]) -> CoreResponse:
    """The core's answer as the gateway passes it on."""
    if status == 401:
        # The core refused our CORE_TOKEN: a misconfiguration of this
        # deployment, not the client's fault, so not the client's 401.
        log.error("the core refused the gateway's credential: check CORE_TOKEN on both")
        raise ApiError("internal", "internal error")
    passed = {name: headers[name] for name in PASSED_HEADERS if name in headers}
    return CoreResponse(status, body, passed)


class CoreClient:
    def __init__(self, settings: Settings):
        self._headers = RequestHeaders(settings)
        self._pool = urllib3.connection_from_url(
            settings.core_url,
            maxsize=settings.threads,
            block=False,  # past maxsize, open a throwaway connection rather than queue
            timeout=urllib3.Timeout(
                connect=settings.core_connect_timeout_ms / 1000,
                read=settings.core_timeout_ms / 1000,
            ),
            retries=False,
        )

    def forward(self, request: CoreRequest) -> CoreResponse:
        """The core's answer to `request`."""
        try:
            response = self._pool.urlopen(
                request.method,
                self._headers.prefix + request.path,
                body=request.body,
                headers=self._headers.of(request),
                retries=False,
                redirect=False,
                preload_content=True,
            )
        except Urllib3Error as exc:
            raise unanswered(exc, request.write, request.method, request.path) from None
        return answered(response.status, response.data, response.headers)

    def simplified(self, track_id: int, tolerance: str) -> bytes | None:
        """The core's answer to a track simplified at the canonical `tolerance`,
        None when it has no such track. A core that is down, busy or failing
        makes the read a 503 core_unavailable."""
        answer = self.forward(
            CoreRequest("GET", f"/internal/v1/tracks/{track_id}/simplified?tolerance={tolerance}")
        )
        if answer.status == 200:
            return answer.body
        if answer.status == 404:
            return None
        log.error("the core answered %d to a simplification: %r", answer.status, answer.body[:200])
        raise ApiError(
            "core_unavailable", "the core could not simplify the track now", {"Retry-After": "1"}
        )

    def close(self) -> None:
        self._pool.close()


def unanswered(exc: Urllib3Error, write: bool, method: str, path: str) -> ApiError:
    """The answer to a request urllib3 got no answer to (see the module's doc)."""
    sent = isinstance(exc, ReadTimeoutError | ProtocolError)
    return unanswered_error(sent, write, method, path, type(exc).__name__)


def unanswered_error(sent: bool, write: bool, method: str, path: str, reason: str) -> ApiError:
    """The answer to a request the core did not answer: `sent`, whether it may
    have reached the core (a read timeout, a connection broken after it went out)."""
    if write and sent:
        log.warning(
            "the core did not answer %s %s (%s): the write may have been applied",
            method, path, reason,
        )  # fmt: skip
        return ApiError(
            "write_outcome_unknown",
            "the core did not answer: the write may have been applied; "
            "retry with the same Idempotency-Key (a create) or the same request",
            {"Retry-After": "1"},
        )
    return ApiError("core_unavailable", f"the core did not answer: {reason}")


class AsyncCoreClient:
    """The event loop's client to the core, for the writes answered there:
    built on first use, inside the worker's loop that it belongs to.

    At most GATEWAY_THREADS connections per worker, like the Flask side's pool;
    a request waits for one at most GATEWAY_QUEUE_TIMEOUT_MS (as long as a
    request may wait for a Flask thread), then is 503 core_unavailable: it was
    never sent.
    """

    def __init__(self, settings: Settings):
        self._settings = settings
        self._headers = RequestHeaders(settings)
        self._root = settings.core_url.rstrip("/")  # its path is the prefix
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            settings = self._settings
            connect_s = settings.core_connect_timeout_ms / 1000
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=settings.threads),
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    connect=settings.queue_timeout_ms / 1000 + connect_s,
                    sock_connect=connect_s,
                    sock_read=settings.core_timeout_ms / 1000,
                ),
                auto_decompress=False,
                # Only what the client sent: no guessed Content-Type for a body without one.
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
            )
        return self._session

    async def forward(self, request: CoreRequest) -> CoreResponse:
        """As CoreClient.forward, on the event loop."""
        try:
            async with self._client().request(
                request.method,
                self._root + request.path,
                data=request.body,
                headers=self._headers.of(request),
                allow_redirects=False,
            ) as response:
                data = await response.read()
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            raise _unsent(request, exc) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _sent(request, exc) from None
        return answered(response.status, data, response.headers)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _unsent(request: CoreRequest, exc: BaseException) -> ApiError:
    return unanswered_error(False, request.write, request.method, request.path, type(exc).__name__)


def _sent(request: CoreRequest, exc: BaseException) -> ApiError:
    return unanswered_error(True, request.write, request.method, request.path, type(exc).__name__)
