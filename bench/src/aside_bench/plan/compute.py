"""A compute request's body and what every answer must carry (contracts/compute.json). Pure."""

from __future__ import annotations

import hashlib
import json

ENGINES = ("go", "python")
KINDS = ("checksum", "pbkdf2", "bcrypt")
# An arm of compute work is an engine and a kind: python-bcrypt.
WORK_ARMS = tuple(f"{engine}-{kind}" for kind in KINDS for engine in ENGINES)

DEFAULT_PBKDF2_ITERATIONS = 600_000
DEFAULT_BCRYPT_COST = 10
PBKDF2_ITERATIONS_RANGE = (1, 1_000_000)
BCRYPT_COST_RANGE = (4, 12)
CHECKSUM_PER_COMPLEXITY = 46_250_000  # checksum(n) = n * 46,250,000
# Fixed inputs: every pbkdf2 answer of a run must be the same key.
PASSWORD = "aside-lab-password"
SALT = "aside-lab-salt-16"
BCRYPT_HASH = r"^\$2[aby]\$[0-9]{2}\$[./A-Za-z0-9]{53}$"


class ComputeError(ValueError):
    """A compute parameter is out of range; the message says which."""


def split_arm(arm: str) -> tuple[str, str]:
    """'python-bcrypt' -> ('python', 'bcrypt')."""
    engine, _, kind = arm.partition("-")
    if engine not in ENGINES or kind not in KINDS:
        raise ComputeError(f"arm must be <engine>-<kind>, one of {', '.join(WORK_ARMS)}")
    return engine, kind


def compute_request(
    arm: str, complexity: int, pbkdf2_iterations: int, bcrypt_cost: int
) -> tuple[dict[str, object], dict[str, object]]:
    """The body an arm's compute requests send and the fields answers must carry."""
    engine, kind = split_arm(arm)
    expect: dict[str, object] = {"kind": kind, "engine": engine}
    if kind == "pbkdf2":
        body = {"password": PASSWORD, "salt": SALT, "iterations": pbkdf2_iterations}
        key = hashlib.pbkdf2_hmac("sha256", PASSWORD.encode(), SALT.encode(), pbkdf2_iterations)
        expect["derived_key"] = key.hex()
    elif kind == "bcrypt":
        body = {"password": PASSWORD, "cost": bcrypt_cost}
        expect["cost"] = bcrypt_cost
    else:
        body = {"complexity": complexity}
        expect["checksum"] = complexity * CHECKSUM_PER_COMPLEXITY
    return {"kind": kind, "engine": engine, **body}, expect


def compute_variables(arm: str, work: tuple[int, int, int]) -> dict[str, str]:
    """The driver's compute variables; `work`: complexity, iterations, cost."""
    body, expect = compute_request(arm, *work)
    return {
        "COMPUTE_BODY": json.dumps(body, separators=(",", ":")),
        "COMPUTE_EXPECT": json.dumps(expect, separators=(",", ":")),
        "COMPUTE_HASH_PATTERN": BCRYPT_HASH,
    }
