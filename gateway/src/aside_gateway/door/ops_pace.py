"""Production's pace on the operational routes (/healthz, /readyz, /metrics): so
many requests a second per client, with a burst, per worker.

A client over its pace is held, not answered: the HTTP protocol
(front/worker.py) leaves the request unstarted, pauses reading its connection
and starts it when its turn is due. A client that pipelines heads as fast as
it can is slowed by TCP backpressure and costs the event loop one timer per
held request, where answering it 429s would cost a response each, as fast as
it sends.

The pace is a token bucket kept as its theoretical arrival time (GCRA): a
client's entry is the instant its bucket would be full again, so a request
costs one comparison and one store, and `turn` both answers how long to wait
and reserves that turn, so a held request is started when its delay ends
without asking again. `limits` (door/miss_budget.py) counts hits in windows
and answers yes or no; it has no notion of a turn to wait for, and its memory
storage has no bound on its keys. Here the table of clients is an LRU of
MAX_CLIENTS entries (cachetools): an evicted client starts again with a full
burst, which costs a client that forges addresses nothing it could not get
by sending its burst from each.

A client is keyed as the miss budget keys it (door/miss_budget.py): the peer
address, or behind GATEWAY_TRUSTED_PROXIES the address they forwarded, an
IPv6 client by its /GATEWAY_CLIENT_IPV6_PREFIX network. See
docs/decisions/076-ops-endpoints-paced-per-client.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cachetools import LRUCache

from aside_gateway.config import metrics
from aside_gateway.config.settings import Network, Settings
from aside_gateway.door.miss_budget import client_address, client_key

OPS_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
# Clients a worker remembers; past it the least recently seen is forgotten.
MAX_CLIENTS = 10_000
FORWARDED_FOR = b"x-forwarded-for"


@dataclass(frozen=True)
class OpsPaceLimits:
    """Requests a second per client, and how many may come at once (the burst);
    per_s 0 turns the pace off."""

    per_s: int
    burst: int

    @property
    def off(self) -> bool:
        return self.per_s == 0


class OpsPace:
    """One worker's pace of the operational routes, per client."""

    def __init__(
        self,
        limits: OpsPaceLimits,
        max_clients: int = MAX_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.limits = limits
        self._interval = 1.0 / limits.per_s if limits.per_s else 0.0
        # A client may be this far ahead of its pace before it waits.
        self._tolerance = self._interval * max(limits.burst - 1, 0)
        self._due: LRUCache[str, float] = LRUCache(maxsize=max_clients)
        self._clock = clock

    def turn(self, client: str | None) -> float:
        """Seconds `client` waits before its request may start (0: now); the
        turn is reserved, so the request starts when they have passed."""
        if self.limits.off or client is None:
            return 0.0
        now = self._clock()
        due = max(self._due.get(client, now), now)
        self._due[client] = due + self._interval
        return max(0.0, due - self._tolerance - now)

    def __len__(self) -> int:
        return len(self._due)


def ops_client(
    peer: tuple[str, int] | None,
    headers: Iterable[tuple[bytes, bytes]],
    proxies: tuple[Network, ...],
    ipv6_prefix: int,
) -> str | None:
    """Who sends an ASGI request, from its scope's client and headers."""
    address = peer[0] if peer else None
    forwarded = None
    if proxies:
        forwarded = b",".join(v for k, v in headers if k == FORWARDED_FOR).decode("latin-1")
    return client_key(client_address(address, forwarded or None, proxies), ipv6_prefix)


class WorkerOpsPace:
    """The pace as the HTTP protocol asks it: by path and ASGI scope."""

    def __init__(self, pace: OpsPace, proxies: tuple[Network, ...], ipv6_prefix: int):
        self.pace = pace
        self._proxies = proxies
        self._ipv6_prefix = ipv6_prefix

    @classmethod
    def from_settings(cls, settings: Settings) -> WorkerOpsPace:
        limits = OpsPaceLimits(settings.ops_client_per_s, settings.ops_client_burst)
        return cls(OpsPace(limits), settings.trusted_proxies, settings.client_ipv6_prefix)

    @property
    def off(self) -> bool:
        return self.pace.limits.off

    def hold_s(self, scope: dict[str, object]) -> float:
        """How long this request is held (0: start it now); a hold is counted."""
        if scope.get("path") not in OPS_PATHS:
            return 0.0
        client = ops_client(
            scope.get("client"),  # type: ignore[arg-type]
            scope.get("headers", ()),  # type: ignore[arg-type]
            self._proxies,
            self._ipv6_prefix,
        )
        delay = self.pace.turn(client)
        if delay > 0:
            metrics.ops_held(str(scope["path"]))
        return delay
