"""The L1 tier's invalidation subscription, both ways a worker can run it
(CACHE_L1_SUBSCRIBER): a task on the event loop and a daemon thread, each
driven in this process on a real Redis.

A message evicts its keys; any loss of the connection (the server gone, or
silent: stopped, so no PONG comes back) flushes the L1 and keeps it from
serving until Redis confirms the new subscription. The gateway-level tests
of the same rules are in test_tiers.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import redis
from aside_gateway.config.settings import load_settings
from aside_gateway.contracts import cache_keys
from aside_gateway.tiers import invalidations
from aside_gateway.tiers.invalidations import InvalidationSubscriber, LoopInvalidationSubscriber
from aside_gateway.tiers.l1 import L1Cache
from prometheus_client import REGISTRY

KEY = cache_keys.count_key("subscriber-test@example.com")
VALUE = b"7"


def run(scenario: Coroutine[Any, Any, None], deadline_s: float = 30) -> None:
    asyncio.run(asyncio.wait_for(scenario, deadline_s))


async def until(predicate: Callable[[], bool], what: str, deadline_s: float = 5.0) -> None:
    """Let the loop run until `predicate()` holds; fail after the deadline."""
    deadline = time.monotonic() + deadline_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {deadline_s}s waiting for {what}")
        await asyncio.sleep(0.005)


class Running:
    """A subscriber of either kind, started and stopped from the test's loop."""

    def __init__(self, kind: str, redis_url: str, l1: L1Cache):
        settings = load_settings(
            {
                "DATABASE_URL": "postgresql://aside@127.0.0.1:1/aside",
                "REDIS_URL": redis_url,
                "CORE_URL": "http://127.0.0.1:1",
                "ASIDE_PROFILE": "lab",
            }
        )
        self.kind = kind
        if kind == "loop":
            self.loop_subscriber = LoopInvalidationSubscriber(settings, l1)
        else:
            self.thread_subscriber = InvalidationSubscriber(settings, l1)

    def start(self) -> None:
        if self.kind == "loop":
            self.loop_subscriber.start()
        else:
            self.thread_subscriber.start()

    async def stop(self) -> None:
        if self.kind == "loop":
            await self.loop_subscriber.stop()
        else:
            await asyncio.to_thread(self.thread_subscriber.stop)


def new_l1() -> L1Cache:
    return L1Cache(100, 1 << 20, 60, needs_subscription=True)


def fill(l1: L1Cache) -> None:
    assert l1.put(KEY, VALUE, l1.token(KEY))
    assert l1.get(KEY) == VALUE


def subscriptions() -> float:
    return REGISTRY.get_sample_value("aside_gateway_l1_subscriptions_total") or 0.0


def lag_count() -> float:
    return REGISTRY.get_sample_value("aside_gateway_l1_invalidation_lag_seconds_count") or 0.0


@pytest.fixture
def own_redis(redis_server) -> tuple[Callable[[], subprocess.Popen], str]:
    """A redis-server of this test alone (stopped, killed and restarted at will)."""
    return redis_server, f"redis://127.0.0.1:{redis_server.port}/0"


KINDS = ["loop", "thread"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_message_evicts_its_keys_and_records_the_lag(kind, own_redis):
    start_redis, url = own_redis
    start_redis()
    publisher = redis.Redis.from_url(url, socket_timeout=5)
    l1 = new_l1()
    subscriber = Running(kind, url, l1)

    async def scenario() -> None:
        subscriber.start()
        try:
            await until(lambda: l1.usable, "the subscription confirmed")
            fill(l1)
            lags = lag_count()
            message = {"keys": [KEY], "published_ms": int(time.time() * 1000)}
            assert publisher.publish(cache_keys.INVALIDATION_CHANNEL, json.dumps(message)) == 1
            await until(lambda: l1.get(KEY) is None, "the key evicted")
            await until(lambda: lag_count() == lags + 1, "the lag recorded")
            assert l1.usable
        finally:
            await subscriber.stop()
        assert not l1.usable  # a stopped subscriber leaves nothing to trust

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_the_server_gone_flushes_and_blocks_l1_until_resubscribed(kind, own_redis):
    start_redis, url = own_redis
    server = start_redis()
    l1 = new_l1()
    subscriber = Running(kind, url, l1)

    async def scenario() -> None:
        subscriber.start()
        try:
            await until(lambda: l1.usable, "the subscription confirmed")
            fill(l1)
            server.terminate()
            await asyncio.to_thread(server.wait, 10)
            await until(lambda: not l1.usable, "the loss seen")
            assert l1.peek(KEY) is None  # flushed, not just hidden
            assert not l1.put(KEY, VALUE, l1.token(KEY))  # and nothing stored meanwhile
            assert l1.get(KEY) is None
            confirmed = subscriptions()
            await asyncio.to_thread(start_redis)
            await until(lambda: subscriptions() > confirmed, "a new subscription", 10)
            assert l1.usable
            assert l1.peek(KEY) is None
            fill(l1)
        finally:
            await subscriber.stop()

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_a_silent_server_is_given_up_after_its_pings_go_unanswered(kind, own_redis, monkeypatch):
    monkeypatch.setattr(invalidations, "PING_EVERY_S", 0.2)
    monkeypatch.setattr(invalidations, "DEAD_AFTER_S", 1.0)
    start_redis, url = own_redis
    server = start_redis()
    l1 = new_l1()
    subscriber = Running(kind, url, l1)

    async def scenario() -> None:
        subscriber.start()
        try:
            await until(lambda: l1.usable, "the subscription confirmed")
            fill(l1)
            confirmed = subscriptions()
            os.kill(server.pid, signal.SIGSTOP)  # the socket stays open; nothing answers
            try:
                await until(lambda: not l1.usable, "the silence taken for a loss", 5)
                assert l1.peek(KEY) is None
            finally:
                os.kill(server.pid, signal.SIGCONT)
            await until(lambda: subscriptions() > confirmed, "a new subscription", 10)
            assert l1.usable and l1.peek(KEY) is None
        finally:
            await subscriber.stop()

    run(scenario())


def test_the_loop_subscriber_serves_hits_beside_it(own_redis):
    """The subscription shares the loop: other coroutines keep running while it
    waits for messages (it never blocks the loop)."""
    start_redis, url = own_redis
    start_redis()
    l1 = new_l1()
    subscriber = Running("loop", url, l1)

    async def scenario() -> None:
        subscriber.start()
        try:
            await until(lambda: l1.usable, "the subscription confirmed")
            started = time.monotonic()
            ticks = 0
            while time.monotonic() - started < 0.5:
                await asyncio.sleep(0.001)
                ticks += 1
            # A blocking read of POLL_S (0.25 s) would leave at most a few ticks.
            assert ticks > 100
        finally:
            await subscriber.stop()

    run(scenario())
