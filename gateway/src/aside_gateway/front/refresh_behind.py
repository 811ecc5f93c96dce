"""Stale-while-revalidate's refresh behind the answer (CACHE_EXPIRY=swr).

A read on the event loop that finds its key past its expiry, within the stale
bound, is answered at once with the value it read. The refresh runs behind it
in Flask like any fill (the lease, the miss batcher, the store under the
lease), as a request of the worker's own whose answer nobody reads; the key's
flight stays busy until it lands, so the reads meanwhile are answered stale on
the loop too. A refresh that fails leaves the stale value in place: the next
read within the bound answers it and tries again.

Bounded: at most `limit` refreshes run at once in a worker (half its Flask
threads), so clients keep the rest; past it a stale read is answered and the
refresh left to a later one. Each waits for a thread like any request handed
to Flask (GATEWAY_QUEUE_TIMEOUT_MS).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aside_gateway.config import metrics
from aside_gateway.contracts.routes import (
    ARRIVED_KEY,
    CLIENT_GONE_KEY,
    REFRESH_BEHIND_KEY,
    AsgiApp,
)
from aside_gateway.door.loop_admission import LoopAdmission
from aside_gateway.misses.coalesce import LoopFlights

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Message = dict[str, Any]
NO_BODY: Message = {"type": "http.request", "body": b"", "more_body": False}


class RefreshBehind:
    def __init__(self, flask: AsgiApp, limit: int, admission: LoopAdmission):
        self.flask = flask
        self.limit = limit
        self.admission = admission
        self.running: set[asyncio.Task[None]] = set()

    def start(self, flights: LoopFlights[Any], flight: Any, route: str, scope: Scope) -> None:
        """Refresh the key of `flight` behind the answer to `scope`'s read, unless
        the worker already runs its bound of refreshes."""
        if len(self.running) >= self.limit:
            metrics.refresh_behind(route, "skipped")
            return
        task = flights.lead_behind(flight, self._refresh(route, _behind(scope)))
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    async def _refresh(self, route: str, scope: Scope) -> None:
        status: list[int] = []

        async def receive() -> Message:
            return NO_BODY

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])

        self.admission.hand_over()
        try:
            await self.flask(scope, receive, send)
        except Exception:  # its own task: nobody else would hear of it
            log.exception("refreshing a stale value failed")
            status.append(0)
        finally:
            self.admission.handed_back()
        metrics.refresh_behind(route, "done" if status[:1] == [200] else "failed")

    async def close(self) -> None:
        for task in list(self.running):
            task.cancel()
        await asyncio.gather(*self.running, return_exceptions=True)


def _behind(scope: Scope) -> Scope:
    """The refresh's own request: the read's, without its client (which may
    leave: the refresh goes on), arrived now, marked as no client's."""
    behind = {k: v for k, v in scope.items() if k != CLIENT_GONE_KEY}
    behind[ARRIVED_KEY] = time.monotonic()
    behind[REFRESH_BEHIND_KEY] = True
    return behind
