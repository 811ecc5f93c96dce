"""The in-process Python engine of POST /api/v1/compute (lab only).

Each kind gives the same answer as the core's Go engine (contracts/compute.json):

* checksum(n) = sum over 0 <= i < n*100000 of ((i*i) % 1000) + 1. A plain
  loop on purpose: it holds the worker thread and the GIL for its whole run.
* pbkdf2: hashlib.pbkdf2_hmac (OpenSSL), PBKDF2-HMAC-SHA256, 32 bytes as hex.
* bcrypt: the `bcrypt` package; hashes under a fresh salt, or verifies.

OpenSSL and bcrypt release the GIL while they hash, so those two kinds take a
core but leave the worker's other threads and its event loop the interpreter;
the checksum makes them take turns with it. That difference is what the interference bench
measures. The PYTHON_COMPUTE_MAX_* caps keep each request under about half a
second, PYTHON_COMPUTE_MAX_CONCURRENCY bounds how many run at once.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable

import bcrypt

from aside_gateway.config import metrics
from aside_gateway.config.settings import Settings
from aside_gateway.contracts.errors import ApiError
from aside_gateway.contracts.validation import KIND_BCRYPT, KIND_CHECKSUM, KIND_PBKDF2, ComputeJob

ITERATIONS_PER_COMPLEXITY = 100_000
PBKDF2_KEY_BYTES = 32
ENGINE = "python"


def checksum(complexity: int) -> int:
    total = 0
    for i in range(complexity * ITERATIONS_PER_COMPLEXITY):
        total += (i * i) % 1000 + 1
    return total


def pbkdf2(password: bytes, salt: bytes, iterations: int) -> str:
    return hashlib.pbkdf2_hmac("sha256", password, salt, iterations, PBKDF2_KEY_BYTES).hex()


def bcrypt_hash(password: bytes, cost: int) -> str:
    """A hash under a fresh random salt: never the same twice."""
    return bcrypt.hashpw(password, bcrypt.gensalt(rounds=cost)).decode("ascii")


def bcrypt_verify(password: bytes, hashed: str) -> bool:
    """Hash password again with hashed's salt and cost, and compare."""
    return bcrypt.checkpw(password, hashed.encode("ascii"))


# Per kind: the job's parameter, the setting capping it, that setting's
# variable, and the code of a refusal.
_CAPS = {
    KIND_CHECKSUM: (
        "complexity", "python_compute_max_complexity", "PYTHON_COMPUTE_MAX_COMPLEXITY",
        "invalid_complexity",
    ),
    KIND_PBKDF2: (
        "iterations", "python_compute_max_pbkdf2_iterations",
        "PYTHON_COMPUTE_MAX_PBKDF2_ITERATIONS", "invalid_cost",
    ),
    KIND_BCRYPT: (
        "cost", "python_compute_max_bcrypt_cost", "PYTHON_COMPUTE_MAX_BCRYPT_COST", "invalid_cost",
    ),
}  # fmt: skip


def check_caps(job: ComputeJob, settings: Settings) -> None:
    """400 when the job asks the python engine for more than its cap."""
    name, setting, variable, code = _CAPS[job.kind]
    cap = getattr(settings, setting)
    if getattr(job, name) > cap:
        raise ApiError(code, f"the python engine takes {name} up to {cap} ({variable})")


def _work(job: ComputeJob) -> tuple[dict[str, object], Callable[[], dict[str, object]]]:
    """The answer's fixed fields, and the work that makes the rest."""
    if job.kind == KIND_PBKDF2:
        return {"iterations": job.iterations}, lambda: {
            "derived_key": pbkdf2(job.password, job.salt, job.iterations)
        }
    if job.kind == KIND_BCRYPT:
        hashed = job.hash
        if hashed is not None:
            return {"cost": job.cost}, lambda: {"match": bcrypt_verify(job.password, hashed)}
        return {"cost": job.cost}, lambda: {"hash": bcrypt_hash(job.password, job.cost)}
    return {"complexity": job.complexity}, lambda: {"checksum": checksum(job.complexity)}


def run(job: ComputeJob) -> dict[str, object]:
    """The API answer: the kind's result and how long the work took, in ms."""
    fixed, work = _work(job)
    started = time.perf_counter()
    result = work()
    elapsed_ms = (time.perf_counter() - started) * 1000
    return {
        "kind": job.kind,
        "engine": ENGINE,
        **fixed,
        **result,
        "elapsed_ms": round(elapsed_ms, 3),
    }


class Slots:
    """At most `size` python computations at once per worker; a caller waits
    up to `wait_s` for a slot, then gets 503 unavailable."""

    def __init__(self, size: int, wait_s: float):
        self._slots = threading.BoundedSemaphore(size)
        self._wait_s = wait_s

    def run(self, job: ComputeJob) -> dict[str, object]:
        if not self._slots.acquire(timeout=self._wait_s):
            metrics.shed("python_compute_busy")
            raise ApiError(
                "unavailable",
                "the python engine is at its concurrency limit; retry later",
                {"Retry-After": "1"},
            )
        try:
            return run(job)
        finally:
            self._slots.release()
