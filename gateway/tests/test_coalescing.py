"""Cold-cache coalescing: in-process single flight and batched count misses.

Unit tests drive `coalesce.SingleFlight` and `coalesce.MissBatcher` with fake
loaders; integration tests go through real gunicorn gateways, PostgreSQL and
Redis like the rest of the suite.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import requests
from aside_gateway.config.settings import ConfigError, load_settings
from aside_gateway.contracts import cache_keys
from aside_gateway.contracts.errors import ApiError, ClientGone
from aside_gateway.misses import db as db_module
from aside_gateway.misses.coalesce import (
    BatcherFull,
    BatchTimeout,
    CpuShare,
    MissBatcher,
    SingleFlight,
)
from aside_gateway.misses.db import Database
from gateway_helpers import (
    COUNT_SQL_TEXT,
    Proc,
    reads_waiting_on_a_lock,
    sample,
    scrape,
    unique_email,
    unique_username,
    wait_until,
)

COUNT = "/api/v1/users/count"
COUNT_ROUTE = "/api/v1/users/count"
BATCH_SQL_TEXT = "SELECT email, count(*) FROM users WHERE email = ANY($1) GROUP BY email"
HOLD_DEADLINE_S = 15


def in_flight(flights: SingleFlight) -> int:
    """Flights of `flights` not landed yet."""
    with flights._lock:
        return len(flights._flights)


def pending(batcher: MissBatcher) -> int:
    """Keys waiting for the next batch of `batcher`."""
    with batcher._lock:
        return len(batcher._pending)


# ---- unit: SingleFlight --------------------------------------------------------------


# Long enough that a reader which gave up early would have queried by then.
HOLD_SECONDS = 2.0


def test_first_joiner_leads_and_later_ones_follow_until_it_lands():
    flights: SingleFlight[str] = SingleFlight()
    first, leads = flights.join("k")
    second, second_leads = flights.join("k")
    other, other_leads = flights.join("other")
    assert (leads, second_leads, other_leads) == (True, False, True)
    assert second is first and other is not first
    assert not first.done.is_set()

    flights.land("k", first, "value", valid_at=12.5)
    assert first.done.is_set()
    assert (second.result, second.valid_at, second.error) == ("value", 12.5, None)
    # A miss after the landing starts a new flight: a landed result is never reused.
    again, again_leads = flights.join("k")
    assert again_leads and again is not first
    assert in_flight(flights) == 2


def test_a_failed_flight_hands_its_error_to_followers():
    flights: SingleFlight[str] = SingleFlight()
    flight, _ = flights.join("k")
    waiter, _ = flights.join("k")
    error = ApiError("timeout", "too slow")
    flights.land("k", flight, error=error)
    assert waiter.done.is_set() and waiter.error is error
    assert in_flight(flights) == 0


# ---- unit: MissBatcher -----------------------------------------------------------------


class FakeQuery:
    """Records every batch; a batch blocks while `gate` is clear."""

    def __init__(self, answers: dict[str, int] | None = None):
        self.answers = answers or {}
        self.calls: list[list[str]] = []
        self.started: list[float] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail_with: BaseException | None = None
        self._lock = threading.Lock()

    def __call__(self, keys: list[str]) -> dict[str, int]:
        with self._lock:
            self.calls.append(list(keys))
            self.started.append(time.monotonic())
        assert self.gate.wait(10)
        if self.fail_with is not None:
            raise self.fail_with
        return {key: self.answers[key] for key in keys if key in self.answers}


@pytest.fixture
def make_batcher() -> Iterator[Callable[..., MissBatcher[str, int]]]:
    made: list[MissBatcher[str, int]] = []

    def make(query: FakeQuery, **options: Any) -> MissBatcher[str, int]:
        settings = {"max_batch": 100, "max_in_flight": 1, "wait_s": 5.0, **options}
        batcher: MissBatcher[str, int] = MissBatcher(query, 0, **settings)  # type: ignore[arg-type]
        made.append(batcher)
        return batcher

    yield make
    for batcher in made:
        batcher.close()


def get_in_thread(batcher: MissBatcher[str, int], key: str, out: dict) -> threading.Thread:
    def run() -> None:
        try:
            out[key] = batcher.get(key)
        except BaseException as exc:  # the test inspects it
            out[key] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def threads_named(prefix: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(prefix)]


def test_keys_pending_while_a_batch_runs_are_read_by_one_query(make_batcher):
    query = FakeQuery({"a": 1, "b": 2, "c": 3})
    batcher = make_batcher(query)
    results: dict = {}
    query.gate.clear()
    threads = [get_in_thread(batcher, "a", results)]
    wait_until(lambda: query.calls, 5, "the first batch to start")
    # While it runs: b, c, c again and an unknown key queue up.
    threads += [get_in_thread(batcher, key, results) for key in ("b", "c", "c", "nobody")]
    wait_until(lambda: pending(batcher) == 3, 5, "three distinct keys pending")
    query.gate.set()
    for thread in threads:
        thread.join(10)
    assert query.calls[0] == ["a"]
    assert sorted(query.calls[1]) == ["b", "c", "nobody"]  # c asked twice, read once
    assert len(query.calls) == 2
    assert results == {"a": 1, "b": 2, "c": 3, "nobody": 0}  # absent from the answer: 0


def test_batches_are_capped_and_one_runs_at_a_time(make_batcher):
    query = FakeQuery({f"k{i}": i for i in range(7)})
    batcher = make_batcher(query, max_batch=3)
    results: dict = {}
    query.gate.clear()
    threads = [get_in_thread(batcher, "k0", results)]
    wait_until(lambda: query.calls, 5, "the first batch to start")
    threads += [get_in_thread(batcher, f"k{i}", results) for i in range(1, 7)]
    wait_until(lambda: pending(batcher) == 6, 5, "six keys pending")
    assert len(query.calls) == 1  # max_in_flight=1: the others wait for the first batch
    query.gate.set()
    for thread in threads:
        thread.join(10)
    assert [len(call) for call in query.calls] == [1, 3, 3]
    assert results == {f"k{i}": i for i in range(7)}


class SlowQuery(FakeQuery):
    """Each batch takes `seconds`: stands for a full scan."""

    def __init__(self, answers: dict[str, int], seconds: float):
        super().__init__(answers)
        self.seconds = seconds

    def __call__(self, keys: list[str]) -> dict[str, int]:
        answer = super().__call__(keys)
        time.sleep(self.seconds)  # the work being metered, not a synchronisation
        return answer


def test_the_duty_cycle_rests_after_a_batch_once_the_burst_is_spent(make_batcher):
    query = SlowQuery({"a": 1, "b": 2, "c": 3}, seconds=0.1)
    batcher = make_batcher(query, duty=0.25, burst_s=0.0)
    assert batcher.get("a") == 1
    assert batcher.get("b") == 2  # asked at once, but 0.1 s of work owes 0.3 s of rest
    assert query.started[1] - query.started[0] >= 0.1 + 0.3 - 0.01


def test_a_burst_budget_lets_batches_follow_each_other_at_once(make_batcher):
    query = SlowQuery({"a": 1, "b": 2}, seconds=0.1)
    batcher = make_batcher(query, duty=0.25, burst_s=1.0)
    assert batcher.get("a") == 1
    assert batcher.get("b") == 2
    assert query.started[1] - query.started[0] < 0.1 + 0.3


def test_a_quiet_worker_owes_no_rest(make_batcher):
    query = SlowQuery({"a": 1, "b": 2}, seconds=0.1)
    batcher = make_batcher(query, duty=0.25, burst_s=0.0, busy=lambda: False)
    assert batcher.get("a") == 1
    assert batcher.get("b") == 2
    assert query.started[1] - query.started[0] < 0.1 + 0.3


def test_keys_asked_together_share_one_query(make_batcher):
    query = FakeQuery({"a": 1, "b": 2})
    batcher = make_batcher(query)
    query.gate.clear()  # a batch already running: the keys queue behind it together
    results: dict = {}
    first = get_in_thread(batcher, "x", results)
    wait_until(lambda: query.calls, 5, "the first batch to start")
    many = threading.Thread(target=lambda: results.update(batcher.get_many(["a", "b", "c"])))
    many.start()
    wait_until(lambda: pending(batcher) == 3, 5, "the keys pending")
    query.gate.set()
    for thread in (first, many):
        thread.join(10)
    assert [sorted(call) for call in query.calls] == [["x"], ["a", "b", "c"]]
    assert results == {"x": 0, "a": 1, "b": 2, "c": 0}


def test_the_batcher_says_whether_it_is_reading(make_batcher):
    """What swr's refresh asks before a paced pass of its own: a key asked for
    while a batch runs or keys wait shares a scan that runs anyway."""
    query = FakeQuery({"a": 1})
    batcher = make_batcher(query)
    assert not batcher.reading()
    query.gate.clear()
    results: dict = {}
    first = get_in_thread(batcher, "a", results)
    wait_until(lambda: query.calls, 5, "the batch to start")
    assert batcher.reading()
    query.gate.set()
    first.join(10)
    wait_until(lambda: not batcher.reading(), 5, "the batch to end")
    assert results == {"a": 1}


def test_keys_asked_together_without_an_answer_in_time_are_withdrawn(make_batcher):
    query = FakeQuery({"a": 1})
    batcher = make_batcher(query, wait_s=0.2)
    query.gate.clear()
    results: dict = {}
    first = get_in_thread(batcher, "x", results)  # holds the only batch slot
    wait_until(lambda: query.calls, 5, "the first batch to start")
    with pytest.raises(BatchTimeout):
        batcher.get_many(["a", "b"])
    assert pending(batcher) == 0  # no scan for keys nobody waits for
    query.gate.set()
    first.join(10)
    assert query.calls == [["x"]]


def test_cpu_share_follows_this_process_cpu_use():
    share = CpuShare(window_s=0.05)
    until = time.monotonic() + 0.12
    while time.monotonic() < until:  # burn CPU in this process
        pass
    assert share() > 0.5
    time.sleep(0.12)  # idle: the behaviour under test
    assert share() < 0.5


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("MISS_BATCH_MAX", "0"),
        ("MISS_BATCHES_IN_FLIGHT", "17"),
        ("MISS_BATCH_DUTY_PERCENT", "0"),
        ("MISS_BATCH_DUTY_PERCENT", "x"),
    ],
)
def test_batch_settings_are_checked(variable, value):
    env = {
        "DATABASE_URL": "postgresql://a@127.0.0.1:5432/a",
        "REDIS_URL": "redis://127.0.0.1:6379/0",
        "CORE_URL": "http://127.0.0.1:1",
        "ASIDE_PROFILE": "lab",
    }
    defaults = load_settings(env)
    assert (defaults.miss_batch_max, defaults.miss_batches_in_flight) == (500, 1)
    assert defaults.miss_batch_duty_percent == 25
    assert (defaults.threads, defaults.redis_pool_max) == (64, 64)
    with pytest.raises(ConfigError, match=variable):
        load_settings({**env, variable: value})


def test_a_failing_batch_fails_every_waiter_with_its_own_copy(make_batcher):
    query = FakeQuery()
    batcher = make_batcher(query)
    query.gate.clear()
    query.fail_with = ApiError("database_unavailable", "the database is unreachable")
    results: dict = {}
    threads = [get_in_thread(batcher, "a", results)]
    wait_until(lambda: query.calls, 5, "the first batch to start")
    threads += [get_in_thread(batcher, key, results) for key in ("b", "c")]
    wait_until(lambda: pending(batcher) == 2, 5, "two keys pending")
    query.gate.set()
    for thread in threads:
        thread.join(10)
    errors = [results[key] for key in ("a", "b", "c")]
    assert all(isinstance(e, ApiError) and e.code == "database_unavailable" for e in errors)
    assert len({id(e) for e in errors}) == 3
    # The batcher keeps serving after a failure.
    query.fail_with = None
    query.answers = {"d": 4}
    assert batcher.get("d") == 4


def test_a_get_that_times_out_is_withdrawn_from_the_next_batch(make_batcher):
    query = FakeQuery({"a": 1, "b": 2})
    batcher = make_batcher(query, wait_s=0.2)
    query.gate.clear()
    results: dict = {}
    first = get_in_thread(batcher, "a", results)
    wait_until(lambda: query.calls, 5, "the first batch to start")
    with pytest.raises(BatchTimeout):
        batcher.get("late")  # queued behind the blocked batch for longer than wait_s
    assert pending(batcher) == 0
    query.gate.set()
    first.join(10)
    assert batcher.get("b") == 2
    assert ["late"] not in query.calls and all("late" not in call for call in query.calls)


def test_a_get_whose_client_left_is_withdrawn_before_its_batch(make_batcher):
    query = FakeQuery({"a": 1})
    batcher = make_batcher(query)
    query.gate.clear()
    results: dict = {}
    first = get_in_thread(batcher, "a", results)
    wait_until(lambda: query.calls, 5, "the first batch to start")
    client_left = threading.Event()
    threading.Timer(0.1, client_left.set).start()
    with pytest.raises(ClientGone):
        batcher.get("abandoned", client_left.is_set)
    assert pending(batcher) == 0
    query.gate.set()
    first.join(10)
    assert all("abandoned" not in call for call in query.calls)


def test_keys_beyond_the_pending_bound_are_refused_at_once(make_batcher):
    query = FakeQuery({"a": 1, "b": 2, "c": 3})
    batcher = make_batcher(query, max_pending=1)
    query.gate.clear()
    results: dict = {}
    threads = [get_in_thread(batcher, "a", results)]
    wait_until(lambda: query.calls, 5, "the first batch to start")
    threads.append(get_in_thread(batcher, "b", results))  # the one pending key
    wait_until(lambda: pending(batcher) == 1, 5, "b to be pending")
    started = time.monotonic()
    with pytest.raises(BatcherFull):
        batcher.get("c")
    assert time.monotonic() - started < 1
    query.gate.set()
    for thread in threads:
        thread.join(10)
    assert results == {"a": 1, "b": 2}


def test_threads_start_on_first_use_and_stop_on_close():
    name = f"test-batcher-{time.monotonic_ns()}"
    batcher: MissBatcher[str, int] = MissBatcher(
        FakeQuery({"a": 1}), 0, max_batch=10, max_in_flight=2, wait_s=5, name=name
    )
    assert threads_named(name) == []  # nothing started by the constructor (gunicorn master)
    assert batcher.get("a") == 1
    assert len(threads_named(name)) == 2
    batcher.close()
    wait_until(lambda: threads_named(name) == [], 5, "the batcher threads to stop")
    with pytest.raises(RuntimeError):
        batcher.get("a")


# ---- integration: the batched query on PostgreSQL --------------------------------------


@pytest.fixture(scope="module")
def database(database_url: str, redis_url: str, core: Proc) -> Iterator[Database]:
    settings = load_settings(
        {
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "CORE_URL": core.url,
            "ASIDE_PROFILE": "lab",
        }
    )
    database = Database(settings)
    yield database
    database.close()


def test_a_batch_counts_each_email_and_zero_for_absent_ones(database, insert_user):
    present, twice, absent = unique_email("b1"), unique_email("b2"), unique_email("b0")
    insert_user(present)
    insert_user(twice)
    insert_user(twice)
    upper = present.upper()  # counts are exact matches: another email
    emails = [present, twice, absent, upper] + [unique_email("pad") for _ in range(12)]
    found = database.count_many(emails)
    assert found == {present: 1, twice: 2}  # the batcher turns the missing ones into 0
    results: dict = {}
    threads = [get_in_thread(database.count_batcher, e, results) for e in (present, absent)]
    for thread in threads:
        thread.join(10)
    assert results == {present: 1, absent: 0}


def test_a_paced_pass_counts_as_one_query_does(database, db, insert_user, monkeypatch):
    """swr's refresh without the email index reads `users` in slices of pages
    (misses/db.py `counts_paced`): one page a slice here, so rows on every page
    and the open-ended last slice count, each row once."""
    tag = unique_email("p")
    db.execute(  # 300 rows, some pages' worth, every 100th with the same email
        "INSERT INTO users (username, email)"
        " SELECT %s || n, CASE WHEN n %% 100 = 0 THEN %s ELSE n || %s END"
        " FROM generate_series(1, 300) AS n",
        (unique_username("p"), "every100-" + tag, "-" + tag),
    )
    emails = ["every100-" + tag, "1-" + tag, "299-" + tag, "late-" + tag, unique_email("p0")]
    monkeypatch.setattr(db_module, "SLICE_PAGES_FIRST", 1)
    monkeypatch.setattr(db_module, "SLICE_PAGES_MIN", 1)
    monkeypatch.setattr(db_module, "SLICE_PAGES_MAX", 1)
    pages = int(database._fetchone(db_module.TABLE_PAGES_SQL, ())[0])
    assert pages >= 3
    insert_user("late-" + tag)  # may land past the pages counted: the open end reads it
    paced = database.counts_paced(emails, duty=1.0)
    assert paced == {email: database.count_many(emails).get(email, 0) for email in emails}
    assert paced == {"every100-" + tag: 3, "1-" + tag: 1, "299-" + tag: 1, "late-" + tag: 1,
                     emails[-1]: 0}  # fmt: skip


# ---- integration: through gunicorn -------------------------------------------------------


@pytest.fixture(scope="module")
def single_worker(start_gateway) -> Proc:
    """One worker: every request of a test meets the same in-process flights."""
    return start_gateway(GATEWAY_WORKERS="1")


def read_count(base: str, email: str, **headers: str) -> requests.Response:
    return requests.get(base + COUNT, params={"email": email}, headers=headers, timeout=30)


Answers = list[tuple[str, requests.Response]]


def count_readers(
    url: str, emails: list[str], cache: str | None = None
) -> tuple[list[threading.Thread], Answers]:
    """A thread (not started) per email that reads its count, and the list of
    (email, answer) they fill."""
    answers: Answers = []
    lock = threading.Lock()
    params = {} if cache is None else {"cache": cache}

    def reader(email: str) -> None:
        response = requests.get(url + COUNT, params={"email": email, **params}, timeout=30)
        with lock:
            answers.append((email, response))

    return [threading.Thread(target=reader, args=(email,)) for email in emails], answers


def delta(before: dict, after: dict, name: str, **labels: str) -> float:
    return sample(after, name, **labels) - sample(before, name, **labels)


def queries(samples: dict) -> float:
    return sample(samples, "aside_gateway_db_queries_total", query="count_by_email") + sample(
        samples, "aside_gateway_db_queries_total", query="count_batch"
    )


@pytest.fixture(scope="module")
def wide_gateway(start_gateway) -> Proc:
    """Two workers with the default 64 threads (the suite's main gateway pins 16).

    Admission at the loop's door is off: 200 client threads starting at once
    on two cores can make a worker's loop late enough for the limit to shed
    the last arrivals, a right answer from the door that is not what these
    tests are about (test_overload.py tests the door)."""
    return start_gateway(GATEWAY_THREADS="64", GATEWAY_ADMISSION="off")


def test_many_cold_keys_cost_a_few_queries_and_answer_right(
    wide_gateway, insert_user, db_count, query_calls, database_url, rdb
):
    """200 concurrent reads of 40 cold keys. The table is locked while they
    arrive, so the first batch of each worker stays busy and every other key
    must queue up behind it: the cold burst of a benchmark, made deterministic."""
    url = wide_gateway.url
    emails = [unique_email(f"many{i}") for i in range(40)]
    for i, email in enumerate(emails):
        for _ in range(i % 3):  # 0, 1 or 2 rows: a third of them count 0
            insert_user(email)
    followers = emails * 4
    random.Random(7).shuffle(followers)
    before = scrape(url)
    sql_before = query_calls(COUNT_SQL_TEXT) + query_calls(BATCH_SQL_TEXT)
    # One reader per key first: all 40 get a leader.
    threads, answers = count_readers(url, emails + followers)
    with psycopg.connect(database_url) as locker:
        locker.execute("LOCK TABLE users IN ACCESS EXCLUSIVE MODE")
        for thread in threads:
            thread.start()
        # A leader takes its key's lease before it queues the key for its batch.
        leases = [cache_keys.lease_key(cache_keys.count_key(e)) for e in emails]
        wait_until(lambda: rdb.exists(*leases) == len(leases), 4, "a lease on every key")
        locker.rollback()
    for thread in threads:
        thread.join(timeout=60)
    after = scrape(url)
    # Before db_count: pg_stat_statements files that query under the gateway's
    # (the same statement once aliases are ignored).
    sql_calls = query_calls(COUNT_SQL_TEXT) + query_calls(BATCH_SQL_TEXT) - sql_before

    assert len(answers) == 200
    for email, response in answers:
        assert response.status_code == 200, response.text
        assert response.json() == {"email": email, "count": db_count(email)}
    assert 2 <= sql_calls <= 2 * 3, sql_calls  # a few batches per worker, not 40 queries
    assert queries(after) - queries(before) == sql_calls
    # Every key was read exactly once (leases across workers, flights within one).
    assert delta(before, after, "aside_gateway_miss_batch_size_sum") == len(emails)
    assert delta(before, after, "aside_gateway_cache_misses_total", route=COUNT_ROUTE) == 40
    assert delta(before, after, "aside_gateway_cache_hits_total", route=COUNT_ROUTE) == 160
    # Readers of a key their worker is filling wait for that fill: on the event
    # loop (front/hot_path.py), or in a Flask thread (tiers/l2.py) for a reader that got there.
    shared = delta(before, after, "aside_gateway_singleflight_shared_total", route=COUNT_ROUTE)
    followed = delta(
        before, after, "aside_gateway_loop_followers_total", route=COUNT_ROUTE, outcome="hit"
    )
    assert 0 < shared + followed <= 160
    missed = [e for e, r in answers if r.headers["X-Cache"] == "MISS"]
    assert sorted(missed) == sorted(emails)  # one MISS per key: the reader that filled it


def _start_held(url: str, email: str, hold: str, rdb) -> tuple[threading.Thread, dict]:
    result: dict[str, requests.Response] = {}
    thread = threading.Thread(
        target=lambda: result.update(response=read_count(url, email, **{"X-Test-Hold": hold}))
    )
    thread.start()
    assert rdb.blpop([f"aside:test:{hold}:reached"], timeout=HOLD_DEADLINE_S), "never held"
    return thread, result


def _start_follower(url: str, email: str, hold: str, rdb) -> tuple[threading.Thread, dict]:
    result: dict[str, requests.Response] = {}
    thread = threading.Thread(
        target=lambda: result.update(response=read_count(url, email, **{"X-Test-Hold": hold}))
    )
    thread.start()
    assert rdb.blpop([f"aside:test:{hold}:joined"], timeout=HOLD_DEADLINE_S), "never joined"
    return thread, result


def _release(rdb, hold: str) -> None:
    rdb.rpush(f"aside:test:{hold}:release", "go")


def test_a_follower_shares_a_fill_stored_under_the_lease(single_worker, insert_user, rdb):
    email = unique_email("share")
    insert_user(email)
    tag = time.monotonic_ns()
    leader, led = _start_held(single_worker.url, email, f"lead-{tag}", rdb)
    before = scrape(single_worker.url)
    follower, followed = _start_follower(single_worker.url, email, f"follow-{tag}", rdb)
    _release(rdb, f"lead-{tag}")
    leader.join(HOLD_DEADLINE_S)
    follower.join(HOLD_DEADLINE_S)
    assert led["response"].headers["X-Cache"] == "MISS"
    assert followed["response"].json() == {"email": email, "count": 1}
    assert followed["response"].headers["X-Cache"] == "HIT"
    assert rdb.llen(f"aside:test:follow-{tag}:reached") == 0  # it never read the database
    after = scrape(single_worker.url)
    assert delta(before, after, "aside_gateway_singleflight_shared_total", route=COUNT_ROUTE) == 1
    assert queries(after) == queries(before)


def test_a_follower_never_inherits_a_read_older_than_a_finished_write(single_worker, rdb, db_count):
    """The leader read before a write; a reader that joins its flight after the
    write returned must not get that old value (the leader itself may)."""
    email = unique_email("race-follow")
    tag = time.monotonic_ns()
    leader, led = _start_held(single_worker.url, email, f"lead-{tag}", rdb)  # read 0
    created = requests.post(
        single_worker.url + "/api/v1/users",
        json={"username": unique_username(), "email": email},
        timeout=10,
    )
    assert created.status_code == 201, created.text
    follower, followed = _start_follower(single_worker.url, email, f"follow-{tag}", rdb)
    _release(rdb, f"lead-{tag}")
    leader.join(HOLD_DEADLINE_S)
    assert led["response"].json()["count"] == 0  # read before the write: allowed
    # The leader's store found its lease gone, so the follower fills the key itself.
    assert rdb.blpop([f"aside:test:follow-{tag}:reached"], timeout=HOLD_DEADLINE_S)
    _release(rdb, f"follow-{tag}")
    follower.join(HOLD_DEADLINE_S)
    assert followed["response"].json() == {"email": email, "count": 1}
    assert followed["response"].headers["X-Cache"] == "MISS"
    assert db_count(email) == 1
    assert read_count(single_worker.url, email).json()["count"] == 1


def test_a_reader_without_the_lease_waits_past_the_old_wait_instead_of_querying(
    single_worker, gateway, insert_user, rdb
):
    """Another process holds the lease for for seconds: the waiting
    gateway keeps polling (no query of its own) and then shares the stored value."""
    email = unique_email("patient")
    insert_user(email)
    tag = time.monotonic_ns()
    holder, held = _start_held(single_worker.url, email, f"hold-{tag}", rdb)
    before = scrape(gateway.url)
    result: dict[str, requests.Response] = {}
    waiter = threading.Thread(target=lambda: result.update(response=read_count(gateway.url, email)))
    started = time.monotonic()
    waiter.start()
    # The behaviour under test is time itself: hold the lease for seconds.
    time.sleep(HOLD_SECONDS + 0.5)
    assert waiter.is_alive()
    _release(rdb, f"hold-{tag}")
    holder.join(HOLD_DEADLINE_S)
    waiter.join(HOLD_DEADLINE_S)
    assert time.monotonic() - started > HOLD_SECONDS
    assert held["response"].headers["X-Cache"] == "MISS"
    assert result["response"].json() == {"email": email, "count": 1}
    assert result["response"].headers["X-Cache"] == "HIT"
    after = scrape(gateway.url)
    assert queries(after) == queries(before)


def test_keys_queued_behind_a_batch_that_finds_the_database_down_fail_with_it(make_batcher):
    """A failure that says PostgreSQL is down also fails the keys pending behind the
    batch: a batch of their own would only wait out the outage (the pool wait) again."""
    query = FakeQuery()
    down = ApiError("database_unavailable", "the database is unreachable")
    batcher = make_batcher(query, fail_pending=lambda exc: exc is down)
    query.gate.clear()
    query.fail_with = down
    results: dict = {}
    threads = [get_in_thread(batcher, "a", results)]
    wait_until(lambda: query.calls, 5, "the first batch to start")
    # "a" again while its batch runs: a second slot for the same key, pending.
    threads += [get_in_thread(batcher, key, results) for key in ("b", "c", "a")]
    wait_until(lambda: pending(batcher) == 3, 5, "three keys pending")
    query.gate.set()
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads)
    assert len(query.calls) == 1  # nobody waited for a batch of their own
    assert all(isinstance(results[k], ApiError) for k in ("a", "b", "c"))
    assert pending(batcher) == 0
    # Any other failure leaves the pending keys to their own batch.
    gate = threading.Event()
    calls: list[list[str]] = []

    def first_fails(keys: list[str]) -> dict[str, int]:
        calls.append(list(keys))
        if len(calls) == 1:
            assert gate.wait(10)
            raise RuntimeError("one bad batch")
        return {"x": 1}

    plain = make_batcher(first_fails, fail_pending=lambda exc: exc is down)
    results = {}
    first = get_in_thread(plain, "w", results)
    wait_until(lambda: calls, 5, "the first batch to start")
    second = get_in_thread(plain, "x", results)
    wait_until(lambda: pending(plain) == 1, 5, "x pending")
    gate.set()
    first.join(10)
    second.join(10)
    assert isinstance(results["w"], RuntimeError) and results["x"] == 1
    assert calls == [["w"], ["x"]]


def test_coalesced_uncached_reads_share_scans_and_store_nothing(
    wide_gateway, insert_user, db_count, query_calls, database_url, rdb
):
    """cache=coalesce: 120 concurrent reads of 40 cold emails cost a few batched
    scans, as the cache's misses do (above), and leave no key or lease in Redis.
    Read one query each (cache=off), they would cost 120 scans."""
    url = wide_gateway.url
    emails = [unique_email(f"coal{i}") for i in range(40)]
    for i, email in enumerate(emails):
        for _ in range(i % 3):
            insert_user(email)
    readers = emails * 3
    random.Random(11).shuffle(readers)
    before = scrape(url)
    sql_before = query_calls(COUNT_SQL_TEXT) + query_calls(BATCH_SQL_TEXT)
    threads, answers = count_readers(url, readers, cache="coalesce")
    with psycopg.connect(database_url) as locker:
        locker.execute("LOCK TABLE users IN ACCESS EXCLUSIVE MODE")
        for thread in threads:
            thread.start()
        wait_until(lambda: reads_waiting_on_a_lock(locker) >= 1, 10, "a scan to wait on the lock")
        locker.rollback()
    for thread in threads:
        thread.join(timeout=60)
    after = scrape(url)
    sql_calls = query_calls(COUNT_SQL_TEXT) + query_calls(BATCH_SQL_TEXT) - sql_before

    assert len(answers) == len(readers)
    for email, response in answers:
        assert response.status_code == 200, response.text
        assert response.json() == {"email": email, "count": db_count(email)}
        assert response.headers["X-Cache"] == "BYPASS"
    assert 1 <= sql_calls <= 12, sql_calls  # batches, not one scan per read
    assert delta(before, after, "aside_gateway_miss_batch_size_sum") < len(readers)
    assert delta(before, after, "aside_gateway_cache_bypass_total", route=COUNT_ROUTE) == 120
    keys = [cache_keys.count_key(e) for e in emails]
    assert rdb.exists(*keys) == 0
    assert rdb.exists(*[cache_keys.lease_key(k) for k in keys]) == 0
