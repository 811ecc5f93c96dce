"""A bound on the reads that fall back to PostgreSQL because Redis was skipped
or failed (tiers/l2.py): at most CACHE_FALLBACK_MAX_CONCURRENCY at once per
worker; one more is answered 503 `unavailable` with `Retry-After: 1` at once.

A warm cache hides the database's cost: a hit is a Redis GET, its fallback a
count that scans the table (70 ms and more on the lab's million rows). With
the breaker open every hit would become such a read; unbounded, they hold
every Flask thread and the database, and the backlog outlives whatever opened
the breaker. Shedding the excess keeps the fallback a trickle the database
can serve, and the fast 503 tells the client to come back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from aside_gateway.config import metrics
from aside_gateway.contracts.errors import ApiError


class FallbackSlots:
    """At most `size` fallback reads at once; none waits for a slot."""

    def __init__(self, size: int):
        self._slots = threading.BoundedSemaphore(size)

    def load(self, load: Callable[[], bytes]) -> bytes:
        if not self._slots.acquire(blocking=False):
            metrics.shed("fallback_busy")
            raise ApiError(
                "unavailable",
                "too many reads are falling back to the database; retry later",
                {"Retry-After": "1"},
            )
        metrics.FALLBACK_IN_FLIGHT.inc()
        try:
            return load()
        finally:
            metrics.FALLBACK_IN_FLIGHT.dec()
            self._slots.release()
