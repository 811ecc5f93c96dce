"""The worker's subscription to the core's invalidations (contracts/cache.json
`tiers.invalidation_channel`): each message's keys are evicted from the L1 tier;
a flush message (`tiers.flush_message`, sent by the seeder after its swap)
empties it.

One subscription per worker, on a Redis connection of its own, started after
gunicorn's fork, either as a task on the worker's event loop
(`LoopInvalidationSubscriber`, redis.asyncio) or as a daemon thread
(`InvalidationSubscriber`): CACHE_L1_SUBSCRIBER. On the loop a message is one
more ready callback among the hits'; a thread must first win the GIL from the
loop and the Flask threads, which CPython hands over only every switch
interval (docs/decisions/033-invalidation-lag-the-subscription-on-the-event-loop.md).

Neither retries silently: redis-py's PubSub would reconnect and resubscribe
under the hood, and messages published in between would be lost unnoticed.
Instead any failure (a dropped connection, CLIENT KILL, no PONG for
DEAD_AFTER_S) flushes the L1 and marks it unusable; the subscriber reconnects
with backoff and the tier serves again only once Redis has confirmed the new
subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from typing import Any

from aside_gateway.backends import redis_clients
from aside_gateway.backends.redis_errors import REDIS_ERRORS
from aside_gateway.config import metrics
from aside_gateway.config.settings import Settings
from aside_gateway.contracts import cache_keys
from aside_gateway.tiers.l1 import L1Cache

log = logging.getLogger("aside_gateway")

POLL_S = 0.25  # longest a get_message waits, so stop and liveness are checked often
PING_EVERY_S = 1.0
DEAD_AFTER_S = 3.0  # no reply to our PINGs for this long: the connection is gone
BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 2.0


class SubscriptionLost(ConnectionError):
    """The server stopped answering our PINGs."""


def published_ms(message: dict[str, Any]) -> float | None:
    """The publish time in unix ms: from `published_us` when the message has it
    (the truncated `published_ms` alone adds up to 1 ms to the lag)."""
    micros = message.get("published_us")
    if isinstance(micros, int) and not isinstance(micros, bool):
        return micros / 1000
    millis = message.get("published_ms")
    return millis if isinstance(millis, int) and not isinstance(millis, bool) else None


def parse(data: bytes) -> tuple[list[str] | None, float | None]:
    """(keys, publish time in unix ms) of one message, keys None for a flush of
    everything (the seeder's, after it replaced the users table); ValueError if
    it is not one."""
    message = json.loads(data)
    if isinstance(message, dict) and message.get("flush") is True:
        return None, published_ms(message)
    keys = message["keys"]
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ValueError("keys must be a list of strings")
    return keys, published_ms(message)


class Follower:
    """What a subscription's events do to an L1, whichever way it listens: the
    core's channel here, Redis's own invalidations in tracking.TrackingFollower,
    which reads its messages, counts them and takes its confirmations otherwise."""

    # Whether a second confirmation on one connection is a loss (tracking's).
    confirms_once = False
    what = "invalidation message"

    def __init__(self, l1: L1Cache):
        self._l1 = l1
        self.confirmed = False

    def lost(self) -> None:
        self._l1.flush(usable=False)
        self.confirmed = False
        self._subscribed(False)

    def handle(self, message: dict[str, Any]) -> bool:
        """Apply one PubSub reply; returns whether it confirmed the subscription."""
        if message["type"] == "subscribe":
            if self.confirmed and self.confirms_once:
                # redis-py resubscribed on a new connection: Redis tracks nothing for it.
                raise SubscriptionLost("resubscribed without CLIENT TRACKING")
            self.confirmed = True
            self._l1.flush(usable=True)  # nothing seen while away can be trusted
            self._subscribed(True)
            return True
        if message["type"] == "message":
            self.apply(message["data"])
        return False

    def apply(self, data: Any) -> None:
        received_ms = time.time() * 1000
        try:
            keys, published = self._read(data)
        except (ValueError, KeyError, TypeError):
            # Which keys it meant is unknown: forget everything rather than guess.
            log.warning("unreadable %s; flushing the L1 tier", self.what)
            self._l1.flush(usable=True)
            return
        if keys is None:
            self._l1.flush(usable=True)
        else:
            self._l1.evict(keys)
        self._received(None if published is None else (received_ms - published) / 1000)

    def _read(self, data: Any) -> tuple[list[str] | None, float | None]:
        """(keys, publish time in unix ms) of one message: see parse."""
        return parse(data)

    def _subscribed(self, on: bool) -> None:
        metrics.L1_SUBSCRIBED.set(int(on))
        if on:
            metrics.L1_SUBSCRIPTIONS.inc()

    def _received(self, lag_s: float | None) -> None:
        metrics.l1_invalidation_received(lag_s)


class Liveness:
    """When to PING and when to give the connection up, from the replies' times."""

    def __init__(self, now: float):
        self.last_reply = self.pinged = now

    def replied(self, now: float) -> None:
        self.last_reply = now

    def check(self, now: float) -> None:
        if now - self.last_reply > DEAD_AFTER_S:
            raise SubscriptionLost(f"no reply from Redis for {DEAD_AFTER_S}s")

    def ping_due(self, now: float) -> bool:
        if now - self.pinged < PING_EVERY_S:
            return False
        self.pinged = now
        return True


def _after_poll(
    follower: Follower, alive: Liveness, message: dict[str, Any] | None, subscribed: bool
) -> tuple[bool, bool]:
    """What one poll of the subscription leaves, in either worker's loop:
    whether the subscription is confirmed, and whether a ping is due."""
    now = time.monotonic()
    if message is not None:
        alive.replied(now)
        subscribed = follower.handle(message) or subscribed
    alive.check(now)
    return subscribed, subscribed and alive.ping_due(now)


def next_backoff(backoff: float, subscribed: bool) -> float:
    return BACKOFF_MIN_S if subscribed else min(backoff * 2, BACKOFF_MAX_S)


class InvalidationSubscriber:
    """The subscription on a daemon thread of the worker."""

    def __init__(self, settings: Settings, l1: L1Cache):
        self._follower = Follower(l1)
        # health_check_interval 0 (the factory's): our own PINGs, with a
        # verdict when unanswered. On a Redis Cluster the subscription goes
        # through the cluster client to one node (PUBLISH reaches every node's
        # subscribers); losing that node is a lost subscription like any other.
        self._client = redis_clients.sync_client(
            settings,
            socket_timeout=max(settings.redis_timeout_ms / 1000, 1.0),
            connect_timeout=settings.redis_connect_timeout_ms / 1000,
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="aside-l1-invalidations", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._client.close()

    def _run(self) -> None:
        backoff = BACKOFF_MIN_S
        while not self._stop.is_set():
            subscribed = False
            try:
                subscribed = self._listen()
            except REDIS_ERRORS as exc:
                log.warning("invalidation subscription lost: %s", exc)
                # On a cluster, the node may have failed over: ask the next
                # subscription's node from a fresh slot map.
                redis_clients.refresh_topology(self._client)
            self._follower.lost()
            backoff = next_backoff(backoff, subscribed)
            self._stop.wait(backoff)

    def _listen(self) -> bool:
        """Subscribe and apply messages until stopped; raises on a failed connection.
        Returns whether the subscription was ever confirmed (to reset the backoff)."""
        pubsub = self._client.pubsub()
        subscribed = False
        try:
            pubsub.subscribe(cache_keys.INVALIDATION_CHANNEL)
            alive = Liveness(time.monotonic())
            while not self._stop.is_set():
                message = pubsub.get_message(timeout=POLL_S)
                subscribed, ping = _after_poll(self._follower, alive, message, subscribed)
                if ping:
                    pubsub.ping()
        finally:
            pubsub.close()
        return subscribed


class LoopInvalidationSubscriber:
    """The subscription as a task on the worker's event loop: start() and stop()
    from that loop (the ASGI lifespan). The L1 is shared with the Flask threads
    under its own lock, held only for dictionary work, so the loop never waits long.
    tracking.TrackingSubscriber is the same loop on Redis's own invalidations."""

    channel = cache_keys.INVALIDATION_CHANNEL
    task_name = "aside-l1-invalidations"
    what = "invalidation subscription"
    protocol: int | None = None  # the client's RESP version; None: the factory's

    def __init__(self, settings: Settings, l1: L1Cache):
        self._settings = settings
        self._follower = self._new_follower(l1)
        self._task: asyncio.Task[None] | None = None

    def _new_follower(self, l1: L1Cache) -> Follower:
        return Follower(l1)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.task_name)

    async def stop(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    def _client(self) -> redis_clients.AsyncClient:
        # No retries and no health checks (the factory's): our own PINGs,
        # with a verdict when unanswered, as on the thread.
        extra = {} if self.protocol is None else {"protocol": self.protocol}
        return redis_clients.async_client(
            self._settings,
            connect_timeout=self._settings.redis_connect_timeout_ms / 1000,
            socket_timeout=max(self._settings.redis_timeout_ms / 1000, 1.0),
            max_connections=2,
            **extra,
        )

    async def _run(self) -> None:
        backoff = BACKOFF_MIN_S
        while True:
            subscribed = False
            try:
                subscribed = await self._listen()
            except REDIS_ERRORS as exc:
                log.warning("%s lost: %s", self.what, exc)
            finally:
                # Also when cancelled: a stopped subscriber leaves no L1 to trust.
                self._follower.lost()
            backoff = next_backoff(backoff, subscribed)
            await asyncio.sleep(backoff)

    async def _before_subscribe(self, pubsub: Any) -> None:
        """What the connection does before it enters subscribed mode: nothing here."""

    async def _listen(self) -> bool:
        """Subscribe and apply messages until cancelled; raises on a failed connection.
        Returns whether the subscription was ever confirmed (to reset the backoff)."""
        client = self._client()
        pubsub = client.pubsub()
        subscribed = False
        try:
            await self._before_subscribe(pubsub)
            await pubsub.subscribe(self.channel)
            alive = Liveness(time.monotonic())
            while True:
                message = await pubsub.get_message(timeout=POLL_S)
                subscribed, ping = _after_poll(self._follower, alive, message, subscribed)
                if ping:
                    await pubsub.ping()
        finally:
            await pubsub.aclose()
            await client.aclose()
        return subscribed
