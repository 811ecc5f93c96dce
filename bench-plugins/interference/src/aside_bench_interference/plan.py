"""The interference scenario's plan (pure): its name, arms, rates and what its
driver run needs; scenario.py registers it, report.py writes its report.

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
    """What the driver's interference scenario reads beside the variables of
    every run: the reads' rate, pool and tier, and the compute request."""
    return {
        "READ_RATE": str(read_rate),
        "READ_POOL": str(read_pool),
        "READ_CACHE": READ_CACHE_PARAM,
        **compute.compute_variables(arm, work),
    }


def check_work(pbkdf2_iterations: int, bcrypt_cost: int) -> None:
    """The costs must be within the contract's bounds (the python engine's own
    caps may be lower: PYTHON_COMPUTE_MAX_*; its refusals count as failures)."""
    low, high = compute.PBKDF2_ITERATIONS_RANGE
    if not low <= pbkdf2_iterations <= high:
        raise compute.ComputeError(f"--pbkdf2-iterations must be from {low} to {high}")
    low, high = compute.BCRYPT_COST_RANGE
    if not low <= bcrypt_cost <= high:
        raise compute.ComputeError(f"--bcrypt-cost must be from {low} to {high}")
