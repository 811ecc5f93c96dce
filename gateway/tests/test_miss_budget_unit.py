"""The miss budget's pure logic (door/miss_budget.py): who a client is, what is
charged, the 429 past the budget, and its settings."""

from __future__ import annotations

import ipaddress

import pytest
from aside_gateway.config.settings import ConfigError, load_settings
from aside_gateway.contracts.errors import ApiError
from aside_gateway.door.miss_budget import (
    TOKEN_CLIENT,
    MissBudget,
    MissBudgetLimits,
    client_address,
    client_key,
    client_of,
)

BASE = {
    "DATABASE_URL": "postgresql://aside@127.0.0.1:1/aside",
    "REDIS_URL": "redis://127.0.0.1:1/0",
    "CORE_URL": "http://127.0.0.1:1",
}
PRODUCTION = {**BASE, "WRITE_TOKEN": "w" * 16, "CORE_TOKEN": "c" * 16}
PROXIES = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("::1/128"))
TOKEN = "t" * 20


@pytest.mark.parametrize(
    ("peer", "forwarded", "client"),
    [
        ("203.0.113.5", None, "203.0.113.5"),
        # An untrusted peer's header proves nothing.
        ("203.0.113.5", "198.51.100.1", "203.0.113.5"),
        ("10.1.2.3", "198.51.100.1", "198.51.100.1"),
        # The right-most untrusted hop: what the client wrote to its left is ignored.
        ("10.1.2.3", "1.1.1.1, 198.51.100.1, 10.9.9.9", "198.51.100.1"),
        ("::1", "2001:db8::7", "2001:db8::7"),
        # Every hop a trusted proxy: the left-most.
        ("10.1.2.3", "10.0.0.1, 10.0.0.2", "10.0.0.1"),
        # A trusted proxy's nonsense: the peer.
        ("10.1.2.3", "1.1.1.1, garbage", "10.1.2.3"),
        ("10.1.2.3", None, "10.1.2.3"),
        (None, "198.51.100.1", None),
    ],
)
def test_the_client_address(peer, forwarded, client):
    assert client_address(peer, forwarded, PROXIES) == client


@pytest.mark.parametrize(
    ("address", "prefix", "key"),
    [
        ("203.0.113.5", 64, "203.0.113.5"),
        ("2001:db8:1:2::7", 64, "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff::1", 64, "2001:db8:1:2::/64"),
        ("2001:db8:1:2::7", 128, "2001:db8:1:2::7/128"),
        ("2001:db8:1:2::7", 48, "2001:db8:1::/48"),
        ("::ffff:203.0.113.5", 64, "203.0.113.5"),  # an IPv4 client on a dual stack
        (None, 64, None),
    ],
)
def test_an_ipv6_client_is_keyed_by_its_prefix(address, prefix, key):
    assert client_key(address, prefix) == key


def test_only_the_write_token_names_a_client():
    environ = {"REMOTE_ADDR": "203.0.113.5", "HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}
    assert client_of(environ, TOKEN, ()) == TOKEN_CLIENT
    # Any other token would let a client pick a new identity per request.
    other = {**environ, "HTTP_AUTHORIZATION": "Bearer " + "x" * 20}
    assert client_of(other, TOKEN, ()) == "203.0.113.5"
    assert client_of(environ, None, ()) == "203.0.113.5"


def _refused(budget: MissBudget, route: str, client: str | None) -> ApiError:
    with pytest.raises(ApiError) as refused:
        budget.charge(route, client)
    return refused.value


def test_a_client_past_its_budget_is_429_with_retry_after():
    budget = MissBudget(MissBudgetLimits(route_per_s=0, client_per_s=3))
    for _ in range(3):
        budget.charge("/r", "a")
    error = _refused(budget, "/r", "a")
    assert (error.code, error.status) == ("too_many_requests", 429)
    assert 1 <= int(error.headers["Retry-After"]) <= 2
    budget.charge("/r", "b")  # another client, and another route, still spend
    budget.charge("/other", "a")
    budget.charge("/r", None)  # an unknown client has no bound of its own here


def test_the_route_budget_bounds_every_client_together():
    budget = MissBudget(MissBudgetLimits(route_per_s=4, client_per_s=0))
    for client in ("a", "b", "c", None):
        budget.charge("/r", client)
    assert _refused(budget, "/r", "d").code == "too_many_requests"
    budget.charge("/other", "d")


def test_a_client_past_its_own_bound_does_not_spend_the_route_budget():
    budget = MissBudget(MissBudgetLimits(route_per_s=5, client_per_s=2))
    refused = 0
    for _ in range(50):
        try:
            budget.charge("/r", "hostile")
        except ApiError:
            refused += 1
    assert refused == 48
    for client in ("a", "b", "c"):
        budget.charge("/r", client)


def test_guarded_charges_only_when_the_load_runs():
    budget = MissBudget(MissBudgetLimits(route_per_s=1, client_per_s=0))
    calls: list[int] = []
    load = budget.guarded("/r", {"REMOTE_ADDR": "203.0.113.5"}, lambda: calls.append(1) or b"1")
    other = budget.guarded("/r", {"REMOTE_ADDR": "203.0.113.6"}, lambda: b"2")
    assert load() == b"1"  # wrapping spent nothing; the load spent one
    with pytest.raises(ApiError, match="too many cache misses"):
        other()
    assert calls == [1]


def test_off_is_the_load_itself():
    budget = MissBudget(MissBudgetLimits(0, 0))

    def load() -> bytes:
        return b"x"

    assert budget.guarded("/r", {}, load) is load


def test_settings_defaults_by_profile():
    production = load_settings(PRODUCTION)
    assert (production.miss_budget_route_per_s, production.miss_budget_client_per_s) == (500, 50)
    assert production.require_email_index is True and production.trusted_proxies == ()
    lab = load_settings({**BASE, "ASIDE_PROFILE": "lab"})
    assert (lab.miss_budget_route_per_s, lab.miss_budget_client_per_s) == (0, 0)
    assert lab.require_email_index is False
    given = load_settings(
        {
            **PRODUCTION,
            "GATEWAY_MISS_BUDGET_ROUTE_PER_S": "7",
            "GATEWAY_MISS_BUDGET_CLIENT_PER_S": "0",
            "GATEWAY_TRUSTED_PROXIES": "10.0.0.0/8, ::1",
            "GATEWAY_REQUIRE_EMAIL_INDEX": "0",
        }
    )
    assert (given.miss_budget_route_per_s, given.miss_budget_client_per_s) == (7, 0)
    assert given.trusted_proxies == PROXIES and given.require_email_index is False


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("GATEWAY_MISS_BUDGET_ROUTE_PER_S", "-1"),
        ("GATEWAY_MISS_BUDGET_CLIENT_PER_S", "many"),
        ("GATEWAY_TRUSTED_PROXIES", "10.0.0.0/8 proxy.example"),
        ("GATEWAY_REQUIRE_EMAIL_INDEX", "yes"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(name, value):
    with pytest.raises(ConfigError) as error:
        load_settings({**PRODUCTION, name: value})
    assert str(error.value).startswith(name) and "\n" not in str(error.value)
