"""Redis side of the seeder: after the swap, nothing cached from the old table
may be served (contracts/README.md, "Coherence when a seed replaces the table").

One Lua script (contracts/flush_cache.lua) deletes every key and lease under
the cache prefix and publishes a flush on the invalidation channel, so the
gateways' in-process L1 tiers drop everything too. Being one script it is
atomic: no gateway store can land between two rounds of its SCAN and escape
it. The price is that Redis serves nothing else while it runs (about a second
per million keys; the cache holds only what was read within one TTL).

The swap records the flush as owed in the core's outbox in its own
transaction (loader.run_owed_flush): a seeder that dies before flushing, or
whose flush fails, leaves it to the core's relay, which runs this same script.
"""

from __future__ import annotations

import json
import time
from urllib.parse import unquote, urlsplit

import redis
import redis.sentinel
from redis.cluster import RedisCluster

from aside_seed.errors import SeedError

# contracts/cache.json: the prefix and the channel the gateways listen on.
CACHE_PATTERN = "aside:v1:*"
INVALIDATION_CHANNEL = "aside:v1:invalidations"
CONNECT_TIMEOUT_S = 5
# A socket timeout longer than the script may take on a large cache.
SCRIPT_TIMEOUT_S = 60
FLUSH_TRIES = 3


def describe_redis(url: str) -> str:
    """host:port/db without credentials, for messages."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    return f"{host}:{parts.port or 6379}{parts.path or '/0'}"


Client = redis.Redis | RedisCluster


def make_client(url: str, mode: str = "standalone", sentinel_master: str | None = None) -> Client:
    """The seeder's one Redis client, for REDIS_MODE (config.py)."""
    timeouts = {"socket_connect_timeout": CONNECT_TIMEOUT_S, "socket_timeout": SCRIPT_TIMEOUT_S}
    if mode == "cluster":
        return RedisCluster.from_url(url, **timeouts)
    if mode == "sentinel":
        parts = urlsplit(url)
        sentinel = redis.sentinel.Sentinel(
            [(parts.hostname or "127.0.0.1", parts.port or 26379)], sentinel_kwargs=timeouts
        )
        return sentinel.master_for(
            sentinel_master or "",
            db=int(parts.path.strip("/") or 0),
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            **timeouts,
        )
    return redis.Redis.from_url(url, **timeouts)


def connect(url: str, mode: str = "standalone", sentinel_master: str | None = None) -> Client:
    """A client whose connection is checked now, before the load: a seed that
    could not flush the cache after its swap would leave the old table served."""
    where = describe_redis(url)
    try:
        client = make_client(url, mode, sentinel_master)
        client.ping()
    except (redis.RedisError, ValueError) as exc:
        raise SeedError(
            f"cannot reach Redis at {where} (REDIS_URL): {first_line(exc)}; "
            "the seeder must flush the cache after its swap"
        ) from None
    return client


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def flush_message() -> bytes:
    """The invalidation channel's flush (contracts/cache.json `tiers.flush_message`)."""
    return json.dumps({"flush": True, "published_ms": int(time.time() * 1000)}).encode()


def _run_flush(client: Client, script: str) -> int:
    """The script on the server, or on every primary of a cluster (each SCANs
    only its own keys; each publishes the flush, which an L1 tier may hear
    more than once at no cost)."""
    args = (CACHE_PATTERN, INVALIDATION_CHANNEL, flush_message())
    if isinstance(client, RedisCluster):
        replies = client.execute_command(
            "EVAL", script, 0, *args, target_nodes=RedisCluster.PRIMARIES
        )
        return sum(int(n) for n in replies.values())
    return int(client.eval(script, 0, *args))


def flush(client: Client, url: str, script: str) -> int:
    """Deletes every cached value and lease and tells the L1 tiers with `script`
    (contracts/flush_cache.lua: ARGV[1] pattern, ARGV[2] channel, ARGV[3]
    message); returns the keys deleted. Retried: the swap has committed, and
    until this succeeds the cache may serve the old table."""
    for attempt in range(1, FLUSH_TRIES + 1):
        try:
            return _run_flush(client, script)
        except redis.RedisError as exc:
            if attempt == FLUSH_TRIES:
                raise SeedError(
                    f"the new data is in, but the cache at {describe_redis(url)} could not be "
                    f"flushed: {first_line(exc)}; the flush stays owed and a running core "
                    f"runs it once Redis answers (without a core, delete {CACHE_PATTERN} there)"
                ) from None
            time.sleep(0.2 * attempt)  # a retry's backoff, not synchronisation
    raise AssertionError("unreachable")
