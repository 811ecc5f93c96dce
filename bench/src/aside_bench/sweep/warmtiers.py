"""The L1 tier's cold and warm states, through every gateway worker."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import requests

from aside_bench.records.documents import WarmFill
from aside_bench.records.tierstats import tier_hit_rates
from aside_bench.stack import prepare
from aside_bench.stack.config import Settings
from aside_bench.stack.gateway_metrics import scrape, tier_read_counts, unlabelled_value
from aside_bench.stack.prepare import StackError

L1_TARGET_SHARE = 0.95
L1_MAX_PASSES = 12
# Many requests in flight: a worker's misses batch into few scans.
WARM_THREADS = 32
L1_EMPTY_DEADLINE_S = 120.0
# contracts/cache.json `tiers.invalidation_channel` (a unit test keeps them equal).
INVALIDATION_CHANNEL = "aside:v1:invalidations"


def flush_message(now_s: float) -> bytes:
    """contracts/cache.json `tiers.flush_message`: every listening worker empties its L1."""
    return json.dumps({"flush": True, "published_ms": int(now_s * 1000)}).encode()


def announce_l1_flush(settings: Settings) -> int:
    """Publish the flush message; the number of workers that heard it."""
    with prepare.redis_client(settings, "publish the L1 flush") as client:
        return int(client.publish(INVALIDATION_CHANNEL, flush_message(time.time())))


def _read_fresh(gateway_url: str, email: str, mode: str) -> str:
    # A connection of its own each: the reads land on every worker's L1.
    with prepare.gateway_session() as session:
        response = session.get(
            prepare.count_url(gateway_url, email, mode), headers={"Connection": "close"}, timeout=30
        )
    response.raise_for_status()
    return response.headers.get("X-Cache-Tier", "")


def warm_l1(settings: Settings, emails: list[str], mode: str, flush: bool = True) -> WarmFill:
    """Fill L1 (hybrid and tracking through a flushed Redis) until a pass hits its target."""
    if flush and mode in ("hybrid", "tracking"):
        # Redis and every worker's L1 together: with L1 full the passes would never refill Redis.
        prepare.flush_cache(settings)
        wait_l1_empty(settings)
    started = time.monotonic()
    shares: list[float | None] = []
    try:
        with ThreadPoolExecutor(WARM_THREADS) as pool:
            for _ in range(L1_MAX_PASSES):
                before = tier_read_counts(scrape(settings))
                list(pool.map(lambda e: _read_fresh(settings.gateway_url, e, mode), emails))
                after = tier_read_counts(scrape(settings))
                shares.append(tier_hit_rates(before, after)["l1"])
                if (shares[-1] or 0.0) >= L1_TARGET_SHARE:
                    break
    except requests.RequestException as error:
        raise StackError(f"warming L1 through the gateway failed: {error}") from error
    last = shares[-1] or 0.0
    return WarmFill(
        keys=len(emails),
        fill_s=round(time.monotonic() - started, 2),
        passes=len(shares),
        l1_hit_share_by_pass=[None if s is None else round(s, 4) for s in shares],
        hit_share_after=round(last, 4),
        reached=last >= L1_TARGET_SHARE,
    )


def wait_l1_empty(settings: Settings, deadline_s: float = L1_EMPTY_DEADLINE_S) -> float:
    """Announce an L1 flush and wait until no worker holds an entry; the seconds waited."""
    started = time.monotonic()
    announce_l1_flush(settings)
    while True:
        try:
            entries = unlabelled_value(scrape(settings), "aside_gateway_l1_entries")
        except requests.RequestException as error:
            raise StackError(f"cannot read the L1 gauge at /metrics: {error}") from error
        if not entries:
            return time.monotonic() - started
        if time.monotonic() - started > deadline_s:
            raise StackError(
                f"L1 still holds {entries:.0f} entries {deadline_s:.0f} s after the flush "
                "(CACHE_L1_TTL_SECONDS longer than the wait?)"
            )
        time.sleep(0.5)
