"""Lab-only pause points for the coherence tests (ASIDE_TEST_HOOKS=1).

A request with `X-Test-Hold: <name>` makes the reader that fills its key,
after its database read and before its store, RPUSH `aside:test:<name>:reached`
and wait on BLPOP `aside:test:<name>:release`; a reader that instead waits on
another thread's fill pushes `aside:test:<name>:joined`.
"""

from __future__ import annotations

import logging

import redis
from redis.cluster import RedisCluster

from aside_gateway.backends.redis_errors import REDIS_ERRORS

log = logging.getLogger("aside_gateway")

HOLD_TIMEOUT_S = 10
# The socket timeout of the hooks' own Redis client (services.build_services):
# BLPOP blocks far longer than the cache's socket timeout.
CLIENT_TIMEOUT_S = HOLD_TIMEOUT_S + 2


class TestHooks:
    """The pause points, on a Redis client of their own (socket timeout
    CLIENT_TIMEOUT_S), which the worker's wiring gives them."""

    def __init__(self, client: redis.Redis | RedisCluster):
        self.client = client

    def joined(self, name: str) -> None:
        """Say this request waits on another thread's fill of its key (it holds
        only if it ends up filling the key itself)."""
        try:
            self.client.rpush(f"aside:test:{name}:joined", "1")
        except REDIS_ERRORS:
            log.exception("test hook %s failed", name)

    def hold(self, name: str) -> None:
        """Say we reached the point, then wait until the test releases us."""
        try:
            self.client.rpush(f"aside:test:{name}:reached", "1")
            self.client.blpop([f"aside:test:{name}:release"], timeout=HOLD_TIMEOUT_S)
        except REDIS_ERRORS:
            log.exception("test hold %s failed", name)

    def close(self) -> None:
        self.client.close()
