"""Cache strategies over two tiers: L1 (the worker's memory, tiers/l1.py) and L2
(Redis with leases, tiers/l2.py).

* `l2`: Redis only, as tiers/l2.py does it;
* `l1`: the worker's memory only, filled from PostgreSQL; no Redis for the
  route at all, so only the L1 TTL and the invalidation messages bound
  staleness (while the subscription is down the reads go to PostgreSQL);
* `hybrid`: L1, then Redis (and its lease protocol on a miss), storing in L1
  what Redis or the fill returned;
* `tracking`: as hybrid, but with an L1 of its own (`tracked`) that Redis's
  client tracking keeps (tiers/tracking.py) instead of the core's channel, and that
  stores only a value Redis held when it was read (`CacheRead.in_redis`):
  Redis reports changes to the keys it holds, not to absent ones.

Every L1 store goes through the token check of tiers/l1.py, so a value read while
an invalidation arrived is never kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from aside_gateway.config import metrics
from aside_gateway.contracts import cache_keys
from aside_gateway.contracts.routes import EarlyGet
from aside_gateway.tiers.hooks import TestHooks
from aside_gateway.tiers.l1 import L1Cache
from aside_gateway.tiers.l2 import BYPASS, HIT, MISS, STALE, Cache, CacheRead

L1 = "l1"
L2 = "l2"


class TieredCache:
    def __init__(
        self,
        l1: L1Cache,
        l2: Cache,
        hooks: TestHooks | None = None,
        tracked: L1Cache | None = None,
    ):
        self.l1 = l1
        self.l2 = l2
        self.hooks = hooks
        # The tracking strategy's L1; a worker without one serves that strategy from Redis.
        self.tracked = tracked

    def l1_of(self, strategy: str) -> L1Cache | None:
        """The L1 a strategy reads, None for l2 (and for tracking without its L1)."""
        if strategy == cache_keys.STRATEGY_TRACKING:
            return self.tracked
        return None if strategy == cache_keys.STRATEGY_L2 else self.l1

    def read_through(
        self,
        route: str,
        key: str,
        load: Callable[[], bytes],
        strategy: str,
        hold: str | None = None,
        early_get: EarlyGet | None = None,
    ) -> CacheRead:
        l1 = self.l1_of(strategy)
        if l1 is None:
            return self._from_l2(route, key, load, hold, early_get)
        value = l1.get(key)
        if value is not None:
            metrics.tier_read(route, L1, "hit")
            return CacheRead(value, HIT, tier=L1)
        metrics.tier_read(route, L1, "miss")
        if strategy == cache_keys.STRATEGY_L1:
            return self._fill_from_database(key, load, hold)
        # The token must predate the Redis GET: the hot path's, when it did the GET.
        if early_get is not None and early_get.key == key and early_get.l1_token is not None:
            token = early_get.l1_token
        else:
            token = l1.token(key)
        result = self._from_l2(route, key, load, hold, early_get)
        tracked = strategy == cache_keys.STRATEGY_TRACKING
        # A stale answer (swr) never enters L1: it would outlive its bound there.
        fresh = result.outcome not in (BYPASS, STALE)
        if fresh and not result.error and (result.in_redis or not tracked):
            l1.put(key, result.value, token, result.life_ms)
        return result

    def _from_l2(
        self,
        route: str,
        key: str,
        load: Callable[[], bytes],
        hold: str | None,
        early_get: EarlyGet | None,
    ) -> CacheRead:
        result = self.l2.read_through(route, key, load, hold, early_get)
        if result.outcome in (HIT, STALE):
            result.tier = L2
            metrics.tier_read(route, L2, "hit")
        elif result.outcome == MISS:
            metrics.tier_read(route, L2, "miss")
        return result

    def _fill_from_database(
        self, key: str, load: Callable[[], bytes], hold: str | None
    ) -> CacheRead:
        token = self.l1.token(key)
        value = load()
        if hold and self.hooks:
            self.hooks.hold(hold)  # lab: let a test write between the read and the store
        self.l1.put(key, value, token)
        return CacheRead(value, MISS)

    def before_write(self, user_id: int | None) -> bytes | None:
        """What a user write needs to know before it is forwarded: this worker's
        L1 copy of the user (the old email of an update or delete)."""
        if user_id is None:
            return None
        key = cache_keys.user_key(user_id)
        held = self.l1.peek(key)
        if held is None and self.tracked is not None:
            held = self.tracked.peek(key)
        return held

    def after_write(
        self, method: str, user_id: int | None, status: int, body: bytes, previous: bytes | None
    ) -> None:
        """Evict a successful forwarded write's keys before answering it, so a client
        reading through this worker sees its own write without waiting for the message."""
        if 200 <= status < 300:
            keys = written_keys(method, user_id, body, previous)
            self.l1.evict(keys)
            if self.tracked is not None:
                self.tracked.evict(keys)


def written_keys(
    method: str, user_id: int | None, answer_body: bytes, previous_user: bytes | None
) -> list[str]:
    """The keys a successful user write made stale, from the core's answer and, for
    the old email of an update or delete, this worker's L1 copy of the user
    (`previous_user`, read before forwarding). A count cached without its user
    is left to the core's invalidation message."""
    old_email = _email_of(previous_user)
    if method == "POST":
        user = _json_object(answer_body) or {}
        new_id, email = user.get("id"), user.get("email")
        if not isinstance(new_id, int) or not isinstance(email, str):
            return []
        return cache_keys.stale_after_create(new_id, email)
    if user_id is None:
        return []
    if method == "PATCH":
        user = _json_object(answer_body)
        new_email = user.get("email") if user else None
        if not isinstance(new_email, str):
            return [cache_keys.user_key(user_id)]
        return cache_keys.stale_after_update(user_id, old_email or new_email, new_email)
    if method == "DELETE":
        if old_email is None:
            return [cache_keys.user_key(user_id)]
        return cache_keys.stale_after_delete(user_id, old_email)
    return []


def _json_object(body: bytes | None) -> dict | None:
    if not body:
        return None
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _email_of(user_body: bytes | None) -> str | None:
    user = _json_object(user_body)
    email = user.get("email") if user else None
    return email if isinstance(email, str) else None
