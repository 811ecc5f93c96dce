"""A per-worker circuit breaker: after a failure, skip a dependency for `open_s`,
then let one caller probe it; the probe's success closes the breaker.

Redis's breaker (backends/breaker.py) and PostgreSQL's (misses/db.py) are this
one: each says for itself what counts as a failure.
"""

from __future__ import annotations

import threading
import time


class Breaker:
    """Skip a dependency for `open_s` after a failure; then let one probe through.
    `open_s` 0: never open."""

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
        caller probes at once instead of skipping for another pause."""
        if self._retry_at != 0.0:
            self._retry_at = time.monotonic()

    def trip(self) -> None:
        """Open the breaker for `open_s` from now (nothing when `open_s` is 0)."""
        if self._open_s > 0:
            self._retry_at = time.monotonic() + self._open_s
