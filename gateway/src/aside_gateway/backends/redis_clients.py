"""Every Redis client of the gateway is made here (REDIS_MODE, config/settings.py).

`standalone`: REDIS_URL is the server. `cluster`: REDIS_URL is one node of a
Redis Cluster; the client learns the others and follows MOVED/ASK redirects.
`sentinel`: REDIS_URL names a Sentinel (asked without a password), which
names the master of REDIS_SENTINEL_MASTER; the URL's credentials and
database are the master's.

Whatever the mode, the callers' bounds stay: the socket and connect timeouts,
no silent retry (redis_errors.no_retry), and the pool bound. A blocking pool
(wait up to `pool_timeout` for a connection) is kept in standalone mode and
on each cluster node; a Sentinel's pool and an asyncio cluster node refuse a
connection past the bound instead of waiting for one.
"""

from __future__ import annotations

import contextlib
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.sentinel
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster

from aside_gateway.backends.redis_errors import REDIS_ERRORS, no_retry
from aside_gateway.config.settings import REDIS_CLUSTER, REDIS_SENTINEL, Settings

SyncClient = redis.Redis | RedisCluster
AsyncClient = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster


def sentinel_target(settings: Settings) -> tuple[tuple[str, int], dict[str, Any]]:
    """The Sentinel's address, and the master's credentials and database."""
    parts = urlsplit(settings.redis_url)
    master: dict[str, Any] = {"db": int(parts.path.strip("/") or 0)}
    if parts.username:
        master["username"] = unquote(parts.username)
    if parts.password:
        master["password"] = unquote(parts.password)
    return (parts.hostname or "127.0.0.1", parts.port or 26379), master


def sync_client(
    settings: Settings,
    *,
    socket_timeout: float,
    connect_timeout: float,
    max_connections: int | None = None,
    pool_timeout: float | None = None,
    health_check_interval: int = 0,
) -> SyncClient:
    """A threaded client; with `max_connections`, a pool bounded to it whose
    callers wait up to `pool_timeout` for a connection."""
    common: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        "retry": no_retry(),
        "health_check_interval": health_check_interval,
    }
    bounded: dict[str, Any] = {}
    if max_connections is not None:
        bounded = {"max_connections": max_connections, "timeout": pool_timeout}
    if settings.redis_mode == REDIS_CLUSTER:
        if bounded:
            bounded["connection_pool_class"] = redis.BlockingConnectionPool
        return RedisCluster.from_url(settings.redis_url, **common, **bounded)
    if settings.redis_mode == REDIS_SENTINEL:
        address, master = sentinel_target(settings)
        sentinel = redis.sentinel.Sentinel(
            [address],
            sentinel_kwargs={
                "socket_timeout": socket_timeout,
                "socket_connect_timeout": connect_timeout,
            },
            **common,
        )
        if max_connections is not None:
            master["max_connections"] = max_connections
        return sentinel.master_for(settings.redis_sentinel_master, **master)
    if bounded:
        pool = redis.BlockingConnectionPool.from_url(settings.redis_url, **common, **bounded)
        return redis.Redis(connection_pool=pool)
    return redis.Redis.from_url(settings.redis_url, **common)


def async_client(
    settings: Settings,
    *,
    connect_timeout: float,
    max_connections: int,
    socket_timeout: float | None = None,
    protocol: int | None = None,
) -> AsyncClient:
    """An asyncio client without a pool timeout, and without a socket timeout
    unless given: the hot path bounds each command with one deadline
    (hot_path.EarlyGetClient), the invalidation subscriber by its socket.
    `protocol` 2 or 3 pins the RESP version (redis-py's default otherwise)."""
    retry = AsyncRetry(NoBackoff(), 0)
    resp: dict[str, Any] = {} if protocol is None else {"protocol": protocol}
    if settings.redis_mode == REDIS_CLUSTER:
        return redis.asyncio.cluster.RedisCluster.from_url(
            settings.redis_url,
            max_connections=max_connections,
            socket_connect_timeout=connect_timeout,
            socket_timeout=socket_timeout,
            retry=retry,
            health_check_interval=0,
            **resp,
        )
    if settings.redis_mode == REDIS_SENTINEL:
        address, master = sentinel_target(settings)
        sentinel = redis.asyncio.sentinel.Sentinel(
            [address],
            sentinel_kwargs={"socket_connect_timeout": connect_timeout},
            socket_connect_timeout=connect_timeout,
            socket_timeout=socket_timeout,
            retry=retry,
            health_check_interval=0,
        )
        return sentinel.master_for(
            settings.redis_sentinel_master, max_connections=max_connections, **master, **resp
        )
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        settings.redis_url,
        max_connections=max_connections,
        timeout=None,
        socket_connect_timeout=connect_timeout,
        socket_timeout=socket_timeout,
        retry=retry,
        health_check_interval=0,
        **resp,
    )
    return redis.asyncio.Redis(connection_pool=pool)


def pools(client: SyncClient) -> list[redis.ConnectionPool]:
    """The connection pools behind a client: one, or one per cluster node."""
    if isinstance(client, RedisCluster):
        return [
            node.redis_connection.connection_pool
            for node in client.get_nodes()
            if node.redis_connection is not None
        ]
    return [client.connection_pool]


def refresh_topology(client: SyncClient) -> None:
    """A cluster client's slot map read again from the cluster (redis-py's own
    NodesManager.initialize), after a node failed: its pub/sub does not, and
    would dial the dead node for ever. Nothing for one server; a cluster that
    does not answer keeps the map it had."""
    if not isinstance(client, RedisCluster):
        return
    with contextlib.suppress(*REDIS_ERRORS):
        client.nodes_manager.initialize()


def single_pool(client: SyncClient) -> redis.ConnectionPool | None:
    """The one pool of a client that talks to one server (standalone, or
    Sentinel's master), for a caller that sends on a pooled connection itself;
    None for a cluster, whose every command must be routed by its key."""
    return None if isinstance(client, RedisCluster) else client.connection_pool


def close(client: SyncClient) -> None:
    """Close every connection of the client's pools (a pool handed to a client
    is not closed with it)."""
    for pool in pools(client):
        pool.disconnect()
    client.close()
