"""The Python a refusal costs a gateway worker: the HTTP protocol (front/worker.py)
fed one read's head at a time with the event loop's door full, on uvloop, the
answer written to a transport that keeps nothing. No socket, so the kernel's
share (a read and a write per request) is not in the figure.

    .venv/bin/python gateway/benchmarks/bench_refusal.py [refusals] [repeats]

Prints the microseconds per refusal of each repeat, and their min/median/max.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from typing import Any

# The metrics write to per-process files, as under gunicorn.
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="bench-refusal-"))

import uvloop
from aside_gateway.backends.breaker import CircuitBreaker
from aside_gateway.config.settings import load_settings
from aside_gateway.door import loop_admission
from aside_gateway.front.hot_path import AsyncHotPath, EarlyGetClient
from aside_gateway.front.worker import BoundedHttpToolsProtocol
from aside_gateway.tiers.l1 import L1Cache
from uvicorn.config import Config
from uvicorn.server import ServerState

HEAD = (
    b"GET /api/v1/users/count?email=user123%40example.com HTTP/1.1\r\n"
    b"Host: 127.0.0.1:28000\r\nUser-Agent: fasthttp\r\n\r\n"
)
# Refusals between two ticks of the lag monitor at 4,000 a second per worker.
PER_TICK = 100
WARMUP = 2000


class NullTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, data: Any) -> None:
        self.writes += 1

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 28000), "peername": ("127.0.0.1", 40000)}.get(
            name, default
        )

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def never_admitted(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("the door let a request in")


def full_door() -> loop_admission.LoopAdmission:
    """A door at its limit, counting refusals as a worker's does: through the
    hot path, which labels a read's refusal with its route."""
    settings = load_settings(
        {
            "DATABASE_URL": "postgresql://aside@127.0.0.1:1/aside",
            "REDIS_URL": "redis://127.0.0.1:1/0",
            "CORE_URL": "http://127.0.0.1:1",
            "ASIDE_PROFILE": "lab",
            "CACHE_STRATEGY": "l2",
        }
    )
    door = loop_admission.LoopAdmission("aimd", 1, 1, 0.005)
    door.in_flight = door.cap = 1
    # Built for its refusal count only: nothing is admitted, so nothing connects.
    l1 = L1Cache(100, 1 << 20, 60, needs_subscription=False)
    redis_get = EarlyGetClient(settings, CircuitBreaker(1))
    AsyncHotPath(never_admitted, redis_get, l1, settings, admission=door)
    return door


async def refusals(count: int) -> float:
    """Seconds per refusal over `count` of them."""
    config = Config(app=never_admitted, http=BoundedHttpToolsProtocol, server_header=False)
    config.load()
    door = full_door()
    loop_admission.install(door)
    protocol = BoundedHttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
    transport = NullTransport()
    protocol.connection_made(transport)
    for _ in range(WARMUP):
        protocol.data_received(HEAD)
    started = time.perf_counter()
    for done in range(count):
        protocol.data_received(HEAD)
        if done % PER_TICK == 0:
            door.on_tick(0.0)
    seconds = time.perf_counter() - started
    assert transport.writes == WARMUP + count
    return seconds / count


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    figures = []
    for _ in range(repeats):
        figures.append(uvloop.run(refusals(count)) * 1e6)
        print(f"{count} refusals: {figures[-1]:.2f} µs each")
    low, mid, high = min(figures), statistics.median(figures), max(figures)
    print(f"µs per refusal: min {low:.2f}, median {mid:.2f}, max {high:.2f}")


if __name__ == "__main__":
    main()
