"""The interference scenario, registered here and only here: its name, arms,
rates and what its driver run needs (pure; plan/steps.py, load/run.py, cli/commands.py
and sweep/collect.py read it, report/interference.py writes its report).

The question: does CPU work next to the cached reads slow them down, and does
it matter where it runs (the Go core, or the gateway's own Python beside its
event loop) and what it is (a loop holding the GIL, or a hash that releases
it)? Every step runs the read mix through a warm Redis cache at a fixed rate
(`--read-rate`, 500/s) and, beside it, POST /api/v1/compute at the step's rate
(0 2 5 10 20/s) with the arm's engine and kind. A step's latency and drops are
the reads'; the compute requests are a second scenario of the driver whose throughput and
latency the report puts next to them. Rate 0 is the reads alone.
"""

from __future__ import annotations

import hashlib
import json

SCENARIO = "interference"
# The driver's scenario of the compute requests; the reads' is SCENARIO.
COMPUTE_SCENARIO = "interference_compute"
ENGINES = ("go", "python")
KINDS = ("checksum", "pbkdf2", "bcrypt")
# An arm is an engine and a kind: python-bcrypt.
ARMS = tuple(f"{engine}-{kind}" for kind in KINDS for engine in ENGINES)
DEFAULT_ARMS = ARMS
DEFAULT_RATES = (0, 2, 5, 10, 20)
DEFAULT_READ_RATE = 500
# The reads are the cache arm's, warm: what a step's latency and drops describe.
READ_CACHE_PARAM = "l2"
PHASE = "warm"

# The work of each kind: contracts/compute.json's defaults and bounds.
DEFAULT_PBKDF2_ITERATIONS = 600_000
DEFAULT_BCRYPT_COST = 10
PBKDF2_ITERATIONS_RANGE = (1, 1_000_000)
BCRYPT_COST_RANGE = (4, 12)
CHECKSUM_PER_COMPLEXITY = 46_250_000  # checksum(n) = n * 46,250,000
# Fixed inputs: every pbkdf2 answer of a run must be the same key.
PASSWORD = "aside-lab-password"
SALT = "aside-lab-salt-16"
BCRYPT_HASH = r"^\$2[aby]\$[0-9]{2}\$[./A-Za-z0-9]{53}$"


class InterferenceError(ValueError):
    """An interference parameter is out of range; the message says which."""


def split_arm(arm: str) -> tuple[str, str]:
    """'python-bcrypt' -> ('python', 'bcrypt')."""
    engine, _, kind = arm.partition("-")
    if engine not in ENGINES or kind not in KINDS:
        raise InterferenceError(f"arm must be <engine>-<kind>, one of {', '.join(ARMS)}")
    return engine, kind


def check_work(pbkdf2_iterations: int, bcrypt_cost: int) -> None:
    """The costs must be within the contract's bounds (the python engine's own
    caps may be lower: PYTHON_COMPUTE_MAX_*; its refusals count as failures)."""
    low, high = PBKDF2_ITERATIONS_RANGE
    if not low <= pbkdf2_iterations <= high:
        raise InterferenceError(f"--pbkdf2-iterations must be from {low} to {high}")
    low, high = BCRYPT_COST_RANGE
    if not low <= bcrypt_cost <= high:
        raise InterferenceError(f"--bcrypt-cost must be from {low} to {high}")


def compute_request(
    arm: str, complexity: int, pbkdf2_iterations: int, bcrypt_cost: int
) -> tuple[dict[str, object], dict[str, object]]:
    """The body an arm's compute requests send, and the fields every answer
    must carry exactly (a bcrypt hash, salted at random, is checked for its
    format by the driver)."""
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
    """The driver's compute request of `arm` (<engine>-<kind>) and what every
    answer must carry; `work` is (complexity, pbkdf2 iterations, bcrypt cost)."""
    body, expect = compute_request(arm, *work)
    return {
        "COMPUTE_BODY": json.dumps(body, separators=(",", ":")),
        "COMPUTE_EXPECT": json.dumps(expect, separators=(",", ":")),
        "COMPUTE_HASH_PATTERN": BCRYPT_HASH,
    }


def driver_variables(
    arm: str, read_rate: int, read_pool: int, work: tuple[int, int, int]
) -> dict[str, str]:
    """What the driver's interference scenario reads beside the variables of
    every run: the reads' rate, pool and tier, and the compute request."""
    return {
        "READ_RATE": str(read_rate),
        "READ_POOL": str(read_pool),
        "READ_CACHE": READ_CACHE_PARAM,
        **compute_variables(arm, work),
    }
