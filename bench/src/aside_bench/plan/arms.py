"""The arms a sweep compares: what each reads through, its ?cache= value, its gateway settings."""

from __future__ import annotations

import re

# Arms that read no cache: no phase; the cached arms are measured against them.
# `coalesce` batches its count misses as the cache arm does and stores nothing.
UNCACHED_ARMS = ("nocache", "index", "coalesce", "nopool")
CEILING_ARMS = ("cache", "l1", "hybrid", "tracking", "healthz")
# The ceiling's reference: the warm cache arm's reads sent by the driver's `bare`
# scenario (no check but the status), so the checks' own cost is left out of it.
BARE_ARM = "cache-bare"
# Arms that read through a cache tier: each has a cold and a warm phase.
TIERED_ARMS = ("cache", "l1", "hybrid", "tracking", "l1-ttl")
# Arms that read through the worker's L1 tier.
L1_ARMS = ("l1", "hybrid", "tracking", "l1-ttl")
# Other names accepted for an arm; `cache` stays the L2 arm's name in reports.
ARM_ALIASES = {"l2": "cache"}
# The ?cache= value each read arm sends (the driver's CACHE variable), in the arms' order.
CACHE_PARAMS = {
    "nocache": "off", "coalesce": "coalesce", "cache": "l2", "index": "off", "l1": "l1",
    "hybrid": "hybrid", "tracking": "tracking", "l1-ttl": "l1", "nopool": "nopool",
    BARE_ARM: "l2",
}  # fmt: skip
# The read and mixed scenarios' arms (the ceiling's reference is no arm of theirs).
CACHE_ARMS = tuple(arm for arm in CACHE_PARAMS if arm != BARE_ARM)
# The ?cache= values whose reads go through Redis (its counters read around their steps).
REDIS_READS = ("l2", "hybrid", "tracking")
# Arms the gateway restarts for: `l1-ttl` is l1 with the invalidation channel off
# (a lab switch), so only the L1 TTL bounds staleness.
GATEWAY_ENV = {"l1-ttl": {"CACHE_L1_INVALIDATION": "off"}}
# Every arm but `tracking` runs with tracking off (a lab switch): in broadcast mode Redis
# sends every change of a cached key to every worker, work no other strategy does.
UNTRACKED_ENV = {"CACHE_L1_TRACKING": "off"}


def base_arm(arm: str) -> str:
    """The arm without its bound or distance: `cache@4mb~same-zone` -> `cache`."""
    return re.split(r"[@~]", arm, maxsplit=1)[0]


def cache_param(arm: str) -> str | None:
    """The ?cache= value of a read arm; None for arms that read no count."""
    return CACHE_PARAMS.get(base_arm(arm))
