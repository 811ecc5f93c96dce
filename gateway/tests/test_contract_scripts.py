"""The lease holder's store script is one file: the gateway's, which the
contract (contracts/store_if_lease_held.lua) links to and the core's test
reader runs."""

from __future__ import annotations

from pathlib import Path

import aside_gateway
from aside_gateway.tiers import l2
from gateway_helpers import CONTRACTS

SCRIPT = Path(aside_gateway.__file__).parent / "scripts" / "store_if_lease_held.lua"


def test_the_contract_is_the_gateways_script() -> None:
    contract = CONTRACTS / "store_if_lease_held.lua"
    assert contract.resolve() == SCRIPT.resolve(), f"{contract} must link to {SCRIPT}"


def test_the_gateway_runs_that_script() -> None:
    assert SCRIPT.read_text() == l2.STORE_IF_LEASE_HELD
    assert "redis.call('DEL', KEYS[2])" in l2.STORE_IF_LEASE_HELD
