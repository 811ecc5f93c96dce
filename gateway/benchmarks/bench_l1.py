"""What an L1 hit costs: `L1Cache.get` of entries stored with a life of their
own (an enveloped value: early, swr) and without (a bare value), against
cachetools' TTLCache behind the same lock, the structure the tier used for
a bare value before every entry could carry its own life.

    /tmp/heavy .venv/bin/python gateway/benchmarks/bench_l1.py [--gets 200000] [--repeats 5]

10,000 entries of a count's size; each repeat reads 100 of them in turn,
`gets` reads in all. The figure is wall time per get in this process (no
other work in it); each repeat's, then min/median/max.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable

os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="bench-l1-"))

from aside_gateway.tiers.l1 import L1Cache
from cachetools import TTLCache

KEYS = [f"aside:v1:{{count:user{i}@example.com}}" for i in range(10_000)]
VALUE = b'{"count":1}'
READ = KEYS[:100]
TTL_S = 30


def tier(life_ms: int | None) -> Callable[[str], bytes | None]:
    l1 = L1Cache(len(KEYS), 1 << 28, TTL_S, needs_subscription=False)
    for key in KEYS:
        l1.put(key, VALUE, l1.token(key), life_ms)
    return l1.get


def ttl_cache() -> Callable[[str], bytes | None]:
    cache: TTLCache[str, tuple[bytes, int]] = TTLCache(maxsize=len(KEYS), ttl=TTL_S)
    lock = threading.Lock()
    for key in KEYS:
        cache[key] = (VALUE, len(VALUE))

    def get(key: str) -> bytes | None:
        with lock:
            entry = cache.get(key)
        return None if entry is None else entry[0]

    return get


def ns_per_get(get: Callable[[str], bytes | None], gets: int) -> float:
    rounds = gets // len(READ)
    started = time.perf_counter()
    for _ in range(rounds):
        for key in READ:
            get(key)
    return (time.perf_counter() - started) / (rounds * len(READ)) * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gets", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    arms = {
        "L1Cache, each entry its own life": tier(20_000),
        "L1Cache, the tier's TTL": tier(None),
        "TTLCache behind a lock (reference)": ttl_cache(),
    }
    figures: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(args.repeats):  # arms in turn, so a drift of the machine lands in each
        for name, get in arms.items():
            figures[name].append(ns_per_get(get, args.gets))
    for name, found in figures.items():
        print(
            f"{name:36s} ns/get min {min(found):6.0f}  median {statistics.median(found):6.0f}"
            f"  max {max(found):6.0f}"
        )


if __name__ == "__main__":
    main()
