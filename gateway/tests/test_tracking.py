"""The tracking tier's connection (tiers/tracking.py) driven in this process on a
real Redis of the test's own: every change Redis makes to a tracked key (a
DEL or SET by another client, an expiry, an eviction under maxmemory, a
FLUSHALL) evicts it from the L1; losing the connection (CLIENT KILL, the
server restarted) flushes the L1 and keeps it from serving until Redis has
confirmed tracking and subscription on a new one. The gateway-level tests of
the same rules are in test_tracking_tiers.py; the pure parts come first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import redis
from aside_gateway.config.settings import load_settings
from aside_gateway.contracts import cache_keys
from aside_gateway.tiers.invalidations import SubscriptionLost
from aside_gateway.tiers.l1 import L1Cache
from aside_gateway.tiers.tracking import (
    TrackingFollower,
    TrackingSubscriber,
    invalidated_keys,
    tracking_command,
)
from prometheus_client import REGISTRY

KEY = cache_keys.count_key("tracking-test@example.com")
USER_KEY = cache_keys.user_key(424242)
VALUE = b"7"


# ---- pure parts ---------------------------------------------------------------------


def test_the_tracking_command_redirects_in_broadcast_mode_with_every_prefix():
    assert tracking_command(42, ("a:", "b:")) == [
        "CLIENT", "TRACKING", "ON", "REDIRECT", 42, "BCAST", "PREFIX", "a:", "PREFIX", "b:",
    ]  # fmt: skip


def test_the_prefixes_cover_the_keys_an_l1_holds_and_no_track():
    assert all(p.startswith(cache_keys.PREFIX) for p in cache_keys.TRACKING_PREFIXES)
    assert KEY.startswith(cache_keys.TRACKING_PREFIXES[0])
    assert USER_KEY.startswith(cache_keys.TRACKING_PREFIXES[1])
    track = cache_keys.track_key(1, None, "raw")
    assert not any(track.startswith(p) for p in cache_keys.TRACKING_PREFIXES)


def test_an_invalidation_names_its_keys_without_leases_and_null_is_a_flush():
    lease = cache_keys.lease_key(KEY)
    assert invalidated_keys([KEY.encode(), lease.encode(), USER_KEY.encode()]) == [KEY, USER_KEY]
    assert invalidated_keys([lease.encode()]) == []
    assert invalidated_keys(None) is None
    for bad in (b"x", [1], "x"):
        with pytest.raises(ValueError):
            invalidated_keys(bad)


def new_l1() -> L1Cache:
    return L1Cache(100, 1 << 20, 60, needs_subscription=True)


def fill(l1: L1Cache, key: str = KEY) -> None:
    assert l1.put(key, VALUE, l1.token(key))
    assert l1.get(key) == VALUE


def test_the_follower_serves_only_from_confirmation_to_loss():
    l1 = new_l1()
    follower = TrackingFollower(l1)
    assert not l1.usable
    assert follower.handle({"type": "subscribe", "data": 1}) is True
    fill(l1)
    follower.handle({"type": "message", "data": [KEY.encode()]})
    assert l1.get(KEY) is None
    fill(l1)
    follower.handle({"type": "message", "data": None})  # FLUSHALL
    assert l1.peek(KEY) is None and l1.usable
    fill(l1)
    follower.handle({"type": "message", "data": b"garbage"})  # unreadable: forget everything
    assert l1.peek(KEY) is None and l1.usable
    follower.lost()
    assert not l1.usable


def test_a_second_confirmation_on_one_connection_is_a_loss():
    """redis-py resubscribes by itself on a reconnect, without CLIENT TRACKING."""
    l1 = new_l1()
    follower = TrackingFollower(l1)
    follower.handle({"type": "subscribe", "data": 1})
    fill(l1)
    with pytest.raises(SubscriptionLost):
        follower.handle({"type": "subscribe", "data": 1})
    follower.lost()
    assert not l1.usable and l1.peek(KEY) is None


# ---- on a real Redis ----------------------------------------------------------------


def run(scenario: Coroutine[Any, Any, None], deadline_s: float = 60) -> None:
    asyncio.run(asyncio.wait_for(scenario, deadline_s))


async def until(predicate: Callable[[], bool], what: str, deadline_s: float = 5.0) -> None:
    """Let the loop run until `predicate()` holds; fail after the deadline."""
    deadline = time.monotonic() + deadline_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {deadline_s}s waiting for {what}")
        await asyncio.sleep(0.005)


def sessions() -> float:
    return REGISTRY.get_sample_value("aside_gateway_l1_tracking_sessions_total") or 0.0


def invalidations() -> float:
    return REGISTRY.get_sample_value("aside_gateway_l1_tracking_invalidations_total") or 0.0


def subscriber(url: str, l1: L1Cache, tracking: str = "on") -> TrackingSubscriber:
    settings = load_settings(
        {
            "DATABASE_URL": "postgresql://aside@127.0.0.1:1/aside",
            "REDIS_URL": url,
            "CORE_URL": "http://127.0.0.1:1",
            "ASIDE_PROFILE": "lab",
            "CACHE_L1_TRACKING": tracking,
        }
    )
    return TrackingSubscriber(settings, l1)


@pytest.fixture
def own_redis(redis_server) -> tuple[Callable[[], Any], str]:
    """A redis-server of this test alone (killed and restarted at will)."""
    return redis_server, f"redis://127.0.0.1:{redis_server.port}/0"


async def stored(writer: redis.Redis, key: str = KEY, **options: Any) -> None:
    """SET `key` in Redis and wait until its own invalidation has come, so a
    fill after this is evicted only by a later change."""
    heard = invalidations()
    writer.set(key, VALUE, **options)
    await until(lambda: invalidations() > heard, "the SET's own invalidation")


def tracking_ids(client: redis.Redis) -> list[int]:
    """The connections Redis tracks for (flag t), by CLIENT ID."""
    return [int(c["id"]) for c in client.client_list() if "t" in c["flags"]]


CHANGES: dict[str, Callable[[redis.Redis], None]] = {
    "del": lambda r: r.delete(KEY),
    "set": lambda r: r.set(KEY, b"8"),
    "flushall": lambda r: r.flushall(),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_by_another_client_evicts_the_key(change, own_redis):
    start_redis, url = own_redis
    start_redis()
    writer = redis.Redis.from_url(url, socket_timeout=5)
    l1 = new_l1()
    tracker = subscriber(url, l1)

    async def scenario() -> None:
        tracker.start()
        try:
            await until(lambda: l1.usable, "tracking confirmed")
            await stored(writer)
            fill(l1)
            fill(l1, USER_KEY)
            heard = invalidations()
            CHANGES[change](writer)
            await until(lambda: l1.get(KEY) is None, f"the key evicted by {change}")
            assert invalidations() > heard
            assert l1.usable
            if change != "flushall":
                assert l1.get(USER_KEY) == VALUE  # a change to one key evicts that key only
        finally:
            await tracker.stop()
        assert not l1.usable  # a stopped tracker leaves nothing to trust

    run(scenario())


def test_an_expiry_evicts_the_key(own_redis):
    start_redis, url = own_redis
    start_redis()
    writer = redis.Redis.from_url(url, socket_timeout=5)
    l1 = new_l1()
    tracker = subscriber(url, l1)

    async def scenario() -> None:
        tracker.start()
        try:
            await until(lambda: l1.usable, "tracking confirmed")
            await stored(writer, px=300)
            fill(l1)
            # Redis's active expiry finds the key within a few of its 100 ms cycles.
            await until(lambda: l1.get(KEY) is None, "the key evicted by its expiry")
            assert writer.exists(KEY) == 0
        finally:
            await tracker.stop()

    run(scenario())


def test_an_eviction_under_maxmemory_evicts_the_key(own_redis):
    start_redis, url = own_redis
    start_redis()
    writer = redis.Redis.from_url(url, socket_timeout=5)
    l1 = new_l1()
    tracker = subscriber(url, l1)

    async def scenario() -> None:
        tracker.start()
        try:
            await until(lambda: l1.usable, "tracking confirmed")
            await stored(writer)
            fill(l1)
            used = int(writer.info("memory")["used_memory"])
            writer.config_set("maxmemory-policy", "allkeys-random")
            writer.config_set("maxmemory", str(used + 2 * 1024 * 1024))
            filler = b"x" * 64 * 1024
            for n in range(2000):  # 125 MB at most: far past the bound
                if writer.exists(KEY) == 0:
                    break
                writer.set(f"filler:{n}", filler)
            assert writer.exists(KEY) == 0, "Redis never evicted the key"
            await until(lambda: l1.get(KEY) is None, "the key evicted from L1 by Redis's eviction")
        finally:
            await tracker.stop()

    run(scenario())


def test_without_client_tracking_a_del_is_never_heard(own_redis):
    """The lab switch CACHE_L1_TRACKING=off subscribes but sends no CLIENT
    TRACKING: the subscription alone hears nothing, and the L1 keeps the old value."""
    start_redis, url = own_redis
    start_redis()
    writer = redis.Redis.from_url(url, socket_timeout=5)
    l1 = new_l1()
    tracker = subscriber(url, l1, tracking="off")

    async def scenario() -> None:
        tracker.start()
        try:
            await until(lambda: l1.usable, "the subscription confirmed")
            writer.set(KEY, VALUE)
            fill(l1)
            heard = invalidations()
            writer.delete(KEY)
            writer.set(USER_KEY, VALUE)
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:  # long enough for a message to come
                await asyncio.sleep(0.05)
            assert invalidations() == heard
            assert l1.get(KEY) == VALUE
            assert tracking_ids(writer) == []
        finally:
            await tracker.stop()

    run(scenario())


def test_client_kill_flushes_and_blocks_l1_until_tracked_again(own_redis):
    start_redis, url = own_redis
    start_redis()
    admin = redis.Redis.from_url(url, socket_timeout=5)
    l1 = new_l1()
    tracker = subscriber(url, l1)

    async def scenario() -> None:
        tracker.start()
        try:
            await until(lambda: l1.usable, "tracking confirmed")
            await stored(admin)
            fill(l1)
            [tracked] = tracking_ids(admin)
            confirmed = sessions()
            assert admin.client_kill_filter(_id=tracked) == 1
            await until(lambda: not l1.usable or sessions() > confirmed, "the loss seen")
            await until(lambda: sessions() > confirmed, "tracking on a new connection", 10)
            assert l1.usable and l1.peek(KEY) is None  # emptied, not just hidden
            [again] = tracking_ids(admin)
            assert again != tracked
            # The new connection is tracked: a DEL is heard again.
            await stored(admin)
            fill(l1)
            admin.delete(KEY)
            await until(lambda: l1.get(KEY) is None, "the key evicted after the reconnect")
        finally:
            await tracker.stop()

    run(scenario())


def test_a_restarted_redis_flushes_and_blocks_l1_until_tracked_again(own_redis):
    start_redis, url = own_redis
    server = start_redis()
    l1 = new_l1()
    tracker = subscriber(url, l1)

    async def scenario() -> None:
        tracker.start()
        try:
            await until(lambda: l1.usable, "tracking confirmed")
            fill(l1)
            server.terminate()
            await asyncio.to_thread(server.wait, 10)
            await until(lambda: not l1.usable, "the loss seen")
            assert l1.peek(KEY) is None
            assert not l1.put(KEY, VALUE, l1.token(KEY))  # nothing stored meanwhile
            confirmed = sessions()
            await asyncio.to_thread(start_redis)
            await until(lambda: sessions() > confirmed, "tracking on the new server", 10)
            assert l1.usable and l1.peek(KEY) is None
            writer = redis.Redis.from_url(url, socket_timeout=5)
            await stored(writer)
            fill(l1)
            writer.delete(KEY)
            await until(lambda: l1.get(KEY) is None, "the key evicted after the restart")
        finally:
            await tracker.stop()

    run(scenario())
