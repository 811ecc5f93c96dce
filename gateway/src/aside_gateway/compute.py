"""The in-process Python arm of POST /api/v1/compute.

checksum(n) = sum over 0 <= i < n*100000 of ((i*i) % 1000) + 1, the same sum
as the core's Go arm (contracts/compute.json). It is a plain loop on purpose:
the point is to measure CPU work, and it holds the worker thread and the GIL
for its whole run, which is why PYTHON_COMPUTE_MAX_COMPLEXITY caps it.
"""

from __future__ import annotations

import time

ITERATIONS_PER_COMPLEXITY = 100_000


def checksum(complexity: int) -> int:
    total = 0
    for i in range(complexity * ITERATIONS_PER_COMPLEXITY):
        total += (i * i) % 1000 + 1
    return total


def run(complexity: int) -> dict[str, object]:
    """The API answer: checksum and how long it took, in milliseconds."""
    started = time.perf_counter()
    value = checksum(complexity)
    elapsed_ms = (time.perf_counter() - started) * 1000
    return {
        "complexity": complexity,
        "engine": "python",
        "checksum": value,
        "elapsed_ms": round(elapsed_ms, 3),
    }
