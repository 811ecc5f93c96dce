"""Admission at the door of the event loop: past its capacity a worker answers
503 at once instead of queueing work for seconds.

Hits are answered on the event loop (front/hot_path.py), so an overloaded worker
does not queue them in a pool that door/admission.py could bound: it runs every
callback later, Redis replies included, until clients time out. Every request
passes `LoopAdmission.enter` first and counts in flight until it is answered
on the loop or handed to Flask (whose queue door/admission.py bounds), unless the
worker will answer it from its own memory (an L1 hit): such a request waits
for nothing but the loop and is answered in the turn after the one that read
it, so counting it would only cap how many of one turn's reads are served,
whatever they cost (the hybrid tier's collapse in
docs/results/2026-11-26-where-overload-waits.md); the worker's bound on open
connections, one request each, bounds them. Past the
limit a request but the health and metrics routes gets `503 unavailable`
with `Retry-After: 1` and the error shape of contracts/errors.json, written
on the loop without touching Redis, PostgreSQL or Flask. The door stands in
the HTTP protocol (front/worker.py), where a request's head is parsed: a refused
request gets bytes written at once, without an ASGI task, the cheapest answer
a late loop can give, so shedding costs the loop little of what it lacks
(its count, too, is kept in memory and written once a tick: RefusalTally). An
app served without that protocol (the unit tests') passes the same door in
front/hot_path.py. GATEWAY_ADMISSION picks the rule:

* `aimd` (the default): a concurrency limit on the requests a worker has in
  flight, adapted every tick of the loop's lag monitor (lateness.LoopLag). A
  tick that finds the loop late (GATEWAY_ADMISSION_LATE_MS) for the second
  time in a row (a standing lateness, not the spike of one long callback or
  a cold fill's scan) cuts the limit to 0.9 of what was in flight in that
  tick; any other tick with the limit at least half used raises it by one.
  A tick counts as late only if the loop's thread ran on a core for
  GATEWAY_ADMISSION_BUSY_PCT of the interval since the last: a loop late
  with its thread mostly off a core waited for a core (other processes of a
  busy machine) or for the GIL, not for its own admitted work.
  It stays within GATEWAY_ADMISSION_MIN_INFLIGHT and
  GATEWAY_ADMISSION_MAX_INFLIGHT and starts at the latter. While every
  Flask thread of the worker (GATEWAY_THREADS) is busy and the limit is
  not half used, a late loop is the threads' doing, not its own admitted
  work's: their Python work holds the GIL the loop waits for (a flood of
  cold reads), cutting the loop's limit would refuse its hits without
  relieving them, and their queue has its own bound (door/admission.py). The
  limit then holds. (An overloaded loop fills the threads too, with reads
  whose Redis lookup it answered too late; its limit is used, and cut.)
  The limit also recovers by the clock, not only by use: once no tick has
  been the loop's own lateness for RECOVERY_GRACE_S, it climbs towards the
  maximum by (maximum - minimum) / RECOVERY_RAMP_S a second, whatever is in
  flight, so from its floor it is back at its maximum within 2 s of the
  loop being on time; a hold (the machine's or the threads' lateness) that
  lasts longer than HOLD_S recovers the same way. A limit moved only by use
  stays where a past episode left it under a light load (which never uses
  half of it) and refuses that load's bursts.
* `pie`: a drop probability in the manner of PIE (RFC 8033), with the
  loop's lag as the queue's delay: every tick moves it by how far the lag
  stands above GATEWAY_ADMISSION_LATE_MS and how fast it grew since the
  last tick (scaled down while the probability is small, as the RFC does),
  and each request is refused with that probability. It acts on the rate of
  admitted work, where the `aimd` limit acts on the requests in flight,
  which stay few past the ceiling (hits are answered in a turn or two)
  while the excess waits unread in the sockets.
  GATEWAY_ADMISSION_MAX_INFLIGHT still caps the requests in flight.
* `off`: every request is admitted.

Why `aimd`, and the figures: docs/decisions/042-admission-at-the-door-of-the-event-loop.md;
why an L1 hit passes uncounted, and the door's own target:
docs/decisions/048-a-hit-from-memory-is-not-in-flight.md; why busy threads
hold the limit: docs/decisions/050-a-late-loop-beside-busy-threads-holds-the-door.md;
why a late loop off its core holds it, and the 5 ms target:
docs/decisions/052-a-late-loop-off-its-core-holds-the-door.md; why the limit
recovers by the clock, and why there is no `codel` rule:
docs/decisions/062-the-door-recovers-by-the-clock.md.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable

from aside_gateway.config import metrics
from aside_gateway.config.settings import Settings
from aside_gateway.contracts.errors import error_body
from aside_gateway.contracts.routes import HEALTHZ_PATH, Scope, Send

BACKOFF = 0.9
# Ticks in a row that must find the loop late before the limit is cut: one
# late tick is as likely a spike (a cold fill's scan beside it) as overload.
LATE_TICKS = 2
# The limit's recovery by the clock (AimdLimit): it starts once no tick has been
# the loop's own lateness for the grace, and climbs from the minimum to the
# maximum in the ramp: back at the maximum within 2 s of an on-time loop.
RECOVERY_GRACE_S = 0.25
RECOVERY_RAMP_S = 1.25
# A hold (a late tick the door did not cause) longer than this is the
# machine's state, not an episode: the limit then recovers as if on time.
HOLD_S = 3.0
# PIE's gains (RFC 8033 section 5.2): the probability's step per tick, per
# second of lag above target (alpha) and of lag growth since the last tick (beta).
PIE_ALPHA = 0.125
PIE_BETA = 1.25
# While the loop is on time the probability decays by this per tick (RFC 8033 4.2).
PIE_DECAY = 0.98
# RFC 8033 5.2's auto-tuning: below each bound the step is divided by its
# divisor, so a small probability moves in small steps (one late tick from a
# cold scan beside the loop must not refuse requests).
PIE_SCALES = ((0.000001, 2048), (0.00001, 512), (0.0001, 128), (0.001, 32), (0.01, 8), (0.1, 2))
# The loop's lag is published as its largest over this many ticks (a quarter second).
PUBLISH_TICKS = 10
# Marks a request the door let in, whether it counts in flight or not.
PASSED_KEY = "aside.passed"
# Marks a request the door counted in flight, until it leaves.
COUNTED_KEY = "aside.admitted"
# Ops routes are never shed (an overloaded worker must still say so) and never
# counted in flight (a scrape must not take the place of a read).
EXEMPT_PATHS = frozenset({HEALTHZ_PATH, "/readyz", "/metrics"})
SHED_BODY = error_body("unavailable", "the gateway is at capacity; retry later")
SHED_HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", b"%d" % len(SHED_BODY)),
    (b"retry-after", b"1"),
]
# The `route` label of a refused request that is not a cached read.
SHED_ROUTE = "shed"
SHED_STATUS_LINE = b"HTTP/1.1 503 Service Unavailable\r\n"
SHED_TAIL = b"".join(name + b": " + value + b"\r\n" for name, value in SHED_HEADERS)


class AimdLimit:
    """A concurrency limit: additive increase while the loop is on time and the
    limit is used, multiplicative decrease to what was in flight when it is
    late, and a recovery towards the maximum by the clock once no tick has
    been the loop's own lateness for `grace_s` (from the minimum in `ramp_s`)."""

    def __init__(
        self,
        minimum: int,
        maximum: int,
        backoff: float = BACKOFF,
        grace_s: float = RECOVERY_GRACE_S,
        ramp_s: float = RECOVERY_RAMP_S,
    ):
        self.minimum = minimum
        self.maximum = maximum
        self.backoff = backoff
        self.grace_s = grace_s
        # Limit units regained per second of recovery.
        self.rate = (maximum - minimum) / ramp_s if ramp_s > 0 else math.inf
        self.limit = maximum
        self._own_late_at = -math.inf  # the last tick that was the loop's own lateness
        self._ticked_at: float | None = None
        self._regained = 0.0  # the recovery's fraction of a unit, carried to the next tick

    def update(self, late: bool, peak_in_flight: int, now: float, own: bool = False) -> int:
        """One tick at `now`: `late` whether the limit is cut (the loop's own
        standing lateness), `peak_in_flight` the most requests in flight since
        the last tick, `own` whether this tick was the loop's own lateness
        (cut or not): it restarts the grace before the recovery."""
        elapsed = 0.0 if self._ticked_at is None else max(0.0, now - self._ticked_at)
        self._ticked_at = now
        if late or own:
            self._own_late_at = now
        if late:
            carried = min(self.limit, peak_in_flight)
            self.limit = max(self.minimum, math.floor(carried * self.backoff))
            self._regained = 0.0
            return self.limit
        step = 1 if 2 * peak_in_flight >= self.limit else 0
        if now - self._own_late_at >= self.grace_s:
            self._regained += self.rate * elapsed
            whole = math.floor(self._regained)
            self._regained -= whole
            step = max(step, whole)
        self.limit = min(self.maximum, self.limit + step)
        return self.limit

    def hold(self, now: float) -> None:
        """A tick that neither cuts nor raises the limit: only the clock moves."""
        self._ticked_at = now


class PieDrop:
    """The probability that a request is refused, moved every tick of the
    loop's lag monitor in the manner of PIE (RFC 8033)."""

    def __init__(
        self,
        target_s: float,
        alpha: float = PIE_ALPHA,
        beta: float = PIE_BETA,
        rng: Callable[[], float] = random.random,
    ):
        self.target_s = target_s
        self.alpha = alpha
        self.beta = beta
        self.probability = 0.0
        self._last_lag = 0.0
        self._rng = rng

    def update(self, lag_s: float) -> float:
        step = self.alpha * (lag_s - self.target_s) + self.beta * (lag_s - self._last_lag)
        for bound, divisor in PIE_SCALES:
            if self.probability < bound:
                step /= divisor
                break
        self.probability = min(1.0, max(0.0, self.probability + step))
        if lag_s < self.target_s / 2 and self._last_lag < self.target_s / 2:
            self.probability *= PIE_DECAY
        self._last_lag = lag_s
        return self.probability

    def drop(self) -> bool:
        return self.probability > 0.0 and self._rng() < self.probability


class RefusalTally:
    """The door's refusals, counted in memory and written to the metrics once
    per tick of the loop's lag monitor. Written one by one, a refusal's four
    samples (a lock, a process check and a page write each) cost as much as
    the rest of its Python (docs/decisions/054-a-refusal-counted-once-a-tick.md)."""

    def __init__(self) -> None:
        self.pending: Counter[tuple[str, str, str]] = Counter()

    def add(self, route: str, method: str, reason: str) -> None:
        self.pending[route, method, reason] += 1

    def flush(self) -> None:
        """Write what was counted since the last flush."""
        if not self.pending:
            return
        for (route, method, reason), count in self.pending.items():
            metrics.count_refused(route, method, reason, count)
        self.pending.clear()


class LoopAdmission:
    """The door of one worker's event loop; touched only by that loop."""

    def __init__(
        self,
        mode: str,
        min_in_flight: int,
        max_in_flight: int,
        late_s: float,
        clock: Callable[[], float] = time.monotonic,
        threads: int = 0,
        busy_share: float = 0.0,
    ):
        self.mode = mode
        # A late tick counts only if the loop's thread ran at least this share
        # of the interval: lateness with the thread mostly off a core is the
        # machine's (other processes, Flask's threads holding the GIL).
        self.busy_share = busy_share
        # Flask's threads (0: unknown, never judged full) and the requests
        # handed to them and not answered yet, with their most since the last tick.
        self.threads = threads
        self.handed = 0
        self._handed_peak = 0
        self.limit = AimdLimit(min_in_flight, max_in_flight)
        self.pie = PieDrop(late_s)
        self.cap = max_in_flight
        self.late_s = late_s
        self.in_flight = 0
        self._peak = 0
        self._late_ticks = 0
        self._held_since: float | None = None  # since when every tick held the limit
        self._clock = clock
        self._published = (self.cap, 0)
        self._lag_max = 0.0
        self._ticks = 0
        # Refusals not yet in the metrics: written every tick, and at the stop.
        self.tally = RefusalTally()
        # Told of every refusal, wherever the door stands (front/hot_path.py sets it
        # to one that labels a read's refusal with its route).
        self.on_refused: Callable[[Scope, str], None] = self._count_refusal
        # Whether the worker will answer a request from its own memory, which
        # then does not count in flight (front/hot_path.py sets it).
        self.from_memory: Callable[[Scope], bool] = _never
        # Headers every refusal carries besides the shed ones (the lab's worker
        # header; front/hot_path.py sets them).
        self.answer_headers: list[tuple[bytes, bytes]] = []
        metrics.ADMISSION_LIMIT.set(self.cap)

    @classmethod
    def from_settings(cls, settings: Settings) -> LoopAdmission:
        return cls(
            settings.admission,
            settings.admission_min_in_flight,
            settings.admission_max_in_flight,
            settings.admission_late_ms / 1000,
            threads=settings.threads,
            busy_share=settings.admission_busy_pct / 100,
        )

    def on_tick(self, lag_s: float, busy: float = 1.0) -> None:
        """Called by the loop's lag monitor every tick (lateness.LoopLag), with
        the share of the interval the loop's thread ran on a core."""
        late = lag_s >= self.late_s
        # Late with the thread mostly off its core: the machine's lateness.
        off_core = late and busy < self.busy_share
        own = late and not off_core
        self._late_ticks = self._late_ticks + 1 if own else 0
        if self.mode == "aimd":
            self._adapt(own, off_core)
        elif self.mode == "pie":
            self.pie.update(lag_s)
        self._peak = self.in_flight
        self._handed_peak = self.handed
        self._publish(lag_s)
        self.tally.flush()

    def _adapt(self, own: bool, off_core: bool) -> None:
        """The `aimd` limit's tick. A late tick the door did not cause holds
        the limit, neither cut nor raised, for HOLD_S; past that the hold is
        the machine's state, and the limit recovers as on an on-time loop."""
        now = self._clock()
        held = off_core or (own and self._threads_lateness())
        if not held:
            self._held_since = None
            cut = self._late_ticks >= LATE_TICKS
            self.cap = self.limit.update(cut, self._peak, now, own)
            return
        if self._held_since is None:
            self._held_since = now
        if now - self._held_since < HOLD_S:
            self.limit.hold(now)
        else:
            self.cap = self.limit.update(False, self._peak, now)

    def _publish(self, lag_s: float) -> None:
        # A gauge set is a write to the worker's metrics file: an idle worker
        # (40 ticks a second) writes only what changed, and the lag's largest
        # value every PUBLISH_TICKS.
        if self.cap != self._published[0]:
            metrics.ADMISSION_LIMIT.set(self.cap)
        if self.in_flight != self._published[1]:
            metrics.ADMISSION_IN_FLIGHT.set(self.in_flight)
        self._published = (self.cap, self.in_flight)
        self._lag_max = max(self._lag_max, lag_s)
        self._ticks += 1
        if self._ticks >= PUBLISH_TICKS:
            metrics.LOOP_LAG.set(self._lag_max)
            self._ticks, self._lag_max = 0, 0.0

    def enter(self, scope: Scope) -> str | None:
        """Let the request in (None), or say why it is refused: a shed reason.
        Every request let in must `leave`: when it is answered on the loop,
        or when it is handed to Flask, whose work is bounded by door/admission.py.
        One answered from memory is let in past a full limit and not counted,
        and so is an ops route: a scrape must never take a read's place."""
        exempt = scope["path"] in EXEMPT_PATHS
        waits = not exempt and not self.from_memory(scope)
        if self.mode != "off" and not exempt:
            refused = self._refusal(scope, waits)
            if refused is not None:
                return refused
        scope[PASSED_KEY] = True
        if waits:
            scope[COUNTED_KEY] = True
            self.in_flight += 1
            self._peak = max(self._peak, self.in_flight)
        return None

    def _count_refusal(self, scope: Scope, reason: str) -> None:
        self.tally.add(SHED_ROUTE, scope["method"], reason)

    def leave(self, scope: Scope) -> None:
        """The request is answered, or handed to Flask; once per request."""
        if scope.pop(COUNTED_KEY, False):
            self.in_flight -= 1

    def _threads_lateness(self) -> bool:
        """Whether a late loop is Flask's threads' doing: all of them were busy
        since the last tick, and the loop's own requests left the limit under
        half used."""
        threads_full = 0 < self.threads <= self._handed_peak
        return threads_full and 2 * self._peak < self.limit.limit

    def hand_over(self) -> None:
        """A request is handed to Flask's threads (after `leave`)."""
        self.handed += 1
        self._handed_peak = max(self._handed_peak, self.handed)

    def handed_back(self) -> None:
        """Flask has answered a request `hand_over` counted."""
        self.handed -= 1

    def _refusal(self, scope: Scope, waits: bool) -> str | None:
        if waits and self.in_flight >= self.cap:
            return "admission_limit"
        if self.mode == "pie" and self.pie.drop():
            return "loop_late"
        return None


def _never(scope: Scope) -> bool:
    return False


# The door of this process's event loop, once its app has started: one app
# and one loop per gateway worker. The HTTP protocol (front/worker.py) asks here.
_installed: LoopAdmission | None = None


def install(door: LoopAdmission | None) -> None:
    """Make `door` the one the HTTP protocol applies (None: none)."""
    global _installed
    _installed = door


def installed() -> LoopAdmission | None:
    return _installed


def shed_response(
    default_headers: Iterable[tuple[bytes, bytes]],
    keep_alive: bool,
    extra: Iterable[tuple[bytes, bytes]] = (),
) -> bytes:
    """A refused request's whole answer as bytes, for a protocol to write:
    the server's default headers (its Date), `extra`, the shed headers and body."""
    head = [SHED_STATUS_LINE]
    head.extend(name + b": " + value + b"\r\n" for name, value in default_headers)
    head.extend(name + b": " + value + b"\r\n" for name, value in extra)
    head.append(SHED_TAIL)
    if not keep_alive:
        head.append(b"connection: close\r\n")
    head.append(b"\r\n")
    head.append(SHED_BODY)
    return b"".join(head)


async def refuse(send: Send, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    """The 503 of a refused request, written without reading its body."""
    headers = SHED_HEADERS + extra if extra else SHED_HEADERS
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": SHED_BODY})
