"""The cyclic garbage collector in a worker: its pauses stop the event loop.

A collection holds the GIL for as long as it walks the objects of its
generations. With CPython's defaults (a first-generation collection every 700
net allocations of tracked objects) a worker serving thousands of requests a
second promotes the objects of the requests in flight at each collection, so
the oldest generation, which also holds every module, the app and its pools,
was collected twice a second, 36-110 ms each, nothing found: every reader of
the worker waited that long, and the door's sheds with them
(docs/decisions/053-the-collector-kept-off-the-event-loop.md).

Once a worker's app is built, `settle` collects once and freezes what is left
(GATEWAY_GC_FREEZE: `gc.freeze`, the objects then never walked again) and
raises the first generation's threshold (GATEWAY_GC_GEN0): most of a
request's objects are freed by their reference counts, so the net count
grows only with what survives, and a collection comes seldom and finds
little. Cycles are still collected. Each collection's pause is observed in
`aside_gateway_gc_pause_seconds{generation}`.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from aside_gateway.config import metrics
from aside_gateway.config.settings import Settings


class PauseMeter:
    """A `gc.callbacks` entry: each collection's duration, by generation."""

    def __init__(self) -> None:
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            paused = time.perf_counter() - self._started
            metrics.GC_PAUSE.labels(str(info["generation"])).observe(paused)


def settle(settings: Settings) -> None:
    """Call once per worker, after its app is built and before it serves."""
    if not any(isinstance(callback, PauseMeter) for callback in gc.callbacks):
        gc.callbacks.append(PauseMeter())
    gc.collect()  # observed: the worker's metrics show it settled
    if settings.gc_freeze:
        gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(settings.gc_gen0, older, oldest)
