"""Pipelined requests on the gateway's HTTP protocol (front/worker.py): the
real uvicorn protocol class on a transport of the test's, then the real
gateway: the queue per connection stays at its bound, a run of refusals
is answered in a loop, not by recursion, and a paced client's requests are
held with reading paused."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

from aside_gateway.config.settings import load_settings
from aside_gateway.door import loop_admission
from aside_gateway.front import worker
from gateway_helpers import wait_until
from uvicorn.config import Config
from uvicorn.server import ServerState

GET = b"GET /api/v1/users/count?email=a%40b.co HTTP/1.1\r\nhost: x\r\n\r\n"


class Transport(asyncio.Transport):
    """Records what the protocol writes; reading pauses as a socket's would."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[bytes, int] = {}
        self.paused = False
        self.closing = False

    def write(self, data: Any) -> None:
        for status in (b"200", b"503"):
            self.counts[status] = self.counts.get(status, 0) + bytes(data).count(
                b"HTTP/1.1 " + status
            )

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 28000)}.get(
            name, default
        )

    def answers(self, status: bytes) -> int:
        return self.counts.get(status, 0)


async def _ok(scope: dict, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def _protocol(app: Any) -> tuple[worker.BoundedHttpToolsProtocol, Transport]:
    config = Config(app=app, lifespan="off", log_level="warning", access_log=False)
    config.load()
    settings = load_settings(
        {"DATABASE_URL": "postgresql://a@h/d", "REDIS_URL": "redis://h", "CORE_URL": "http://c",
         "ASIDE_PROFILE": "lab"}
    )  # fmt: skip
    cls = worker.protocol_class(settings)
    protocol = cls(config=config, server_state=ServerState(), app_state={})
    transport = Transport()
    protocol.connection_made(transport)
    return protocol, transport


class RefuseAfterFirst:
    """A door that admits the first request and refuses every later one, as
    one that turns to refusing while a request is answered."""

    def __init__(self) -> None:
        self.entered = 0
        self.answer_headers: list[tuple[bytes, bytes]] = []

    def enter(self, scope: dict) -> str | None:
        self.entered += 1
        return None if self.entered == 1 else "admission_limit"

    def on_refused(self, scope: dict, reason: str) -> None:
        pass


def test_a_thousand_queued_refusals_are_answered_without_recursion():
    """1,000 requests wait behind one the app is answering; the door refuses
    each as the one before it completes."""

    async def scenario() -> Transport:
        answer = asyncio.Event()

        async def slow(scope: dict, receive: Any, send: Any) -> None:
            await answer.wait()
            await _ok(scope, receive, send)

        loop_admission.install(RefuseAfterFirst())  # type: ignore[arg-type]
        try:
            protocol, transport = _protocol(slow)
            protocol.data_received(GET * 1001)
            answer.set()
            deadline = asyncio.get_running_loop().time() + 30
            while transport.answers(b"503") < 1000 and not transport.closing:
                assert asyncio.get_running_loop().time() < deadline
                if transport.paused:  # the socket delivers what waited
                    transport.resume_reading()
                await asyncio.sleep(0)
            return transport
        finally:
            loop_admission.install(None)

    transport = asyncio.run(scenario())
    assert not transport.closing
    assert (transport.answers(b"200"), transport.answers(b"503")) == (1, 1000)


def test_a_hundred_thousand_pipelined_gets_keep_the_queue_at_its_bound():
    async def scenario() -> tuple[int, int, int]:
        protocol, transport = _protocol(_ok)
        stream = GET * 100_000
        chunk = 256 * 1024  # uvloop's largest read
        offset = most_queued = most_kept = 0
        deadline = asyncio.get_running_loop().time() + 120
        while transport.answers(b"200") < 100_000:
            assert asyncio.get_running_loop().time() < deadline, transport.answers(b"200")
            if not transport.paused and offset < len(stream):  # the socket delivers a chunk
                protocol.data_received(stream[offset : offset + chunk])
                offset += chunk
            most_queued = max(most_queued, len(protocol.pipeline))
            assert most_queued <= worker.MAX_PIPELINED, most_queued
            most_kept = max(most_kept, len(getattr(protocol, "_unparsed", b"")))
            await asyncio.sleep(0)
        return most_queued, most_kept, transport.answers(b"200")

    most_queued, most_kept, answered = asyncio.run(scenario())
    assert answered == 100_000
    assert most_queued <= worker.MAX_PIPELINED, most_queued
    assert most_kept <= 256 * 1024


def test_the_gateway_answers_every_request_of_a_long_pipeline_and_another_client(gateway):
    """20,000 /healthz pipelined in writes of 2,000 while the replies are read:
    every one is answered 200, in order, and another client meanwhile too."""
    host, port = gateway.url.removeprefix("http://").split(":")
    total, per_write = 20_000, 2_000
    head = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"
    got = bytearray()
    sock = socket.create_connection((host, int(port)), timeout=30)

    def read() -> None:
        while got.count(b"HTTP/1.1 ") < total:
            data = sock.recv(1 << 16)
            if not data:
                return
            got.extend(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        for _ in range(total // per_write):
            sock.sendall(head * per_write)
        other = socket.create_connection((host, int(port)), timeout=5)
        other.sendall(head)
        assert other.recv(4096).startswith(b"HTTP/1.1 200")
        other.close()
        wait_until(lambda: not reader.is_alive(), 60, "every pipelined answer")
    finally:
        sock.close()
    assert got.count(b"HTTP/1.1 200 OK") == total


def test_a_paced_client_s_pipeline_is_held_with_reading_paused():
    """The ops pace on (10 a second, burst 2): of 10 pipelined /healthz, the
    burst is answered at once; the next is held with reading paused, and the
    rest come at the pace, not all at once."""
    healthz = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"

    async def scenario() -> tuple[int, bool, bool, int]:
        config = Config(app=_ok, lifespan="off", log_level="warning", access_log=False)
        config.load()
        settings = load_settings(
            {"DATABASE_URL": "postgresql://a@h/d", "REDIS_URL": "redis://h", "CORE_URL": "http://c",
             "ASIDE_PROFILE": "lab", "GATEWAY_OPS_CLIENT_PER_S": "10",
             "GATEWAY_OPS_CLIENT_BURST": "2"}
        )  # fmt: skip
        protocol = worker.protocol_class(settings)(
            config=config, server_state=ServerState(), app_state={}
        )
        transport = Transport()
        protocol.connection_made(transport)
        protocol.data_received(healthz * 10)
        loop = asyncio.get_running_loop()
        settle = loop.time() + 0.05
        while loop.time() < settle:
            await asyncio.sleep(0.005)
        at_once, paused, held = transport.answers(b"200"), transport.paused, protocol._held
        later = loop.time() + 0.35
        while loop.time() < later:
            if transport.paused and protocol._held is None and protocol.pipeline == []:
                transport.resume_reading()
            await asyncio.sleep(0.005)
        return at_once, paused, held is not None, transport.answers(b"200")

    at_once, paused, held, after = asyncio.run(scenario())
    assert (at_once, paused, held) == (2, True, True)
    # 0.4 s at 10 a second past the burst: 3 or 4 more, not the 8 left.
    assert 4 <= after <= 7, after
