"""How far apart the services sit: each hop's round trip and jitter, as its proxy's toxics."""

from __future__ import annotations

import http.client
import json
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import psycopg
import redis

from aside_bench.stack.toxiproxy import HOPS, Proxies, Toxiproxy, latency_toxics, with_port

ROOT = Path(__file__).resolve().parents[4]
PRESETS_FILE = ROOT / "infra" / "conf" / "distance.json"
LOOPBACK = "loopback"
DIRECT = "direct"  # no proxy in the path: the reference of the proxy's own cost
# DISTANCE_<HOP>_MS and _JITTER_MS; the core's own hops follow the gateway's.
EXPLICIT = {"redis": "REDIS", "postgres": "POSTGRES", "core": "CORE"}
FOLLOWS = {"core-redis": "redis", "core-postgres": "postgres"}

# The timeouts each hop is held to, with the services' defaults: none may be reached.
HOP_TIMEOUTS: dict[str, tuple[tuple[str, int], ...]] = {
    "redis": (("REDIS_TIMEOUT_MS", 200), ("REDIS_CONNECT_TIMEOUT_MS", 200)),
    "postgres": (("DB_POOL_TIMEOUT_MS", 1000), ("DB_STATEMENT_TIMEOUT_MS", 5000)),
    "core": (("CORE_CONNECT_TIMEOUT_MS", 500), ("CORE_TIMEOUT_MS", 6000)),
    "core-redis": (("CORE_REDIS_TIMEOUT_MS", 200), ("CORE_INVALIDATION_DEADLINE_MS", 300)),
    "core-postgres": (("CORE_DB_CONNECT_TIMEOUT_MS", 1000), ("CORE_DB_TIMEOUT_MS", 2000)),
}


class DistanceError(ValueError):
    """A distance that cannot be applied; the message names the variable or preset."""


@dataclass(frozen=True)
class HopDistance:
    round_trip_ms: float
    jitter_ms: float = 0

    @property
    def worst_ms(self) -> float:
        return self.round_trip_ms + self.jitter_ms


@dataclass(frozen=True)
class Distance:
    name: str  # a preset's name, or "explicit"
    hops: dict[str, HopDistance]  # every hop of toxiproxy.HOPS
    source: str = ""

    def hop(self, hop: str) -> HopDistance:
        return self.hops.get(hop, HopDistance(0))


def _milliseconds(name: str, value: object) -> float:
    """Milliseconds, 0 or more, to the microsecond the proxy's toxic takes."""
    try:
        number = float(str(value))
    except ValueError:
        raise DistanceError(f"{name} must be a number of milliseconds, got {value!r}") from None
    if not 0 <= number < 60_000 or round(number, 3) != number:
        raise DistanceError(
            f"{name} must be milliseconds from 0 to 60000 with at most three decimals "
            f"(the proxy adds whole microseconds), got {value!r}"
        )
    return number


def _hop(where: str, values: dict[str, object]) -> HopDistance:
    keys = ("round_trip_ms", "jitter_ms")
    return HopDistance(*(_milliseconds(f"{where} {key}", values.get(key, 0)) for key in keys))


@cache
def _presets(path: Path = PRESETS_FILE) -> dict[str, Distance]:
    data = json.loads(path.read_text())
    found = {}
    for name, preset in data["presets"].items():
        where = f"{path.name} preset {name}"
        hops = dict.fromkeys(HOPS, _hop(where, preset))
        for hop, values in preset.get("hops", {}).items():
            if hop not in HOPS:
                raise DistanceError(f"{where} names hop '{hop}' (one of: {' '.join(HOPS)})")
            hops[hop] = _hop(f"{where} {hop}", values)
        found[name] = Distance(name, hops, preset.get("source", ""))
    return found


def preset(name: str) -> Distance:
    presets = _presets()
    if name not in presets:
        raise DistanceError(f"unknown distance '{name}' (one of: {' '.join(presets)})")
    return presets[name]


def explicit(env: dict[str, str] | None = None) -> Distance | None:
    """The distance DISTANCE_*_MS give (unnamed hops at 0); None when none is set."""
    env = dict(os.environ if env is None else env)
    names = [f"DISTANCE_{v}_MS" for v in EXPLICIT.values()]
    names += [f"DISTANCE_{v}_JITTER_MS" for v in EXPLICIT.values()]
    if not any(env.get(name) for name in names):
        return None
    hops = {}
    for hop, var in EXPLICIT.items():
        names = (f"DISTANCE_{var}_MS", f"DISTANCE_{var}_JITTER_MS")
        hops[hop] = HopDistance(*(_milliseconds(name, env.get(name) or 0) for name in names))
    for hop, leader in FOLLOWS.items():
        hops[hop] = hops[leader]
    return Distance("explicit", hops, "DISTANCE_*_MS")


def refuse_short_timeouts(distance: Distance, env: dict[str, str] | None = None) -> None:
    """DistanceError naming the first timeout variable a hop's worst round trip reaches."""
    env = dict(os.environ if env is None else env)
    for hop, timeouts in HOP_TIMEOUTS.items():
        worst = distance.hop(hop).worst_ms
        if worst == 0:
            continue
        for variable, default in timeouts:
            value = env.get(variable) or str(default)
            try:
                timeout = int(value)
            except ValueError:
                raise DistanceError(f"{variable} must be a whole number, got {value!r}") from None
            if worst >= timeout:
                raise DistanceError(
                    f"{variable}={timeout} is not longer than the {hop} hop's round trip at "
                    f"distance {distance.name} ({worst:g} ms): raise {variable} or choose a "
                    "shorter distance"
                )


def apply(api: Toxiproxy, distance: Distance, env: dict[str, str] | None = None) -> None:
    """Every hop's proxy carries `distance`'s toxics alone, short timeouts refused first."""
    refuse_short_timeouts(distance, env)
    for hop in HOPS:
        one = distance.hop(hop)
        api.replace(hop, latency_toxics(one.round_trip_ms, one.jitter_ms))


def asked(names: list[str], env: dict[str, str] | None = None) -> dict[str, Distance]:
    """A run's distances by name (none named: the explicit one when set), each checked."""
    given = explicit(env)
    found: dict[str, Distance] = {}
    for name in names or (["explicit"] if given is not None else []):
        if name == DIRECT:
            found[name] = Distance(DIRECT, {}, "no proxy in the path")
            continue
        if name == "explicit" and given is None:
            raise DistanceError(
                "distance explicit needs DISTANCE_REDIS_MS, DISTANCE_POSTGRES_MS or "
                "DISTANCE_CORE_MS (docs/stack.md)"
            )
        found[name] = given if name == "explicit" and given is not None else preset(name)
        refuse_short_timeouts(found[name], env)
    return found


def as_record(distance: Distance) -> dict[str, object]:
    """A distance as run.json's params keep it: each hop's round trip and jitter."""
    return {"source": distance.source, "hops": {hop: asdict(d) for hop, d in distance.hops.items()}}


PROBE_TIMEOUT_S = 2.0  # a probe past this is not a round trip but a fault
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


def _timed(hop: str, once: Callable[[], object], samples: int) -> HopTime:
    once()  # the connection opened, outside the figures
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        once()
        times.append((time.perf_counter() - start) * 1000)
    p95 = sorted(times)[max(0, math.ceil(0.95 * samples) - 1)]  # by nearest rank
    return HopTime(hop, round(statistics.median(times), 3), round(p95, 3), samples)


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
        limit = (str(int(PROBE_TIMEOUT_S * 1000)),)
        conn.execute("SELECT set_config('statement_timeout', %s, false)", limit)
        return _timed(hop, lambda: conn.execute("SELECT 1").fetchone(), samples)


def http_hop(hop: str, port: int, samples: int = SAMPLES) -> HopTime:
    """GET /healthz on one kept-alive http.client connection, cheaper per call than a Session."""
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
    found = {}
    for hop in hops or HOPS:  # redis, postgres and core, the core's own redis and postgres
        port = proxies.ports[hop]
        if hop == "core":
            found[hop] = http_hop(hop, port, samples)
        elif hop.endswith("redis"):
            found[hop] = redis_hop(hop, redis_url, port, samples)
        else:
            found[hop] = postgres_hop(hop, database_url, port, samples)
    return HopTimes(found)
