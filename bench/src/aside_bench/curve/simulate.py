"""A key stream replayed through libCacheSim's caches: each policy's hit ratio at each size in
keys; Belady's next accesses annotated as its oracle traces are (docs/decisions/044)."""

from __future__ import annotations

import math
import struct
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

# Display name -> libCacheSim's class: LRU (what allkeys-lru samples towards), LFU
# (allkeys-lfu), S3-FIFO and SIEVE (recent, FIFO-based), Belady (the offline optimum).
POLICIES = {"LRU": "LRU", "LFU": "LFU", "S3-FIFO": "S3FIFO", "SIEVE": "Sieve", "Belady": "Belady"}
# libCacheSim reads a next access this far ahead as "never again".
NEVER = 2**62
# The smallest cache drawn: S3-FIFO's small queue, a tenth, must hold a key (libCacheSim aborts).
MIN_CAPACITY = 10
# The others simulate any size from one key: an arm that held fewer is compared at its own.
POLICY_MIN_CAPACITY = {"S3-FIFO": MIN_CAPACITY}


def policies_at(size: int) -> list[str]:
    """The policies libCacheSim can simulate with `size` keys."""
    return [policy for policy in POLICIES if size >= POLICY_MIN_CAPACITY.get(policy, 1)]


@dataclass(frozen=True)
class Stream:
    """Keys in the order sent; the first `warmup` fill the cache without counting."""

    keys: Sequence[str]
    warmup: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.warmup <= len(self.keys):
            raise ValueError(f"warm-up {self.warmup} outside a stream of {len(self.keys)} keys")

    @property
    def measured(self) -> int:
        return len(self.keys) - self.warmup


@dataclass(frozen=True)
class CurvePoint:
    policy: str
    capacity: int  # keys the cache holds
    hit_ratio: float  # over the stream's measured part


def object_ids(keys: Sequence[str]) -> list[int]:
    """Each distinct key a small whole number, in order of first appearance."""
    ids: dict[str, int] = {}
    return [ids.setdefault(key, len(ids)) for key in keys]


def next_accesses(ids: Sequence[int]) -> list[int]:
    """For each request, the place of the next request for the same key (NEVER: none)."""
    following = [NEVER] * len(ids)
    seen: dict[int, int] = {}
    for place in range(len(ids) - 1, -1, -1):
        following[place] = seen.get(ids[place], NEVER)
        seen[ids[place]] = place
    return following


def hit_ratio(stream: Stream, policy: str, capacity: int) -> float:
    """The share of the measured requests a `policy` cache of `capacity` keys hits."""
    return curve(stream, [capacity], [policy])[0].hit_ratio


def write_oracle_trace(path: Path, ids: Sequence[int], following: Sequence[int]) -> None:
    """libCacheSim's oracleGeneral records, one per request."""
    record = struct.Struct("<IQIq")
    with path.open("wb") as out:
        for place, (obj, nxt) in enumerate(zip(ids, following, strict=True)):
            out.write(record.pack(place, obj + 1, 1, -1 if nxt == NEVER else nxt))


def _libcachesim() -> ModuleType:
    """Imported when a curve is drawn: it takes half a second (boto3 with it)."""
    import libcachesim

    return libcachesim


class CurveUnavailable(RuntimeError):
    """libcachesim, the bench's optional `curve` extra, is not installed."""


def simulator() -> ModuleType:
    """libcachesim, or CurveUnavailable: it is GPL, so optional (decision 055)."""
    try:
        return _libcachesim()
    except ImportError as error:
        raise CurveUnavailable(
            "libcachesim, the bench's optional curve extra (GPL-3.0-or-later), is not "
            f"installed ({error}); make install puts it back"
        ) from error


def _hits(reader: Any, cache_type: type, capacity: int, requests: int) -> float:
    """Hits of a fresh cache over the first `requests` requests of the trace."""
    reader.reset()
    miss_ratio, _ = cache_type(cache_size=capacity).process_trace(reader, max_req=requests)
    return (1.0 - miss_ratio) * requests


def _measured_hit_ratio(reader: Any, stream: Stream, cache_type: type, capacity: int) -> float:
    """The measured part's hit ratio: all hits less the warm-up's alone."""
    total = _hits(reader, cache_type, capacity, len(stream.keys))
    before = _hits(reader, cache_type, capacity, stream.warmup) if stream.warmup else 0.0
    return max(total - before, 0.0) / stream.measured


def capacities(distinct: int, also: Sequence[int] = (), points: int = 12) -> list[int]:
    """Log-spaced cache sizes from 1 % of the distinct keys to all, with `also`."""
    if distinct < 1:
        return []
    low = max(MIN_CAPACITY, distinct // 100)
    if distinct <= low:
        return [low]
    spaced = {
        round(math.exp(math.log(low) + (math.log(distinct) - math.log(low)) * i / (points - 1)))
        for i in range(points)
    }
    return sorted(spaced | {size for size in also if size >= MIN_CAPACITY})


def curve(
    stream: Stream, sizes: Sequence[int], policies: Sequence[str] = tuple(POLICIES)
) -> list[CurvePoint]:
    """Every policy's hit ratio at every size, on one stream."""
    unknown = [policy for policy in policies if policy not in POLICIES]
    if unknown:
        raise ValueError(f"unknown policies {unknown}; choose from {', '.join(POLICIES)}")
    if stream.measured == 0:
        raise ValueError("the stream has no measured request")
    for policy in policies:
        least = POLICY_MIN_CAPACITY.get(policy, 1)
        if any(size < least for size in sizes):
            raise ValueError(
                f"a simulated {policy} cache holds at least {least} keys, got {list(sizes)}"
            )
    ids = object_ids(stream.keys)
    with tempfile.TemporaryDirectory(prefix="aside-curve-") as folder:
        path = Path(folder) / "stream.oracleGeneral"
        write_oracle_trace(path, ids, next_accesses(ids))
        # Freed with its object: closing it as well frees it twice.
        lcs = simulator()
        reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
        types = {policy: getattr(lcs, POLICIES[policy]) for policy in policies}
        return [
            CurvePoint(policy, size, _measured_hit_ratio(reader, stream, types[policy], size))
            for policy in policies
            for size in sizes
        ]
