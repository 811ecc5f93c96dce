"""Forwards writes and Go compute to the core over pooled keep-alive connections.

One urllib3 connection pool per worker, sized to the worker's threads, with a
connect and a read timeout and no retries: a POST is not safe to resend, and
a core that is down must answer 503 core_unavailable at once, not after retries.

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
from dataclasses import dataclass
from urllib.parse import urlsplit

import urllib3
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from aside_gateway.config import Settings
from aside_gateway.errors import ApiError

log = logging.getLogger("aside_gateway")

# Core answer headers the gateway passes on to its client.
PASSED_HEADERS = (
    "Content-Type",
    "Location",
    "X-Cache-Invalidation",
    "Retry-After",
    "Idempotent-Replayed",
)


@dataclass(slots=True)
class CoreResponse:
    status: int
    body: bytes
    headers: dict[str, str]


class CoreClient:
    def __init__(self, settings: Settings):
        parts = urlsplit(settings.core_url)
        token = settings.core_token
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}
        self._prefix = parts.path.rstrip("/")
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

    def forward(
        self,
        method: str,
        path: str,
        body: bytes | None,
        content_type: str | None,
        extra_headers: dict[str, str] | None = None,
        write: bool = False,
    ) -> CoreResponse:
        """The core's answer; `write` marks a request that changes data, whose
        outcome is unknown if the core does not answer it."""
        headers = {"Accept": "application/json", **(extra_headers or {}), **self._auth}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            response = self._pool.urlopen(
                method,
                self._prefix + path,
                body=body,
                headers=headers,
                retries=False,
                redirect=False,
                preload_content=True,
            )
        except Urllib3Error as exc:
            raise unanswered(exc, write, method, path) from None
        if response.status == 401:
            # The core refused our CORE_TOKEN: a misconfiguration of this
            # deployment, not the client's fault, so not the client's 401.
            log.error("the core refused the gateway's credential: check CORE_TOKEN on both")
            raise ApiError("internal", "internal error")
        passed = {
            name: response.headers[name] for name in PASSED_HEADERS if name in response.headers
        }
        return CoreResponse(response.status, response.data, passed)

    def simplified(self, track_id: int, tolerance: str) -> bytes | None:
        """The core's answer to a track simplified at the canonical `tolerance`,
        None when it has no such track. A core that is down, busy or failing
        makes the read a 503 core_unavailable."""
        answer = self.forward(
            "GET", f"/internal/v1/tracks/{track_id}/simplified?tolerance={tolerance}", None, None
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
    """The answer to a request the core did not answer (see the module's doc)."""
    if write and isinstance(exc, ReadTimeoutError | ProtocolError):
        log.warning(
            "the core did not answer %s %s (%s): the write may have been applied",
            method, path, type(exc).__name__,
        )  # fmt: skip
        return ApiError(
            "write_outcome_unknown",
            "the core did not answer: the write may have been applied; "
            "retry with the same Idempotency-Key (a create) or the same request",
            {"Retry-After": "1"},
        )
    return ApiError("core_unavailable", f"the core did not answer: {type(exc).__name__}")
