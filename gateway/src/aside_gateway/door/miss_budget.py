"""The production miss budget: misses that reach PostgreSQL or the core, a
second, per route and per client, answered 429 `too_many_requests` with
Retry-After beyond it. Hits never spend it; only the read that wins a key's
fill does (tiers/l2.py calls the load only then), so hits are served meanwhile.

Counted with `limits` (MIT): a sliding-window counter per key in the worker's
own memory, so a gateway of N workers allows N times each budget (a worker
never asks another, nor Redis, before a miss). A client is the write token's
holder when the request carries it, else the peer address; behind the proxies
GATEWAY_TRUSTED_PROXIES names, the address those proxies put in
X-Forwarded-For (uvicorn's own proxy headers are off, front/worker.py, so
no other rule decides). An IPv6 client is its /GATEWAY_CLIENT_IPV6_PREFIX
(64) network: one host is handed a whole /64, and keyed whole each of its
addresses would be another client. A token that is not the write token names
no one: it would let a client pick a fresh identity per request. See
docs/decisions/064-*.md.
"""

from __future__ import annotations

import hmac
import ipaddress
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import SlidingWindowCounterRateLimiter

from aside_gateway.config import metrics
from aside_gateway.config.settings import Network, Settings
from aside_gateway.contracts.errors import ApiError

TOKEN_CLIENT = "token"
SCOPE_ROUTE, SCOPE_CLIENT = "route", "client"


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def _trusted(address: str, proxies: tuple[Network, ...]) -> bool:
    parsed = _address(address)
    return parsed is not None and any(parsed in network for network in proxies)


def client_address(
    peer: str | None, forwarded_for: str | None, proxies: tuple[Network, ...]
) -> str | None:
    """The client's address: the peer's, unless the peer is a trusted proxy; then
    the right-most X-Forwarded-For entry that is not a trusted proxy (entries
    to its left were written by the client and prove nothing)."""
    if not peer or not _trusted(peer, proxies) or not forwarded_for:
        return peer or None
    hops = [hop.strip() for hop in forwarded_for.split(",")]
    for hop in reversed(hops):
        if _address(hop) is None:
            return peer  # a proxy we trust wrote nonsense: the peer is all we know
        if not _trusted(hop, proxies):
            return hop
    return hops[0]


def client_key(address: str | None, ipv6_prefix: int) -> str | None:
    """An IPv4 client is its address; an IPv6 one its network of `ipv6_prefix` bits."""
    parsed = _address(address) if address else None
    if not isinstance(parsed, ipaddress.IPv6Address):
        return address
    if parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    return str(ipaddress.IPv6Network((parsed, ipv6_prefix), strict=False))


def client_of(
    environ: Mapping[str, Any],
    write_token: str | None,
    proxies: tuple[Network, ...],
    ipv6_prefix: int = 64,
) -> str | None:
    """Who is asking (a WSGI environ): the token's holder, an address (an IPv6
    network), or None."""
    auth = environ.get("HTTP_AUTHORIZATION", "")
    token = auth[7:] if auth.startswith("Bearer ") else None
    if write_token and token and hmac.compare_digest(token.encode(), write_token.encode()):
        return TOKEN_CLIENT
    address = client_address(
        environ.get("REMOTE_ADDR"), environ.get("HTTP_X_FORWARDED_FOR"), proxies
    )
    return client_key(address, ipv6_prefix)


@dataclass(frozen=True)
class MissBudgetLimits:
    """Misses a second a worker allows: per route, and per client of a route;
    0 turns that bound off."""

    route_per_s: int
    client_per_s: int

    @property
    def off(self) -> bool:
        return self.route_per_s == 0 and self.client_per_s == 0


class MissBudget:
    """One worker's budget of misses."""

    def __init__(
        self,
        budget: MissBudgetLimits,
        write_token: str | None = None,
        proxies: tuple[Network, ...] = (),
        ipv6_prefix: int = 64,
    ):
        self.budget = budget
        self._write_token = write_token
        self._proxies = proxies
        self._ipv6_prefix = ipv6_prefix
        self._limiter = SlidingWindowCounterRateLimiter(MemoryStorage())
        self._route = RateLimitItemPerSecond(max(budget.route_per_s, 1))
        self._client = RateLimitItemPerSecond(max(budget.client_per_s, 1))

    @classmethod
    def from_settings(cls, settings: Settings) -> MissBudget:
        budget = MissBudgetLimits(
            settings.miss_budget_route_per_s, settings.miss_budget_client_per_s
        )
        return cls(
            budget, settings.write_token, settings.trusted_proxies, settings.client_ipv6_prefix
        )

    def charge(self, route: str, client: str | None) -> None:
        """Spend one miss of `route` for `client`, or raise 429 with Retry-After.
        The client's bound is checked first, so one client past its own bound
        does not spend the route's budget for everyone."""
        if self.budget.client_per_s and client is not None:
            self._spend(self._client, SCOPE_CLIENT, route, client)
        if self.budget.route_per_s:
            self._spend(self._route, SCOPE_ROUTE, route)

    def guarded(
        self, route: str, environ: Mapping[str, Any], load: Callable[[], bytes]
    ) -> Callable[[], bytes]:
        """`load`, charged to the client of `environ` (a WSGI request's) when it
        runs: a miss that does the work."""
        if self.budget.off:
            return load
        client = client_of(environ, self._write_token, self._proxies, self._ipv6_prefix)

        def charged() -> bytes:
            self.charge(route, client)
            return load()

        return charged

    def _spend(self, item: RateLimitItemPerSecond, scope: str, *identifiers: str) -> None:
        if self._limiter.hit(item, scope, *identifiers):
            return
        metrics.miss_budget_refused(identifiers[0], scope)
        reset = self._limiter.get_window_stats(item, scope, *identifiers).reset_time
        retry_after = max(1, math.ceil(reset - time.time()))
        raise ApiError(
            "too_many_requests",
            f"too many cache misses a second ({scope} budget); retry later",
            {"Retry-After": str(retry_after)},
        )
