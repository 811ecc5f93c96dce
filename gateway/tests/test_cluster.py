"""The gateway and the core on a Redis Cluster (REDIS_MODE=cluster), against the
test stack's three primaries and their replicas (ASIDE_REDIS_CLUSTER_URL;
infra/test.sh starts them, infra/cluster.sh).

The read, write, invalidation, lease and L1 tests of test_reads, test_e2e and
test_tiers run here again as they are: this module redefines the fixtures they
ask for (`gateway`, `core`, `rdb`, ...) as a cluster core, cluster gateways and
a cluster client, and pytest collects the imported tests with them. Beside
them, what only a cluster has: keys on several primaries, the flush on every
one of them, and the CROSSSLOT refusal that the keys' hash tag avoids.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import requests
from aside_gateway.backends import redis_clients
from aside_gateway.config.settings import load_settings
from aside_gateway.contracts import cache_keys
from aside_gateway.tiers import l2
from aside_seed import cache as seed_cache
from gateway_helpers import (
    WORKERS,
    Proc,
    cached,
    sample,
    scrape,
    unique_email,
    unique_username,
    wait_until,
)
from redis.cluster import RedisCluster
from test_e2e import (  # noqa: F401 - collected here, with this module's fixtures
    test_create_update_delete_keep_reads_fresh,
    test_reads_equal_the_database_after_concurrent_writes,
    test_stale_set_race_on_count,
    test_stale_set_race_on_user,
)
from test_reads import (  # noqa: F401
    test_a_malformed_cached_value_is_a_miss_and_is_refilled,
    test_count_keeps_case_and_unicode,
    test_count_miss_then_hit,
    test_counters_are_exact_across_workers,
    test_fifty_concurrent_reads_of_a_cold_key_query_once,
    test_health_and_readiness,
    test_missing_user_is_cached_as_a_negative_entry,
    test_user_by_id_miss_then_hit,
)
from test_tiers import (  # noqa: F401
    L1_TTL_S,
    count,
    fill_l1,
    subscribed,
    test_a_fill_racing_a_write_does_not_keep_the_old_value,
    test_hybrid_fills_l1_from_redis_and_serves_a_user,
    test_l1_hit_is_served_with_its_tier_and_touches_no_redis,
    test_no_worker_serves_the_old_value_after_a_write,
)

CLUSTER_URL = os.environ.get("ASIDE_REDIS_CLUSTER_URL", "")
CLUSTER = {"REDIS_URL": CLUSTER_URL, "REDIS_MODE": "cluster"}
FLUSH_SCRIPT = (Path(__file__).resolve().parents[2] / "contracts" / "flush_cache.lua").read_text()

pytestmark = pytest.mark.skipif(
    not CLUSTER_URL, reason="ASIDE_REDIS_CLUSTER_URL is not set (infra/test.sh starts a cluster)"
)


# ---- the fixtures the imported tests ask for, on the cluster ----------------------------


@pytest.fixture(scope="module")
def rdb() -> Iterator[RedisCluster]:
    # socket_timeout above the gateway's 10 s hold, for BLPOP on its test keys.
    client = RedisCluster.from_url(CLUSTER_URL, socket_timeout=15)
    client.flushdb(target_nodes=RedisCluster.PRIMARIES)
    yield client
    client.close()


@pytest.fixture(scope="module")
def core(start_core: Callable[..., Proc], rdb: RedisCluster) -> Proc:
    return start_core(**CLUSTER)


@pytest.fixture(scope="module")
def gateway(start_gateway: Callable[..., Proc], core: Proc) -> Proc:
    return start_gateway(CORE_URL=core.url, **CLUSTER)


@pytest.fixture(scope="module")
def l1_gateway(start_gateway: Callable[..., Proc], core: Proc) -> Proc:
    """The cluster's gateway with the tier tests' WORKERS workers, for cache=l1."""
    return start_gateway(CORE_URL=core.url, GATEWAY_WORKERS=str(WORKERS), **CLUSTER)


@pytest.fixture(scope="module")
def naive_gateway(start_gateway: Callable[..., Proc], core: Proc) -> Proc:
    return start_gateway(
        CORE_URL=core.url, ASIDE_CACHE_COHERENCE="naive", GATEWAY_WORKERS="1", **CLUSTER
    )


@pytest.fixture(scope="module")
def hybrid_gateway(start_gateway: Callable[..., Proc], core: Proc) -> Proc:
    return start_gateway(
        CORE_URL=core.url, CACHE_STRATEGY="hybrid", CACHE_L1_TTL_SECONDS=str(L1_TTL_S), **CLUSTER
    )


@pytest.fixture(scope="module")
def uninvalidated_gateway(start_gateway: Callable[..., Proc], core: Proc) -> Proc:
    return start_gateway(
        CORE_URL=core.url,
        CACHE_STRATEGY="hybrid",
        CACHE_L1_TTL_SECONDS=str(L1_TTL_S),
        CACHE_L1_INVALIDATION="off",
        **CLUSTER,
    )


# ---- what only a cluster has -------------------------------------------------------------


def primaries_holding(rdb: RedisCluster, keys: list[str]) -> set[str]:
    return {rdb.get_node_from_key(key).name for key in keys}


def emails_on_every_primary(rdb: RedisCluster, prefix: str, at_least: int) -> list[str]:
    """At least `at_least` fresh emails whose keys cover all three primaries
    (random ones miss a primary now and then: 9 do in about 8 % of draws)."""
    emails: list[str] = []
    for i in range(300):
        emails.append(unique_email(f"{prefix}{i}"))
        keys = [cache_keys.count_key(e) for e in emails]
        if len(emails) >= at_least and len(primaries_holding(rdb, keys)) == 3:
            return emails
    raise AssertionError("300 emails did not cover the three primaries")


def test_keys_spread_over_the_primaries_and_a_write_deletes_its_own(gateway, insert_user, rdb):
    emails = emails_on_every_primary(rdb, "spread", 12)
    for email in emails:
        insert_user(email)
        assert count(gateway.url, email).status_code == 200
    keys = [cache_keys.count_key(e) for e in emails]
    assert all(cached(rdb, key) == b"1" for key in keys)
    assert len(primaries_holding(rdb, keys)) == len(rdb.get_primaries()) == 3
    # A create through the gateway and the core: its key goes, on whichever node.
    created = requests.post(
        gateway.url + "/api/v1/users",
        json={"username": unique_username(), "email": emails[0]},
        timeout=10,
    )
    assert created.status_code == 201, created.text
    assert created.headers.get("X-Cache-Invalidation") != "failed"
    assert rdb.get(keys[0]) is None
    assert all(cached(rdb, key) == b"1" for key in keys[1:])
    assert count(gateway.url, emails[0]).json()["count"] == 2


def test_a_flush_empties_every_primary_and_every_l1(hybrid_gateway, insert_user, rdb):
    wait_until(lambda: subscribed(hybrid_gateway.url), 10, "both workers subscribed")
    emails = emails_on_every_primary(rdb, "flush", 9)
    for email in emails:
        insert_user(email)
    fill_l1(hybrid_gateway.url, emails[0])
    for email in emails[1:]:
        count(hybrid_gateway.url, email)
    keys = [cache_keys.count_key(e) for e in emails]
    assert len(primaries_holding(rdb, keys)) == 3
    rdb.set("aside:test:kept", "1")
    received = sample(scrape(hybrid_gateway.url), "aside_gateway_l1_invalidations_received_total")

    deleted = seed_cache.flush(rdb, CLUSTER_URL, FLUSH_SCRIPT)  # what the seeder runs

    assert deleted >= len(keys)
    for node in rdb.get_primaries():
        assert list(rdb.scan_iter(match=f"{cache_keys.PREFIX}:*", target_nodes=node)) == []
    assert rdb.get("aside:test:kept") == b"1"
    wait_until(
        lambda: (
            sample(scrape(hybrid_gateway.url), "aside_gateway_l1_invalidations_received_total")
            >= received + 2
        ),
        5,
        "the flush message in both workers",
    )
    wait_until(
        lambda: count(hybrid_gateway.url, emails[0]).headers.get("X-Cache-Tier") != "l1",
        5,
        "the L1 copy to be gone",
    )


def test_the_cluster_client_keeps_the_bounds_on_every_node(rdb):
    env = {"DATABASE_URL": "postgresql://a@h/d", "CORE_URL": "http://c", "ASIDE_PROFILE": "lab"}
    settings = load_settings({**env, **CLUSTER})
    client = redis_clients.sync_client(
        settings, socket_timeout=0.2, connect_timeout=0.1, max_connections=7, pool_timeout=0.3
    )
    try:
        assert isinstance(client, RedisCluster) and redis_clients.single_pool(client) is None
        pools = redis_clients.pools(client)
        # Three primaries and their replicas: a pool for every node it knows.
        assert len(pools) == 6
        for pool in pools:
            assert isinstance(pool, redis.BlockingConnectionPool)
            assert (pool.max_connections, pool.timeout) == (7, 0.3)
            kwargs = pool.connection_kwargs
            assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (0.2, 0.1)
            assert kwargs["retry"].get_retries() == 0
    finally:
        redis_clients.close(client)


def test_every_nodes_cluster_bus_listens_below_the_ephemeral_range(rdb):
    # Redis's default bus port (+10000) lies where the kernel hands out client
    # ports: one held by any client socket keeps a node from starting.
    nodes = rdb.get_nodes()
    assert len(nodes) == 6
    for node in nodes:
        bus = int(rdb.config_get("cluster-port", target_nodes=node)["cluster-port"])
        assert bus == node.port + 1000 and bus < 32768, (node.name, bus)


def test_each_primary_has_its_own_replica_in_sync(rdb):
    # infra/cluster.sh: the i-th replica port follows the i-th primary port,
    # so a primary killed has a replica to promote (the bench's cluster-failover).
    primaries = os.environ["ASIDE_REDIS_CLUSTER_PORTS"].split()
    replicas = os.environ["ASIDE_REDIS_CLUSTER_REPLICA_PORTS"].split()
    by_port = {str(node.port): node for node in rdb.get_nodes()}
    ids = {port: rdb.cluster_myid(by_port[port]).decode() for port in primaries}
    for primary, replica in zip(primaries, replicas, strict=True):
        assert by_port[primary].server_type == "primary", primary
        assert by_port[replica].server_type == "replica", replica
        info = rdb.info("replication", target_nodes=by_port[replica])
        assert (info["role"], str(info["master_port"]), info["master_link_status"]) == (
            "slave", primary, "up",
        ), replica  # fmt: skip
        seen = rdb.cluster_nodes()  # as the cluster's gossip has it
        assert seen[f"127.0.0.1:{replica}"]["master_id"] == ids[primary], seen


def _untagged_pair(rdb: RedisCluster) -> tuple[str, str]:
    """A key named the old way (no hash tag) whose lease lands in another slot."""
    for i in range(100):
        key = f"{cache_keys.PREFIX}:count:untagged{i}@example.com"
        lease = cache_keys.lease_key(key)
        if rdb.keyslot(key) != rdb.keyslot(lease):
            return key, lease
    pytest.fail("no untagged key whose lease lands in another slot")


def test_the_lease_script_runs_on_a_tagged_pair(rdb):
    key = cache_keys.count_key("tagged@example.com")
    lease = cache_keys.lease_key(key)
    rdb.set(lease, "token", px=5000)
    assert rdb.eval(l2.STORE_IF_LEASE_HELD, 2, key, lease, "token", "3", 60) == 1
    assert rdb.get(key) == b"3" and rdb.get(lease) is None


def test_the_lease_script_fails_cross_slot_without_the_hash_tag(rdb):
    """The hash tag is what lets the lease script run: untagged, the node that
    owns the key refuses it (redis-py's cluster client refuses it even before
    sending; the node's own connection shows the server's answer)."""
    key, lease = _untagged_pair(rdb)
    node = rdb.get_node_from_key(key).redis_connection
    with pytest.raises(redis.exceptions.ClusterCrossSlotError):  # the server's CROSSSLOT
        node.eval(l2.STORE_IF_LEASE_HELD, 2, key, lease, "token", "3", 60)
    with pytest.raises(redis.RedisClusterException, match="same key slot"):
        rdb.eval(l2.STORE_IF_LEASE_HELD, 2, key, lease, "token", "3", 60)
