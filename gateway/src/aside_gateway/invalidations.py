"""The worker's subscription to the core's invalidations (contracts/cache.json
`tiers.invalidation_channel`): each message's keys are evicted from the L1 tier;
a flush message (`tiers.flush_message`, sent by the seeder after its swap)
empties it.

A daemon thread per worker, started after gunicorn's fork, on a Redis
connection of its own. It never retries silently: redis-py's PubSub would
reconnect and resubscribe under the hood, and messages published in between
would be lost unnoticed. Instead any failure (a dropped connection, CLIENT
KILL, no PONG for DEAD_AFTER_S) flushes the L1 and marks it unusable; the
thread reconnects with backoff and the tier serves again only once Redis has
confirmed the new subscription.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from aside_gateway import cache_keys, metrics, redis_clients
from aside_gateway.config import Settings
from aside_gateway.l1 import L1Cache
from aside_gateway.redis_errors import REDIS_ERRORS

log = logging.getLogger("aside_gateway")

POLL_S = 0.25  # longest a get_message waits, so stop and liveness are checked often
PING_EVERY_S = 1.0
DEAD_AFTER_S = 3.0  # no reply to our PINGs for this long: the connection is gone
BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 2.0


class SubscriptionLost(ConnectionError):
    """The server stopped answering our PINGs."""


def parse(data: bytes) -> tuple[list[str] | None, int | None]:
    """(keys, published_ms) of one message, keys None for a flush of everything
    (the seeder's, after it replaced the users table); ValueError if it is not one."""
    message = json.loads(data)
    if isinstance(message, dict) and message.get("flush") is True:
        published = message.get("published_ms")
        return None, published if isinstance(published, int) else None
    keys = message["keys"]
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ValueError("keys must be a list of strings")
    published = message.get("published_ms")
    return keys, published if isinstance(published, int) else None


class InvalidationSubscriber:
    def __init__(self, settings: Settings, l1: L1Cache):
        self._l1 = l1
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
            self._lost()
            backoff = BACKOFF_MIN_S if subscribed else min(backoff * 2, BACKOFF_MAX_S)
            self._stop.wait(backoff)

    def _lost(self) -> None:
        self._l1.flush(usable=False)
        metrics.L1_SUBSCRIBED.set(0)

    def _listen(self) -> bool:
        """Subscribe and apply messages until stopped; raises on a failed connection.
        Returns whether the subscription was ever confirmed (to reset the backoff)."""
        pubsub = self._client.pubsub()
        subscribed = False
        try:
            pubsub.subscribe(cache_keys.INVALIDATION_CHANNEL)
            last_reply = pinged = time.monotonic()
            while not self._stop.is_set():
                message = pubsub.get_message(timeout=POLL_S)
                now = time.monotonic()
                if message is not None:
                    last_reply = now
                    if message["type"] == "subscribe":
                        subscribed = True
                        self._l1.flush(usable=True)  # nothing seen while away can be trusted
                        metrics.L1_SUBSCRIBED.set(1)
                        metrics.L1_SUBSCRIPTIONS.inc()
                    elif message["type"] == "message":
                        self._apply(message["data"])
                if now - last_reply > DEAD_AFTER_S:
                    raise SubscriptionLost(f"no reply from Redis for {DEAD_AFTER_S}s")
                if subscribed and now - pinged >= PING_EVERY_S:
                    pubsub.ping()
                    pinged = now
        finally:
            pubsub.close()
        return subscribed

    def _apply(self, data: Any) -> None:
        received_ms = time.time() * 1000
        try:
            keys, published_ms = parse(data)
        except (ValueError, KeyError, TypeError):
            # Which keys it meant is unknown: forget everything rather than guess.
            log.warning("unreadable invalidation message; flushing the L1 tier")
            self._l1.flush(usable=True)
            return
        if keys is None:
            self._l1.flush(usable=True)
        else:
            self._l1.evict(keys)
        metrics.l1_invalidation_received(
            None if published_ms is None else (received_ms - published_ms) / 1000
        )
