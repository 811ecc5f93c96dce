"""The bench's Redis clients for REDIS_MODE: one server, or a cluster's every primary."""

from __future__ import annotations

import redis
from redis.cluster import RedisCluster

from aside_bench.stack.config import Settings

Client = redis.Redis | RedisCluster


def connect(settings: Settings, socket_timeout: float = 10, connect_timeout: float = 5) -> Client:
    timeouts = {"socket_timeout": socket_timeout, "socket_connect_timeout": connect_timeout}
    if settings.redis_mode == "cluster":
        return RedisCluster.from_url(settings.redis_url, **timeouts)
    return redis.Redis.from_url(settings.redis_url, **timeouts)


def flush(client: Client) -> None:
    """Empty the database REDIS_URL names: every primary of a cluster."""
    if isinstance(client, RedisCluster):
        client.flushdb(target_nodes=RedisCluster.PRIMARIES)
    else:
        client.flushdb()


def keys(client: Client) -> list[bytes]:
    """Every key, SCANned on the server or on each primary of a cluster."""
    if isinstance(client, RedisCluster):
        found: list[bytes] = []
        for node in client.get_primaries():
            found.extend(client.scan_iter(count=1000, target_nodes=node))
        return found
    return list(client.scan_iter(count=1000))
