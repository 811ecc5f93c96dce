"""gunicorn's worker class for the gateway: uvicorn on uvloop and httptools.

uvicorn arms no timer until a first response is sent and bounds neither the
request head nor the number of connections, so a client that opens sockets
and never finishes a request would hold a descriptor and up to a head's worth
of memory each, forever. `BoundedHttpToolsProtocol` adds what gunicorn's own
workers have: limits on the head, a deadline for the head (from the
connection or the request's first byte) and for the body (from the end of
the head), and a bound on open connections per worker, beyond which a new
connection gets a 503 and is closed. uvicorn's keep-alive timeout covers the
idle time between requests.

Pipelined requests are bounded by design: at most MAX_PIPELINED requests
wait per connection behind the one being answered. A chunk read from the
socket is fed to the parser in slices no longer than the room left can hold
(MIN_REQUEST_BYTES each), and what remains is kept, with reading paused,
until answers make room; so a client that pipelines as fast as it can holds
one chunk and MAX_PIPELINED parsed requests, not its whole stream. Answers
that complete while another is being completed (the door's 503s, one per
queued request) are taken in a loop, not by recursion.

Production paces each client's requests to the operational routes
(door/ops_pace.py): a request past its client's pace is held unstarted, its
connection's reading paused, and started by a timer when its turn is due, so
a client pipelining /healthz as fast as it can is slowed by TCP backpressure
rather than answered as fast as it sends; nothing more of its connection is
parsed meanwhile.

It is also where the event loop's door stands (door/loop_admission.py): a request
the door refuses is answered 503 from here, as soon as its head is parsed,
without the ASGI task, scope walk and response events an app's answer costs.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn_worker import UvicornWorker

from aside_gateway.config.settings import Settings, load_settings
from aside_gateway.contracts.errors import error_body
from aside_gateway.contracts.routes import ARRIVED_KEY, CLIENT_GONE_KEY

# gunicorn's own workers bound the request head; uvicorn's httptools protocol
# does not, so one endless header could grow a worker's memory.
MAX_URL_BYTES = 8190
MAX_HEADER_COUNT = 100
MAX_HEAD_BYTES = 64 * 1024
# Requests parsed and waiting per connection behind the one being answered.
MAX_PIPELINED = 32
# The shortest whole request head ("GET / HTTP/1.1" and an empty line is 18).
MIN_REQUEST_BYTES = 16


def _ops_pace(settings: Settings | None) -> Any:
    """This worker's ops pace, None when off; built by the worker's first
    connection (ops_pace counts in metrics, as loop_admission does)."""
    if settings is None:
        return None
    from aside_gateway.door.ops_pace import WorkerOpsPace

    return WorkerOpsPace.from_settings(settings)


def _door_module() -> Any:
    """loop_admission, imported by a worker's first connection, not when
    gunicorn's master loads this class: it counts in metrics, which need the
    worker's metrics directory (gunicorn.conf.py makes it)."""
    from aside_gateway.door import loop_admission

    return loop_admission


class RequestHeadTooLarge(Exception):
    """Raised from a parser callback: httptools turns it into a parser error,
    answered with a JSON 400 and a closed connection."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with gunicorn's limits on the request head,
    deadlines for the head and the body, and a bound on connections."""

    # Per worker, from the settings (protocol_class).
    head_timeout_s: ClassVar[float] = 5.0
    body_timeout_s: ClassVar[float] = 15.0
    max_connections: ClassVar[int] = 1000
    # The settings of the ops pace when it is on (protocol_class), and this
    # process's pace, built from them by its first connection.
    ops_pace_settings: ClassVar[Settings | None] = None
    worker_ops_pace: ClassVar[Any] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = False
        self._head_bytes = 0
        self._awaiting_body = False
        self._head_deadline: asyncio.TimerHandle | None = None
        self._body_deadline: asyncio.TimerHandle | None = None
        self.doors = _door_module()  # where the worker's door is installed
        # Bytes read but not parsed while MAX_PIPELINED requests wait.
        self._unparsed = b""
        # Responses completed while one is being completed: taken in a loop.
        self._completions = 0
        self._completing = False
        # A request held by the ops pace: the timer that starts it.
        self._held: asyncio.TimerHandle | None = None
        cls = type(self)
        if cls.worker_ops_pace is None and cls.ops_pace_settings is not None:
            cls.worker_ops_pace = _ops_pace(cls.ops_pace_settings)
        self.ops_pace = cls.worker_ops_pace

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self._send_error_and_close(
                b"503 Service Unavailable",
                "unavailable",
                "too many open connections",
                [b"retry-after: 1"],
            )
            return
        # A connection that never sends a byte is closed at the head deadline too.
        self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadlines()
        if self._held is not None:
            self._held.cancel()
            self._held = None
        self._unparsed = b""
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._unparsed or self._held is not None:  # reading is paused: kept
            self._unparsed += data
            return
        self._feed(data)
        self._arm_deadlines_after_data()

    def _feed(self, data: bytes) -> None:
        """Parse `data` in slices the pipeline has room for; keep the rest."""
        offset = 0
        while offset < len(data) and not self.transport.is_closing():
            # Slices fed while the head was still incomplete were all head bytes.
            if self._in_head and self._head_bytes > MAX_HEAD_BYTES:
                self._in_head = False
                self.send_400_response("Request header fields too large.")
                return
            room = MAX_PIPELINED - len(self.pipeline)
            if room <= 0 or self._held is not None:
                self._unparsed = data[offset:]
                self.flow.pause_reading()
                return
            step = room * MIN_REQUEST_BYTES
            piece = data if offset == 0 and len(data) <= step else data[offset : offset + step]
            offset += len(piece)
            super().data_received(piece)
            if self._in_head:
                self._head_bytes += len(piece)

    def on_response_complete(self) -> None:
        """uvicorn's (start the next pipelined request), in a loop: the door's
        503 completes a response inside the call that started it."""
        self._completions += 1
        if self._completing:
            return
        self._completing = True
        fed = False
        try:
            while not self.transport.is_closing():
                if self._completions:
                    self._completions -= 1
                    super().on_response_complete()
                elif self._unparsed and len(self.pipeline) < MAX_PIPELINED and not self._held:
                    data, self._unparsed = self._unparsed, b""
                    self._feed(data)
                    fed = True
                else:
                    break
        finally:
            self._completions = 0
            self._completing = False
        if self._unparsed or len(self.pipeline) >= MAX_PIPELINED or self._held is not None:
            self.flow.pause_reading()  # uvicorn's resumed it
        elif fed:
            self._arm_deadlines_after_data()

    def _arm_deadlines_after_data(self) -> None:
        """Armed only when a chunk left a head or a body unfinished, so a whole
        request in one chunk (the common case) costs no timer."""
        if self.transport.is_closing():
            return
        # Between requests, bytes that start no message (stray CRLFs) end
        # uvicorn's keep-alive timer without starting a head: the head deadline
        # bounds them as well. A request answered within this chunk (the door's
        # 503) armed the keep-alive timer again, which bounds the idle time.
        between_requests = self.cycle is None or self.cycle.response_complete
        idle_unbounded = between_requests and self.timeout_keep_alive_task is None
        if self._in_head or (idle_unbounded and not self._awaiting_body):
            self._arm_head_deadline()
        elif self._awaiting_body and self._body_deadline is None:
            self._body_deadline = self.loop.call_later(self.body_timeout_s, self._deadline_passed)

    def _arm_head_deadline(self) -> None:
        # Not re-armed by later bytes: a head trickled a byte at a time still
        # has to be complete within the deadline.
        if self._head_deadline is None:
            self._head_deadline = self.loop.call_later(self.head_timeout_s, self._deadline_passed)

    def _cancel_deadlines(self) -> None:
        for handle in (self._head_deadline, self._body_deadline):
            if handle is not None:
                handle.cancel()
        self._head_deadline = self._body_deadline = None

    def _deadline_passed(self) -> None:
        self._head_deadline = self._body_deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def send_400_response(self, msg: str) -> None:
        # The API's error shape (contracts/errors.json) even for a request the
        # parser refused, instead of uvicorn's plain-text page.
        self._send_error_and_close(b"400 Bad Request", "invalid_request", msg)

    def _send_error_and_close(
        self, status: bytes, code: str, msg: str, extra: list[bytes] | None = None
    ) -> None:
        body = error_body(code, msg)
        head = [
            b"HTTP/1.1 " + status,
            *(name + b": " + value for name, value in self.server_state.default_headers),
            b"content-type: application/json",
            b"content-length: %d" % len(body),
            *(extra or []),
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
        self._awaiting_body = True
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None
        # What the app needs to shed work nobody waits for (door/admission.py).
        self.scope[ARRIVED_KEY] = time.monotonic()  # type: ignore[literal-required]
        self.scope[CLIENT_GONE_KEY] = self.transport.is_closing  # type: ignore[literal-required]
        super().on_headers_complete()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        if self.ops_pace is not None and app is self.app:
            hold_s = self.ops_pace.hold_s(cycle.scope)
            if hold_s > 0:
                self.flow.pause_reading()
                self._held = self.loop.call_later(hold_s, self._release, cycle, app)
                return
        self._admit(cycle, app)

    def _release(self, cycle: RequestResponseCycle, app: Any) -> None:
        """A held request's turn: started without asking the pace again (its
        turn was reserved); reading resumes when its answer is complete."""
        self._held = None
        if not self.transport.is_closing():
            self._admit(cycle, app)

    def _admit(self, cycle: RequestResponseCycle, app: Any) -> None:
        # uvicorn's own 503 app (limit_concurrency) and apps without a door pass.
        door = self.doors.installed()
        if door is not None and app is self.app:
            refused = door.enter(cycle.scope)
            if refused is not None:
                door.on_refused(cycle.scope, refused)
                return self._shed(cycle, door.answer_headers)
        super()._start_asgi_task(cycle, app)

    def _shed(self, cycle: RequestResponseCycle, extra: list[tuple[bytes, bytes]]) -> None:
        """Answer the door's 503 now; a body still on its way is discarded by
        the parser callbacks, which see the response complete."""
        cycle.response_complete = True
        self.transport.write(
            self.doors.shed_response(self.server_state.default_headers, cycle.keep_alive, extra)
        )
        if not cycle.keep_alive:
            self.transport.close()
        self.on_response_complete()

    def on_message_complete(self) -> None:
        self._awaiting_body = False
        if self._body_deadline is not None:
            self._body_deadline.cancel()
            self._body_deadline = None
        super().on_message_complete()


def protocol_class(settings: Settings) -> type[BoundedHttpToolsProtocol]:
    """The protocol with this worker's deadlines and connection bound."""
    return type(
        "GatewayHttpToolsProtocol",
        (BoundedHttpToolsProtocol,),
        {
            "head_timeout_s": float(settings.head_timeout_s),
            "body_timeout_s": float(settings.body_timeout_s),
            "max_connections": settings.max_connections,
            "ops_pace_settings": settings if settings.ops_client_per_s else None,
        },
    )


# Named, not "auto": a missing C extension must fail the start, not silently
# halve the throughput. Lifespan events "on", not "auto": the app builds its
# pools when imported, and starts the tasks of its event loop (the L1 tier's
# subscription) at the startup event, whose failure must stop the worker.
# No Server header, as under gunicorn's own workers. No proxy headers:
# uvicorn would otherwise put X-Forwarded-For's address in the request's
# client for any peer in forwarded_allow_ips (127.0.0.1 by default), before
# the miss budget reads the peer; only GATEWAY_TRUSTED_PROXIES decides which
# forwarding header is believed (door/miss_budget.py).
BASE_CONFIG: dict[str, Any] = {
    "loop": "uvloop",
    "http": BoundedHttpToolsProtocol,
    "lifespan": "on",
    "server_header": False,
    "proxy_headers": False,
}


class GatewayWorker(UvicornWorker):
    CONFIG_KWARGS: ClassVar[dict[str, Any]] = BASE_CONFIG

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # gunicorn.conf.py has checked the settings before any worker starts.
        settings = load_settings(os.environ)
        self.CONFIG_KWARGS = {  # type: ignore[misc]
            **BASE_CONFIG,
            "http": protocol_class(settings),
            # uvicorn closes a connection idle this long after a response.
            "timeout_keep_alive": settings.keepalive_s,
        }
        super().__init__(*args, **kwargs)
