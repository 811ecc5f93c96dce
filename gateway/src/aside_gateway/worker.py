"""gunicorn's worker class for the gateway: uvicorn on uvloop and httptools."""

from __future__ import annotations

from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn_worker import UvicornWorker

from aside_gateway.errors import error_body

# gunicorn's own workers bound the request head; uvicorn's httptools protocol
# does not, so one endless header could grow a worker's memory.
MAX_URL_BYTES = 8190
MAX_HEADER_COUNT = 100
MAX_HEAD_BYTES = 64 * 1024


class RequestHeadTooLarge(Exception):
    """Raised from a parser callback: httptools turns it into a parser error,
    answered with a JSON 400 and a closed connection."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with gunicorn's limits on the request head."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = False
        self._head_bytes = 0

    def data_received(self, data: bytes) -> None:
        # Chunks fed while the head was still incomplete were all head bytes.
        if self._in_head and self._head_bytes > MAX_HEAD_BYTES:
            self._in_head = False
            self.send_400_response("Request header fields too large.")
            return
        super().data_received(data)
        if self._in_head:
            self._head_bytes += len(data)

    def send_400_response(self, msg: str) -> None:
        # The API's error shape (contracts/errors.json) even for a request the
        # parser refused, instead of uvicorn's plain-text page.
        body = error_body("invalid_request", msg)
        head = [
            b"HTTP/1.1 400 Bad Request",
            *(name + b": " + value for name, value in self.server_state.default_headers),
            b"content-type: application/json",
            b"content-length: %d" % len(body),
            b"connection: close",
        ]
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = 0

    def on_url(self, url: bytes) -> None:
        if len(self.url) + len(url) > MAX_URL_BYTES:
            raise RequestHeadTooLarge("request line too long")
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(self.headers) >= MAX_HEADER_COUNT:
            raise RequestHeadTooLarge("too many headers")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()


class GatewayWorker(UvicornWorker):
    # Named, not "auto": a missing C extension must fail the start, not
    # silently halve the throughput. No lifespan events: the app builds its
    # pools when imported. No Server header, as under gunicorn's own workers.
    CONFIG_KWARGS: ClassVar[dict[str, Any]] = {
        "loop": "uvloop",
        "http": BoundedHttpToolsProtocol,
        "lifespan": "off",
        "server_header": False,
    }
