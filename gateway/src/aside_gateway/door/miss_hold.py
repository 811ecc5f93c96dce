"""A client the miss budget refused is held, not refused again at once: its
misses wait on the event loop until the Retry-After it was given has passed.

The miss budget (door/miss_budget.py) answers 429 from a Flask thread. A
client that ignores Retry-After and sends its next miss as soon as the 429
arrives would be answered 429 as fast as it asks, each a Flask request that
takes the GIL from the event loop. The hot path (front/hot_path.py) learns
the refusal from the answer going out (`watch`) and, while it stands, makes
that client's next miss wait (`hold_s`) before it goes on; its next answer
is then the budget's verdict at that time, a fill or another 429. A client
that honours Retry-After never waits here. A client is keyed as the budget
keys it; the table of refused clients is an LRU of MAX_CLIENTS entries.
See docs/decisions/076-ops-endpoints-paced-per-client.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from cachetools import LRUCache

from aside_gateway.config import metrics
from aside_gateway.config.settings import Network, Settings
from aside_gateway.door.miss_budget import client_of

MAX_CLIENTS = 10_000
TOO_MANY = 429
# Held at most this long whatever the answer said.
MAX_HOLD_S = 5.0
Send = Callable[[dict[str, Any]], Awaitable[None]]


def _environ(scope: dict[str, Any]) -> dict[str, str]:
    """What client_of reads of a WSGI environ, from an ASGI scope."""
    found = {"REMOTE_ADDR": scope["client"][0] if scope.get("client") else ""}
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            found["HTTP_AUTHORIZATION"] = value.decode("latin-1")
        elif name == b"x-forwarded-for":
            found["HTTP_X_FORWARDED_FOR"] = value.decode("latin-1")
    return found


def retry_after_s(headers: list[tuple[bytes, bytes]]) -> float:
    """The answer's Retry-After in seconds (1 when absent or not a number)."""
    for name, value in headers:
        if name.lower() == b"retry-after":
            try:
                return min(max(float(value), 0.0), MAX_HOLD_S)
            except ValueError:
                break
    return 1.0


class MissHolds:
    """One worker's clients refused by the miss budget, and until when."""

    def __init__(
        self,
        write_token: str | None,
        proxies: tuple[Network, ...],
        ipv6_prefix: int,
        max_clients: int = MAX_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._write_token = write_token
        self._proxies = proxies
        self._ipv6_prefix = ipv6_prefix
        self._until: LRUCache[str, float] = LRUCache(maxsize=max_clients)
        self._clock = clock

    @classmethod
    def from_settings(cls, settings: Settings) -> MissHolds | None:
        """None when the miss budget is off: nothing is refused to learn from."""
        if settings.miss_budget_route_per_s == 0 and settings.miss_budget_client_per_s == 0:
            return None
        return cls(settings.write_token, settings.trusted_proxies, settings.client_ipv6_prefix)

    def client(self, scope: dict[str, Any]) -> str | None:
        return client_of(_environ(scope), self._write_token, self._proxies, self._ipv6_prefix)

    def hold_s(self, client: str | None) -> float:
        """How long `client`'s miss waits (0: it goes on now); a hold is counted."""
        if client is None:
            return 0.0
        until = self._until.get(client)
        if until is None:
            return 0.0
        wait = until - self._clock()
        if wait <= 0:
            del self._until[client]
            return 0.0
        metrics.miss_held()
        return wait

    async def waited(self, client: str | None, before: Callable[[], None]) -> bool:
        """Wait out `client`'s refusal, if one stands, calling `before` first;
        whether it waited."""
        wait = self.hold_s(client)
        if wait <= 0:
            return False
        before()
        await asyncio.sleep(wait)
        return True

    def refused(self, client: str, retry_after: float) -> None:
        self._until[client] = self._clock() + retry_after

    def watch(self, client: str | None, send: Send) -> Send:
        """`send`, noting a 429 to `client` and its Retry-After."""
        if client is None:
            return send

        async def watched(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and message["status"] == TOO_MANY:
                self.refused(client, retry_after_s(message.get("headers", [])))
            await send(message)

        return watched
