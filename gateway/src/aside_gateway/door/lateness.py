"""How late the worker's event loop runs, and what a Redis error says given that.

`LoopLag` is a timer on the event loop that asks to run every `tick_s` and
notes how much later than asked it ran: the loop's lag. An overloaded worker
(its loop busy, or its threads fighting for the GIL and the cores) runs every
callback late, its Redis replies included, so a Redis timeout seen while the
loop ran late says more about the gateway than about Redis. `late_within`
answers, from any thread, whether the loop ran late during the last seconds;
a tick that is overdue right now counts too, so a loop stuck in one long
callback is late before its tick runs.

`is_verdict_on_redis` is the breaker's rule (backends/breaker.py): a refused or broken
connection always says Redis failed; a timeout, or a pool with no free
connection, says so only if the worker was not late meanwhile. Why: see
docs/decisions/042-admission-at-the-door-of-the-event-loop.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

# How often the loop's lag is sampled: 40 timer callbacks a second.
TICK_S = 0.025


class LoopLag:
    """The event loop's lag, sampled by a timer of its own.

    The state is plain floats written by the loop and read by any thread
    (each read and write is atomic under the GIL); `clock` is injectable for
    the unit tests.
    """

    def __init__(
        self,
        late_s: float,
        tick_s: float = TICK_S,
        clock: Callable[[], float] = time.monotonic,
        on_tick: Callable[[float, float], None] | None = None,
        thread_clock: Callable[[], float] = time.thread_time,
    ):
        self.late_s = late_s
        self.tick_s = tick_s
        self._clock = clock
        # Told every tick's lag and the loop's busy share since the last tick:
        # the door's limit adapts to them (door/loop_admission.py).
        self.on_tick = on_tick
        # The loop's own thread's CPU time: a loop late while its thread ran
        # for little of the interval waited for a core or the GIL, not for
        # its own work.
        self._thread_clock = thread_clock
        self._ticked_at = 0.0
        self._thread_at = 0.0
        self._due = 0.0  # when the pending tick should run; 0.0: not started
        self._late_at = -1e18  # the last instant a tick found the loop late
        self.lag_s = 0.0  # the last tick's lag
        self._handle: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start sampling on `loop` (the ASGI lifespan's startup)."""
        self._due = self._clock() + self.tick_s
        self._handle = loop.call_later(self.tick_s, self._tick, loop)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._due = 0.0

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self.observe(self._clock())
        self._handle = loop.call_later(self.tick_s, self._tick, loop)

    def observe(self, now: float) -> float:
        """Record a tick that ran at `now`; the next is due a tick later."""
        lag = max(now - self._due, 0.0)
        self.lag_s = lag
        if lag >= self.late_s:
            self._late_at = now
        self._due = now + self.tick_s
        busy = self._busy_share(now)
        if self.on_tick is not None:
            self.on_tick(lag, busy)
        return lag

    def _busy_share(self, now: float) -> float:
        """The share of the time since the last tick the loop's thread ran on a
        core (1.0 at the first tick: no evidence of idling)."""
        thread_now = self._thread_clock()
        elapsed = now - self._ticked_at
        busy = 1.0
        if self._ticked_at and elapsed > 0:
            busy = min(1.0, (thread_now - self._thread_at) / elapsed)
        self._ticked_at, self._thread_at = now, thread_now
        return busy

    def current_lag(self) -> float:
        """The lag so far: the last tick's, or how overdue the pending tick is."""
        if self._due == 0.0:
            return 0.0
        return max(self.lag_s, self._clock() - self._due)

    def late_within(self, window_s: float) -> bool:
        """Whether the loop ran late at some point in the last `window_s` seconds
        (a tick found it late, or the pending tick is overdue by `late_s`)."""
        if self._due == 0.0:
            return False  # not sampling: no evidence either way
        now = self._clock()
        return now - self._late_at <= window_s or now - self._due >= self.late_s


def is_timeout(exc: BaseException) -> bool:
    """A Redis call that ran out of time, or found no free connection in time:
    errors a late worker causes by itself."""
    if isinstance(exc, RedisTimeoutError | TimeoutError):
        return True
    # redis-py's pools say "No connection available." (blocking pool, past its
    # timeout) or raise MaxConnectionsError (a ConnectionError too).
    return isinstance(exc, RedisConnectionError) and (
        type(exc).__name__ == "MaxConnectionsError" or "No connection available" in str(exc)
    )


def is_verdict_on_redis(exc: BaseException | None, worker_late: bool) -> bool:
    """Whether `exc` shows Redis failing (the breaker opens), given whether the
    worker itself ran late meanwhile. None: a failure with no exception to
    judge (a caller's own verdict), always Redis's."""
    if exc is None or not is_timeout(exc):
        return True
    return not worker_late
