"""In-process coalescing of cache fills: one flight per key, one query per batch.

On a cold cache many threads of a gunicorn worker miss the same keys at once,
and every distinct cold count is a full scan of `users`. Two mechanisms keep
the database work near the number of distinct keys, not of requests:

* `SingleFlight`: the first thread of this process that misses key K leads;
  threads that miss K while it is in flight wait for its result (an Event
  with a deadline) and touch neither Redis nor PostgreSQL. Only leaders take
  part in the cross-process lease protocol (tiers/l2.py).
* `MissBatcher`: leaders holding a lease hand their key to a per-process
  background thread that reads every pending key with ONE query, with at most
  `max_in_flight` queries running and at most `max_batch` keys per query.
  Each batch is a full scan of `users`, so batches also spend a time budget
  (a token bucket of seconds): it refills at `duty` seconds per second up to
  `burst_s`, a batch spends its duration, and while the budget is negative the
  next batch waits (at most MAX_PAUSE_S) and keys that miss meanwhile join it.
  A burst of misses (a flushed cache) is served back to back; a steady stream
  of new keys gets at most `duty` of a worker's time in scans (0.25: a quarter
  of the time, leaving the CPU to the hits) however fast the keys arrive, and
  the rests grow by themselves when a loaded machine makes scans slower. The
  budget only binds while `busy()` says the worker has hits to protect (the
  gateway asks whether the process used BUSY_CPU_SHARE of a core over the
  last second): a quiet worker (low rates, the bench's cache warm-up) reads
  its misses at once.
  `get_many` asks for several keys at once (swr's refreshes behind their
  stale answers, gathered on the event loop: front/refresh_behind.py): they
  are all pending before the first is waited for, so they share a batch.
  The threads start on first use, so never in gunicorn's master before the
  fork (and again in a child that was forked after they started).

Both are plain threading code with no Redis or PostgreSQL in them, so they
are unit-tested with fake loaders.

`LoopFlights` is single flight one step earlier, on the worker's event loop:
a reader that misses a key another request of the worker is already filling
waits for that fill there, taking no Flask thread, then looks in the cache
again (front/hot_path.py).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from aside_gateway.contracts.errors import ApiError, ClientGone

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")


def shared_error(exc: BaseException) -> BaseException:
    """An exception to raise in one more thread: an ApiError is copied so that
    threads answering the same failure do not share (and rewrite) one traceback."""
    if isinstance(exc, ApiError):
        return ApiError(exc.code, exc.message, exc.headers)
    return exc


@dataclass(eq=False)
class Flight(Generic[T]):
    """One in-flight fill of a key; `valid_at` is the monotonic instant at which
    `result` was known to be current (see Cache._fill for how followers use it)."""

    done: threading.Event = field(default_factory=threading.Event)
    result: T | None = None
    valid_at: float = 0.0
    error: BaseException | None = None


class SingleFlight(Generic[T]):
    """Per-process registry of in-flight fills, keyed by cache key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flights: dict[str, Flight[T]] = {}

    def join(self, key: str) -> tuple[Flight[T], bool]:
        """The flight of `key`, and True when the caller started it (it leads)."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None:
                return flight, False
            flight = Flight()
            self._flights[key] = flight
            return flight, True

    def land(
        self,
        key: str,
        flight: Flight[T],
        result: T | None = None,
        valid_at: float = 0.0,
        error: BaseException | None = None,
    ) -> None:
        """End `flight` (leader only): later misses start a new one, waiters wake up."""
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]
        flight.result, flight.valid_at, flight.error = result, valid_at, error
        flight.done.set()


class LoopFlights(Generic[K]):
    """Per-worker registry of fills in flight, for readers on the event loop.

    The hot path's first reader that misses a key leads (`lead` runs its fill,
    which Flask does); readers missing the key meanwhile `follow`: they wait on
    the loop, holding no thread, and then look in the cache again. Nothing is
    handed from leader to follower, so a follower's answer is a read made after
    it arrived. Touched only from the worker's event loop, so there is no lock.
    Followers are requests on open connections: GATEWAY_MAX_CONNECTIONS bounds
    them.
    """

    def __init__(self) -> None:
        self._flights: dict[K, asyncio.Event] = {}

    def __len__(self) -> int:
        return len(self._flights)

    def busy(self, key: K) -> bool:
        return key in self._flights

    async def lead(self, key: K, fill: Awaitable[T]) -> T:
        """Await `fill` as the flight of `key` (not busy). The flight lands however
        the fill ends, a failure or a cancellation (client gone) included, so no
        follower waits for a fill that nobody runs any more."""
        return await self._fly(key, self._take_off(key), fill)

    def lead_behind(self, key: K, fill: Awaitable[T]) -> asyncio.Task[T]:
        """`lead` as a task of its own, the flight of `key` (not busy) busy from
        now on, not from the task's first step: no reader in between leads too."""
        flight = self._fly(key, self._take_off(key), fill)
        return asyncio.get_running_loop().create_task(flight)

    def _take_off(self, key: K) -> asyncio.Event:
        done = asyncio.Event()
        self._flights[key] = done
        return done

    async def _fly(self, key: K, done: asyncio.Event, fill: Awaitable[T]) -> T:
        try:
            return await fill
        finally:
            if self._flights.get(key) is done:
                del self._flights[key]
            done.set()

    async def follow(self, key: K, timeout_s: float) -> bool:
        """Wait until the flight of `key` lands: True once it has (or if none is in
        flight), False after `timeout_s` with the fill still running."""
        done = self._flights.get(key)
        if done is None:
            return True
        try:
            async with asyncio.timeout(timeout_s):
                await done.wait()
        except TimeoutError:
            return False
        return True


MAX_PAUSE_S = 2.0  # the longest rest after a batch, however slow it was


class CpuShare:
    """This process's CPU time per wall-clock second over the last `window_s` or
    so (all threads; time.process_time). Not thread-safe: one caller."""

    def __init__(self, window_s: float = 1.0):
        self._window_s = window_s
        self._at = time.monotonic()
        self._cpu = time.process_time()
        self._share = 0.0

    def __call__(self) -> float:
        now = time.monotonic()
        if now - self._at >= self._window_s:
            cpu = time.process_time()
            self._share = (cpu - self._cpu) / (now - self._at)
            self._at, self._cpu = now, cpu
        return self._share


class BatchTimeout(Exception):
    """A batched read did not answer within the batcher's wait."""


class BatcherFull(Exception):
    """As many keys as allowed already wait for a batch: shed, do not queue."""


# How often a key's waiter checks whether its client is still there.
GONE_POLL_S = 0.05


@dataclass(eq=False)
class _Slot(Generic[V]):
    done: threading.Event = field(default_factory=threading.Event)
    value: V | None = None
    error: BaseException | None = None
    waiters: int = 0


class MissBatcher(Generic[K, V]):
    """Reads pending keys with one `query(keys) -> {key: value}` per batch.

    Keys missing from the query's answer get `default` (a count of 0). A key
    asked for while it is already pending shares the pending slot: the query
    runs after every asker joined, so its answer is current for all of them.
    """

    def __init__(
        self,
        query: Callable[[list[K]], Mapping[K, V]],
        default: V,
        *,
        max_batch: int,
        max_in_flight: int,
        wait_s: float,
        duty: float = 1.0,
        burst_s: float = 1.0,
        busy: Callable[[], bool] = lambda: True,
        fail_pending: Callable[[BaseException], bool] = lambda _exc: False,
        name: str = "aside-miss-batcher",
        max_pending: int | None = None,
    ):
        if max_batch < 1 or max_in_flight < 1:
            raise ValueError("max_batch and max_in_flight must be at least 1")
        if not 0 < duty <= 1:
            raise ValueError("duty must be in (0, 1]")
        self._query = query
        self._default = default
        self._max_batch = max_batch
        self._max_in_flight = max_in_flight
        # Each pending key is a waiting thread and a share of the next scan.
        self._max_pending = max_pending
        self._wait_s = wait_s
        self._duty = duty
        self._burst_s = burst_s
        self._credit = burst_s  # seconds of batch time available now; negative: in debt
        self._credit_at = time.monotonic()
        self._busy = busy
        # A failure that says the source is down (PostgreSQL unreachable) also
        # fails the keys that queued behind the failed batch: a batch of their
        # own would only wait out the same outage once more.
        self._fail_pending = fail_pending
        self._name = name
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._pending: dict[K, _Slot[V]] = {}  # insertion order: oldest first
        self._pid: int | None = None  # the process whose threads serve the queue
        self._closed = False
        self._running = 0  # batches being read now

    def get(
        self, key: K, gone: Callable[[], bool] | None = None, timeout_s: float | None = None
    ) -> V:
        """The value of `key` from the next batch; BatchTimeout after wait_s (or
        `timeout_s`, if shorter), BatcherFull at once when max_pending keys
        already wait. `gone`: whether the asker's client left; if so before its
        batch started, the key is withdrawn (no scan for an answer nobody reads)
        and ClientGone raised."""
        slot = self._submit(key)
        wait_s = self._wait_s if timeout_s is None else min(self._wait_s, timeout_s)
        if not self._wait(slot, gone, wait_s):
            self._withdraw(key, slot)
            if gone is not None and gone():
                raise ClientGone()
            raise self._timed_out()
        return self._answer(slot)

    def get_many(self, keys: Sequence[K]) -> dict[K, V]:
        """The values of `keys`, every one pending before any is waited for, so
        they share a batch (up to max_batch keys); errors as `get`'s. A key not
        answered when the call ends is withdrawn."""
        asked: list[tuple[K, _Slot[V]]] = []
        try:
            for key in keys:
                asked.append((key, self._submit(key)))
            deadline = time.monotonic() + self._wait_s
            values: dict[K, V] = {}
            for key, slot in asked:
                if not slot.done.wait(max(deadline - time.monotonic(), 0.0)):
                    raise self._timed_out()
                values[key] = self._answer(slot)
            return values
        except BaseException:
            for key, slot in asked:
                if not slot.done.is_set():
                    self._withdraw(key, slot)
            raise

    def _answer(self, slot: _Slot[V]) -> V:
        """A done slot's value, or its batch's error raised in this thread."""
        if slot.error is not None:
            raise shared_error(slot.error)
        return slot.value  # type: ignore[return-value]

    def _timed_out(self) -> BatchTimeout:
        return BatchTimeout(f"no answer for a batched read within {self._wait_s:g} s")

    def _wait(self, slot: _Slot[V], gone: Callable[[], bool] | None, wait_s: float) -> bool:
        """True once `slot` is done; False after `wait_s` or once `gone()`."""
        if gone is None:
            return slot.done.wait(wait_s)
        deadline = time.monotonic() + wait_s
        while not slot.done.wait(min(GONE_POLL_S, max(deadline - time.monotonic(), 0.0))):
            if gone() or time.monotonic() >= deadline:
                return slot.done.is_set()
        return True

    def reading(self) -> bool:
        """Whether keys wait for a batch or a batch is being read: a key asked
        for now would share a scan that runs anyway, or the next one."""
        with self._lock:
            return bool(self._pending) or self._running > 0

    def close(self) -> None:
        """Stop the threads once their current batch is done; later gets fail."""
        with self._lock:
            self._closed = True
            self._wake.notify_all()

    def _submit(self, key: K) -> _Slot[V]:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self._name} is closed")
            self._start_threads_once()
            slot = self._pending.get(key)
            if slot is None:
                if self._max_pending is not None and len(self._pending) >= self._max_pending:
                    raise BatcherFull(f"{len(self._pending)} keys already wait for a batch")
                slot = _Slot()
                self._pending[key] = slot
                self._wake.notify()
            slot.waiters += 1
            return slot

    def _withdraw(self, key: K, slot: _Slot[V]) -> None:
        # Nobody waits for it any more: keep it out of the next query.
        with self._lock:
            slot.waiters -= 1
            if slot.waiters == 0 and self._pending.get(key) is slot:
                del self._pending[key]

    def _start_threads_once(self) -> None:
        pid = os.getpid()
        if self._pid == pid:
            return
        # First use in this process. Threads do not survive a fork, so a child
        # forked after a start gets its own (and the parent's queue is not its).
        self._pid = pid
        self._pending.clear()
        for number in range(self._max_in_flight):
            threading.Thread(
                target=self._serve, args=(pid,), name=f"{self._name}-{number}", daemon=True
            ).start()

    def _serve(self, pid: int) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closed and self._pid == pid:
                    self._wake.wait()
                if self._closed or self._pid != pid:
                    return
                rest_s = self._rest_needed()
                if rest_s > 0:
                    self._wake.wait(rest_s)  # more keys join meanwhile; close wakes us
                    continue
                batch = self._take_batch()
                self._running += 1
            started = time.monotonic()
            self._run(batch)
            ended = time.monotonic()
            with self._lock:
                self._running -= 1
                self._refill(started)
                # A very slow batch leaves at most MAX_PAUSE_S of rest owed.
                self._credit = max(self._credit - (ended - started), -MAX_PAUSE_S * self._duty)

    def _refill(self, now: float) -> None:
        self._credit = min(self._burst_s, self._credit + (now - self._credit_at) * self._duty)
        self._credit_at = now

    def _rest_needed(self) -> float:
        """Seconds until the time budget allows the next batch (0: now)."""
        self._refill(time.monotonic())
        if not self._busy():
            self._credit = max(self._credit, 0.0)  # nothing to protect: no rest owed
        if self._credit >= 0:
            return 0.0
        return -self._credit / self._duty

    def _take_batch(self) -> dict[K, _Slot[V]]:
        batch: dict[K, _Slot[V]] = {}
        for key in self._pending:
            batch[key] = self._pending[key]
            if len(batch) == self._max_batch:
                break
        for key in batch:
            del self._pending[key]
        return batch

    def _run(self, batch: dict[K, _Slot[V]]) -> None:
        try:
            found = self._query(list(batch))
        except BaseException as exc:  # every waiter must wake up, whatever went wrong
            slots = list(batch.values())
            if isinstance(exc, Exception) and self._fail_pending(exc):
                with self._lock:
                    slots += self._pending.values()  # a key may be in both: two slots
                    self._pending = {}
            for slot in slots:
                slot.error = exc
                slot.done.set()
            if not isinstance(exc, Exception):
                raise
            return
        for key, slot in batch.items():
            slot.value = found.get(key, self._default)
            slot.done.set()
