"""Expiry handling (CACHE_EXPIRY, tiers/expiry.py) through real gunicorn
gateways, Redis, PostgreSQL and the core: jitter's spread of TTLs, early
refresh before the expiry, swr's stale answers within their bound with one
refresh, values read under another mode than the one that wrote them, and
values invalidated by a write never answered, stale or not, in any mode.

Values about to expire are written straight into Redis in the contract's
envelope (cache.json `expiry`), so no test waits out a TTL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
import pytest
import redis
import requests
from aside_gateway.backends.breaker import CircuitBreaker
from aside_gateway.config.settings import load_settings
from aside_gateway.contracts import cache_keys
from aside_gateway.contracts.routes import EarlyGet
from aside_gateway.tiers import l2
from gateway_helpers import (
    Proc,
    cached,
    reads_waiting_on_a_lock,
    release,
    sample,
    scrape,
    start_held,
    unique_email,
    unique_username,
    wait_until,
)

COUNT = "/api/v1/users/count"
COUNT_ROUTE = "/api/v1/users/count"
TTL_S = 100
JITTER = 0.5
STALE_MAX_S = 5
OLD = 7  # a count no test email has: an answer of OLD is the value written here
DEADLINE_S = 10


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def count(
    base: str, email: str, headers: dict[str, str] | None = None, timeout_s: float = 10
) -> requests.Response:
    response = requests.get(
        base + COUNT, params={"email": email}, headers=headers, timeout=timeout_s
    )
    assert response.status_code == 200, response.text
    return response


def answered(response: requests.Response) -> tuple[int, str]:
    return response.json()["count"], response.headers["X-Cache"]


def put(rdb: redis.Redis, email: str, value: int, expires_ms: int, ttl_ms: int, delta_ms: int = 1):
    """Store `value` for `email` as an early/swr gateway would, expiring at `expires_ms`."""
    data = cache_keys.wrap(str(value).encode(), expires_ms, delta_ms)
    rdb.set(cache_keys.count_key(email), data, px=ttl_ms)


def db_reads(base: str) -> float:
    """The count queries the gateway sent PostgreSQL (single and batched)."""
    samples = scrape(base)
    return sum(
        sample(samples, "aside_gateway_db_queries_total", query=q)
        for q in ("count_by_email", "count_batch")
    )


def metric(base: str, name: str) -> float:
    return sample(scrape(base), name, route=COUNT_ROUTE)


def core_create(core: Proc, email: str) -> None:
    body = {"username": unique_username(), "email": email}
    response = requests.post(core.url + "/api/v1/users", json=body, timeout=10)
    assert response.status_code == 201, response.text


@pytest.fixture(scope="module")
def gateways(start_gateway: Callable[..., Proc]) -> dict[str, Proc]:
    common = {"CACHE_TTL_SECONDS": str(TTL_S), "GATEWAY_WORKERS": "2"}
    return {
        "plain": start_gateway(CACHE_EXPIRY="plain", **common),
        "jitter": start_gateway(CACHE_EXPIRY="jitter", CACHE_EXPIRY_JITTER=str(JITTER), **common),
        "early": start_gateway(CACHE_EXPIRY="early", CACHE_EXPIRY_EARLY_BETA="1", **common),
        "swr": start_gateway(
            CACHE_EXPIRY="swr", CACHE_EXPIRY_STALE_MAX_SECONDS=str(STALE_MAX_S), **common
        ),
    }


# ---- jitter --------------------------------------------------------------------------


def filled_pttls(base: str, rdb: redis.Redis, n: int) -> list[int]:
    emails = [unique_email("jit") for _ in range(n)]
    for email in emails:
        assert answered(count(base, email)) == (0, "MISS")
    for email in emails:
        assert rdb.get(cache_keys.count_key(email)) == b"0"  # stored bare
    return [rdb.pttl(cache_keys.count_key(email)) for email in emails]


def test_jitter_spreads_ttls_within_the_documented_range(gateways, rdb):
    ttls = filled_pttls(gateways["jitter"].url, rdb, 40)
    low, high = TTL_S * 1000 * (1 - JITTER), TTL_S * 1000
    margin = 5000  # the time the fills and PTTLs took
    assert all(low - margin <= ttl <= high for ttl in ttls), ttls
    assert max(ttls) - min(ttls) > 0.3 * (high - low), ttls


def test_plain_keys_filled_together_end_together(gateways, rdb):
    ttls = filled_pttls(gateways["plain"].url, rdb, 20)
    assert all(TTL_S * 1000 - 5000 <= ttl <= TTL_S * 1000 for ttl in ttls), ttls


# ---- early ---------------------------------------------------------------------------


def test_early_refreshes_once_before_the_key_expires(gateways, rdb):
    base = gateways["early"].url
    email = unique_email("early")
    expires = now_ms() + 3000
    put(rdb, email, OLD, expires, 3000, delta_ms=1000)
    early, queries = metric(base, "aside_cache_early_refresh_total"), db_reads(base)
    seen = []

    def refreshed() -> bool:
        seen.append((answered(count(base, email)), now_ms()))
        return seen[-1][0][0] == 0

    wait_until(refreshed, DEADLINE_S, "an early refresh", step_s=0.02)
    (_, outcome), at = seen[-1]
    assert at < expires, "refreshed only once the value had expired"
    assert outcome == "MISS"  # the reader that refreshed read PostgreSQL
    assert all(answer == (OLD, "HIT") for answer, _ in seen[:-1])  # the others kept the value
    envelope = cache_keys.unwrap(rdb.get(cache_keys.count_key(email)))
    assert envelope is not None and envelope.value == b"0"
    assert envelope.expires_ms >= expires - 3000 + TTL_S * 1000 - 5000
    assert metric(base, "aside_cache_early_refresh_total") == early + 1
    assert db_reads(base) == queries + 1


def test_early_stores_the_measured_recomputation_time(gateways, rdb, database_url):
    """delta is measured around the load: a count that waited 300 ms on a lock says so."""
    base = gateways["early"].url
    email = unique_email("delta")
    with (
        psycopg.connect(database_url, autocommit=True) as watcher,
        psycopg.connect(database_url) as locker,
    ):
        locker.execute("LOCK TABLE users IN ACCESS EXCLUSIVE MODE")
        result: list[requests.Response] = []
        reader = threading.Thread(target=lambda: result.append(count(base, email)))
        reader.start()
        wait_until(lambda: reads_waiting_on_a_lock(watcher) > 0, DEADLINE_S, "a read on the lock")
        time.sleep(0.3)  # the recomputation's cost, not a synchronisation
        locker.rollback()
        reader.join(DEADLINE_S)
    assert answered(result[0]) == (0, "MISS")
    envelope = cache_keys.unwrap(rdb.get(cache_keys.count_key(email)))
    assert envelope is not None and 300 <= envelope.delta_ms < 10_000


# ---- swr -----------------------------------------------------------------------------


def test_swr_answers_stale_while_one_reader_refreshes(gateways, rdb):
    base = gateways["swr"].url
    email = unique_email("swr")
    put(rdb, email, OLD, now_ms() - 100, STALE_MAX_S * 1000)
    served, queries = metric(base, "aside_cache_stale_served_total"), db_reads(base)
    hold = "swr-" + email.split("@")[0]
    holder = start_held(base, email, hold, rdb)  # took the lease, read PostgreSQL, held
    try:
        answers = [count(base, email) for _ in range(20)]  # fresh connections: both workers
    finally:
        release(rdb, hold)
    for response in answers:
        assert answered(response) == (OLD, "STALE")
        assert 100 <= int(response.headers["X-Cache-Stale-Ms"]) <= STALE_MAX_S * 1000
    assert answered(holder.result()) == (0, "MISS")
    assert answered(count(base, email)) == (0, "HIT")
    assert db_reads(base) == queries + 1  # only the lease holder's
    assert metric(base, "aside_cache_stale_served_total") == served + 20
    largest = metric(base, "aside_cache_stale_age_max_seconds")
    assert 0.1 <= largest <= STALE_MAX_S


def test_swr_concurrent_reads_after_expiry_cost_one_query(gateways, rdb):
    base = gateways["swr"].url
    email = unique_email("swrc")
    put(rdb, email, OLD, now_ms() - 50, STALE_MAX_S * 1000)
    queries = db_reads(base)
    answers: list[tuple[int, str]] = []
    threads = [
        threading.Thread(target=lambda: answers.append(answered(count(base, email))))
        for _ in range(24)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE_S)
    assert len(answers) == 24
    assert set(answers) <= {(OLD, "STALE"), (0, "MISS"), (0, "HIT")}, answers
    # The refresh may still run behind the answers: wait for it to land.
    wait_until(lambda: answered(count(base, email)) == (0, "HIT"), DEADLINE_S, "the refresh")
    assert db_reads(base) == queries + 1


def test_swr_answers_at_once_while_the_refresh_waits_behind_it(gateways, rdb, database_url):
    """The refresh runs behind the stale answer (front/refresh_behind.py): with
    PostgreSQL locked, reads of an expired key are answered stale at once, one
    refresh waits on the lock, and once it lands the key is fresh again."""
    base = gateways["swr"].url
    email = unique_email("swrq")
    put(rdb, email, OLD, now_ms() - 50, STALE_MAX_S * 1000)
    queries, done = db_reads(base), refreshes(base)
    with (
        psycopg.connect(database_url, autocommit=True) as watcher,
        psycopg.connect(database_url) as locker,
    ):
        locker.execute("LOCK TABLE users IN ACCESS EXCLUSIVE MODE")
        try:
            answers = [answered(count(base, email, timeout_s=3.0)) for _ in range(6)]
            wait_until(lambda: reads_waiting_on_a_lock(watcher) > 0, DEADLINE_S, "the refresh")
            answers += [answered(count(base, email, timeout_s=3.0)) for _ in range(6)]
        finally:
            locker.rollback()
    assert answers == [(OLD, "STALE")] * 12
    wait_until(lambda: answered(count(base, email)) == (0, "HIT"), DEADLINE_S, "the refresh")
    assert db_reads(base) == queries + 1
    assert refreshes(base) >= done + 1


@pytest.fixture(scope="module")
def swr_one_worker(start_gateway: Callable[..., Proc]) -> Proc:
    return start_gateway(
        CACHE_EXPIRY="swr",
        CACHE_TTL_SECONDS=str(TTL_S),
        CACHE_EXPIRY_STALE_MAX_SECONDS=str(STALE_MAX_S),
        GATEWAY_WORKERS="1",
    )


def test_swr_refreshes_of_keys_expiring_together_share_one_query(swr_one_worker, rdb):
    """Nobody waits for a refresh behind a stale answer, so it waits
    CACHE_EXPIRY_REFRESH_GATHER_MS for the others: one scan for them all."""
    base = swr_one_worker.url
    emails = [unique_email("swrg") for _ in range(8)]
    for email in emails:
        put(rdb, email, OLD, now_ms() - 50, STALE_MAX_S * 1000)
    queries = db_reads(base)
    for email in emails:  # one after the other, each starting its own refresh
        assert answered(count(base, email)) == (OLD, "STALE")
    fresh = (0, "HIT")
    wait_until(lambda: all(answered(count(base, e)) == fresh for e in emails), DEADLINE_S, "all")
    assert db_reads(base) == queries + 1


def refreshes(base: str, outcome: str = "done") -> float:
    name = "aside_cache_refresh_behind_total"
    return sample(scrape(base), name, route=COUNT_ROUTE, outcome=outcome)


@pytest.fixture(scope="module")
def swr_impatient(start_gateway: Callable[..., Proc]) -> Proc:
    """swr with a statement timeout short enough for a locked table to fail a refresh."""
    return start_gateway(
        CACHE_EXPIRY="swr",
        CACHE_TTL_SECONDS=str(TTL_S),
        CACHE_EXPIRY_STALE_MAX_SECONDS=str(STALE_MAX_S),
        DB_STATEMENT_TIMEOUT_MS="300",
        GATEWAY_WORKERS="1",
    )


def test_a_refresh_that_fails_leaves_the_stale_value_and_the_next_read_tries_again(
    swr_impatient, rdb, database_url
):
    """A refresh behind the answer that fails (its query timed out on a locked
    table) is counted as failed and changes nothing: the stale value stays in
    Redis, the next read within the bound answers it and refreshes again, and
    that refresh lands once PostgreSQL answers."""
    base = swr_impatient.url
    email = unique_email("swrf")
    key = cache_keys.count_key(email)
    put(rdb, email, OLD, now_ms() - 50, STALE_MAX_S * 1000)
    failed, done = refreshes(base, "failed"), refreshes(base)
    with psycopg.connect(database_url) as locker:
        locker.execute("LOCK TABLE users IN ACCESS EXCLUSIVE MODE")
        try:
            assert answered(count(base, email, timeout_s=3.0)) == (OLD, "STALE")
            wait_until(lambda: refreshes(base, "failed") > failed, DEADLINE_S, "a failed refresh")
            envelope = cache_keys.unwrap(rdb.get(key) or b"")
            assert envelope is not None and envelope.value == str(OLD).encode()
            assert answered(count(base, email, timeout_s=3.0)) == (OLD, "STALE")
        finally:
            locker.rollback()
    wait_until(lambda: answered(count(base, email)) == (0, "HIT"), DEADLINE_S, "the refresh")
    assert refreshes(base) >= done + 1
    assert rdb.get(cache_keys.lease_key(key)) is None


def test_a_reader_that_read_the_old_value_after_a_refresh_landed_does_not_refresh_again(
    redis_url, rdb
):
    """The race behind a burst's second query: a reader reads the expired value,
    another process's refresh lands and drops its lease, then the reader asks for
    the lease. It finds the new value instead and answers it, with no query."""
    env = {"DATABASE_URL": "postgresql://a@h/d", "CORE_URL": "http://c", "ASIDE_PROFILE": "lab"}
    env |= {"REDIS_URL": redis_url, "CACHE_EXPIRY": "swr"}
    env["CACHE_EXPIRY_STALE_MAX_SECONDS"] = str(STALE_MAX_S)
    cache = l2.Cache(load_settings(env), CircuitBreaker(1.0))
    email = unique_email("swrl")
    key = cache_keys.count_key(email)
    put(rdb, email, OLD, now_ms() - 50, STALE_MAX_S * 1000)
    seen = rdb.get(key)
    put(rdb, email, 3, now_ms() + TTL_S * 1000, TTL_S * 1000)  # the refresh that landed
    loads: list[int] = []

    def load() -> bytes:
        loads.append(1)
        return b"9"

    try:
        early = EarlyGet(key, seen, failed=False)
        read = cache.read_through(COUNT_ROUTE, key, load, early_get=early)
    finally:
        cache.close()
    assert loads == []
    assert (read.value, read.outcome) == (b"3", l2.HIT)
    assert rdb.get(cache_keys.lease_key(key)) is None


def test_a_batched_refresh_stores_only_under_a_lease_no_write_took(redis_url, rdb):
    """The refresh thread's batch (Cache.refresh_behind): a key whose value was
    replaced before its lease was asked for is not read again, and a key that a
    write invalidated (the core deletes key and lease) while the batch read
    PostgreSQL keeps no refreshed value: the next read misses and reads anew."""
    env = {"DATABASE_URL": "postgresql://a@h/d", "CORE_URL": "http://c", "ASIDE_PROFILE": "lab"}
    env |= {"REDIS_URL": redis_url, "CACHE_EXPIRY": "swr"}
    env["CACHE_EXPIRY_STALE_MAX_SECONDS"] = str(STALE_MAX_S)
    cache = l2.Cache(load_settings(env), CircuitBreaker(1.0))
    written, kept, replaced = (unique_email(f"swrb{n}") for n in range(3))
    keys = {email: cache_keys.count_key(email) for email in (written, kept, replaced)}
    for email in keys:
        put(rdb, email, OLD, now_ms() - 50, STALE_MAX_S * 1000)
    stale = [l2.Stale(key, rdb.get(key) or b"") for key in keys.values()]
    put(rdb, replaced, 3, now_ms() + TTL_S * 1000, TTL_S * 1000)  # a refresh that landed
    loaded: list[list[str]] = []

    def load_many(asked: list[str]) -> dict[str, bytes]:
        loaded.append(asked)
        written_key = keys[written]
        rdb.delete(written_key, cache_keys.lease_key(written_key))  # the core's invalidation
        return {key: b"1" for key in asked}

    try:
        landed = cache.refresh_behind(COUNT_ROUTE, stale, load_many)
    finally:
        cache.close()
    assert landed == [True, True, True]
    assert loaded == [[keys[written], keys[kept]]]
    assert rdb.get(keys[written]) is None  # not the value read before the write
    assert cached(rdb, keys[kept]) == b"1"
    assert cached(rdb, keys[replaced]) == b"3"
    assert not any(rdb.exists(cache_keys.lease_key(key)) for key in keys.values())


def test_swr_never_answers_past_its_bound(gateways, rdb):
    base = gateways["swr"].url
    email = unique_email("swrb")
    # Still in Redis (written with a longer bound), past this gateway's own.
    put(rdb, email, OLD, now_ms() - STALE_MAX_S * 1000 - 500, 60_000)
    assert answered(count(base, email)) == (0, "MISS")
    assert answered(count(base, email)) == (0, "HIT")


def test_swr_stores_with_the_stale_bound_added(gateways, rdb):
    email = unique_email("swrt")
    assert answered(count(gateways["swr"].url, email)) == (0, "MISS")
    key = cache_keys.count_key(email)
    envelope = cache_keys.unwrap(rdb.get(key))
    assert envelope is not None and envelope.value == b"0"
    # The logical expiry is drawn from [TTL * (1 - jitter), TTL] (default jitter 0.1).
    expires_in = envelope.expires_ms - now_ms()
    assert TTL_S * 1000 * 0.9 - 5000 < expires_in <= TTL_S * 1000
    pttl = rdb.pttl(key)
    assert expires_in < pttl <= expires_in + STALE_MAX_S * 1000 + 5000


# ---- across modes --------------------------------------------------------------------


@pytest.mark.parametrize("reader", ["plain", "jitter", "early"])
def test_an_expired_envelope_is_a_miss_outside_swr(gateways, rdb, reader):
    """A restart into another mode finds swr's values: past their expiry they are
    misses, never answers, though Redis still holds them."""
    email = unique_email("cross")
    put(rdb, email, OLD, now_ms() - 100, 60_000)
    assert answered(count(gateways[reader].url, email)) == (0, "MISS")


@pytest.mark.parametrize("writer", ["plain", "jitter", "early", "swr"])
@pytest.mark.parametrize("reader", ["plain", "jitter", "early", "swr"])
def test_a_value_written_under_one_mode_is_a_hit_under_another(gateways, writer, reader):
    email = unique_email("across")
    assert answered(count(gateways[writer].url, email)) == (0, "MISS")
    assert answered(count(gateways[reader].url, email)) == (0, "HIT")


# ---- coherence -----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["plain", "jitter", "early", "swr"])
def test_a_value_invalidated_by_a_write_is_never_answered(gateways, rdb, core, insert_user, mode):
    """The core's DEL removes the value whatever its form: an invalidated value is
    not served, neither fresh nor stale, even one expired within swr's bound."""
    base = gateways[mode].url
    email = unique_email(f"coh-{mode}")
    insert_user(email)
    assert answered(count(base, email))[0] == 1
    if mode in ("early", "swr"):
        # Expired within swr's bound (early: about to be refreshed) when the write lands.
        put(rdb, email, 1, now_ms() - 100, STALE_MAX_S * 1000, delta_ms=1000)
        assert answered(count(base, email))[0] == 1  # stale, or refreshed by this read
        put(rdb, email, 1, now_ms() - 100, STALE_MAX_S * 1000, delta_ms=1000)
    core_create(core, email)
    answers = [answered(count(base, email)) for _ in range(10)]
    assert all(value == 2 for value, _ in answers), answers
    assert "STALE" not in {outcome for _, outcome in answers}
