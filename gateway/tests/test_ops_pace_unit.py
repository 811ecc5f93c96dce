"""The ops pace's own logic (door/ops_pace.py) on a clock of the test's: the
burst, the turns it reserves, clients apart, the bounded table, the keying,
and its settings; and the hold of a client the miss budget refused
(door/miss_hold.py)."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest
from aside_gateway.config.settings import ConfigError, load_settings
from aside_gateway.door.miss_hold import MissHolds, retry_after_s
from aside_gateway.door.ops_pace import OpsPace, OpsPaceLimits, WorkerOpsPace, ops_client

BASE = {
    "DATABASE_URL": "postgresql://aside@127.0.0.1:1/aside",
    "REDIS_URL": "redis://127.0.0.1:1/0",
    "CORE_URL": "http://127.0.0.1:1",
}
PRODUCTION = {**BASE, "WRITE_TOKEN": "w" * 16, "CORE_TOKEN": "c" * 16}
PROXY = (ipaddress.ip_network("10.0.0.0/8"),)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pace(per_s: int = 10, burst: int = 3, max_clients: int = 100) -> tuple[OpsPace, Clock]:
    clock = Clock()
    return OpsPace(OpsPaceLimits(per_s, burst), max_clients, clock), clock


def test_a_burst_passes_then_each_request_waits_its_turn() -> None:
    ops, _ = pace(per_s=10, burst=3)
    waits = [ops.turn("a") for _ in range(6)]
    # Three at once, then one every 0.1 s, each turn reserved by the one before.
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert waits[3:] == pytest.approx([0.1, 0.2, 0.3])


def test_time_refills_the_bucket_up_to_the_burst_only() -> None:
    ops, clock = pace(per_s=10, burst=3)
    for _ in range(3):
        ops.turn("a")
    clock.now += 0.1
    assert ops.turn("a") == 0.0 and ops.turn("a") == pytest.approx(0.1)
    clock.now += 60  # a minute idle earns no more than the burst
    assert [ops.turn("a") for _ in range(4)] == pytest.approx([0, 0, 0, 0.1])


def test_clients_have_buckets_of_their_own() -> None:
    ops, _ = pace(per_s=10, burst=1)
    assert ops.turn("a") == 0.0 and ops.turn("a") > 0
    assert ops.turn("b") == 0.0


def test_off_or_without_a_client_nothing_waits() -> None:
    ops, _ = pace(per_s=0, burst=1)
    assert [ops.turn("a") for _ in range(100)] == [0.0] * 100
    assert len(ops) == 0
    ops, _ = pace(per_s=1, burst=1)
    assert [ops.turn(None) for _ in range(5)] == [0.0] * 5


def test_the_table_of_clients_is_bounded_least_recent_forgotten() -> None:
    ops, _ = pace(per_s=1, burst=1, max_clients=3)
    for client in ("a", "b", "c"):
        ops.turn(client)
    ops.turn("a")  # "a" seen again: "b" is now the least recent
    ops.turn("d")
    assert len(ops) == 3
    assert ops.turn("b") == 0.0  # forgotten: a full bucket again
    assert ops.turn("a") > 0  # remembered: still waiting its turn


def test_a_client_is_keyed_as_the_miss_budget_keys_it() -> None:
    forwarded = [(b"x-forwarded-for", b"203.0.113.9")]
    # The peer, whatever it forwards, unless the peer is a trusted proxy.
    assert ops_client(("192.0.2.1", 5), forwarded, (), 64) == "192.0.2.1"
    assert ops_client(("192.0.2.1", 5), forwarded, PROXY, 64) == "192.0.2.1"
    assert ops_client(("10.1.1.1", 5), forwarded, PROXY, 64) == "203.0.113.9"
    assert ops_client(("10.1.1.1", 5), [], PROXY, 64) == "10.1.1.1"
    # One host's IPv6 addresses are one client: its /64.
    assert ops_client(("2001:db8::1", 5), [], (), 64) == "2001:db8::/64"
    assert ops_client(None, [], (), 64) is None


def test_only_the_ops_paths_are_paced() -> None:
    settings = load_settings({**PRODUCTION, "GATEWAY_OPS_CLIENT_BURST": "1"})
    worker = WorkerOpsPace.from_settings(settings)
    scope = {"client": ("192.0.2.1", 5), "headers": []}
    assert [worker.hold_s({**scope, "path": "/api/v1/users/count"}) for _ in range(5)] == [0] * 5
    assert worker.hold_s({**scope, "path": "/healthz"}) == 0.0
    assert 0.04 < worker.hold_s({**scope, "path": "/readyz"}) <= 1 / 20


def test_the_profiles_defaults_and_bad_values() -> None:
    production = load_settings(PRODUCTION)
    assert (production.ops_client_per_s, production.ops_client_burst) == (20, 20)
    assert load_settings({**BASE, "ASIDE_PROFILE": "lab"}).ops_client_per_s == 0
    given = load_settings({**BASE, "ASIDE_PROFILE": "lab", "GATEWAY_OPS_CLIENT_PER_S": "5"})
    assert given.ops_client_per_s == 5
    for name, value in (("GATEWAY_OPS_CLIENT_PER_S", "-1"), ("GATEWAY_OPS_CLIENT_BURST", "0")):
        with pytest.raises(ConfigError) as error:
            load_settings({**PRODUCTION, name: value})
        assert str(error.value).startswith(name) and "\n" not in str(error.value)


# ---- a client the miss budget refused (door/miss_hold.py) ----------------------------------
def test_a_refused_client_waits_out_its_retry_after_and_no_longer() -> None:
    clock = Clock()
    holds = MissHolds(None, (), 64, max_clients=2, clock=clock)
    scope = {"client": ("192.0.2.1", 5), "headers": [(b"x-forwarded-for", b"203.0.113.9")]}
    client = holds.client(scope)
    assert client == "192.0.2.1"  # no trusted proxy: the forwarded address names no one
    assert holds.hold_s(client) == 0.0

    async def answer(status: int, headers: list[tuple[bytes, bytes]]) -> None:
        sent: list[dict] = []

        async def send(message: dict) -> None:
            sent.append(message)

        await holds.watch(client, send)({"type": "http.response.start", "status": status,
                                         "headers": headers})  # fmt: skip
        assert sent and sent[0]["status"] == status  # passed on unchanged

    asyncio.run(answer(200, []))
    assert holds.hold_s(client) == 0.0
    asyncio.run(answer(429, [(b"Retry-After", b"2")]))
    assert holds.hold_s(client) == pytest.approx(2.0)
    assert holds.hold_s("198.51.100.1") == 0.0  # another client is not held
    clock.now += 1.5
    assert holds.hold_s(client) == pytest.approx(0.5)
    clock.now += 0.5
    assert holds.hold_s(client) == 0.0 and len(holds._until) == 0


def test_retry_after_is_read_bounded() -> None:
    assert retry_after_s([(b"retry-after", b"3")]) == 3.0
    assert retry_after_s([(b"retry-after", b"86400")]) == 5.0
    assert retry_after_s([(b"retry-after", b"soon")]) == retry_after_s([]) == 1.0


def test_no_miss_budget_no_holds() -> None:
    assert MissHolds.from_settings(load_settings({**BASE, "ASIDE_PROFILE": "lab"})) is None
    assert MissHolds.from_settings(load_settings(PRODUCTION)) is not None
