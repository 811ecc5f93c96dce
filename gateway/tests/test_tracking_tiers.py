"""The tracking tier through real gunicorn gateways (WORKERS workers), the core,
Redis and PostgreSQL: every worker's L1 hears (checked on each worker's own
answer, the lab's X-Aside-Worker header), from Redis itself, a write
through the core, a DEL by another client, a key's expiry and an eviction
under maxmemory; it serves nothing while its tracking connection is down and
is emptied before it serves again.

To see a change reach the L1 and not just Redis, the count is raised behind
every cache's back first (a row inserted into PostgreSQL directly): the old
count then stays in each L1 until something in Redis changes the key.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis
import requests
from gateway_helpers import WORKERS, Proc, every_worker, sample, scrape, unique_email, wait_until
from test_tiers import core_create, count, each_workers_count

L1_TTL_S = 30  # long: staleness seen in these tests is not the TTL running out
TRACKING = {"cache": "tracking"}


@pytest.fixture(scope="module")
def tracking_gateway(start_gateway: Callable[..., Proc]) -> Proc:
    return start_gateway(
        CACHE_STRATEGY="tracking", CACHE_L1_TTL_SECONDS=str(L1_TTL_S), GATEWAY_WORKERS=str(WORKERS)
    )


@pytest.fixture(scope="module")
def untracked_gateway(start_gateway: Callable[..., Proc]) -> Proc:
    """Lab switch: the tracking connection subscribes but sends no CLIENT TRACKING."""
    return start_gateway(
        CACHE_STRATEGY="tracking",
        CACHE_L1_TTL_SECONDS=str(L1_TTL_S),
        CACHE_L1_TRACKING="off",
        GATEWAY_WORKERS=str(WORKERS),
    )


@pytest.fixture(scope="module")
def short_redis_ttl_gateway(start_gateway: Callable[..., Proc]) -> Proc:
    """Redis keeps a value 2 s, each L1 up to 30 s: only Redis's expiry evicts it.
    `jitter`: Redis's TTL is the value's end (under `swr` Redis keeps it the stale
    bound longer, CACHE_EXPIRY_STALE_MAX_SECONDS)."""
    return start_gateway(
        CACHE_STRATEGY="tracking",
        CACHE_EXPIRY="jitter",
        CACHE_L1_TTL_SECONDS=str(L1_TTL_S),
        CACHE_TTL_SECONDS="2",
        GATEWAY_WORKERS=str(WORKERS),
    )


def tracked(base: str) -> bool:
    return sample(scrape(base), "aside_gateway_l1_tracking") == 1


def invalidations(base: str) -> float:
    return sample(scrape(base), "aside_gateway_l1_tracking_invalidations_total")


def fill_tracked_l1(base: str, email: str) -> None:
    """Read on fresh connections until every worker has answered from its L1."""
    every_worker(
        lambda: count(base, email),
        WORKERS,
        "an L1 hit",
        lambda response: response.headers.get("X-Cache-Tier") == "l1",
    )


def every_worker_serves(base: str, email: str, expected: int) -> bool:
    """Whether each worker's next answer is `expected`."""
    return all(c == expected for c, _ in each_workers_count(base, email).values())


def stale_then_fresh(base: str, email: str, change: Callable[[], object]) -> None:
    """Every worker serves the old count 1 from L1 though PostgreSQL says 2;
    after `change` (something done to the key in Redis) every worker serves 2."""
    seen = each_workers_count(base, email)
    assert all(s == (1, "l1") for s in seen.values()), seen
    change()
    wait_until(
        lambda: every_worker_serves(base, email, 2), 5, "every worker to serve the new count"
    )


def test_tracking_per_request_is_lab_only(gateway, production_gateway, insert_user):
    response = count(production_gateway.url, "a@b.co", cache="tracking")
    assert response.status_code == 403 and response.json()["error"]["code"] == "lab_disabled"
    # The lab's gateway (CACHE_STRATEGY l2) tracks too, for ?cache=tracking.
    wait_until(lambda: tracked(gateway.url), 10, "every worker tracked")
    email = unique_email("trk-lab")
    insert_user(email)
    wait_until(
        lambda: count(gateway.url, email, **TRACKING).headers.get("X-Cache-Tier") == "l1",
        10,
        "an L1 hit of cache=tracking",
    )
    assert count(gateway.url, email).headers["X-Cache-Tier"] == "l2"  # the configured l2


@pytest.mark.parametrize("tracking", ["on", "off"])
def test_no_worker_serves_the_old_value_after_a_write(
    tracking, tracking_gateway, untracked_gateway, core, insert_user
):
    gw = tracking_gateway if tracking == "on" else untracked_gateway
    wait_until(lambda: tracked(gw.url), 10, "every worker subscribed")
    email = unique_email(f"trk-coh-{tracking}")
    insert_user(email)
    fill_tracked_l1(gw.url, email)
    heard = invalidations(gw.url)

    core_create(core, email)  # acknowledged: the count is now 2, the key DELeted in Redis
    if tracking == "on":
        # The bound: every worker has heard Redis's invalidation of the DEL.
        wait_until(
            lambda: invalidations(gw.url) >= heard + WORKERS, 2, "the invalidation in every worker"
        )
    seen = each_workers_count(gw.url, email)
    old = {pid: s for pid, s in seen.items() if s[0] == 1}
    if tracking == "on":
        assert not old, f"old value served after the write by workers {sorted(old)}: {seen}"
    else:
        # Redis tracks nothing for these connections: every worker keeps its L1 copy.
        assert old == {pid: (1, "l1") for pid in seen}, seen


def test_a_del_by_another_client_reaches_every_worker(tracking_gateway, insert_user, rdb):
    wait_until(lambda: tracked(tracking_gateway.url), 10, "every worker tracked")
    email = unique_email("trk-del")
    insert_user(email)
    fill_tracked_l1(tracking_gateway.url, email)
    insert_user(email)  # behind every cache's back
    stale_then_fresh(tracking_gateway.url, email, lambda: rdb.delete(f"aside:v1:{{count:{email}}}"))


def test_an_expiry_in_redis_reaches_every_worker(short_redis_ttl_gateway, insert_user):
    gw = short_redis_ttl_gateway
    wait_until(lambda: tracked(gw.url), 10, "every worker tracked")
    email = unique_email("trk-exp")
    insert_user(email)
    fill_tracked_l1(gw.url, email)
    insert_user(email)
    seen = each_workers_count(gw.url, email)
    assert all(c == 1 for c, _ in seen.values()), seen
    # Redis's 2 s TTL runs out well before the L1's 30 s.
    wait_until(
        lambda: every_worker_serves(gw.url, email, 2),
        8,
        "every worker to drop the count when Redis expired it",
    )


def test_an_eviction_under_maxmemory_reaches_every_worker(start_gateway, redis_server, insert_user):
    redis_server()
    own = redis.Redis(port=redis_server.port, socket_timeout=5)
    gw = start_gateway(
        REDIS_URL=f"redis://127.0.0.1:{redis_server.port}/0",
        CACHE_STRATEGY="tracking",
        CACHE_L1_TTL_SECONDS=str(L1_TTL_S),
        GATEWAY_WORKERS=str(WORKERS),
    )
    wait_until(lambda: tracked(gw.url), 10, "every worker tracked")
    email = unique_email("trk-evict")
    key = f"aside:v1:{{count:{email}}}"
    insert_user(email)
    fill_tracked_l1(gw.url, email)
    insert_user(email)

    def evict() -> None:
        used = int(own.info("memory")["used_memory"])
        own.config_set("maxmemory-policy", "allkeys-random")
        own.config_set("maxmemory", str(used + 2 * 1024 * 1024))
        filler = b"x" * 64 * 1024
        for n in range(2000):  # 125 MB at most: far past the bound
            if own.exists(key) == 0:
                break
            own.set(f"filler:{n}", filler)
        assert own.exists(key) == 0, "Redis never evicted the key"
        own.config_set("maxmemory", "0")  # room again for the refill

    stale_then_fresh(gw.url, email, evict)


def test_client_kill_empties_every_l1_until_tracked_again(tracking_gateway, insert_user, rdb):
    gw = tracking_gateway
    wait_until(lambda: tracked(gw.url), 10, "every worker tracked")
    email = unique_email("trk-kill")
    insert_user(email)
    fill_tracked_l1(gw.url, email)

    def sessions() -> float:
        return sample(scrape(gw.url), "aside_gateway_l1_tracking_sessions_total")

    before = sessions()
    ids = [c["id"] for c in rdb.client_list() if "t" in c["flags"]]
    # One tracking connection per worker (and per gateway on this Redis).
    assert len(ids) >= WORKERS
    for client_id in ids:
        rdb.client_kill_filter(_id=client_id)
    wait_until(lambda: sessions() >= before + WORKERS, 10, "every worker tracked again")
    # The copies held before the loss are gone: each worker's first read is Redis's.
    seen = each_workers_count(gw.url, email)
    assert all(tier == "l2" for _, tier in seen.values()), seen
    with requests.Session() as session:
        count(gw.url, email, session)
        assert count(gw.url, email, session).headers["X-Cache-Tier"] == "l1"


def test_l1_is_not_served_while_redis_is_down_and_emptied_after(
    start_gateway, redis_server, insert_user
):
    start_redis = redis_server
    server = start_redis()
    gw = start_gateway(
        REDIS_URL=f"redis://127.0.0.1:{start_redis.port}/0",
        CACHE_STRATEGY="tracking",
        CACHE_L1_TTL_SECONDS=str(L1_TTL_S),
        GATEWAY_WORKERS=str(WORKERS),
        ready_path="/healthz",
    )
    email = unique_email("trk-down")
    insert_user(email)
    wait_until(lambda: tracked(gw.url), 10, "every worker tracked")
    fill_tracked_l1(gw.url, email)
    server.terminate()
    server.wait(timeout=10)
    wait_until(lambda: not tracked(gw.url), 5, "a worker to see its tracking lost")
    for response in every_worker(lambda: count(gw.url, email), WORKERS, "a read").values():
        assert response.status_code == 200
        assert response.headers["X-Cache"] == "BYPASS", response.headers  # never L1
    insert_user(email)  # while Redis was away: no invalidation could be sent for it
    start_redis()
    wait_until(lambda: tracked(gw.url), 15, "every worker tracked again")
    seen = each_workers_count(gw.url, email)
    assert all(c == 2 for c, _ in seen.values()), seen  # nothing from before the loss


def test_the_own_fill_is_served_from_l1_after_redis_holds_it(tracking_gateway, insert_user):
    """A value enters the tracking L1 only once Redis holds it; users too."""
    gw = tracking_gateway
    wait_until(lambda: tracked(gw.url), 10, "every worker tracked")
    user_id = insert_user(unique_email("trk-user"))
    url = f"{gw.url}/api/v1/users/{user_id}"
    first = requests.get(url, timeout=10)
    assert first.status_code == 200 and first.headers["X-Cache"] == "MISS"
    wait_until(
        lambda: requests.get(url, timeout=10).headers.get("X-Cache-Tier") == "l1",
        10,
        "an L1 hit of the user",
    )
    assert requests.get(url, timeout=10).json() == first.json()
