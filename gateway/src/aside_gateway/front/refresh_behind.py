"""Stale-while-revalidate's refreshes behind the answer (CACHE_EXPIRY=swr).

A read on the event loop that finds its key past its expiry, within the stale
bound, is answered at once with the value it read, and its key joins the
refreshes gathering in this worker. Nobody waits for them, so they gather for
CACHE_EXPIRY_REFRESH_GATHER_MS (or until MISS_BATCH_MAX keys), holding no
thread, and are then refreshed together in one thread of the worker's own
(tiers/l2.py `Cache.refresh_behind`: a lease per key, one read of all the
counts, a store per key under its lease; the read is misses/db.py
`refresh_counts`, a batch or, without the email index and no reader
scanning, a paced pass): keys expiring over a second share one scan, and no
Flask thread waits on it. Each key's flight stays busy until its refresh
lands, so the reads meanwhile are answered stale on the loop too. A refresh
that fails leaves the stale value in place: the next read within the bound
answers it and tries again.

Bounded: at most MISS_BATCH_MAX keys gather or are refreshed at once in a
worker; past it a stale read is answered and its refresh left to a later one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aside_gateway.config import metrics
from aside_gateway.contracts import cache_keys
from aside_gateway.contracts.routes import COUNT_ROUTE
from aside_gateway.front.lookup import Lookup
from aside_gateway.misses.coalesce import LoopFlights
from aside_gateway.misses.db import Database
from aside_gateway.tiers.l2 import Cache
from aside_gateway.tiers.lease_refresh import Stale

log = logging.getLogger(__name__)

# A stale read to refresh: what it looked up, and the stored form it read.
StaleRead = tuple[Lookup, bytes]
# Refreshes the reads of one route (in the refresh thread): whether each landed.
Refresh = Callable[[str, list[StaleRead]], list[bool]]


def refresher(cache: Cache, db: Database) -> Refresh:
    """Refreshes in Redis from PostgreSQL: counts in one batch, users by id."""

    def refresh(route: str, reads: list[StaleRead]) -> list[bool]:
        found = {lookup.key: lookup for lookup, _ in reads}

        def load_many(keys: list[str]) -> dict[str, bytes]:
            if route == COUNT_ROUTE:
                emails = {key: found[key].email for key in keys}
                counts = db.refresh_counts(list(emails.values()))
                return {key: cache_keys.encode_count(counts[emails[key]]) for key in keys}
            return {key: cache_keys.user_value(db.user_by_id(found[key].user_id)) for key in keys}

        stale = [Stale(lookup.key, seen) for lookup, seen in reads]
        return cache.refresh_behind(route, stale, load_many)

    return refresh


class RefreshBehind:
    def __init__(self, refresh: Refresh, gather_s: float, limit: int):
        self.refresh = refresh
        self.gather_s = gather_s
        self.limit = limit
        self.waiting = 0  # keys gathering or being refreshed
        self.gathering: dict[str, list[tuple[StaleRead, asyncio.Future[None]]]] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.running: set[asyncio.Task[None]] = set()
        # One thread: the refreshes of a worker run one batch after another.
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="aside-refresh-behind")

    def start(self, flights: LoopFlights[Any], flight: Any, found: Lookup, seen: bytes) -> None:
        """Refresh `found`'s key, read as `seen`, behind the stale answer, unless
        the worker already has its bound of keys to refresh."""
        if self.waiting >= self.limit:
            metrics.refresh_behind(found.route, "skipped")
            return
        loop = asyncio.get_running_loop()
        landed: asyncio.Future[None] = loop.create_future()
        flights.lead_behind(flight, landed)  # busy until it lands: reads meanwhile answer stale
        self.waiting += 1
        self.gathering.setdefault(found.route, []).append(((found, seen), landed))
        if self.waiting >= self.limit:
            self._send()
        elif self.timer is None:
            self.timer = loop.call_later(self.gather_s, self._send)

    def _send(self) -> None:
        """Hand every gathered key to the refresh thread, a batch a route."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        gathered, self.gathering = self.gathering, {}
        for route, reads in gathered.items():
            task = asyncio.get_running_loop().create_task(self._refresh(route, reads))
            self.running.add(task)
            task.add_done_callback(self.running.discard)

    async def _refresh(
        self, route: str, reads: list[tuple[StaleRead, asyncio.Future[None]]]
    ) -> None:
        loop = asyncio.get_running_loop()
        landed = [False] * len(reads)
        try:
            batch = [read for read, _ in reads]
            landed = await loop.run_in_executor(self.thread, self.refresh, route, batch)
        except Exception:  # its own task: nobody else would hear of it
            log.exception("refreshing stale values failed")
        finally:
            self.waiting -= len(reads)
            for _, done in reads:
                if not done.done():
                    done.set_result(None)
        for ok in landed:
            metrics.refresh_behind(route, "done" if ok else "failed")

    async def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for _, done in (entry for reads in self.gathering.values() for entry in reads):
            done.cancel()
        self.gathering = {}
        for task in list(self.running):
            task.cancel()
        await asyncio.gather(*self.running, return_exceptions=True)
        self.thread.shutdown(wait=False, cancel_futures=True)
