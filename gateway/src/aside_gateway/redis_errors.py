"""How the gateway's Redis clients fail: fast, and with one set of errors."""

from __future__ import annotations

from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

# A refused or broken connection surfaces as OSError, a timeout as either.
REDIS_ERRORS = (RedisError, OSError)


def no_retry() -> Retry:
    # redis-py retries with backoff by default; a cache must fail fast instead.
    return Retry(NoBackoff(), 0)
