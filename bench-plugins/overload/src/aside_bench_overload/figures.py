"""The overload suite's figures and verdicts, from plain records (pure)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import ClassVar, TypedDict

from aside_bench.load.samples import number, sample_lines
from aside_bench.records.saturation import busy_share, noisy, steal_share
from aside_bench.records.tierstats import nearest_rank
from aside_bench.stack.procs import RunQueue
from aside_bench_suite.samples import Check, fmt_ms_unit

GOODPUT_WITHIN_MS = 1000.0  # a 2xx answered within this counts towards goodput
SHED_STATUS = 503  # the gateway's answer past its door's limit


@dataclass(frozen=True)
class Request:
    """A samples file's line: due and sent (epoch s); a dropped one was never sent."""

    due: float
    sent: float
    ms: float = 0.0
    status: int = 0  # 0: no answer, `error` says why
    error: str = ""
    dropped: bool = False
    new_conn: bool = False  # its connection was opened for it

    @property
    def served(self) -> bool:
        return not self.dropped and 200 <= self.status < 300

    @property
    def shed(self) -> bool:
        return not self.dropped and self.status == SHED_STATUS

    @property
    def unanswered(self) -> bool:
        return not self.dropped and self.status == 0

    @property
    def timed_out(self) -> bool:
        return self.unanswered and self.error == "timeout"


def parse_requests(lines: Iterable[str], source: str) -> list[Request]:
    found: list[Request] = []
    for where, line in sample_lines(lines, source):
        due, sent = number(line, "due", where), number(line, "t", where)
        if line.get("dropped"):
            found.append(Request(due, sent, dropped=True))
            continue
        ms, status = number(line, "ms", where), int(number(line, "status", where))
        tags = line.get("tags") or {}
        error = str(tags.get("error") or "") if isinstance(tags, dict) else ""
        found.append(Request(due, sent, ms, status, error, new_conn=bool(line.get("new_conn"))))
    found.sort(key=lambda r: r.due)
    return found


def _served_ms(requests: Iterable[Request]) -> list[float]:
    return [r.ms for r in requests if r.served]


def _unserved(requests: Sequence[Request]) -> tuple[int, int, int]:
    """How many were shed, left unanswered (timeouts and other errors) and dropped."""
    return (
        sum(r.shed for r in requests),
        sum(r.unanswered for r in requests),
        sum(r.dropped for r in requests),
    )


# ---- one step ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Latency:
    count: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Latency:
        ranks = (nearest_rank(values, q) for q in (50, 95, 99))
        return cls(len(values), *ranks, max(values, default=None))


@dataclass(frozen=True)
class Second:
    at_s: int  # from the step's start
    served: int
    served_p95_ms: float | None
    shed: int
    unanswered: int  # timeouts and other errors
    dropped: int


@dataclass(frozen=True)
class RequestFigures:
    due: int
    dropped: int
    served: Latency
    shed: Latency
    # The served on a connection open before (the steady state) and on one opened for
    # them, whose first request waits until a busy worker's loop accepts it.
    served_open: Latency
    served_new: Latency
    good: int  # served within GOODPUT_WITHIN_MS
    timeouts: int
    other_errors: int
    other_statuses: dict[str, int]
    seconds: list[Second]


def request_figures(requests: Sequence[Request], start: float, duration_s: int) -> RequestFigures:
    served = _served_ms(requests)
    answered = (r for r in requests if not r.dropped and r.status)
    others = Counter(str(r.status) for r in answered if not r.served and not r.shed)
    return RequestFigures(
        due=len(requests),
        dropped=sum(r.dropped for r in requests),
        served=Latency.of(served),
        shed=Latency.of([r.ms for r in requests if r.shed]),
        served_open=Latency.of(_served_ms(r for r in requests if not r.new_conn)),
        served_new=Latency.of(_served_ms(r for r in requests if r.new_conn)),
        good=sum(ms <= GOODPUT_WITHIN_MS for ms in served),
        timeouts=sum(r.timed_out for r in requests),
        other_errors=sum(r.unanswered and not r.timed_out for r in requests),
        other_statuses=dict(sorted(others.items())),
        seconds=per_second(requests, start, duration_s),
    )


def per_second(requests: Sequence[Request], start: float, duration_s: int) -> list[Second]:
    """Every whole second of the step, by due time (what a user arriving then saw)."""
    buckets: list[list[Request]] = [[] for _ in range(duration_s)]
    for r in requests:
        index = math.floor(r.due - start)
        if 0 <= index < duration_s:
            buckets[index].append(r)
    return [
        Second(i, len(served := _served_ms(bucket)), nearest_rank(served, 95), *_unserved(bucket))
        for i, bucket in enumerate(buckets)
    ]


MIN_WINDOW_S = 5  # judged for recovery, the rest of the step lasts at least this long
# A noisy second's stray 503 is no backlog: a recovered window or held step sheds at most this.
MAX_SHED_SHARE = 0.01


@dataclass(frozen=True)
class SearchStep:
    """A step of the ceiling search: the driver's figures and the gateway's sheds (503s)."""

    rate: int
    requests: int
    p95_ms: float | None
    dropped: int
    failed: int
    shed: int
    steal: float | None = None  # the host's share of the machine's cores over the step

    def holds(self, p95_limit_ms: float) -> bool:
        """p95 within the limit, nothing dropped, no failure but sheds of at most MAX_SHED_SHARE."""
        return (
            self.p95_ms is not None
            and self.p95_ms <= p95_limit_ms
            and self.dropped == 0
            and self.failed <= self.shed <= MAX_SHED_SHARE * self.requests
        )

    @property
    def noisy(self) -> bool:
        return noisy(self.steal)

    def as_dict(self, held: bool, counted: bool = True) -> SearchRecord:
        """The step as report.json keeps it: its verdict, not its request count."""
        found = asdict(self)
        del found["requests"]
        return {"rate": self.rate, "held": held, "counted": counted, **found}


class SearchRecord(TypedDict):
    rate: int
    held: bool
    counted: bool
    p95_ms: float | None
    dropped: int
    failed: int
    shed: int
    steal: float | None


@dataclass(frozen=True)
class Window:
    """The recovery step's requests due from `from_s` after the overload's end on."""

    from_s: float
    due: int
    served: Latency
    shed: int
    unanswered: int  # timeouts and other errors
    dropped: int

    def normal(self, limit_ms: float) -> bool:
        """p95 within the limit, nothing unanswered or dropped, at most MAX_SHED_SHARE shed."""
        return (
            self.served.p95_ms is not None
            and self.served.p95_ms <= limit_ms
            and self.unanswered == self.dropped == 0
            and self.shed <= MAX_SHED_SHARE * self.due
        )


def window(requests: Sequence[Request], overload_end: float, from_s: float) -> Window:
    rest = [r for r in requests if r.due >= overload_end + from_s]
    return Window(from_s, len(rest), Latency.of(_served_ms(rest)), *_unserved(rest))


def recovery_s(
    requests: Sequence[Request], overload_end: float, step_end: float, limit_ms: float
) -> float | None:
    """Whole seconds from the overload's end until the rest (>= MIN_WINDOW_S) is normal."""
    at = 0
    while overload_end + at + MIN_WINDOW_S <= step_end:
        if window(requests, overload_end, at).normal(limit_ms):
            return float(at)
        at += 1
    return None


# ---- the step's record --------------------------------------------------------------------
@dataclass(frozen=True)
class Counters:
    # cache_errors_total{op="breaker_open"}: reads an open breaker skipped
    breaker_skips: float = 0.0
    fallback_reads: float = 0.0  # loop_followers_total{outcome="fallback"}
    shed: dict[str, float] = field(default_factory=dict)  # shed_total by reason
    redis_judged: dict[str, float] = field(default_factory=dict)  # redis_errors_judged_total
    admission_limit: float | None = None  # the door's limit at the step's end, summed
    # gc_pause_seconds: the workers' garbage collections and the time they held them
    gc_collections: float = 0.0
    gc_pause_s: float = 0.0

    # The totals a step's figure is the increase of.
    TOTALS: ClassVar = ("breaker_skips", "fallback_reads", "gc_collections", "gc_pause_s")


@dataclass(frozen=True)
class MachineReading:
    """Busy and total ticks of every core (/proc/stat), the gateway's and Redis's CPU ticks."""

    busy_ticks: int
    total_ticks: int
    gateway_ticks: int | None
    redis_ticks: int | None
    clk_tck: int
    steal_ticks: int = 0  # of the busy ticks, the hypervisor's for other guests
    # The gateway workers' event loops' wait for a core so far.
    gateway_loops: RunQueue | None = None

    @property
    def machine_ticks(self) -> tuple[int, int, int]:
        return self.busy_ticks, self.total_ticks, self.steal_ticks


@dataclass(frozen=True)
class MachineShare:
    """Over a step: the cores' busy share (every process) and the gateway's and Redis's cores."""

    busy: float | None
    gateway_cores: float | None
    redis_cores: float | None
    # Of `busy`: the cores' time the hypervisor gave other guests.
    steal: float | None = None
    # A worker's event loop ready with no core free: ms a second (a worker's mean), ms a turn.
    loop_wait_ms_per_s: float | None = None
    loop_wait_ms_per_turn: float | None = None

    @classmethod
    def between(cls, before: MachineReading, after: MachineReading, seconds: float) -> MachineShare:
        def cores(a: int | None, b: int | None) -> float | None:
            if a is None or b is None or seconds <= 0:
                return None
            return (b - a) / after.clk_tck / seconds

        return cls(
            busy=busy_share(before.machine_ticks, after.machine_ticks),
            gateway_cores=cores(before.gateway_ticks, after.gateway_ticks),
            redis_cores=cores(before.redis_ticks, after.redis_ticks),
            steal=steal_share(before.machine_ticks, after.machine_ticks),
            **loop_wait(before.gateway_loops, after.gateway_loops, seconds),
        )


def loop_wait(
    before: RunQueue | None, after: RunQueue | None, seconds: float
) -> dict[str, float | None]:
    """The same workers' loops' wait for a core: a worker's mean ms a second, ms a turn."""
    if before is None or after is None or before.pids != after.pids or seconds <= 0:
        return {}
    waited_ms = (after.wait_ns - before.wait_ns) / 1e6
    turns = after.turns - before.turns
    return {
        "loop_wait_ms_per_s": waited_ms / seconds / len(after.pids),
        "loop_wait_ms_per_turn": waited_ms / turns if turns > 0 else None,
    }


@dataclass(frozen=True)
class StepFigures:
    arm: str
    label: str  # "0.6x before", "1.25x", "1.5x", "2x", "0.6x after"
    factor: float
    rate: int  # offered requests/s
    duration_s: int
    start: float  # epoch s: the first due instant
    requests: RequestFigures
    counters: Counters
    driver_cpu_s: float | None
    cores: int
    machine: MachineShare | None = None
    # The step after the overload only: seconds until the rest was normal, and its window.
    recovery_s: float | None = None
    recovery_window: Window | None = None

    @property
    def goodput_rps(self) -> float:
        return self.requests.good / self.duration_s

    @property
    def driver_cores(self) -> float | None:
        return None if self.driver_cpu_s is None else self.driver_cpu_s / self.duration_s

    @property
    def driver_share(self) -> float | None:
        cores = self.driver_cores
        return None if cores is None else cores / max(self.cores, 1)

    def as_dict(self) -> StepRecord:
        return {
            **asdict(self),
            "goodput_rps": round(self.goodput_rps, 1),
            "driver_cores": self.driver_cores,
            "driver_share": self.driver_share,
        }

    def recovered(
        self,
        requests: Sequence[Request],
        overload_end: float,
        limit_ms: float | None,
        from_s: float,
    ) -> StepFigures:
        """The step after the overload, judged from its end (epoch s); no limit, no time."""
        step_end = self.start + self.duration_s
        took = None if limit_ms is None else recovery_s(requests, overload_end, step_end, limit_ms)
        return replace(
            self, recovery_s=took, recovery_window=window(requests, overload_end, from_s)
        )


class StepRecord(TypedDict):
    """A step as report.json keeps it: its fields (records as dicts) and figures of them."""

    arm: str
    label: str
    factor: float
    rate: int
    duration_s: int
    start: float
    requests: dict[str, object]
    counters: dict[str, object]
    driver_cpu_s: float | None
    cores: int
    machine: dict[str, float | None] | None
    recovery_s: float | None
    recovery_window: dict[str, object] | None
    goodput_rps: float
    driver_cores: float | None
    driver_share: float | None


# ---- verdicts -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Targets:
    goodput_share: float = 0.9  # of the ceiling, at every overload step
    served_p99_ms: float = 100.0
    shed_p99_ms: float = 10.0
    recovery_factor: float = 1.5  # p95 within this many times the one before the overload
    recovery_s: float = 2.0


def overload_checks(step: StepFigures, ceiling: int, targets: Targets) -> list[Check]:
    """Above the ceiling: goodput held, served and shed fast, no timeout, the breaker shut."""
    req, at = step.requests, step.label
    floor = targets.goodput_share * ceiling
    return [
        Check(
            f"{at}: goodput >= {targets.goodput_share:g} x ceiling",
            step.goodput_rps >= floor,
            f"{step.goodput_rps:.0f}/s of 2xx within 1 s (limit {floor:.0f}/s)",
        ),
        Check(
            f"{at}: served p99 <= {targets.served_p99_ms:g} ms",
            req.served.p99_ms is not None and req.served.p99_ms <= targets.served_p99_ms,
            f"p99 {fmt_ms_unit(req.served.p99_ms)} over {req.served.count} served",
        ),
        Check(f"{at}: no client timeout", req.timeouts == 0, f"{req.timeouts} timed out"),
        Check(
            f"{at}: sheds p99 <= {targets.shed_p99_ms:g} ms",
            req.shed.count == 0
            or (req.shed.p99_ms is not None and req.shed.p99_ms <= targets.shed_p99_ms),
            f"p99 {fmt_ms_unit(req.shed.p99_ms)} over {req.shed.count} shed"
            if req.shed.count
            else "nothing shed",
        ),
        Check(
            f"{at}: no breaker opening",
            step.counters.breaker_skips == 0,
            f"{step.counters.breaker_skips:.0f} reads skipped Redis behind an open breaker",
        ),
    ]


def recovery_limit_ms(before: StepFigures, targets: Targets) -> float | None:
    p95 = before.requests.served.p95_ms
    return None if p95 is None else targets.recovery_factor * p95


def recovery_check(after: StepFigures, before: StepFigures, targets: Targets) -> Check:
    """From `targets.recovery_s` after the overload on: normal, p95 by the step before's."""
    limit = recovery_limit_ms(before, targets)
    name = (
        f"recovery: p95 from {targets.recovery_s:g} s after the overload within "
        f"{targets.recovery_factor:g} x the one before"
    )
    if limit is None:
        return Check(name, False, "no request was served at 0.6x before the overload")
    rest = after.recovery_window
    if rest is None:
        return Check(name, False, "the step after the overload has no requests to judge")
    took = "never" if after.recovery_s is None else f"{after.recovery_s:.0f} s"
    return Check(
        name,
        rest.normal(limit),
        f"p95 {fmt_ms_unit(rest.served.p95_ms)} over {rest.served.count} served, {rest.shed} shed, "
        f"{rest.unanswered} unanswered, {rest.dropped} dropped (limit p95 {limit:.1f} ms = "
        f"{targets.recovery_factor:g} x {before.requests.served.p95_ms:.1f} ms); "
        f"normal from {took} after the overload's end",
    )
