"""The lease holder's store script is the contract's (contracts/store_if_lease_held.lua)."""

from __future__ import annotations

from aside_gateway import cache
from gateway_helpers import CONTRACTS


def script_lines(source: str) -> list[str]:
    """Statements in order, without comments, blank lines or indentation."""
    lines = (line.strip() for line in source.splitlines())
    return [line for line in lines if line and not line.startswith("--")]


def test_store_script_is_the_contracts() -> None:
    contract = (CONTRACTS / "store_if_lease_held.lua").read_text()
    assert script_lines(cache.STORE_IF_LEASE_HELD) == script_lines(contract)
