"""The ops pace through a real gateway (door/ops_pace.py, front/worker.py): one
connection pipelining 2,000 /healthz heads is answered at its pace, not as
fast as it sends, while another client's cached read and another client's
/healthz are answered at once; the holds are counted."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest
import requests
from gateway_helpers import sample, scrape, unique_email, wait_until

PACE_PER_S = 100
BURST = 20
PIPELINED = 2_000
# How long the pipelined answers are counted, and the bound on the other
# clients' answers meanwhile (a shared 2-core machine).
WINDOW_S = 2.0
OTHER_BOUND_S = 0.5
HEALTHZ = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"
OTHER_CLIENT = "198.51.100.9"


@pytest.fixture(scope="module")
def paced_gateway(start_gateway):
    """One worker with the pace on, behind a trusted proxy (the suite's own
    address), so X-Forwarded-For names a second client."""
    return start_gateway(
        GATEWAY_WORKERS="1",
        GATEWAY_OPS_CLIENT_PER_S=str(PACE_PER_S),
        GATEWAY_OPS_CLIENT_BURST=str(BURST),
        GATEWAY_TRUSTED_PROXIES="127.0.0.1",
    )


class Pipeline:
    """One connection sending PIPELINED /healthz heads at once; the instant
    each answer's status line arrived."""

    def __init__(self, host: str, port: int):
        self.sock = socket.create_connection((host, port), timeout=30)
        self.arrivals: list[float] = []
        self._tail = b""
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.writer = threading.Thread(target=self._write, daemon=True)

    def start(self) -> float:
        started = time.monotonic()
        self.reader.start()
        self.writer.start()
        return started

    def _write(self) -> None:
        # Closed by the test before all was taken: nothing more to send.
        with contextlib.suppress(OSError):
            self.sock.sendall(HEALTHZ * PIPELINED)

    def _read(self) -> None:
        while len(self.arrivals) < PIPELINED:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                return
            if not data:
                return
            chunk = self._tail + data
            now = time.monotonic()
            self.arrivals += [now] * chunk.count(b"HTTP/1.1 200")
            self._tail = chunk[-12:]
            self.arrivals = self.arrivals[: len(self.arrivals) - self._tail.count(b"HTTP/1.1 200")]

    def close(self) -> None:
        self.sock.close()


def _timed(get: object) -> float:
    started = time.monotonic()
    response = get()  # type: ignore[operator]
    assert response.status_code == 200, response.text
    return time.monotonic() - started


def test_a_pipelining_client_is_answered_at_its_pace_and_others_at_once(paced_gateway):
    host, port = paced_gateway.url.removeprefix("http://").split(":")
    count_url = paced_gateway.url + "/api/v1/users/count"
    email = unique_email("paced")
    session = requests.Session()
    assert session.get(count_url, params={"email": email}, timeout=5).status_code == 200
    other = {"X-Forwarded-For": OTHER_CLIENT}
    held_before = sample(scrape(paced_gateway.url), "aside_gateway_ops_held_total", path="/healthz")

    pipeline = Pipeline(host, int(port))
    started = pipeline.start()
    try:
        waits = []
        while time.monotonic() - started < WINDOW_S:
            waits.append(_timed(lambda: session.get(count_url, params={"email": email}, timeout=5)))
            waits.append(
                _timed(
                    lambda: session.get(paced_gateway.url + "/healthz", headers=other, timeout=5)
                )
            )
        answered = sum(1 for t in pipeline.arrivals if t - started <= WINDOW_S)
    finally:
        pipeline.close()

    # The burst, then the pace: not the 2,000 at once (25 % over, for the timers' slack).
    most = BURST + PACE_PER_S * WINDOW_S * 1.25
    assert answered <= most, f"{answered} of {PIPELINED} answered within {WINDOW_S} s"
    assert answered >= PACE_PER_S * WINDOW_S / 2, f"only {answered} answered: stalled"
    assert max(waits) <= OTHER_BOUND_S, f"other clients waited {max(waits):.3f} s"
    # Every head past the burst was held once (the last ones maybe still waiting).
    wait_until(
        lambda: (
            sample(scrape(paced_gateway.url), "aside_gateway_ops_held_total", path="/healthz")
            - held_before
            >= answered - BURST
        ),
        5,
        "the holds counted",
    )
