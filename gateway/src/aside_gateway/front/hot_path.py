"""The async hot path: cache hits, /healthz and user writes answered on the event loop.

`AsyncHotPath` is the ASGI app in front of Flask. It recognises the one shape
the benchmark hammers, `GET /api/v1/users/count?email=E` or
`GET /api/v1/users/<id>` with valid input and the cache on, looks in the
worker's L1 tier (strategies l1 and hybrid: no Redis call on an L1 hit) and
then, unless the strategy is l1, does the Redis GET, and answers a hit itself
with the same body, headers and metrics as the Flask route; the user writes
that front/loop_writes.py takes are forwarded on the loop too. Everything else goes
to Flask (`fallback`): misses, negative entries, Redis errors, cache=off, bad
input, every other route. A GET that fell through travels
with the request as an `EarlyGet`, so Flask neither repeats it nor counts it
twice.

A miss whose key another request of the worker is already filling does not
go to Flask at once: it waits for that fill on the event loop, holding no
Flask thread (coalesce.LoopFlights), then looks in the cache once more and
answers a hit itself; only if there is still no value does Flask answer it.

Every request passes the event loop's door first (door/loop_admission.py): past
the worker's capacity it is answered 503 at once, before any of the above.

Why hits skip Flask: see docs/decisions/001-asgi-hot-path.md; why followers wait
here: docs/decisions/011-followers-wait-on-the-event-loop.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from aside_gateway.backends import redis_reads
from aside_gateway.backends.breaker import CircuitBreaker
from aside_gateway.backends.redis_errors import REDIS_ERRORS
from aside_gateway.config import metrics
from aside_gateway.config.settings import Settings
from aside_gateway.contracts import cache_keys
from aside_gateway.contracts.routes import (
    ARRIVED_KEY,
    EARLY_GET_KEY,
    HEALTHZ_BODY,
    HEALTHZ_PATH,
    START_KEY,
    AsgiApp,
    EarlyGet,
    Receive,
    Scope,
    Send,
)
from aside_gateway.door import loop_admission
from aside_gateway.door.lateness import LoopLag, is_timeout
from aside_gateway.door.loop_admission import PASSED_KEY, SHED_ROUTE, LoopAdmission, refuse
from aside_gateway.door.miss_hold import MissHolds
from aside_gateway.front.lookup import Answer, Lookup, Meanwhile, Miss, remembered_lookup
from aside_gateway.front.loop_writes import LoopWrites
from aside_gateway.front.refresh_behind import RefreshBehind
from aside_gateway.misses.coalesce import LoopFlights
from aside_gateway.services import ReadinessCache, Verdict
from aside_gateway.tiers import expiry
from aside_gateway.tiers.expiry import ExpiryPolicy
from aside_gateway.tiers.invalidations import LoopInvalidationSubscriber
from aside_gateway.tiers.l1 import L1Cache
from aside_gateway.tiers.l2 import FOLLOW_TIMEOUT_S, HIT, STALE
from aside_gateway.tiers.tracking import TrackingSubscriber

log = logging.getLogger("aside_gateway")


TEST_HOLD_HEADER = b"x-test-hold"
# The lab's hook that makes the event loop late by its own work: a read with
# this header (milliseconds, at most TEST_STALL_MAX_MS) holds the loop first.
TEST_STALL_HEADER = b"x-test-stall-ms"
TEST_STALL_MAX_MS = 1000
# The operational routes Flask answers (/healthz is answered here) run in a
# pool of their own, not queued behind the reads in Flask's (whose admission
# sheds what waited too long): an overloaded worker still says so. At most
# OPS_PENDING_MAX of them wait or run at once; one more is answered 503.
READYZ_PATH = "/readyz"
OPS_PATHS = frozenset({READYZ_PATH, "/metrics"})
OPS_THREADS = 2
OPS_PENDING_MAX = 16


# ---- the event-loop side ----------------------------------------------------------


class EarlyGetClient:
    """The hot path's GET on an asyncio Redis client, behind the same circuit
    breaker as the Flask side's client (l2.Cache)."""

    def __init__(self, settings: Settings, breaker: CircuitBreaker):
        self._settings = settings
        self._breaker = breaker
        self._client: redis_reads.Reads | None = None

    def _redis(self) -> redis_reads.Reads:
        # Built on first use, inside the worker's event loop that it belongs to.
        # Its GET keeps one deadline (REDIS_TIMEOUT_MS) for connection wait,
        # send and reply together: backends/redis_reads.py.
        if self._client is None:
            self._client = redis_reads.loop_reads(self._settings)
        return self._client

    async def get(self, key: str, l1_token: tuple[int, int] | None = None) -> EarlyGet | None:
        """GET `key`. None leaves the read to Flask without a verdict on Redis:
        the breaker is open, or the deadline passed.

        A deadline passing on the event loop says little about Redis (the loop
        itself runs late under a burst), so it does not open the breaker:
        Flask's threaded client asks again with a real socket timeout, and only
        its failure does. See
        docs/decisions/002-an-event-loop-deadline-is-not-a-redis-failure.md. A
        refused or broken connection is a verdict, handed over as a failed GET.
        """
        if not self._breaker.allow():
            return None
        try:
            value = await self._redis().get(key)
        except TimeoutError:
            self._breaker.return_probe()  # if this was the probe, Flask's GET makes it
            return None
        except REDIS_ERRORS as exc:
            if is_timeout(exc):  # a connect that ran out of time: no verdict either
                self._breaker.return_probe()
                return None
            return EarlyGet(key, None, True, l1_token)
        self._breaker.record_success()
        return EarlyGet(key, value, False, l1_token)

    @property
    def skipping(self) -> bool:
        """Whether Redis is being skipped (the breaker is open): reads go to PostgreSQL."""
        return self._breaker.is_open


def _stall(scope: Scope) -> None:
    """The lab's test hook: hold the event loop, busy, for the milliseconds the
    request's X-Test-Stall-Ms asks (at most TEST_STALL_MAX_MS)."""
    for name, value in scope["headers"]:
        if name == TEST_STALL_HEADER and value.isdigit():
            until = time.perf_counter() + min(int(value), TEST_STALL_MAX_MS) / 1000
            while time.perf_counter() < until:
                pass  # on the core, as the loop's own work would be


def _held(scope: Scope) -> bool:
    """The lab's test hook: the request's fill is held until the test lets it go."""
    return any(name == TEST_HOLD_HEADER for name, _ in scope["headers"])


def _headers(
    body: bytes, tier: str | None, extra: list[tuple[bytes, bytes]]
) -> list[tuple[bytes, bytes]]:
    """`tier`: the cache tier of a hit, None for an answer that is no cache read;
    `extra`: the headers every answer of the worker carries."""
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if tier is not None:
        headers.append((b"x-cache", HIT.encode()))
        headers.append((b"x-cache-tier", tier.encode()))
    headers.extend(extra)
    return headers


def answer_headers(settings: Settings) -> list[tuple[bytes, bytes]]:
    """The headers every answer of this worker carries: in the lab, the
    worker's pid (Settings.worker_header); none in production."""
    if settings.worker_header is None:
        return []
    name, value = settings.worker_header
    return [(name.lower().encode("latin-1"), value.encode("latin-1"))]


class AsyncHotPath:
    """ASGI app: hits, /healthz and (given `writes`) user writes on the event
    loop, the rest to `fallback`."""

    def __init__(
        self,
        fallback: AsgiApp,
        redis_get: EarlyGetClient,
        l1: L1Cache,
        settings: Settings,
        subscriber: LoopInvalidationSubscriber | None = None,
        writes: LoopWrites | None = None,
        admission: LoopAdmission | None = None,
        loop_lag: LoopLag | None = None,
        tracked: L1Cache | None = None,
        tracker: TrackingSubscriber | None = None,
        ops: AsgiApp | None = None,
        refresh_behind: RefreshBehind | None = None,
        readiness: ReadinessCache | None = None,
    ):
        self.fallback = fallback
        # /readyz's shared verdict: answered here while fresh, without the ops pool.
        self.readiness = readiness
        # Where the operational routes go (OPS_PATHS); None: with the rest, to Flask.
        self.ops = ops
        self.ops_pending = 0
        # The L1 each strategy reads (strategies.TieredCache.l1_of); l2 reads none.
        self.l1s: dict[str, L1Cache] = {
            cache_keys.STRATEGY_L1: l1,
            cache_keys.STRATEGY_HYBRID: l1,
        }
        if tracked is not None:
            self.l1s[cache_keys.STRATEGY_TRACKING] = tracked
        self.tracker = tracker
        self.admission = admission or LoopAdmission.from_settings(settings)
        self.admission.on_refused = self._count_refusal
        self.worker_headers = answer_headers(settings)
        self.admission.answer_headers = self.worker_headers
        self.admission.from_memory = self._from_memory
        self.loop_lag = loop_lag
        self.subscriber = subscriber
        self.writes = writes
        self.redis_get = redis_get
        self.l1 = l1
        self.test_hooks = settings.test_hooks
        self.default_strategy = settings.cache_strategy
        self.lab = settings.is_lab
        self.flights: LoopFlights[tuple[str, str]] = LoopFlights()
        self.expiry = ExpiryPolicy.from_settings(settings)
        # swr's refreshes behind stale answers (None in the other modes).
        self.refresh_behind = refresh_behind
        # Clients the miss budget refused: their misses wait (None: no budget).
        self.miss_holds = MissHolds.from_settings(settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        if scope["type"] != "http":
            return await self.fallback(scope, receive, send)
        started = time.perf_counter()
        scope[START_KEY] = started
        # Served by the gateway's HTTP protocol, the request passed the door there.
        if not scope.get(PASSED_KEY):
            refused = self.admission.enter(scope)
            if refused is not None:
                self.admission.on_refused(scope, refused)
                return await refuse(send, self.worker_headers)
        try:
            await self._serve(scope, receive, send, started)
        finally:
            self.admission.leave(scope)

    async def _to_flask(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Flask's work has bounds of its own (door/admission.py, door/fallback.py): the
        # door counts the loop's, and how busy Flask's threads are.
        self.admission.leave(scope)
        self.admission.hand_over()
        try:
            await self.fallback(scope, receive, send)
        finally:
            self.admission.handed_back()

    def _count_refusal(self, scope: Scope, reason: str) -> None:
        """The door's refusal, for the metrics: its reason, and a 503 of the
        route the request asked for (a read's) or `shed`."""
        found = (
            remembered_lookup(scope["path"], scope["query_string"], self.default_strategy, self.lab)
            if scope["method"] == "GET"
            else None
        )
        route = found.route if found is not None else SHED_ROUTE
        self.admission.tally.add(route, scope["method"], reason)

    def _from_memory(self, scope: Scope) -> bool:
        """Whether `_answer` will find the request's value in an L1 tier: it
        then waits for nothing but the loop (the door does not count it)."""
        if scope["method"] != "GET":
            return False
        found = remembered_lookup(
            scope["path"], scope["query_string"], self.default_strategy, self.lab
        )
        if found is None:
            return False
        l1 = self.l1s.get(found.strategy)
        if l1 is None or (self.test_hooks and _held(scope)):
            return False
        return l1.get(found.key) is not None

    async def _send_verdict(self, verdict: Verdict, send: Send) -> None:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(verdict.body)),
            *self.worker_headers,
        ]
        await send({"type": "http.response.start", "status": verdict.status, "headers": headers})
        await send({"type": "http.response.body", "body": verdict.body})

    async def _to_ops(self, scope: Scope, receive: Receive, send: Send) -> None:
        """An operational route, in the pool of its own (OPS_PATHS)."""
        assert self.ops is not None
        if self.ops_pending >= OPS_PENDING_MAX:
            return await refuse(send, self.worker_headers)
        self.ops_pending += 1
        try:
            await self.ops(scope, receive, send)
        finally:
            self.ops_pending -= 1

    async def _serve(self, scope: Scope, receive: Receive, send: Send, started: float) -> None:
        if self.ops is not None and scope["path"] in OPS_PATHS:
            if scope["path"] == READYZ_PATH and self.readiness is not None:
                verdict = self.readiness.answer_now()
                if verdict is not None:
                    return await self._send_verdict(verdict, send)
            return await self._to_ops(scope, receive, send)
        if self.test_hooks:
            _stall(scope)
        if scope["method"] != "GET":
            write = self.writes.take(scope) if self.writes is not None else None
            if write is None:
                return await self._to_flask(scope, receive, send)
            return await self.writes.answer(write, scope, receive, send)
        answer = await self._look(scope)
        if isinstance(answer, Miss) and self.miss_holds is not None:
            # A client the miss budget refused waits out its Retry-After, out of the door's count.
            client = self.miss_holds.client(scope)
            if await self.miss_holds.waited(client, lambda: self.admission.leave(scope)):
                scope.pop(EARLY_GET_KEY, None)
                answer = await self._look(scope)
            send = self.miss_holds.watch(client, send)
        if isinstance(answer, Miss):
            if not self.flights.busy(answer.flight):
                if self._refreshes_behind(answer, scope):
                    return await self._send_meanwhile(answer.meanwhile, send, started)
                # This request fills the key, in Flask; readers missing it meanwhile wait here.
                return await self.flights.lead(answer.flight, self._to_flask(scope, receive, send))
            if answer.meanwhile is not None:
                return await self._send_meanwhile(answer.meanwhile, send, started)
            answer = None if answer.held else await self._follow(answer, scope)
        if answer is None:
            return await self._to_flask(scope, receive, send)
        route, body, tier = answer
        # Counted before it is written, as Flask's answers are: a worker killed
        # between the two may count an answer never delivered, never the reverse.
        metrics.observe_request(route, "GET", 200, time.perf_counter() - started)
        headers = _headers(body, tier, self.worker_headers)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        """The worker's start and stop: the loop's own tasks (the L1 subscription)."""
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                if self.loop_lag is not None:
                    self.loop_lag.start(asyncio.get_running_loop())
                loop_admission.install(self.admission)
                if self.subscriber is not None:
                    self.subscriber.start()
                if self.tracker is not None:
                    self.tracker.start()
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                loop_admission.install(None)
                self.admission.tally.flush()
                if self.loop_lag is not None:
                    self.loop_lag.stop()
                if self.subscriber is not None:
                    await self.subscriber.stop()
                if self.tracker is not None:
                    await self.tracker.stop()
                if self.writes is not None:
                    await self.writes.close()
                if self.refresh_behind is not None:
                    await self.refresh_behind.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _look(self, scope: Scope) -> Answer | Miss | None:
        try:
            return await self._answer(scope)
        except Exception:  # never worse than Flask: let it answer (and log) instead
            log.exception("hot path failed; falling back to Flask")
            scope.pop(EARLY_GET_KEY, None)
            return None

    async def _follow(self, miss: Miss, scope: Scope) -> Answer | None:
        """Wait for the fill of `miss`'s key in flight, then look in the cache once
        more: a hit answers here, anything else (a negative entry, a fill that
        failed or stored nothing, the wait timing out) goes to Flask.

        The second look is a read like any hit's, made after this reader arrived,
        so it is never older than what a Flask follower accepts (tiers/l2.py, _fill):
        the leader's answer itself is never handed over.
        """
        metrics.LOOP_FOLLOWERS_WAITING.inc()
        try:
            landed = await self.flights.follow(miss.flight, FOLLOW_TIMEOUT_S)
        finally:
            metrics.LOOP_FOLLOWERS_WAITING.dec()
        scope.pop(EARLY_GET_KEY, None)  # the GET before the wait is out of date
        answer = await self._look(scope) if landed else None
        if answer is None or isinstance(answer, Miss):
            metrics.loop_follower(miss.found.route, "fallback")
            if ARRIVED_KEY in scope:
                # door/admission.py bounds the wait for a thread; the wait here was none.
                scope[ARRIVED_KEY] = time.monotonic()
            return None
        metrics.loop_follower(miss.found.route, "hit")
        return answer

    async def _answer(self, scope: Scope) -> Answer | Miss | None:
        """A hit to answer, a Miss that Flask must fill, or None: Flask answers."""
        path, query = scope["path"], scope["query_string"]
        if path == HEALTHZ_PATH and not query:
            return HEALTHZ_PATH, HEALTHZ_BODY, None
        found = remembered_lookup(path, query, self.default_strategy, self.lab)
        if found is None:
            return None
        if self.test_hooks and _held(scope):
            return Miss(found, held=True)
        l1_token = None
        l1 = self.l1s.get(found.strategy)
        if l1 is not None:
            value = l1.get(found.key)
            if value is not None:
                return self._l1_hit(found, value)
            if found.strategy == cache_keys.STRATEGY_L1:
                # Filled from PostgreSQL by Flask, which also counts the miss; a
                # follower can find the fill only while the tier may keep it.
                return Miss(found) if l1.usable else None
            l1_token = l1.token(found.key)  # before the GET: see tiers/l1.py
        early = await self.redis_get.get(found.key, l1_token)
        if early is None:
            # No verdict. With Redis skipped every read goes to PostgreSQL: no fill
            # to wait for. A passed deadline (the loop runs late, as under a cold
            # burst) leaves the read a miss like any other, which Flask will check.
            return None if self.redis_get.skipping else Miss(found)
        if early.failed or early.value is None:
            scope[EARLY_GET_KEY] = early  # Flask goes on from this GET's outcome
            return None if early.failed else Miss(found)
        judged = self.expiry.judge(early.value)
        if judged.state == expiry.EXPIRED:
            scope[EARLY_GET_KEY] = early  # past its expiry: a miss, which Flask fills
            return Miss(found)
        if judged.state == expiry.REFRESH:
            early = dataclasses.replace(early, refresh=True)
        body = found.body(judged.value)
        if body is None:
            scope[EARLY_GET_KEY] = early  # a negative or malformed entry: Flask answers
            return None
        if judged.state != expiry.FRESH:
            # To refresh (early) or stale (swr): the worker's first such read goes to
            # Flask, which refreshes it if it gets the lease; the others answer it.
            scope[EARLY_GET_KEY] = early
            stale_ms = judged.age_ms if judged.state == expiry.STALE else None
            return Miss(found, meanwhile=Meanwhile(found.route, body, stale_ms))
        if l1 is not None and l1_token is not None:
            l1.put(found.key, judged.value, l1_token, judged.life_ms)
            metrics.tier_read(found.route, "l1", "miss")
        metrics.tier_read(found.route, "l2", "hit")
        metrics.cache_outcome(found.route, HIT)
        return found.route, body, "l2"

    def _refreshes_behind(self, miss: Miss, scope: Scope) -> bool:
        """swr: a stale value is answered at once, its refresh run behind it (or,
        with the worker's bound of refreshes reached, left to a later read)."""
        stale = miss.meanwhile is not None and miss.meanwhile.stale_ms is not None
        if not stale or self.refresh_behind is None:
            return False
        early = scope.pop(EARLY_GET_KEY)  # the stale read: no Flask request follows it
        self.refresh_behind.start(self.flights, miss.flight, miss.found, early.value)
        return True

    async def _send_meanwhile(self, meanwhile: Meanwhile, send: Send, started: float) -> None:
        """Answer the value read while this worker refreshes its key: a hit, or
        with X-Cache: STALE and X-Cache-Stale-Ms (its age past expiry)."""
        route, body = meanwhile.route, meanwhile.body
        headers = _headers(body, "l2", self.worker_headers)
        metrics.tier_read(route, "l2", "hit")
        if meanwhile.stale_ms is None:
            metrics.cache_outcome(route, HIT)
        else:
            metrics.cache_outcome(route, STALE, meanwhile.stale_ms)
            headers = [(n, STALE.encode() if n == b"x-cache" else v) for n, v in headers]
            headers.append((b"x-cache-stale-ms", b"%d" % meanwhile.stale_ms))
        metrics.observe_request(route, "GET", 200, time.perf_counter() - started)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _l1_hit(self, found: Lookup, value: bytes) -> Answer | None:
        """An L1 hit answered without Redis. A negative entry is left to Flask,
        which looks again and counts it."""
        body = found.body(value)
        if body is None:
            return None
        metrics.tier_read(found.route, "l1", "hit")
        metrics.cache_outcome(found.route, HIT)
        return found.route, body, "l1"
