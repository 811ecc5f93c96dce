"""Slow and idle clients cannot hold a worker's memory and descriptors
(front/worker.py): deadlines for the request head and body, an idle keep-alive
timeout and a bound on open connections per worker, against real gunicorn."""

from __future__ import annotations

import json
import selectors
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import requests
from gateway_helpers import wait_until

HEAD_TIMEOUT_S = 2
BODY_TIMEOUT_S = 2
KEEPALIVE_S = 1
# Slack over a deadline for a loaded 2-core machine to close what it must.
MARGIN_S = 4
PARTIAL_HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "


@pytest.fixture(scope="module")
def strict_gateway(start_gateway):
    return start_gateway(
        GATEWAY_HEAD_TIMEOUT_S=str(HEAD_TIMEOUT_S),
        GATEWAY_BODY_TIMEOUT_S=str(BODY_TIMEOUT_S),
        GATEWAY_KEEPALIVE_S=str(KEEPALIVE_S),
    )


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


@contextmanager
def _sockets(url: str, count: int) -> Iterator[list[socket.socket]]:
    opened = []
    try:
        for _ in range(count):
            opened.append(socket.create_connection(_address(url), timeout=5))
        yield opened
    finally:
        for sock in opened:
            sock.close()


def _closed_by_server(sock: socket.socket) -> bool:
    """True once the server closed `sock` (EOF or reset); data is read and dropped."""
    try:
        return sock.recv(65536) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _wait_all_closed(socks: list[socket.socket], deadline_s: float) -> float:
    """Seconds until the server closed every socket; fails after `deadline_s`."""
    started = time.monotonic()
    selector = selectors.DefaultSelector()
    for sock in socks:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    open_count = len(socks)
    try:
        while open_count:
            left = deadline_s - (time.monotonic() - started)
            if left <= 0:
                pytest.fail(f"{open_count} of {len(socks)} sockets still open after {deadline_s} s")
            for key, _ in selector.select(timeout=min(left, 0.5)):
                if _closed_by_server(key.fileobj):  # type: ignore[arg-type]
                    selector.unregister(key.fileobj)
                    open_count -= 1
    finally:
        selector.close()
    return time.monotonic() - started


def test_unfinished_request_heads_are_closed_within_the_head_deadline(strict_gateway):
    # 300 clients each send part of a head and stop; a further 20 trickle a byte
    # at a time, which must not push the deadline back.
    with _sockets(strict_gateway.url, 300) as idle, _sockets(strict_gateway.url, 20) as trickling:
        for sock in idle + trickling:
            sock.sendall(PARTIAL_HEAD)
        started = time.monotonic()
        # A normal request is answered meanwhile.
        assert requests.get(strict_gateway.url + "/healthz", timeout=5).status_code == 200
        while time.monotonic() - started < HEAD_TIMEOUT_S / 2:
            for sock in trickling:
                sock.sendall(b"a")
            time.sleep(0.1)  # the trickle's pace, not a wait for the server
        _wait_all_closed(idle + trickling, HEAD_TIMEOUT_S + MARGIN_S)
        took = time.monotonic() - started
    print(f"320 unfinished heads all closed by the server {took:.2f} s after they were sent")
    assert requests.get(strict_gateway.url + "/healthz", timeout=5).status_code == 200


def test_a_connection_that_sends_nothing_is_closed(strict_gateway):
    with _sockets(strict_gateway.url, 1) as socks:
        _wait_all_closed(socks, HEAD_TIMEOUT_S + MARGIN_S)


def test_an_unfinished_body_is_closed_within_the_body_deadline(strict_gateway):
    head = (
        b"POST /api/v1/users HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n"
    )
    with _sockets(strict_gateway.url, 5) as socks:
        for sock in socks:
            sock.sendall(head + b'{"username"')
        _wait_all_closed(socks, BODY_TIMEOUT_S + MARGIN_S)


def test_an_idle_keep_alive_connection_is_closed(strict_gateway):
    with _sockets(strict_gateway.url, 1) as socks:
        (sock,) = socks
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        _wait_all_closed(socks, KEEPALIVE_S + MARGIN_S)


def _refused(sock: socket.socket) -> bool:
    """The gateway answered `sock` with 503 JSON and Retry-After, or closed it."""
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = sock.recv(4096)
    except OSError:
        return True
    if not answer:
        return True
    head, _, body = answer.partition(b"\r\n\r\n")
    if head.startswith(b"HTTP/1.1 200"):
        return False
    assert head.startswith(b"HTTP/1.1 503"), answer
    assert b"\r\nretry-after: 1" in head.lower()
    assert json.loads(body)["error"]["code"] == "unavailable"
    return True


def test_connections_beyond_the_bound_are_refused_and_the_gateway_recovers(start_gateway):
    bound = 20
    gateway = start_gateway(
        GATEWAY_WORKERS="1", GATEWAY_MAX_CONNECTIONS=str(bound), GATEWAY_HEAD_TIMEOUT_S="60"
    )
    with _sockets(gateway.url, bound) as held:
        # The gateway has taken them all once a request on a fresh one is refused.
        def one_more_refused() -> bool:
            with _sockets(gateway.url, 1) as (extra,):
                return _refused(extra)

        assert wait_until(one_more_refused, 10, "a connection beyond the bound to be refused")
        assert len(held) == bound
    # Once they are closed the gateway serves again.
    wait_until(
        lambda: requests.get(gateway.url + "/healthz", timeout=5).status_code == 200,
        10,
        "the gateway to serve again",
    )
    # It says its bound, which the bench keeps its pools below.
    page = requests.get(gateway.url + "/metrics", timeout=5).text
    assert f"aside_gateway_connections_max {bound:.1f}" in page
