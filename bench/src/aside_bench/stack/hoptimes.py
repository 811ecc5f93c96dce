"""Each hop's round trip as the services see it: through the hop's proxy port,
on one connection already open, the smallest request its server answers
(Redis PING, PostgreSQL SELECT 1, the core's /healthz). What a step's figures
stand beside, rather than the distance they were asked at."""

from __future__ import annotations

import http.client
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
import redis

from aside_bench.stack.toxiproxy import Proxies, with_port

# A probe past this is not a round trip but a fault: it is counted as this.
PROBE_TIMEOUT_S = 2.0
SAMPLES = 30


@dataclass(frozen=True)
class HopTime:
    hop: str
    median_ms: float
    p95_ms: float
    samples: int


@dataclass(frozen=True)
class HopTimes:
    hops: dict[str, HopTime]  # by hop (stack/toxiproxy.py HOPS)

    def median_ms(self, hop: str) -> float:
        return self.hops[hop].median_ms


def _nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _timed(hop: str, once: Callable[[], object], samples: int) -> HopTime:
    once()  # the connection opened, outside the figures
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        once()
        times.append((time.perf_counter() - start) * 1000)
    return HopTime(
        hop, round(statistics.median(times), 3), round(_nearest_rank(times, 0.95), 3), samples
    )


def redis_hop(hop: str, redis_url: str, port: int, samples: int = SAMPLES) -> HopTime:
    client = redis.Redis.from_url(
        with_port(redis_url, port),
        socket_timeout=PROBE_TIMEOUT_S,
        socket_connect_timeout=PROBE_TIMEOUT_S,
    )
    try:
        return _timed(hop, client.ping, samples)
    finally:
        client.close()


def postgres_hop(hop: str, database_url: str, port: int, samples: int = SAMPLES) -> HopTime:
    timeout = math.ceil(PROBE_TIMEOUT_S)
    with psycopg.connect(with_port(database_url, port), connect_timeout=timeout) as conn:
        conn.autocommit = True
        conn.execute(f"SET statement_timeout = {int(PROBE_TIMEOUT_S * 1000)}")
        return _timed(hop, lambda: conn.execute("SELECT 1").fetchone(), samples)


def http_hop(hop: str, port: int, samples: int = SAMPLES) -> HopTime:
    """GET /healthz on one kept-alive connection, read whole: the standard
    library's client, whose own cost per call is a fraction of a Session's, so
    the hop's figure is mostly the hop."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=PROBE_TIMEOUT_S)

    def once() -> None:
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise OSError(f"{hop}: /healthz answered {response.status}")

    try:
        return _timed(hop, once, samples)
    finally:
        conn.close()


def measure(
    proxies: Proxies,
    database_url: str,
    redis_url: str,
    hops: tuple[str, ...] | None = None,
    samples: int = SAMPLES,
) -> HopTimes:
    """The round trip of each of `hops` (default every hop) through its proxy."""
    ports = proxies.ports
    probes: dict[str, Callable[[], HopTime]] = {
        "redis": lambda: redis_hop("redis", redis_url, ports["redis"], samples),
        "postgres": lambda: postgres_hop("postgres", database_url, ports["postgres"], samples),
        "core": lambda: http_hop("core", ports["core"], samples),
        "core-redis": lambda: redis_hop("core-redis", redis_url, ports["core-redis"], samples),
        "core-postgres": lambda: postgres_hop(
            "core-postgres", database_url, ports["core-postgres"], samples
        ),
    }
    return HopTimes({hop: probes[hop]() for hop in hops or tuple(probes)})
