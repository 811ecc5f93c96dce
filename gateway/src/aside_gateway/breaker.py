"""The per-worker circuit breaker in front of Redis.

After a Redis failure the cache skips Redis for `open_s`, so a dead or slow
Redis does not add its timeout to every request; then one caller probes, and
its success closes the breaker. The threaded cache (cache.py) and the async
hot path (hot_path.py) of a worker share one breaker.
"""

from __future__ import annotations

import threading
import time


class CircuitBreaker:
    """Skip Redis for `open_s` after a failure; then let one probe through."""

    def __init__(self, open_s: float):
        self._open_s = open_s
        self._retry_at = 0.0  # 0.0 means closed
        self._lock = threading.Lock()

    @property
    def is_open(self) -> bool:
        return self._retry_at != 0.0

    def allow(self) -> bool:
        retry_at = self._retry_at
        if retry_at == 0.0:
            return True
        now = time.monotonic()
        if now < retry_at:
            return False
        with self._lock:
            if self._retry_at != retry_at:  # another thread took the probe, or it closed
                return self._retry_at == 0.0
            self._retry_at = now + self._open_s  # others keep skipping while we probe
            return True

    def record_success(self) -> None:
        if self._retry_at != 0.0:
            self._retry_at = 0.0

    def return_probe(self) -> None:
        """Give back a probe taken by allow() without a verdict, so the next
        caller probes at once instead of skipping Redis for another pause."""
        if self._retry_at != 0.0:
            self._retry_at = time.monotonic()

    def record_failure(self) -> None:
        if self._open_s > 0:
            self._retry_at = time.monotonic() + self._open_s
