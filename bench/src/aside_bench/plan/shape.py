"""The request mix of a run's steps (LoadShape), the same for every step."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aside_bench.plan import compute


@dataclass(frozen=True)
class LoadShape:
    """Knobs of the sweep's request mix, the same for every step of a run."""

    hot_share: float = 0.9
    cold_sample: int = 200
    # The keys' popularity (read, bare): hotset (the two samples above), uniform or zipf
    # (alpha) over the first `keys` keys of the key space (0: every distinct email).
    dist: str = "hotset"
    alpha: float = 0.99
    keys: int = 0
    # A key trace replayed instead of drawing keys (not with dist but hotset), and, when
    # timed, its requests a second (keytrace.timed_rate): scaled to each step's rate.
    trace: Path | None = None
    trace_rate: float | None = None
    write_share: float = 0.1
    complexity: int = 10
    timeout_s: int = 10
    # mixed: read-after-write checks a minute (0: none), each key's reads after a write.
    stale_per_min: int = 12
    stale_reads_after: int = 2
    # interference: the reads' fixed rate beside the compute; the work of the hashing kinds.
    read_rate: int = 500
    pbkdf2_iterations: int = compute.DEFAULT_PBKDF2_ITERATIONS
    bcrypt_cost: int = compute.DEFAULT_BCRYPT_COST
