"""The per-worker circuit breaker in front of Redis.

After a Redis failure the cache skips Redis for `open_s`, so a dead or slow
Redis does not add its timeout to every request; then one caller probes, and
its success closes the breaker (door/circuit.py, the base PostgreSQL's breaker
shares). The threaded cache (tiers/l2.py) and the async hot path
(front/hot_path.py) of a worker share one breaker.

A timeout while the worker itself ran late is no verdict on Redis
(door/lateness.py): an overloaded gateway reads its replies late, and opening the
breaker then would turn its hits into PostgreSQL reads, the costliest answer
it has, just when it has no time to spare.
"""

from __future__ import annotations

from collections.abc import Callable

from aside_gateway.config import metrics
from aside_gateway.door.circuit import Breaker
from aside_gateway.door.lateness import is_verdict_on_redis


def _never_late() -> bool:
    return False


class CircuitBreaker(Breaker):
    """Skip Redis for `open_s` after a failure; then let one probe through."""

    def __init__(self, open_s: float, worker_late: Callable[[], bool] = _never_late):
        """`worker_late`: whether the worker ran late during the last Redis
        timeout's span (lateness.LoopLag.late_within)."""
        super().__init__(open_s)
        self._worker_late = worker_late

    def record_failure(self, exc: BaseException | None = None) -> bool:
        """Open the breaker if `exc` shows Redis failing; True if it did. A
        timeout while the worker ran late opens nothing and gives back a probe."""
        if not is_verdict_on_redis(exc, self._worker_late()):
            metrics.redis_error_judged("gateway_late")
            self.return_probe()
            return False
        metrics.redis_error_judged("redis")
        self.trip()
        return True
