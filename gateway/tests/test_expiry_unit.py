"""Expiry handling without services (tiers/expiry.py): the contract's modes and
envelope, the settings, the stored form and TTL of each mode, XFetch's decision
with a seeded draw, the stale bound, values read under another mode than
the one that wrote them, and the L1 tier's jittered lifetimes."""

from __future__ import annotations

import asyncio
import math
import random

import pytest
from aside_gateway.config.settings import ConfigError, load_settings
from aside_gateway.contracts import cache_keys
from aside_gateway.contracts.routes import COUNT_ROUTE
from aside_gateway.front.lookup import Lookup
from aside_gateway.front.refresh_behind import RefreshBehind
from aside_gateway.misses.coalesce import LoopFlights
from aside_gateway.tiers import expiry
from aside_gateway.tiers.expiry import ExpiryPolicy, jittered, xfetch
from aside_gateway.tiers.l1 import L1Cache
from aside_gateway.tiers.l2 import Cache
from gateway_helpers import contract

CACHE = contract("cache.json")
BASE_ENV = {
    "DATABASE_URL": "postgresql://aside@127.0.0.1:1/aside",
    "REDIS_URL": "redis://127.0.0.1:1/0",
    "CORE_URL": "http://127.0.0.1:1",
    "ASIDE_PROFILE": "lab",
}
NOW = 1_700_000_000_000


def policy(mode: str, seed: int = 1, **kwargs: float) -> ExpiryPolicy:
    return ExpiryPolicy(mode, draw=random.Random(seed).random, **kwargs)  # type: ignore[arg-type]


def test_contract_expiry_matches_the_constants():
    section = CACHE["expiry"]
    assert tuple(section["modes_order"]) == cache_keys.EXPIRY_MODES
    assert tuple(section["modes"]) == cache_keys.EXPIRY_MODES
    assert section["default_mode"] == cache_keys.DEFAULT_EXPIRY
    assert section["jitter_default"] == cache_keys.EXPIRY_JITTER_DEFAULT
    assert section["early_beta_default"] == cache_keys.EXPIRY_EARLY_BETA_DEFAULT
    assert section["stale_max_seconds_default"] == cache_keys.EXPIRY_STALE_MAX_SECONDS_DEFAULT
    assert section["envelope_magic"].encode() == cache_keys.ENVELOPE_MAGIC


@pytest.mark.parametrize("case", CACHE["expiry"]["envelope"], ids=lambda c: c["stored"][:24])
def test_envelope_vectors(case):
    stored = case["stored"].encode()
    assert cache_keys.wrap(case["value"].encode(), case["expires_ms"], case["delta_ms"]) == stored
    assert cache_keys.unwrap(stored) == cache_keys.Envelope(
        case["value"].encode(), case["expires_ms"], case["delta_ms"]
    )


def test_no_bare_value_is_taken_for_an_envelope():
    bare = [b"0", b"42", b"null", b'{"id":1}', cache_keys.TOO_LARGE]
    bare += [magic + b"frame" for magic in cache_keys.CODEC_MAGIC.values()]
    for value in bare:
        assert cache_keys.unwrap(value) is None
    # Begins like one but does not parse: expired at once (a miss), never served.
    assert cache_keys.unwrap(b"~x1:soon:3:42") == cache_keys.Envelope(b"", 0, 0)


def test_settings_defaults_and_values():
    settings = load_settings(BASE_ENV)
    assert settings.cache_expiry == cache_keys.DEFAULT_EXPIRY == "swr"
    assert settings.cache_expiry_jitter == 0.1
    assert settings.cache_expiry_early_beta == 1.0
    assert settings.cache_expiry_stale_max_seconds == 10
    env = {
        **BASE_ENV,
        "CACHE_EXPIRY": "jitter",
        "CACHE_EXPIRY_JITTER": "0.25",
        "CACHE_EXPIRY_EARLY_BETA": "2.5",
        "CACHE_EXPIRY_STALE_MAX_SECONDS": "3",
    }
    settings = load_settings(env)
    assert (settings.cache_expiry, settings.cache_expiry_jitter) == ("jitter", 0.25)
    assert (settings.cache_expiry_early_beta, settings.cache_expiry_stale_max_seconds) == (2.5, 3)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CACHE_EXPIRY", "stale"),
        ("CACHE_EXPIRY_JITTER", "0.95"),
        ("CACHE_EXPIRY_JITTER", "-0.1"),
        ("CACHE_EXPIRY_JITTER", "1e-1"),
        ("CACHE_EXPIRY_EARLY_BETA", "nan"),
        ("CACHE_EXPIRY_EARLY_BETA", "101"),
        ("CACHE_EXPIRY_STALE_MAX_SECONDS", "0"),
        ("CACHE_EXPIRY_REFRESH_GATHER_MS", "5001"),
        ("CACHE_EXPIRY_REFRESH_DUTY_PERCENT", "0"),
        ("CACHE_EXPIRY_REFRESH_DUTY_PERCENT", "half"),
    ],
)
def test_a_wrong_expiry_setting_names_its_variable(name, value):
    with pytest.raises(ConfigError) as raised:
        load_settings({**BASE_ENV, name: value})
    message = str(raised.value)
    assert message.startswith(name) and "\n" not in message


def test_plain_stores_the_value_for_the_ttl():
    stored = policy("plain", ttl_s=60).stored(b"42", 3.0, NOW)
    assert (stored.data, stored.ttl_ms, stored.ttl_s) == (b"42", 60_000, 60)


def test_jitter_draws_each_ttl_within_the_documented_range():
    p = policy("jitter", ttl_s=60, jitter=0.2)
    ttls = [p.stored(b"42", 3.0, NOW).ttl_ms for _ in range(2000)]
    assert min(ttls) >= 48_000 and max(ttls) <= 60_000
    # Spread over the range, not bunched: each fifth of it holds some.
    fifths = {min((t - 48_000) * 5 // 12_000, 4) for t in ttls}
    assert fifths == {0, 1, 2, 3, 4}
    assert p.stored(b"42", 3.0, NOW).data == b"42"  # stored bare
    assert jittered(60_000, 0.2, 0.0) == 60_000
    assert jittered(60_000, 0.2, 0.999999) == 48_000


def test_early_and_swr_store_an_envelope_with_the_measured_delta():
    early = policy("early", ttl_s=60).stored(b"42", 12.4, NOW)
    assert early.data == cache_keys.wrap(b"42", NOW + 60_000, 12)
    assert early.ttl_ms == 60_000
    swr = policy("swr", ttl_s=60, stale_max_s=10, jitter=0.0).stored(b"42", 0.2, NOW)
    assert swr.data == cache_keys.wrap(b"42", NOW + 60_000, 0)
    assert swr.ttl_ms == 70_000  # the logical TTL plus the stale bound


def test_swr_spreads_its_logical_expiries_as_jitter_spreads_ttls():
    p = policy("swr", ttl_s=60, stale_max_s=10, jitter=0.2)
    expiries = []
    for _ in range(500):
        stored = p.stored(b"42", 0.2, NOW)
        envelope = cache_keys.unwrap(stored.data)
        assert envelope is not None
        assert stored.ttl_ms == envelope.expires_ms - NOW + 10_000  # the bound after each
        expiries.append(envelope.expires_ms - NOW)
    assert min(expiries) >= 48_000 and max(expiries) <= 60_000
    assert max(expiries) - min(expiries) > 10_000  # spread, not all at the TTL


def test_xfetch_is_the_papers_test():
    # now - delta * beta * ln(u) >= expiry
    assert xfetch(900, 1000, 100, 1.0, math.exp(-1.0))  # 900 + 100 * 1 = 1000
    assert not xfetch(899, 1000, 100, 1.0, math.exp(-1.0))
    assert xfetch(1000, 1000, 0, 1.0, 0.5)  # at the expiry: always
    assert not xfetch(999, 1000, 0, 1.0, 1e-9)  # no cost measured: never early
    assert xfetch(500, 1000, 100, 1.0, 0.0)  # a draw of 0 is ln(0): always


def early_share(remaining_ms: int, delta_ms: int, beta: float, reads: int = 4000) -> float:
    p = policy("early", seed=7, beta=beta)
    stored = cache_keys.wrap(b"42", NOW + remaining_ms, delta_ms)
    states = [p.judge(stored, NOW).state for _ in range(reads)]
    assert set(states) <= {expiry.FRESH, expiry.REFRESH}
    return states.count(expiry.REFRESH) / reads


def test_early_refresh_probability_grows_as_expiry_nears():
    # P(refresh) = exp(-remaining / (delta * beta)).
    shares = [early_share(remaining, 100, 1.0) for remaining in (1000, 300, 100, 30, 1)]
    assert shares == sorted(shares)
    for remaining, share in zip((1000, 300, 100, 30), shares, strict=False):
        assert abs(share - math.exp(-remaining / 100)) < 0.03
    assert shares[-1] > 0.97
    # Scaled by the recomputation's cost and by beta.
    assert early_share(300, 300, 1.0) > early_share(300, 100, 1.0)
    assert early_share(300, 100, 3.0) > early_share(300, 100, 1.0)


def test_only_early_draws_and_a_judged_read_does_not_draw_again():
    stored = cache_keys.wrap(b"42", NOW + 1, 1000)  # all but certain to refresh
    assert policy("early").judge(stored, NOW).state == expiry.REFRESH
    assert policy("early").judge(stored, NOW, roll=False).state == expiry.FRESH
    for mode in ("plain", "jitter", "swr"):
        assert policy(mode).judge(stored, NOW) == expiry.Judged(b"42", expiry.FRESH, life_ms=1)


def test_a_value_in_an_envelope_says_how_long_it_has_left_a_bare_one_does_not():
    for mode in ("early", "swr"):
        stored = policy(mode, ttl_s=60, jitter=0.0).stored(b"42", 0.0, NOW)
        assert stored.life_ms == 60_000
        assert policy(mode).judge(stored.data, NOW + 45_000, roll=False).life_ms == 15_000
    for mode in ("plain", "jitter"):
        stored = policy(mode, ttl_s=60).stored(b"42", 0.0, NOW)
        assert stored.life_ms is None
        assert policy(mode).judge(stored.data, NOW).life_ms is None
    stale = policy("swr").judge(cache_keys.wrap(b"42", NOW, 0), NOW + 1)
    assert (stale.state, stale.life_ms) == (expiry.STALE, None)


def test_a_reader_that_leaves_the_refresh_to_another_keeps_the_values_life():
    """early's readers that do not take the lease answer the value: an L1 tier
    must keep it no longer than its expiry, as any other hit."""
    meanwhile = Cache._meanwhile(expiry.Judged(b"42", expiry.REFRESH, life_ms=500))
    assert (meanwhile.outcome, meanwhile.life_ms) == (cache_keys.HIT, 500)
    stale = Cache._meanwhile(expiry.Judged(b"42", expiry.STALE, age_ms=700))
    assert (stale.outcome, stale.stale_ms, stale.life_ms) == (cache_keys.STALE, 700, None)


def test_swr_serves_stale_only_within_its_bound():
    p = policy("swr", stale_max_s=10)
    stored = cache_keys.wrap(b"42", NOW, 3)
    assert p.judge(stored, NOW - 1).state == expiry.FRESH
    assert p.judge(stored, NOW) == expiry.Judged(b"42", expiry.STALE, 0)
    assert p.judge(stored, NOW + 10_000) == expiry.Judged(b"42", expiry.STALE, 10_000)
    assert p.judge(stored, NOW + 10_001).state == expiry.EXPIRED


@pytest.mark.parametrize("writer", cache_keys.EXPIRY_MODES)
@pytest.mark.parametrize("reader", cache_keys.EXPIRY_MODES)
def test_a_value_written_under_one_mode_is_read_safely_under_another(writer, reader):
    """Before its logical expiry every mode answers the value; after it only swr
    may answer it (stale, within its own bound); a bare value is fresh (Redis
    ends it)."""
    stored = policy(writer, ttl_s=60, stale_max_s=30, jitter=0.0).stored(b"42", 0.0, NOW).data
    read = policy(reader, stale_max_s=10)
    life = None if cache_keys.unwrap(stored) is None else 59_000
    assert read.judge(stored, NOW + 1_000, roll=False) == expiry.Judged(
        b"42", expiry.FRESH, life_ms=life
    )
    after = read.judge(stored, NOW + 60_000 + 5_000)
    beyond = read.judge(stored, NOW + 60_000 + 20_000)
    if cache_keys.unwrap(stored) is None:
        assert after.state == beyond.state == expiry.FRESH
    elif reader == "swr":
        assert (after.state, after.age_ms) == (expiry.STALE, 5_000)
        assert beyond.state == expiry.EXPIRED  # the reader's bound, not the writer's
    else:
        assert after.state == beyond.state == expiry.EXPIRED


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_l1_jitter_spreads_lifetimes_within_the_range():
    clock = Clock()
    l1 = L1Cache(1000, 1 << 22, 10, False, timer=clock, jitter=0.5, draw=random.Random(3).random)
    keys = [f"k{i}" for i in range(200)]
    for key in keys:
        assert l1.put(key, b"1", l1.token(key))
    alive = []
    for step in range(11):
        clock.now = 1000.0 + step
        alive.append(sum(l1.get(key) is not None for key in keys))
    assert alive[4] == 200  # nothing ends before ttl * (1 - jitter)
    assert 0 < alive[7] < 200  # some end between
    assert alive[10] == 0  # everything by the ttl
    assert alive == sorted(alive, reverse=True)


def test_l1_without_jitter_ends_every_entry_together():
    clock = Clock()
    l1 = L1Cache(1000, 1 << 22, 10, False, timer=clock)
    for key in ("a", "b", "c"):
        l1.put(key, b"1", l1.token(key))
    clock.now += 9.999
    assert all(l1.get(key) for key in ("a", "b", "c"))
    clock.now += 0.002
    assert not any(l1.get(key) for key in ("a", "b", "c"))


def test_an_l1_entry_lives_no_longer_than_its_values_own_expiry():
    """A value read 1.5 s before its expiry (early, swr) leaves L1 then, whatever
    the tier's TTL; a longer life than the TTL does not extend it."""
    for jitter in (0.0, 0.5):
        clock = Clock()
        l1 = L1Cache(1000, 1 << 22, 10, False, timer=clock, jitter=jitter)
        assert l1.put("short", b"1", l1.token("short"), life_ms=1_500)
        assert l1.put("long", b"1", l1.token("long"), life_ms=60_000)
        assert l1.put("over", b"1", l1.token("over"), life_ms=-5)  # read past it: not kept
        assert l1.get("over") is None
        clock.now += 1.499
        assert l1.get("short") == b"1"
        clock.now += 0.002
        assert l1.get("short") is None and l1.get("long") == b"1"
        clock.now = 1000.0 + 10.001
        assert l1.get("long") is None


# ---- swr's refreshes behind the answer, gathered on the loop (front/refresh_behind.py) ---


def stale_read(email: str) -> tuple[Lookup, bytes]:
    return Lookup(COUNT_ROUTE, cache_keys.count_key(email), "l2", email), b"~x1:1:0:7"


class FakeRefresh:
    """Records each batch handed to the refresh thread; fails if told to."""

    def __init__(self, fail: bool = False):
        self.batches: list[list[str]] = []
        self.fail = fail

    def __call__(self, route: str, reads: list[tuple[Lookup, bytes]]) -> list[bool]:
        self.batches.append([lookup.email or "" for lookup, _ in reads])
        if self.fail:
            raise RuntimeError("refresh failed")
        return [True] * len(reads)


async def refresh_reads(
    behind: RefreshBehind, emails: list[str], flights: LoopFlights | None = None
) -> LoopFlights:
    """Start a refresh of each email as stale reads do, and wait until all landed."""
    flights = flights or LoopFlights()
    for email in emails:
        found, seen = stale_read(email)
        if not flights.busy((found.key, "l2")):
            behind.start(flights, (found.key, "l2"), found, seen)
    for email in emails:
        assert await flights.follow((cache_keys.count_key(email), "l2"), 10)
    return flights


def test_refreshes_started_within_the_gathering_share_one_batch():
    refresh = FakeRefresh()

    async def run() -> None:
        behind = RefreshBehind(refresh, gather_s=0.2, limit=100)
        flights = LoopFlights()
        found, seen = stale_read("a@x.io")
        behind.start(flights, (found.key, "l2"), found, seen)
        await asyncio.sleep(0.05)  # within the gathering: the behaviour under test
        await refresh_reads(behind, ["b@x.io", "c@x.io"], flights)
        assert len(flights) == 0
        await behind.close()

    asyncio.run(run())
    assert refresh.batches == [["a@x.io", "b@x.io", "c@x.io"]]


def test_refreshes_after_the_gathering_form_a_batch_of_their_own():
    refresh = FakeRefresh()

    async def run() -> None:
        behind = RefreshBehind(refresh, gather_s=0.0, limit=100)
        await refresh_reads(behind, ["a@x.io"])
        await refresh_reads(behind, ["b@x.io"])
        await behind.close()

    asyncio.run(run())
    assert refresh.batches == [["a@x.io"], ["b@x.io"]]


def test_a_full_bound_of_keys_is_sent_at_once_and_more_are_skipped():
    refresh = FakeRefresh()

    async def run() -> None:
        behind = RefreshBehind(refresh, gather_s=30.0, limit=2)
        flights = LoopFlights()
        for email in ("a@x.io", "b@x.io", "c@x.io"):
            found, seen = stale_read(email)
            behind.start(flights, (found.key, "l2"), found, seen)
        assert not flights.busy((cache_keys.count_key("c@x.io"), "l2"))  # skipped
        async with asyncio.timeout(10):  # far from the 30 s of gathering
            await refresh_reads(behind, ["a@x.io", "b@x.io"], flights)
        await behind.close()

    asyncio.run(run())
    assert refresh.batches == [["a@x.io", "b@x.io"]]


def test_a_refresh_that_fails_lands_its_flights_and_frees_its_bound():
    refresh = FakeRefresh(fail=True)

    async def run() -> None:
        behind = RefreshBehind(refresh, gather_s=0.0, limit=1)
        flights = await refresh_reads(behind, ["a@x.io"])
        assert len(flights) == 0 and behind.waiting == 0
        await refresh_reads(behind, ["a@x.io"], flights)  # the next read tries again
        await behind.close()

    asyncio.run(run())
    assert refresh.batches == [["a@x.io"], ["a@x.io"]]
