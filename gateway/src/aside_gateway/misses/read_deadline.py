"""A cached read's own deadline for its miss.

A miss may wait in several places: for its process's leader (single flight),
on another process's lease, in the miss batcher's queue, for a pooled
connection, and on its statement. Each wait has its own bound, but in a row
they could add up to several times what a read may take. The deadline is set
once, when the read misses (tiers/l2.py), as DB_POOL_TIMEOUT_MS +
DB_STATEMENT_TIMEOUT_MS from then; every wait after that ends by it, and a miss
past it answers 503 with Retry-After.

It is a context variable of the request's thread, so the layers below the
cache (misses/db.py) see it without it being passed through every loader.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from aside_gateway.contracts.errors import ApiError

_DEADLINE: ContextVar[float | None] = ContextVar("aside_miss_deadline", default=None)
RETRY_LATER = {"Retry-After": "1"}


@contextmanager
def bounded(limit_s: float) -> Iterator[float]:
    """The miss's deadline (monotonic) for the block: `limit_s` from now, or
    the deadline already set by an enclosing block, which it keeps."""
    current = _DEADLINE.get()
    if current is not None:
        yield current
        return
    deadline = time.monotonic() + limit_s
    token = _DEADLINE.set(deadline)
    try:
        yield deadline
    finally:
        _DEADLINE.reset(token)


def remaining() -> float | None:
    """Seconds left before this read's deadline (0 once past), None without one."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return None
    return max(deadline - time.monotonic(), 0.0)


def passed() -> bool:
    left = remaining()
    return left is not None and left <= 0


def within(limit_s: float | None) -> float | None:
    """`limit_s` cut to what is left before the deadline (None: no bound at all)."""
    left = remaining()
    if left is None:
        return limit_s
    return left if limit_s is None else min(limit_s, left)


class MissPastDeadline(ApiError):
    """A miss out of time: no verdict on the database (the wait may have been
    elsewhere), so neither a lease's failure mark nor the breaker follows."""

    def __init__(self) -> None:
        super().__init__(
            "database_unavailable", "the read's miss took longer than its deadline", RETRY_LATER
        )


def past_deadline() -> MissPastDeadline:
    return MissPastDeadline()
