"""The tracking tier's invalidations: Redis's own server-assisted client-side
caching (CLIENT TRACKING) feeds a second L1 of the worker, the one the
`tracking` strategy reads (tiers/strategies.py).

One connection per worker, on its event loop, speaking RESP2, does all of it:
`CLIENT ID`, then `CLIENT TRACKING on REDIRECT <its own id> BCAST PREFIX ...`
(cache.json `tiers.tracking_prefixes`), then `SUBSCRIBE __redis__:invalidate`.
In BCAST mode Redis keeps no table of what was read: every change to a key of
those prefixes, by any client (the core's DEL, an operator's DEL, FLUSHALL,
an expiry, an eviction under maxmemory), is sent to the connection as a
message naming the keys, or naming none for a flush of everything. Redirecting
to itself puts tracking and subscription on one connection, so they are lost
together: there is no state in which the subscription lives on while Redis
has forgotten the tracking. (Why this and not a client's own cache:
docs/decisions/045-the-tracking-tier-redis-invalidations-on-resp2.md.)

The loss rules are the channel's (tiers/invalidations.py): any failure flushes the
tracked L1 and marks it unusable; a new connection serves again only once
Redis has confirmed the new subscription, and that confirmation empties the
L1, since Redis dropped the tracking state with the old connection. redis-py's
PubSub reconnects and resubscribes on its own after some errors, without the
CLIENT TRACKING: a second confirmation on one connection is treated as a loss.

Lease keys share the prefixes and are reported too; no L1 holds one, so they
are skipped. A key Redis does not hold is never reported (a DEL of a missing
key changes nothing), which is why only a value Redis held enters this L1
(l2.CacheRead.in_redis).
"""

from __future__ import annotations

from typing import Any

from aside_gateway.config import metrics
from aside_gateway.contracts import cache_keys
from aside_gateway.tiers.invalidations import (
    Follower,
    LoopInvalidationSubscriber,
    SubscriptionLost,
)
from aside_gateway.tiers.l1 import L1Cache


def tracking_command(client_id: int, prefixes: tuple[str, ...]) -> list[str | int]:
    """CLIENT TRACKING in broadcast mode, redirected to `client_id`."""
    command: list[str | int] = ["CLIENT", "TRACKING", "ON", "REDIRECT", client_id, "BCAST"]
    for prefix in prefixes:
        command += ["PREFIX", prefix]
    return command


def invalidated_keys(data: Any) -> list[str] | None:
    """The value keys one invalidation names: None for a flush of everything
    (Redis sends a null), without lease keys (no L1 holds one). ValueError if
    it is neither."""
    if data is None:
        return None
    if not isinstance(data, list) or not all(isinstance(k, bytes) for k in data):
        raise ValueError("an invalidation is a list of key names or null")
    keys = (k.decode("utf-8", "surrogateescape") for k in data)
    return [k for k in keys if not k.endswith(cache_keys.LEASE_SUFFIX)]


class TrackingFollower(Follower):
    """What the tracking connection's events do to the tracked L1: the channel's
    rules, with Redis's messages, a confirmation once per connection and its
    own gauges."""

    confirms_once = True
    what = "tracking invalidation"

    def _read(self, data: Any) -> tuple[list[str] | None, float | None]:
        return invalidated_keys(data), None  # Redis says not when it sent one

    def _subscribed(self, on: bool) -> None:
        metrics.L1_TRACKING.set(int(on))
        if on:
            metrics.L1_TRACKING_SESSIONS.inc()

    def _received(self, lag_s: float | None) -> None:
        metrics.L1_TRACKING_INVALIDATIONS.inc()


class TrackingSubscriber(LoopInvalidationSubscriber):
    """The tracking connection as a task on the worker's event loop: the
    channel's loop (start, stop, reconnect with backoff, liveness pings), on
    Redis's own invalidation channel, tracking switched on before it subscribes."""

    channel = cache_keys.TRACKING_CHANNEL
    task_name = "aside-l1-tracking"
    what = "tracking connection"
    # RESP2: invalidations then arrive as messages on the subscribed
    # connection; on RESP3 they would be push replies redis-py's PubSub drops.
    protocol = 2

    def _new_follower(self, l1: L1Cache) -> TrackingFollower:
        return TrackingFollower(l1)

    async def _before_subscribe(self, pubsub: Any) -> None:
        await pubsub.connect()
        if self._settings.cache_l1_tracking:
            await self._track(pubsub.connection)

    @staticmethod
    async def _track(connection: Any) -> None:
        """CLIENT TRACKING on this very connection, redirected to itself, before
        it enters subscribed mode (where RESP2 allows no other command)."""
        await connection.send_command("CLIENT", "ID")
        client_id = await connection.read_response()
        await connection.send_command(*tracking_command(client_id, cache_keys.TRACKING_PREFIXES))
        reply = await connection.read_response()
        if reply not in (b"OK", "OK"):
            raise SubscriptionLost(f"CLIENT TRACKING answered {reply!r}")
