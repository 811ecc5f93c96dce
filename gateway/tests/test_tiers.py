"""The L1 tier through real gunicorn gateways (two workers, or WORKERS for the
coherence tests), the core, Redis and PostgreSQL: where a read is served
from, expiry, counters, and coherence across workers through the core's
invalidation messages, checked on each worker's own answer (the lab's
X-Aside-Worker header)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import requests
from gateway_helpers import (
    WORKERS,
    Proc,
    every_worker,
    sample,
    scrape,
    unique_email,
    unique_username,
    wait_until,
)

COUNT = "/api/v1/users/count"
COUNT_ROUTE = "/api/v1/users/count"
L1_TTL_S = 30  # long: staleness seen in these tests is not the TTL running out
READS = 20  # fresh connections spread over the workers
HOLD_DEADLINE_S = 10


def count(base: str, email: str, session: requests.Session | None = None, **params: str):
    getter = session.get if session is not None else requests.get
    # A new connection per call (no session) lands on either worker.
    return getter(base + COUNT, params={"email": email, **params}, timeout=10)


def core_create(core: Proc, email: str) -> None:
    """A write acknowledged by the core itself: no gateway evicts anything for it."""
    body = {"username": unique_username(), "email": email}
    response = requests.post(core.url + "/api/v1/users", json=body, timeout=10)
    assert response.status_code == 201, response.text


def fill_l1(base: str, email: str, **params: str) -> None:
    """Read on fresh connections until every worker has answered from its L1."""
    every_worker(
        lambda: count(base, email, **params),
        WORKERS,
        "an L1 hit",
        lambda response: response.headers.get("X-Cache-Tier") == "l1",
    )


def each_workers_count(base: str, email: str, **params: str) -> dict[int, tuple[int, str | None]]:
    """Every worker's first answer from now: its count and tier, by pid."""
    answers = every_worker(lambda: count(base, email, **params), WORKERS, "the count")
    for response in answers.values():
        assert response.status_code == 200, response.text
    return {
        pid: (response.json()["count"], response.headers.get("X-Cache-Tier"))
        for pid, response in answers.items()
    }


def counts_seen(base: str, email: str, **params: str) -> list[tuple[int, str | None]]:
    seen = []
    for _ in range(READS):
        response = count(base, email, **params)
        assert response.status_code == 200, response.text
        seen.append((response.json()["count"], response.headers.get("X-Cache-Tier")))
    return seen


@pytest.fixture(scope="module")
def hybrid_gateway(start_gateway: Callable[..., Proc]) -> Proc:
    return start_gateway(
        CACHE_STRATEGY="hybrid", CACHE_L1_TTL_SECONDS=str(L1_TTL_S), GATEWAY_WORKERS=str(WORKERS)
    )


@pytest.fixture(scope="module")
def uninvalidated_gateway(start_gateway: Callable[..., Proc]) -> Proc:
    """Lab switch: L1 without invalidation messages, to show the coherence test fails."""
    return start_gateway(
        CACHE_STRATEGY="hybrid",
        CACHE_L1_TTL_SECONDS=str(L1_TTL_S),
        CACHE_L1_INVALIDATION="off",
        GATEWAY_WORKERS=str(WORKERS),
    )


@pytest.fixture(scope="module")
def short_ttl_gateway(start_gateway: Callable[..., Proc]) -> Proc:
    return start_gateway(CACHE_L1_TTL_SECONDS="1", GATEWAY_WORKERS=str(WORKERS))


@pytest.fixture(scope="module")
def hybrid_swr_gateway(start_gateway: Callable[..., Proc]) -> Proc:
    """Values that expire in a second (swr), an L1 TTL of 30 s."""
    return start_gateway(
        CACHE_STRATEGY="hybrid",
        CACHE_EXPIRY="swr",
        CACHE_TTL_SECONDS="1",
        CACHE_L1_TTL_SECONDS=str(L1_TTL_S),
        GATEWAY_WORKERS=str(WORKERS),
    )


@pytest.fixture(scope="module")
def l1_gateway(start_gateway: Callable[..., Proc]) -> Proc:
    """The lab's gateway (CACHE_STRATEGY l2) with WORKERS workers, for cache=l1."""
    return start_gateway(GATEWAY_WORKERS=str(WORKERS))


def subscribed(base: str) -> bool:
    return sample(scrape(base), "aside_gateway_l1_subscribed") == 1


# ---- where a read is served from ------------------------------------------------------


def test_l1_hit_is_served_with_its_tier_and_touches_no_redis(gateway, insert_user, rdb):
    email = unique_email("l1")
    insert_user(email)
    wait_until(lambda: subscribed(gateway.url), 10, "both workers subscribed")
    first = count(gateway.url, email, cache="l1")
    assert first.status_code == 200 and first.json() == {"email": email, "count": 1}
    assert first.headers["X-Cache"] == "MISS" and "X-Cache-Tier" not in first.headers
    hit = wait_until(
        lambda: (r := count(gateway.url, email, cache="l1")).headers["X-Cache"] == "HIT" and r,
        10,
        "an L1 hit",
    )
    assert hit.headers["X-Cache-Tier"] == "l1"
    assert hit.json() == {"email": email, "count": 1}
    assert hit.headers["Content-Type"] == "application/json"
    # The l1 strategy never wrote the key or a lease to Redis.
    assert rdb.exists(f"aside:v1:{{count:{email}}}", f"aside:v1:{{count:{email}}}:lease") == 0
    # The configured strategy (l2) still answers from Redis.
    count(gateway.url, email)
    l2_hit = count(gateway.url, email)
    assert l2_hit.headers["X-Cache"] == "HIT" and l2_hit.headers["X-Cache-Tier"] == "l2"


def test_hybrid_fills_l1_from_redis_and_serves_a_user(hybrid_gateway, insert_user):
    user_id = insert_user(unique_email("hy"))
    url = f"{hybrid_gateway.url}/api/v1/users/{user_id}"
    first = requests.get(url, timeout=10)
    assert first.status_code == 200 and first.headers["X-Cache"] == "MISS"
    tiers = set()
    for _ in range(READS):
        response = requests.get(url, timeout=10)
        assert response.json() == first.json()
        tiers.add(response.headers.get("X-Cache-Tier"))
    assert "l1" in tiers and tiers <= {"l1", "l2"}
    missing = requests.get(f"{hybrid_gateway.url}/api/v1/users/999999999", timeout=10)
    assert missing.status_code == 404
    again = requests.get(f"{hybrid_gateway.url}/api/v1/users/999999999", timeout=10)
    assert again.status_code == 404 and again.headers["X-Cache"] == "HIT"
    assert again.headers["X-Cache-Tier"] in ("l1", "l2")


def test_tier_choice_is_lab_only(production_gateway):
    for mode in ("l1", "l2", "hybrid"):
        response = count(production_gateway.url, "a@b.co", cache=mode)
        assert response.status_code == 403, response.text
        assert response.json()["error"]["code"] == "lab_disabled"
    assert count(production_gateway.url, "a@b.co", cache="L1").status_code == 400


def test_l1_entry_expires_after_its_ttl(short_ttl_gateway, insert_user):
    email = unique_email("ttl")
    insert_user(email)
    wait_until(lambda: subscribed(short_ttl_gateway.url), 10, "both workers subscribed")
    fill_l1(short_ttl_gateway.url, email, cache="l1")
    insert_user(email)  # behind the gateway's back: no invalidation message
    stale = count(short_ttl_gateway.url, email, cache="l1")
    assert stale.json()["count"] in (1, 2)
    started = time.monotonic()
    # Every worker's copy is gone within the TTL (1 s) plus slack.
    wait_until(
        lambda: all(
            c == 2 for c, _ in each_workers_count(short_ttl_gateway.url, email, cache="l1").values()
        ),
        5,
        "every worker's L1 entry to expire",
    )
    assert time.monotonic() - started < 5


def test_an_l1_entry_ends_with_its_values_expiry_not_the_tiers_ttl(hybrid_swr_gateway, insert_user):
    """Under swr a value's own expiry (1 s here) ends its L1 copy, though the
    tier keeps entries 30 s: past it the read goes to Redis, answers the stale
    value and refreshes it, so a change made behind the gateway's back (no
    invalidation message) shows in seconds."""
    base = hybrid_swr_gateway.url
    email = unique_email("swrl1")
    insert_user(email)
    wait_until(lambda: subscribed(base), 10, "both workers subscribed")
    fill_l1(base, email)
    insert_user(email)  # behind the gateway's back: only expiry ends the old count
    wait_until(
        lambda: all(c == 2 for c, _ in each_workers_count(base, email).values()),
        L1_TTL_S / 3,
        "every worker to answer the new count",
    )


def test_per_tier_counters(gateway, insert_user):
    email = unique_email("ctr")
    insert_user(email)
    wait_until(lambda: subscribed(gateway.url), 10, "both workers subscribed")

    def tier_reads(tier: str, outcome: str) -> float:
        return sample(
            scrape(gateway.url),
            "aside_gateway_cache_tier_reads_total",
            route=COUNT_ROUTE,
            tier=tier,
            outcome=outcome,
        )

    before = {(t, o): tier_reads(t, o) for t in ("l1", "l2") for o in ("hit", "miss")}
    tiers = [
        count(gateway.url, email, cache="hybrid").headers.get("X-Cache-Tier") for _ in range(10)
    ]
    after = {(t, o): tier_reads(t, o) for t in ("l1", "l2") for o in ("hit", "miss")}
    delta = {k: after[k] - before[k] for k in after}
    assert delta[("l1", "hit")] == tiers.count("l1")
    assert delta[("l2", "hit")] == tiers.count("l2")
    assert delta[("l2", "miss")] == 1  # the first read filled Redis
    assert delta[("l1", "miss")] == 10 - tiers.count("l1")
    # Gauges are sampled once a second by each worker.
    wait_until(
        lambda: sample(scrape(gateway.url), "aside_gateway_l1_entries") >= 1, 5, "the entries gauge"
    )
    assert sample(scrape(gateway.url), "aside_gateway_l1_bytes") > 0


# ---- coherence across workers ---------------------------------------------------------


@pytest.mark.parametrize("invalidation", ["on", "off"])
def test_no_worker_serves_the_old_value_after_a_write(
    invalidation, hybrid_gateway, uninvalidated_gateway, core, insert_user
):
    gw = hybrid_gateway if invalidation == "on" else uninvalidated_gateway
    if invalidation == "on":
        wait_until(lambda: subscribed(gw.url), 10, "both workers subscribed")
    email = unique_email(f"coh-{invalidation}")
    insert_user(email)
    fill_l1(gw.url, email)
    received = sample(scrape(gw.url), "aside_gateway_l1_invalidations_received_total")

    core_create(core, email)  # acknowledged: the count is now 2
    if invalidation == "on":
        # The bound: every worker has heard of the write (published before the 2xx).
        wait_until(
            lambda: (
                sample(scrape(gw.url), "aside_gateway_l1_invalidations_received_total")
                >= received + WORKERS
            ),
            1,
            "the invalidation message in every worker",
        )
    seen = each_workers_count(gw.url, email)
    old = {pid: s for pid, s in seen.items() if s[0] == 1}
    if invalidation == "on":
        assert not old, f"old value served after the write by workers {sorted(old)}: {seen}"
    else:
        # Without messages every worker keeps serving its L1 copy: the test can fail.
        assert old == {pid: (1, "l1") for pid in seen}, seen


def test_a_client_sees_its_own_write_through_the_same_worker(uninvalidated_gateway, insert_user):
    """Invalidation messages off: only the forwarding worker's own eviction can do this."""
    email = unique_email("own")
    insert_user(email)
    with requests.Session() as session:  # one keep-alive connection: one worker
        count(uninvalidated_gateway.url, email, session)
        hit = count(uninvalidated_gateway.url, email, session)
        assert hit.headers["X-Cache-Tier"] == "l1" and hit.json()["count"] == 1
        body = {"username": unique_username(), "email": email}
        created = session.post(uninvalidated_gateway.url + "/api/v1/users", json=body, timeout=10)
        assert created.status_code == 201, created.text
        after = count(uninvalidated_gateway.url, email, session)
        assert after.json()["count"] == 2, after.headers
        user_url = uninvalidated_gateway.url + created.headers["Location"]
        user = session.get(user_url, timeout=10)
        assert user.status_code == 200 and user.json()["email"] == email


def test_subscription_loss_flushes_l1_until_resubscribed(hybrid_gateway, insert_user, rdb):
    email = unique_email("kill")
    insert_user(email)
    wait_until(lambda: subscribed(hybrid_gateway.url), 10, "every worker subscribed")
    fill_l1(hybrid_gateway.url, email)

    def flushes() -> float:
        return sample(
            scrape(hybrid_gateway.url), "aside_gateway_l1_evictions_total", reason="flush"
        )

    def subscriptions() -> float:
        return sample(scrape(hybrid_gateway.url), "aside_gateway_l1_subscriptions_total")

    before, subscribed_before = flushes(), subscriptions()
    killed = rdb.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
    assert killed >= WORKERS
    # Each worker lost its subscription (flushing its L1) and made a new one.
    wait_until(
        lambda: subscriptions() >= subscribed_before + WORKERS, 10, "every worker subscribed again"
    )
    assert flushes() > before
    # The copies held before the loss are gone: each worker's first read comes from Redis.
    seen = each_workers_count(hybrid_gateway.url, email)
    assert all(tier == "l2" for _, tier in seen.values()), seen
    with requests.Session() as session:
        first = count(hybrid_gateway.url, email, session)
        assert count(hybrid_gateway.url, email, session).headers["X-Cache-Tier"] == "l1"
        assert first.headers["X-Aside-Worker"] in {str(pid) for pid in seen}


def test_l1_is_not_served_while_the_subscription_is_down(start_gateway, redis_server, insert_user):
    start_redis = redis_server
    server = start_redis()
    gw = start_gateway(
        REDIS_URL=f"redis://127.0.0.1:{start_redis.port}/0",
        CACHE_STRATEGY="hybrid",
        CACHE_L1_TTL_SECONDS=str(L1_TTL_S),
        GATEWAY_WORKERS=str(WORKERS),
        ready_path="/healthz",
    )
    email = unique_email("down")
    insert_user(email)
    wait_until(lambda: subscribed(gw.url), 10, "both workers subscribed")
    fill_l1(gw.url, email)
    server.terminate()
    server.wait(timeout=10)
    wait_until(lambda: not subscribed(gw.url), 5, "a worker to see its subscription lost")
    wait_until(lambda: sample(scrape(gw.url), "aside_gateway_l1_entries") == 0, 5, "the L1 flushed")
    for response in every_worker(lambda: count(gw.url, email), WORKERS, "a read").values():
        assert response.status_code == 200
        assert response.headers["X-Cache"] == "BYPASS", response.headers  # never L1
    start_redis()
    wait_until(lambda: subscribed(gw.url), 15, "both workers subscribed again")
    fill_l1(gw.url, email)


def test_a_fill_racing_a_write_does_not_keep_the_old_value(l1_gateway, core, rdb):
    """A cache=l1 read pauses after its database read; a write commits and its
    message arrives; the paused read's store must be refused."""
    email = unique_email("race-l1")
    gateway = l1_gateway
    wait_until(lambda: subscribed(gateway.url), 10, "every worker subscribed")
    hold = f"l1-race-{time.monotonic_ns()}"
    result: dict[str, requests.Response] = {}
    url = f"{gateway.url}{COUNT}?email={email}&cache=l1"
    thread = threading.Thread(
        target=lambda: result.update(
            response=requests.get(url, headers={"X-Test-Hold": hold}, timeout=30)
        )
    )
    thread.start()
    assert rdb.blpop([f"aside:test:{hold}:reached"], timeout=HOLD_DEADLINE_S) is not None
    received = sample(scrape(gateway.url), "aside_gateway_l1_invalidations_received_total")
    core_create(core, email)
    wait_until(
        lambda: (
            sample(scrape(gateway.url), "aside_gateway_l1_invalidations_received_total")
            >= received + WORKERS
        ),
        2,
        "the message in every worker",
    )
    rdb.rpush(f"aside:test:{hold}:release", "go")
    thread.join(timeout=HOLD_DEADLINE_S + 5)
    assert result["response"].json()["count"] == 0  # read before the write
    seen = each_workers_count(gateway.url, email, cache="l1")
    assert all(c == 1 for c, _ in seen.values()), seen
