"""The Redis tier's memory: the bound a memory arm gives it (maxmemory and the
eviction policy, set on every primary) and what it did in a step (keys held,
memory used, keys evicted and expired), read from INFO."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import redis
from redis.cluster import RedisCluster

from aside_bench.stack import redisclient
from aside_bench.stack.config import Settings
from aside_bench.stack.prepare import redis_client


@dataclass(frozen=True)
class MemoryBound:
    """Redis's maxmemory (bytes, 0: none) and maxmemory-policy."""

    maxmemory: int
    policy: str


@dataclass(frozen=True)
class RedisReading:
    """INFO figures summed over the primaries at one instant."""

    keys: int
    used_memory: int
    evicted_keys: int
    expired_keys: int
    # Its clients' buffers (mem_clients_normal): they count in maxmemory too.
    clients_memory: int = 0


def _nodes(client: redisclient.Client) -> list[redis.Redis]:
    if isinstance(client, RedisCluster):
        return [client.get_redis_connection(node) for node in client.get_primaries()]
    return [client]


def read_bound(settings: Settings) -> MemoryBound:
    """The bound of the first primary (the stack gives every primary the same)."""
    with redis_client(settings, "read Redis's maxmemory") as client:
        found = _nodes(client)[0].config_get("maxmemory*")
    return MemoryBound(int(found["maxmemory"]), str(found["maxmemory-policy"]))


def apply_bound(settings: Settings, bound: MemoryBound) -> None:
    """Give every primary this maxmemory and policy (CONFIG SET, not persisted)."""
    with redis_client(settings, "set Redis's maxmemory") as client:
        for node in _nodes(client):
            node.config_set("maxmemory-policy", bound.policy)
            node.config_set("maxmemory", str(bound.maxmemory))


def reading(settings: Settings) -> RedisReading:
    """Keys, used memory and the eviction and expiry counters, over every primary."""
    with redis_client(settings, "read Redis's INFO") as client:
        totals = [0, 0, 0, 0, 0]
        for node in _nodes(client):
            info = node.info()
            totals[0] += int(node.dbsize())
            totals[1] += int(info["used_memory"])
            totals[2] += int(info["evicted_keys"])
            totals[3] += int(info["expired_keys"])
            totals[4] += int(info.get("mem_clients_normal", 0))
    return RedisReading(*totals)


class KeyCounter:
    """DBSIZE over the primaries once a `period_s` in a thread of its own while a
    step runs: a bounded cache's keys move with its clients' buffers, so the
    median over the step says what it held better than one reading at its end."""

    def __init__(self, settings: Settings, period_s: float = 1.0, timeout_s: float = 2.0):
        self.settings = settings
        self.period_s = period_s
        self.timeout_s = timeout_s
        self.counts: list[int] = []
        self.problem: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="redis-key-counter", daemon=True)

    def start(self) -> KeyCounter:
        self._thread.start()
        return self

    def stop(self) -> list[int]:
        self._stop.set()
        self._thread.join(timeout=self.timeout_s + self.period_s)
        return list(self.counts)

    def _run(self) -> None:
        client = redisclient.connect(self.settings, socket_timeout=self.timeout_s)
        try:
            while not self._stop.wait(self.period_s):
                self.counts.append(sum(int(node.dbsize()) for node in _nodes(client)))
        except redis.RedisError as error:
            self.problem = f"cannot count Redis's keys: {error}"
        finally:
            client.close()
