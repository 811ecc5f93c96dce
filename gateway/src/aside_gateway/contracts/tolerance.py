"""contracts/tracks.json's tolerance: a plain decimal of degrees within its
bounds, answered at the largest level of the ladder not above it.

Free of the gateway's other modules, so that the settings read
CACHE_SIMPLIFY_TOLERANCE by the same rule as validation.parse_tolerance reads
a request's `simplify`.
"""

from __future__ import annotations

import re
from decimal import Decimal

# contracts/tracks.json "tolerance": degrees, a plain decimal.
TOLERANCE_MIN = Decimal("0.000001")
TOLERANCE_MAX = Decimal("0.01")
TOLERANCE_MAX_LENGTH = 16
# contracts/tracks.json "ladder": every tolerance is answered at the largest
# level not above it, so a track has at most len(TOLERANCE_LADDER) simplified
# cache entries whatever a client asks (docs/decisions/064-*.md).
TOLERANCE_LADDER = tuple(
    Decimal(level)
    for level in (
        "0.000001", "0.000002", "0.000005", "0.00001", "0.00002", "0.00005", "0.0001",
        "0.0002", "0.0005", "0.001", "0.002", "0.005", "0.01",
    )
)  # fmt: skip
_TOLERANCE_RE = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def tolerance_problem(raw: str) -> str | None:
    """Why `raw` is not a tolerance of contracts/tracks.json, or None."""
    bounds = f"{TOLERANCE_MIN:f} to {TOLERANCE_MAX:f}"
    # [0-9], not \d: other scripts' digits are not decimals here.
    if len(raw) > TOLERANCE_MAX_LENGTH or not _TOLERANCE_RE.fullmatch(raw):
        return f"simplify must be a plain decimal from {bounds} (degrees)"
    if not TOLERANCE_MIN <= Decimal(raw) <= TOLERANCE_MAX:
        return f"simplify must be from {bounds} (degrees)"
    return None


def snap_tolerance(value: Decimal) -> Decimal:
    """The largest level of the ladder not above `value` (within the bounds)."""
    return max(level for level in TOLERANCE_LADDER if level <= value)


def canonical(raw: str) -> str:
    """The ladder level of a tolerance in canonical text (no leading zeros
    before the point, no trailing zeros after it): the cache key's and the
    answer's. ValueError, saying why, if `raw` is not a tolerance."""
    problem = tolerance_problem(raw)
    if problem:
        raise ValueError(problem)
    return format(snap_tolerance(Decimal(raw)).normalize(), "f")
