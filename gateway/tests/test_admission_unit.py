"""Pure logic of the event loop's door (door/loop_admission.py), the loop's lateness
and the breaker's verdict on Redis errors (door/lateness.py, backends/breaker.py), and the
bound on reads that fall back to PostgreSQL (door/fallback.py)."""

from __future__ import annotations

import os
import threading

import pytest
from aside_gateway.backends.breaker import CircuitBreaker
from aside_gateway.config import metrics
from aside_gateway.config.settings import ConfigError, load_settings
from aside_gateway.contracts.errors import ApiError
from aside_gateway.contracts.routes import ARRIVED_KEY
from aside_gateway.door.fallback import FallbackSlots
from aside_gateway.door.lateness import LoopLag, is_timeout, is_verdict_on_redis
from aside_gateway.door.loop_admission import (
    HOLD_S,
    LATE_TICKS,
    SHED_BODY,
    AimdLimit,
    LoopAdmission,
    PieDrop,
    RefusalTally,
    shed_response,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError
from redis.exceptions import TimeoutError as RedisTimeoutError

ENV = {
    "DATABASE_URL": "postgresql://aside@127.0.0.1:25432/aside",
    "REDIS_URL": "redis://127.0.0.1:26379/0",
    "CORE_URL": "http://127.0.0.1:28080",
    "ASIDE_PROFILE": "lab",
}
LATE_S = 0.02


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def read(path: str = "/api/v1/users/count", arrived: float | None = None) -> dict:
    scope: dict = {"type": "http", "path": path, "method": "GET"}
    if arrived is not None:
        scope[ARRIVED_KEY] = arrived
    return scope


# ---- the AIMD limit -------------------------------------------------------------


def test_the_limit_starts_at_its_maximum():
    assert AimdLimit(4, 100).limit == 100


def test_a_late_tick_cuts_the_limit_to_nine_tenths_of_what_was_in_flight():
    limit = AimdLimit(4, 100)
    assert limit.update(late=True, peak_in_flight=50, now=0.0) == 45
    assert limit.update(late=True, peak_in_flight=45, now=0.0) == 40


def test_the_cut_never_goes_below_the_minimum():
    limit = AimdLimit(8, 100)
    assert limit.update(late=True, peak_in_flight=3, now=0.0) == 8


def test_a_late_tick_never_raises_the_limit_to_what_was_in_flight():
    limit = AimdLimit(4, 100)
    limit.update(late=True, peak_in_flight=20, now=0.0)  # 18
    assert limit.update(late=True, peak_in_flight=40, now=0.0) == 16  # 0.9 x min(18, 40)


def test_an_on_time_tick_raises_a_used_limit_by_one_up_to_the_maximum():
    limit = AimdLimit(4, 20)
    limit.update(late=True, peak_in_flight=10, now=0.0)  # 9
    assert limit.update(late=False, peak_in_flight=5, now=0.0) == 10
    assert limit.update(late=False, peak_in_flight=2, now=0.0) == 10  # under half used: unchanged
    for _ in range(50):
        limit.update(late=False, peak_in_flight=20, now=0.0)
    assert limit.limit == 20


def test_pie_rises_while_the_lag_stands_above_target_and_decays_once_on_time():
    pie = PieDrop(target_s=0.02)
    pie.update(0.021)  # one tick just late: a tiny step, scaled down
    assert 0 < pie.probability < 1e-4
    for _ in range(80):  # 2 s of a loop 50 ms late
        pie.update(0.05)
    high = pie.probability
    assert 0.1 < high < 1
    for _ in range(40):  # 1 s on time
        pie.update(0.001)
    assert pie.probability < high / 2


def test_pie_answers_a_fast_growing_lag_at_once_and_stays_within_0_and_1():
    pie = PieDrop(target_s=0.02)
    for _ in range(10):
        pie.update(0.05)
    before = pie.probability
    pie.update(0.5)  # the lag grew by 450 ms within a tick
    assert pie.probability > before + 0.01
    for _ in range(200):
        pie.update(5.0)
    assert pie.probability == 1.0
    for _ in range(2000):
        pie.update(0.0)
    assert pie.probability < 0.001


def test_pie_refuses_with_its_probability():
    draws = iter([0.05, 0.5])
    pie = PieDrop(target_s=0.02, rng=lambda: next(draws))
    assert not pie.drop()  # probability 0: no draw
    pie.probability = 0.1
    assert pie.drop() and not pie.drop()


# ---- the door ---------------------------------------------------------------------


def test_the_door_refuses_past_its_limit_and_admits_again_when_one_leaves():
    door = LoopAdmission("aimd", 2, 2, LATE_S)
    first = read()
    assert door.enter(first) is None
    assert door.enter(read()) is None
    assert door.enter(read()) == "admission_limit"
    assert door.in_flight == 2
    door.leave(first)
    door.leave(first)  # once only: handed to Flask, then answered
    assert door.in_flight == 1
    assert door.enter(read()) is None


def test_a_read_answered_from_memory_passes_a_full_limit_uncounted():
    door = LoopAdmission("aimd", 1, 1, LATE_S)
    door.from_memory = lambda scope: scope["path"].endswith("/7")
    waiting = read()
    assert door.enter(waiting) is None
    assert door.enter(read()) == "admission_limit"
    in_memory = read("/api/v1/users/7")
    assert door.enter(in_memory) is None
    assert door.in_flight == 1
    door.leave(in_memory)
    assert door.in_flight == 1
    door.leave(waiting)
    assert door.in_flight == 0


def test_a_read_answered_from_memory_is_still_refused_by_pie():
    door = LoopAdmission("pie", 1, 10, LATE_S)
    door.from_memory = lambda scope: True
    door.pie = PieDrop(LATE_S, rng=lambda: 0.5)
    door.pie.probability = 0.9
    assert door.enter(read()) == "loop_late"


def test_health_and_metrics_are_never_refused():
    door = LoopAdmission("aimd", 1, 1, LATE_S)
    assert door.enter(read()) is None
    for path in ("/healthz", "/readyz", "/metrics"):
        assert door.enter(read(path)) is None


def test_a_scrape_in_flight_never_takes_a_reads_place():
    door = LoopAdmission("aimd", 1, 1, LATE_S)
    scrapes = [read(path) for path in ("/healthz", "/readyz", "/metrics")]
    for scrape in scrapes:
        assert door.enter(scrape) is None
    assert door.in_flight == 0
    assert door.enter(read()) is None
    for scrape in scrapes:
        door.leave(scrape)
    assert door.in_flight == 1


def test_off_admits_everything_and_still_counts():
    door = LoopAdmission("off", 1, 1, LATE_S)
    for _ in range(10):
        assert door.enter(read()) is None
    assert door.in_flight == 10


def test_the_limit_is_cut_only_after_ticks_late_in_a_row():
    door = LoopAdmission("aimd", 4, 100, LATE_S)
    for _ in range(50):
        door.enter(read())
    for _ in range(LATE_TICKS - 1):
        door.on_tick(0.5)
        door.on_tick(0.0)  # a spike, then on time again: no cut
    assert door.cap == 100
    for _ in range(LATE_TICKS):
        door.on_tick(0.5)
    assert door.cap == 45


def test_a_late_loop_whose_thread_was_mostly_off_its_core_holds_the_limit():
    door = LoopAdmission("aimd", 4, 100, LATE_S, busy_share=0.5)
    for _ in range(50):
        door.enter(read())
    # Late, the loop's thread on a core for a fifth of the time: it waited for
    # a core or the GIL, and refusing its reads would not give it one.
    for _ in range(5):
        door.on_tick(0.5, busy=0.2)
    assert door.cap == 100
    # Late while running its own work: cut.
    for _ in range(LATE_TICKS):
        door.on_tick(0.5, busy=0.9)
    assert door.cap == 45
    # A used limit is not raised by a late tick either, only by one on time.
    door.on_tick(0.5, busy=0.2)
    assert door.cap == 45
    door.on_tick(0.0, busy=0.2)
    assert door.cap == 46
    # Without the rule every late tick counts.
    every = LoopAdmission("aimd", 4, 100, LATE_S)
    for _ in range(50):
        every.enter(read())
    for _ in range(LATE_TICKS):
        every.on_tick(0.5, busy=0.2)
    assert every.cap == 45


def test_while_flasks_threads_are_all_busy_a_late_loop_holds_the_limit():
    door = LoopAdmission("aimd", 4, 100, LATE_S, threads=8)
    for _ in range(40):  # the limit (100) not half used
        door.enter(read())
    for _ in range(8):
        door.hand_over()
    for _ in range(2 * LATE_TICKS):
        door.on_tick(0.5)
    assert door.cap == 100  # the threads' lateness: held, not cut
    for _ in range(2):
        door.handed_back()
    door.on_tick(0.5)  # the peak since the last tick was still 8: held
    assert door.cap == 100
    door.on_tick(0.5)  # 6 of 8 threads busy: the loop's own lateness, cut
    assert door.cap == 36


def test_a_thread_busy_for_a_moment_within_a_tick_counts_as_busy():
    door = LoopAdmission("aimd", 4, 100, LATE_S, threads=2)
    for _ in range(40):  # the limit (100) not half used
        door.enter(read())
    door.on_tick(0.5)
    door.hand_over()
    door.hand_over()
    door.handed_back()
    door.handed_back()
    door.on_tick(0.5)  # both were busy at once since the last tick: held
    assert door.cap == 100
    door.on_tick(0.5)
    assert door.cap == 36


def test_threads_full_beside_a_used_limit_hold_nothing():
    # An overloaded loop hands reads it answered too late to Flask: its own
    # work fills the limit, and the cut goes on.
    door = LoopAdmission("aimd", 4, 100, LATE_S, threads=2)
    for _ in range(60):
        door.enter(read())
    door.hand_over()
    door.hand_over()
    for _ in range(LATE_TICKS):
        door.on_tick(0.5)
    assert door.cap == 54


def test_without_flasks_thread_count_the_threads_never_hold_the_limit():
    door = LoopAdmission("aimd", 4, 100, LATE_S)
    for _ in range(50):
        door.enter(read())
    for _ in range(1000):
        door.hand_over()
    for _ in range(LATE_TICKS):
        door.on_tick(0.5)
    assert door.cap == 45
    assert LoopAdmission.from_settings(load_settings(ENV)).threads == 64


def test_pie_door_refuses_loop_late_while_the_lag_stands_and_caps_in_flight():
    door = LoopAdmission("pie", 1, 3, LATE_S)
    door.pie = PieDrop(LATE_S, rng=lambda: 0.5)
    assert door.enter(read()) is None
    for _ in range(200):
        door.on_tick(0.3)
    assert door.pie.probability > 0.5
    assert door.enter(read()) == "loop_late"
    health = read("/healthz")
    assert door.enter(health) is None  # ops routes pass
    door.leave(health)
    for _ in range(2000):
        door.on_tick(0.0)
    assert door.enter(read()) is None and door.enter(read()) is None
    assert door.enter(read()) == "admission_limit"  # the cap (3) still holds
    assert door.cap == 3


def test_an_on_time_loop_brings_the_limit_back_to_its_maximum_within_2_s():
    """From its floor, under a light load that never uses half of it (which
    alone would never raise it), the limit is back at its maximum within 2 s."""
    limit = AimdLimit(16, 512)
    assert limit.update(late=True, peak_in_flight=10, now=0.0) == 16
    now = 0.0
    for _ in range(8):  # 0.2 s: within the grace, the use rule alone
        now += 0.025
        limit.update(late=False, peak_in_flight=2, now=now)
    assert limit.limit == 16
    while now < 2.0:
        now += 0.025
        limit.update(late=False, peak_in_flight=2, now=now)
    assert limit.limit == 512


def test_the_loops_own_lateness_restarts_the_grace_before_the_recovery():
    limit = AimdLimit(16, 512)
    limit.update(late=True, peak_in_flight=10, now=0.0)
    now = 0.0
    for tick in range(80):  # 2 s with every other tick late by the loop's own work
        now += 0.025
        limit.update(late=False, peak_in_flight=2, now=now, own=tick % 2 == 0)
    assert limit.limit == 16


def test_a_late_loop_held_for_longer_than_the_hold_recovers():
    clock = Clock()
    door = LoopAdmission("aimd", 4, 100, LATE_S, clock=clock, busy_share=0.5)
    for _ in range(50):
        door.enter(read())
    for _ in range(LATE_TICKS):
        clock.now += 0.025
        door.on_tick(0.5, busy=0.9)
    assert door.cap == 45
    for _ in range(50):
        door.leave(read())
    door.in_flight = 0
    held_until = clock.now + HOLD_S
    while clock.now + 0.025 < held_until:  # the machine's lateness: held
        clock.now += 0.025
        door.on_tick(0.5, busy=0.2)
    assert door.cap == 45
    for _ in range(80):  # still the machine's, for 2 s more: recovered
        clock.now += 0.025
        door.on_tick(0.5, busy=0.2)
    assert door.cap == 100


# ---- the loop's lateness ----------------------------------------------------------


def counted(metric, **labels: str) -> float:
    """A counter's value in this process, 0 before its first count."""
    for family in metric.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels == labels:
                return sample.value
    return 0.0


def refusals_counted(route: str, reason: str) -> tuple[float, float]:
    """The 503 answers of `route` and the sheds for `reason`."""
    answers = counted(metrics.HTTP_REQUESTS, route=route, method="GET", status="503")
    return answers, counted(metrics.SHED, reason=reason)


def test_the_doors_refusals_reach_the_metrics_at_its_next_tick():
    door = LoopAdmission("aimd", 1, 1, LATE_S)
    door.enter(read())  # the one request the limit holds
    before = refusals_counted("shed", "admission_limit")
    for _ in range(3):
        reason = door.enter(read())
        assert reason == "admission_limit"
        door.on_refused(read(), reason)
    assert refusals_counted("shed", "admission_limit") == before
    door.on_tick(0.0)
    assert refusals_counted("shed", "admission_limit") == (before[0] + 3, before[1] + 3)
    door.on_tick(0.0)  # counted once
    assert refusals_counted("shed", "admission_limit") == (before[0] + 3, before[1] + 3)


def test_a_tally_writes_each_route_and_reason_in_one_go():
    tally = RefusalTally()
    before = (
        refusals_counted("users_count", "loop_late"),
        refusals_counted("shed", "admission_limit"),
    )
    for _ in range(5):
        tally.add("users_count", "GET", "loop_late")
    tally.add("shed", "GET", "admission_limit")
    tally.flush()
    assert not tally.pending
    (count_before, late_before), (shed_before, delay_before) = before
    assert refusals_counted("users_count", "loop_late") == (count_before + 5, late_before + 5)
    assert refusals_counted("shed", "admission_limit") == (shed_before + 1, delay_before + 1)


def test_the_protocols_shed_answer_is_one_whole_503():
    date = [(b"date", b"Wed, 25 Nov 2026 10:00:00 GMT")]
    head, _, body = shed_response(date, keep_alive=True).partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 503 Service Unavailable"
    headers = dict(line.split(b": ", 1) for line in lines[1:])
    assert headers == {
        b"date": date[0][1],
        b"content-type": b"application/json",
        b"content-length": b"%d" % len(SHED_BODY),
        b"retry-after": b"1",
    }
    assert body == SHED_BODY
    closing = shed_response(date, keep_alive=False).partition(b"\r\n\r\n")[0]
    assert closing.endswith(b"\r\nconnection: close")
    named = shed_response(date, True, [(b"x-aside-worker", b"123")]).partition(b"\r\n\r\n")[0]
    assert b"\r\nx-aside-worker: 123\r\n" in named


def test_codel_is_no_longer_a_rule_of_the_door():
    with pytest.raises(ConfigError, match="GATEWAY_ADMISSION"):
        load_settings({**ENV, "GATEWAY_ADMISSION": "codel"})


def test_the_lab_names_its_worker_and_production_does_not():
    assert load_settings(ENV).worker_header == ("X-Aside-Worker", str(os.getpid()))
    tokens = {"WRITE_TOKEN": "w" * 32, "CORE_TOKEN": "c" * 32}
    production = load_settings({**ENV, **tokens, "ASIDE_PROFILE": "production"})
    assert production.worker_header is None


def test_a_tick_on_time_is_no_lateness():
    clock = Clock()
    lag = LoopLag(LATE_S, tick_s=0.025, clock=clock)
    lag.start(FakeLoop())
    clock.now += 0.026
    assert lag.observe(clock.now) == pytest.approx(0.001)
    assert not lag.late_within(0.2)


def test_a_late_tick_makes_the_loop_late_for_the_window_after_it():
    clock = Clock()
    lag = LoopLag(LATE_S, tick_s=0.025, clock=clock)
    lag.start(FakeLoop())
    clock.now += 0.025 + 0.1
    lag.observe(clock.now)
    clock.now += 0.01
    lag.observe(clock.now)  # on time again
    assert lag.late_within(0.2)
    for _ in range(12):  # 0.3 s of ticks on time
        clock.now += 0.025
        lag.observe(clock.now)
    assert not lag.late_within(0.2)


def test_a_tick_overdue_now_is_lateness_before_it_runs():
    clock = Clock()
    lag = LoopLag(LATE_S, tick_s=0.025, clock=clock)
    lag.start(FakeLoop())
    clock.now += 0.025 + LATE_S + 0.001  # the loop is stuck: its tick has not run
    assert lag.late_within(0.2)
    assert lag.current_lag() >= LATE_S


def test_a_monitor_not_started_never_says_late():
    assert not LoopLag(LATE_S).late_within(10.0)


def test_every_tick_is_told_its_lag():
    clock, seen = Clock(), []
    lag = LoopLag(LATE_S, tick_s=0.025, clock=clock, on_tick=lambda lag_s, busy: seen.append(lag_s))
    lag.start(FakeLoop())
    clock.now += 0.075
    lag.observe(clock.now)
    assert seen == [pytest.approx(0.05)]


def test_every_tick_is_told_the_share_of_its_interval_the_loops_thread_ran():
    clock, cpu, seen = Clock(), Clock(), []
    cpu.now = 7.0
    lag = LoopLag(
        LATE_S, tick_s=0.025, clock=clock, on_tick=lambda lag_s, busy: seen.append(busy),
        thread_clock=cpu,
    )  # fmt: skip
    lag.start(FakeLoop())
    clock.now += 0.025
    lag.observe(clock.now)  # the first tick: nothing to compare with, taken as busy
    clock.now += 0.1
    cpu.now += 0.02  # 20 ms on a core of 100 ms
    lag.observe(clock.now)
    clock.now += 0.05
    cpu.now += 0.05
    lag.observe(clock.now)
    assert seen == [1.0, pytest.approx(0.2), pytest.approx(1.0)]


class FakeLoop:
    """Enough of an event loop for LoopLag.start: the tests call observe themselves."""

    def call_later(self, delay: float, callback, *args):
        return Handle()


class Handle:
    def cancel(self) -> None:
        pass


# ---- what a Redis error says ------------------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [
        RedisTimeoutError("Timeout reading from socket"),
        TimeoutError(),
        RedisConnectionError("No connection available."),
        MaxConnectionsError("Too many connections"),
    ],
)
def test_timeouts_and_a_pool_without_a_connection_are_timeouts(exc):
    assert is_timeout(exc)
    assert is_verdict_on_redis(exc, worker_late=False)
    assert not is_verdict_on_redis(exc, worker_late=True)


@pytest.mark.parametrize(
    "exc",
    [
        RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
        ConnectionResetError(),
        None,
    ],
)
def test_a_refused_or_broken_connection_is_a_verdict_even_when_late(exc):
    assert is_verdict_on_redis(exc, worker_late=True)


def test_the_breaker_stays_closed_on_a_timeout_while_the_worker_is_late():
    breaker = CircuitBreaker(1.0, worker_late=lambda: True)
    assert not breaker.record_failure(RedisTimeoutError("Timeout reading from socket"))
    assert not breaker.is_open
    assert breaker.record_failure(RedisConnectionError("Connection refused."))
    assert breaker.is_open


def test_the_breaker_opens_on_a_timeout_while_the_worker_is_on_time():
    breaker = CircuitBreaker(1.0, worker_late=lambda: False)
    assert breaker.record_failure(RedisTimeoutError("Timeout reading from socket"))
    assert breaker.is_open


def test_a_late_timeout_gives_the_probe_back():
    late = [False]
    breaker = CircuitBreaker(60.0, worker_late=lambda: late[0])
    breaker.record_failure()
    late[0] = True
    breaker.record_failure(RedisTimeoutError("Timeout reading from socket"))
    assert breaker.allow()  # the next caller probes at once


# ---- the fallback bound ------------------------------------------------------------


def test_a_fallback_past_the_bound_is_a_503_at_once():
    slots = FallbackSlots(1)
    running, release = threading.Event(), threading.Event()

    def slow() -> bytes:
        running.set()
        release.wait(10)
        return b"1"

    first = threading.Thread(target=slots.load, args=(slow,))
    first.start()
    try:
        assert running.wait(10)
        with pytest.raises(ApiError) as err:
            slots.load(lambda: b"2")
        assert err.value.status == 503
        assert err.value.code == "unavailable"
        assert err.value.headers == {"Retry-After": "1"}
    finally:
        release.set()
        first.join(10)
    assert slots.load(lambda: b"3") == b"3"  # the slot came back


def test_a_failed_fallback_gives_its_slot_back():
    slots = FallbackSlots(1)

    def failing() -> bytes:
        raise RuntimeError("database down")

    with pytest.raises(RuntimeError):
        slots.load(failing)
    assert slots.load(lambda: b"1") == b"1"


# ---- configuration -----------------------------------------------------------------


def test_the_defaults():
    settings = load_settings(ENV)
    assert settings.admission == "aimd"
    assert (settings.admission_min_in_flight, settings.admission_max_in_flight) == (16, 512)
    assert settings.loop_late_ms == 20
    assert settings.admission_late_ms == 5 and settings.admission_busy_pct == 50
    assert settings.cache_fallback_max_concurrency == 8


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"GATEWAY_ADMISSION": "fifo"}, "GATEWAY_ADMISSION"),
        ({"GATEWAY_ADMISSION_MAX_INFLIGHT": "0"}, "GATEWAY_ADMISSION_MAX_INFLIGHT"),
        ({"GATEWAY_ADMISSION_MIN_INFLIGHT": "x"}, "GATEWAY_ADMISSION_MIN_INFLIGHT"),
        (
            {"GATEWAY_ADMISSION_MIN_INFLIGHT": "9", "GATEWAY_ADMISSION_MAX_INFLIGHT": "8"},
            "GATEWAY_ADMISSION_MIN_INFLIGHT",
        ),
        ({"GATEWAY_LOOP_LATE_MS": "0"}, "GATEWAY_LOOP_LATE_MS"),
        ({"GATEWAY_ADMISSION_LATE_MS": "0"}, "GATEWAY_ADMISSION_LATE_MS"),
        ({"GATEWAY_ADMISSION_BUSY_PCT": "101"}, "GATEWAY_ADMISSION_BUSY_PCT"),
        ({"CACHE_FALLBACK_MAX_CONCURRENCY": "-1"}, "CACHE_FALLBACK_MAX_CONCURRENCY"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(overrides, named):
    with pytest.raises(ConfigError) as err:
        load_settings({**ENV, **overrides})
    message = str(err.value)
    assert named in message
    assert "\n" not in message
