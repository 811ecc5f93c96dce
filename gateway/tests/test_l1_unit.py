"""The L1 tier and its rules without services: bounds, TTL, the fill token,
the keys a forwarded write evicts, the settings and the contract."""

from __future__ import annotations

import dataclasses
import json

import pytest
from aside_gateway.config.settings import ConfigError, load_settings
from aside_gateway.contracts import cache_keys
from aside_gateway.tiers.invalidations import parse
from aside_gateway.tiers.l1 import ENTRY_OVERHEAD_BYTES, L1Cache, entry_size, stripe_of
from aside_gateway.tiers.l2 import BYPASS, HIT, MISS, CacheRead
from aside_gateway.tiers.strategies import TieredCache, written_keys
from gateway_helpers import contract

CACHE = contract("cache.json")
BASE_ENV = {
    "DATABASE_URL": "postgresql://aside@127.0.0.1:1/aside",
    "REDIS_URL": "redis://127.0.0.1:1/0",
    "CORE_URL": "http://127.0.0.1:1",
    "ASIDE_PROFILE": "lab",
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_l1(
    max_entries: int = 100, max_bytes: int = 1 << 20, ttl_s: float = 5, clock: Clock | None = None
) -> L1Cache:
    return L1Cache(max_entries, max_bytes, ttl_s, needs_subscription=False, timer=clock or Clock())


def test_contract_tiers_match_the_constants():
    tiers = CACHE["tiers"]
    assert tuple(tiers["strategies"]) == cache_keys.STRATEGIES
    assert tiers["default_strategy"] == cache_keys.DEFAULT_STRATEGY
    assert tiers["l1_ttl_seconds_default"] == cache_keys.L1_TTL_SECONDS_DEFAULT
    assert tiers["invalidation_channel"] == cache_keys.INVALIDATION_CHANNEL
    assert tiers["tracking_channel"] == cache_keys.TRACKING_CHANNEL
    assert tuple(tiers["tracking_prefixes"]) == cache_keys.TRACKING_PREFIXES
    assert parse(str.encode(__import__("json").dumps(tiers["invalidation_message"]))) == (
        tiers["invalidation_message"]["keys"],
        tiers["invalidation_message"]["published_ms"],
    )
    assert parse(str.encode(__import__("json").dumps(tiers["flush_message"]))) == (
        None,
        tiers["flush_message"]["published_ms"],
    )


@pytest.mark.parametrize("case", CACHE["invalidation"], ids=lambda c: c["name"])
def test_stale_key_rules_match_the_contract(case):
    before, after = case["before"], case["after"]
    if case["write"] == "create":
        keys = cache_keys.stale_after_create(after["id"], after["email"])
    elif case["write"] == "update":
        keys = cache_keys.stale_after_update(after["id"], before["email"], after["email"])
    else:
        keys = cache_keys.stale_after_delete(before["id"], before["email"])
    assert sorted(keys) == sorted(case["keys"])


def test_get_put_and_ttl_expiry():
    clock = Clock()
    l1 = make_l1(ttl_s=5, clock=clock)
    assert l1.put("k", b"v", l1.token("k"))
    assert l1.get("k") == b"v"
    clock.now += 4.9
    assert l1.get("k") == b"v"
    clock.now += 0.2
    assert l1.get("k") is None
    assert l1.stats() == (0, 0)


def test_entry_bound_evicts_the_least_recently_used():
    l1 = make_l1(max_entries=3)
    for key in ("a", "b", "c"):
        assert l1.put(key, b"1", l1.token(key))
    assert l1.get("a") == b"1"  # a is now the most recent
    assert l1.put("d", b"1", l1.token("d"))
    assert l1.stats()[0] == 3
    assert l1.get("b") is None
    assert [l1.get(k) for k in ("a", "c", "d")] == [b"1", b"1", b"1"]


def test_byte_bound_counts_keys_values_and_overhead():
    value = b"x" * 100
    size = entry_size("key-0", value)
    assert size == 5 + 100 + ENTRY_OVERHEAD_BYTES
    l1 = make_l1(max_entries=1000, max_bytes=3 * size)
    for i in range(5):
        assert l1.put(f"key-{i}", value, l1.token(f"key-{i}"))
    entries, used = l1.stats()
    assert entries == 3 and used == 3 * size
    assert l1.get("key-0") is None and l1.get("key-4") == value
    # An entry larger than the whole bound is refused, not stored.
    assert not l1.put("huge", b"x" * (4 * size), l1.token("huge"))
    assert l1.get("huge") is None


def test_a_fill_that_overlaps_an_invalidation_stores_nothing():
    l1 = make_l1()
    database = {"k": b"old"}

    def fill(key: str, during_read=lambda: None) -> bool:
        token = l1.token(key)  # before the read, as tiers/strategies.py does
        value = database[key]
        during_read()
        return l1.put(key, value, token)

    def writer_commits_and_message_arrives() -> None:
        database["k"] = b"new"
        l1.evict(["k"])

    assert not fill("k", writer_commits_and_message_arrives)
    assert l1.get("k") is None  # the old read was not kept
    assert fill("k")
    assert l1.get("k") == b"new"


def test_an_invalidation_blocks_the_fills_of_its_keys_stripe_only():
    l1 = make_l1()
    other = next(f"other-{i}" for i in range(100) if stripe_of(f"other-{i}") != stripe_of("k"))
    token = l1.token("k")
    l1.evict([other])  # another stripe: the fill of k goes on
    assert l1.put("k", b"v", token)
    token = l1.token("k")
    l1.evict(["k"])
    assert not l1.put("k", b"v2", token)
    token = l1.token("k")
    l1.flush(usable=True)  # a flush blocks every fill in flight
    assert not l1.put("k", b"v3", token)


def test_no_entry_is_served_or_stored_without_a_subscription():
    l1 = L1Cache(100, 1 << 20, 5, needs_subscription=True)
    assert not l1.put("k", b"v", l1.token("k"))
    l1.flush(usable=True)  # subscribed
    assert l1.put("k", b"v", l1.token("k"))
    token = l1.token("k")
    l1.flush(usable=False)  # subscription lost
    assert l1.get("k") is None and l1.stats()[0] == 0
    assert not l1.put("k", b"v", token)
    assert l1.peek("k") is None


def test_written_keys_from_the_core_answer_and_the_cached_user():
    user = b'{"id":7,"username":"u","email":"new@example.com","created_at":"x"}'
    cached = b'{"id":7,"username":"u","email":"old@example.com","created_at":"x"}'
    assert sorted(written_keys("POST", None, user, None)) == sorted(
        [cache_keys.user_key(7), cache_keys.count_key("new@example.com")]
    )
    assert sorted(written_keys("PATCH", 7, user, cached)) == sorted(
        cache_keys.stale_after_update(7, "old@example.com", "new@example.com")
    )
    assert written_keys("PATCH", 7, user, None) == cache_keys.stale_after_update(
        7, "new@example.com", "new@example.com"
    )
    assert sorted(written_keys("DELETE", 7, b"", cached)) == sorted(
        cache_keys.stale_after_delete(7, "old@example.com")
    )
    assert written_keys("DELETE", 7, b"", None) == [cache_keys.user_key(7)]
    assert written_keys("POST", None, b"not json", None) == []


def test_tier_settings_defaults_and_errors():
    settings = load_settings(BASE_ENV)
    assert settings.cache_strategy == "l2" and settings.cache_l1_ttl_seconds == 30
    assert settings.cache_l1_invalidation
    for env, variable in [
        ({"CACHE_STRATEGY": "memory"}, "CACHE_STRATEGY"),
        ({"CACHE_L1_TTL_SECONDS": "0"}, "CACHE_L1_TTL_SECONDS"),
        ({"CACHE_L1_MAX_ENTRIES": "x"}, "CACHE_L1_MAX_ENTRIES"),
        ({"CACHE_L1_MAX_BYTES": "10"}, "CACHE_L1_MAX_BYTES"),
        ({"CACHE_L1_INVALIDATION": "no"}, "CACHE_L1_INVALIDATION"),
        (
            {
                "CACHE_L1_INVALIDATION": "off",
                "ASIDE_PROFILE": "production",
                "WRITE_TOKEN": "t" * 20,
            },
            "CACHE_L1_INVALIDATION",
        ),
    ]:
        with pytest.raises(ConfigError) as raised:
            load_settings({**BASE_ENV, **env})
        message = str(raised.value)
        assert variable in message and "\n" not in message
    assert not load_settings({**BASE_ENV, "CACHE_L1_INVALIDATION": "off"}).cache_l1_invalidation


@pytest.mark.parametrize(
    "data", [b"not json", b"{}", b'{"keys": "k"}', b'{"keys": [1]}', b"[]", b'{"flush": 1}']
)
def test_unreadable_messages_are_refused(data):
    with pytest.raises((ValueError, KeyError, TypeError)):
        parse(data)


def test_the_publish_time_is_taken_in_microseconds_when_given():
    # The truncated ms alone would add up to 1 ms to every lag.
    assert parse(b'{"keys": ["k"], "published_ms": 1000, "published_us": 1000999}') == (
        ["k"],
        pytest.approx(1000.999),
    )
    assert parse(b'{"keys": ["k"], "published_ms": 1000}') == (["k"], 1000)
    assert parse(b'{"keys": ["k"], "published_ms": 5, "published_us": true}') == (["k"], 5)
    assert parse(b'{"keys": ["k"], "published_ms": "x"}') == (["k"], None)


# ---- the tracking strategy's own L1 (strategies.TieredCache) ----------------------------


class ScriptedL2:
    """Stands in for l2.Cache's read_through: answers what the test scripted."""

    def __init__(self, read: CacheRead):
        self.read = read

    def read_through(self, route, key, load, hold=None, early_get=None) -> CacheRead:
        return dataclasses.replace(self.read)


@pytest.mark.parametrize(
    ("read", "kept"),
    [
        (CacheRead(b"3", HIT, in_redis=True), True),  # a Redis GET
        (CacheRead(b"3", MISS, in_redis=True), True),  # stored under a held lease
        (CacheRead(b"3", MISS), False),  # the lease was lost: Redis never held it
        (CacheRead(b"3", BYPASS, True), False),
    ],
)
def test_the_tracking_l1_keeps_only_what_redis_held(read, kept):
    channel, tracked = make_l1(), make_l1()
    tiers = TieredCache(channel, ScriptedL2(read), tracked=tracked)  # type: ignore[arg-type]
    key = cache_keys.count_key("t@example.com")
    result = tiers.read_through("count", key, lambda: b"3", cache_keys.STRATEGY_TRACKING)
    assert result.value == b"3"
    assert (tracked.peek(key) is not None) == kept
    assert channel.peek(key) is None  # the channel's L1 is another strategy's


def test_hybrid_keeps_a_fill_redis_did_not_store_and_writes_evict_both():
    channel, tracked = make_l1(), make_l1()
    tiers = TieredCache(channel, ScriptedL2(CacheRead(b"3", MISS)), tracked=tracked)  # type: ignore[arg-type]
    key = cache_keys.count_key("t@example.com")
    tiers.read_through("count", key, lambda: b"3", cache_keys.STRATEGY_HYBRID)
    assert channel.peek(key) == b"3" and tracked.peek(key) is None
    assert tracked.put(key, b"3", tracked.token(key))
    body = json.dumps({"id": 5, "email": "t@example.com"}).encode()
    tiers.after_write("POST", None, 201, body, None)
    assert channel.peek(key) is None and tracked.peek(key) is None


def test_without_its_l1_the_tracking_strategy_reads_redis_only():
    tiers = TieredCache(make_l1(), ScriptedL2(CacheRead(b"3", HIT, in_redis=True)))  # type: ignore[arg-type]
    assert tiers.l1_of(cache_keys.STRATEGY_TRACKING) is None
    result = tiers.read_through("count", "k", lambda: b"3", cache_keys.STRATEGY_TRACKING)
    assert result.tier == "l2"


def test_hybrid_keeps_a_redis_read_in_l1_only_until_the_values_expiry():
    clock = Clock()
    l1 = make_l1(ttl_s=30, clock=clock)
    read = CacheRead(b"3", HIT, in_redis=True, life_ms=2_000)
    tiers = TieredCache(l1, ScriptedL2(read))  # type: ignore[arg-type]
    key = cache_keys.count_key("t@example.com")
    tiers.read_through("count", key, lambda: b"3", cache_keys.STRATEGY_HYBRID)
    assert l1.get(key) == b"3"
    clock.now += 2.001
    assert l1.get(key) is None
