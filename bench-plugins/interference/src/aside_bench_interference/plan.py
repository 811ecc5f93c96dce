"""The interference scenario's plan (pure): does CPU work beside cached reads slow them,
by where it runs (Go core, gateway's Python) and what it is (GIL-holding or not)? Reads at
`--read-rate` through a warm cache beside POST /api/v1/compute at the step's rate."""

from __future__ import annotations

from aside_bench.plan import compute

SCENARIO = "interference"
# The driver's scenario of the compute requests; the reads' is SCENARIO.
COMPUTE_SCENARIO = "interference_compute"
# An arm is an engine and a kind: python-bcrypt.
ARMS = compute.WORK_ARMS
DEFAULT_ARMS = ARMS
DEFAULT_RATES = (0, 2, 5, 10, 20)
# The reads are the cache arm's, warm: what a step's latency and drops describe.
READ_CACHE_PARAM = "l2"
PHASE = "warm"


def driver_variables(
    arm: str, read_rate: int, read_pool: int, work: tuple[int, int, int]
) -> dict[str, str]:
    """The driver's interference variables: the reads' rate, pool, tier, and the compute."""
    return {
        "READ_RATE": str(read_rate),
        "READ_POOL": str(read_pool),
        "READ_CACHE": READ_CACHE_PARAM,
        **compute.compute_variables(arm, work),
    }


def check_work(pbkdf2_iterations: int, bcrypt_cost: int) -> None:
    """Within the contract's bounds (the python engine's refusals count as failures)."""
    low, high = compute.PBKDF2_ITERATIONS_RANGE
    if not low <= pbkdf2_iterations <= high:
        raise compute.ComputeError(f"--pbkdf2-iterations must be from {low} to {high}")
    low, high = compute.BCRYPT_COST_RANGE
    if not low <= bcrypt_cost <= high:
        raise compute.ComputeError(f"--bcrypt-cost must be from {low} to {high}")
