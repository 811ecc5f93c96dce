"""How the gateway's Redis clients fail: fast, and with one set of errors."""

from __future__ import annotations

from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException, RedisError
from redis.retry import Retry

# A refused or broken connection surfaces as OSError, a timeout as either. A
# cluster client's own failures (no node reachable, a command it cannot
# route) are not RedisErrors but fail a read the same way: PostgreSQL answers.
REDIS_ERRORS = (RedisError, OSError, RedisClusterException)


def no_retry() -> Retry:
    # redis-py retries with backoff by default; a cache must fail fast instead.
    return Retry(NoBackoff(), 0)
