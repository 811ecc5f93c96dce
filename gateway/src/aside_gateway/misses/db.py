"""PostgreSQL reads through one psycopg connection pool per worker.

Four timeouts keep a sick database from hanging a request: libpq's
connect_timeout, the server-side statement_timeout, the pool's wait for a
free connection, and a client-side deadline past statement_timeout for a
server that takes a statement and never answers (misses/deadline.py); a cached
read's miss besides keeps to its own deadline over them all
(misses/read_deadline.py). After a read found PostgreSQL down or silent, the
worker's breaker answers reads 503 at once for DB_BREAKER_MS, then lets one
probe through (door/circuit.py). A
refused or lost connection, a pool wait that times out and a statement past
the client's deadline answer 503 database_unavailable; a statement cut by
statement_timeout answers 504 timeout. The gateway only reads: writes belong to the core.

Count misses of the cached path go through a per-worker `MissBatcher`
(misses/coalesce.py): every count pending while the previous batch ran is read by one
`= ANY(array)` query, so a cold cache costs a few full scans instead of one per
distinct email. The uncached arm (`cache=off`) keeps one query per request: it
is the baseline the cache is measured against. The lab's `cache=nopool` arm
does the same over a connection of its own per read, opened and closed around
its one query: what the pool saves (only in the lab profile; production
builds no such connection).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

from aside_gateway.config import metrics
from aside_gateway.config.settings import Settings
from aside_gateway.contracts.errors import ApiError
from aside_gateway.door.circuit import Breaker
from aside_gateway.misses import read_deadline
from aside_gateway.misses.coalesce import (
    MAX_PAUSE_S,
    BatcherFull,
    BatchTimeout,
    CpuShare,
    MissBatcher,
)
from aside_gateway.misses.deadline import StatementWatchdog

COUNT_BY_EMAIL_SQL = "SELECT count(*) FROM users WHERE email = %s"
# Sent unprepared (prepare=False) so PostgreSQL plans it with the array's value:
# PG 14+ then hashes `= ANY` over a constant array of 9+ elements (one probe per
# row); a generic plan of a prepared statement keeps a parameter and compares
# each row with every element. See docs/decisions/003-batched-count-misses-sent-unprepared.md.
COUNT_MANY_SQL = "SELECT email, count(*) FROM users WHERE email = ANY(%s) GROUP BY email"
# A refresh nobody waits for (swr's, front/refresh_behind.py) reads `users`
# without the email index in slices of pages (TID ranges), resting between them
# so that its pass takes at most CACHE_EXPIRY_REFRESH_DUTY_PERCENT of a core:
# one full scan at once on 2 shared cores queues every read answered meanwhile.
COUNT_SLICE_SQL = (
    "SELECT email, count(*) FROM users WHERE ctid >= %s::tid AND ctid < %s::tid"
    " AND email = ANY(%s) GROUP BY email"
)
TABLE_PAGES_SQL = "SELECT pg_relation_size('users') / current_setting('block_size')::int"
LAST_PAGE = 4294967295  # the largest block number a TID names: the last slice's open end
SLICE_TARGET_S = 0.01  # each slice's aim; its size in pages follows the last one's time
SLICE_PAGES_FIRST, SLICE_PAGES_MIN, SLICE_PAGES_MAX = 256, 16, 8192
# How long a refresh trusts the last look at whether the email index exists.
INDEX_LOOK_S = 10.0
# A worker using this much of a core is serving hits worth protecting: only then
# does the count batcher hold its scans to MISS_BATCH_DUTY_PERCENT of the time.
BUSY_CPU_SHARE = 0.2
USER_BY_ID_SQL = "SELECT id, username, email, created_at FROM users WHERE id = %s"
# path::text is the stored JSON text as it is (json keeps it byte for byte).
TRACK_BY_ID_SQL = "SELECT name, distance_m, path::text FROM tracks WHERE id = %s"

UserRow = tuple[int, str, str, datetime]
APPLICATION_NAME = "aside-gateway"
# The nopool arm's connections, told apart in pg_stat_activity.
UNPOOLED_APPLICATION_NAME = "aside-gateway-nopool"
TrackRow = tuple[str, int, str]  # name, distance_m, path
# How long a read waits for a pooled connection while PostgreSQL is known to be down.
DOWN_POOL_WAIT_S = 0.1
# While the pool has no connection, a read looks every this often whether its
# reconnects are being refused.
RECONNECT_SLICE_S = 0.05
# A statement's client-side deadline is statement_timeout plus this: the server
# is the one to cut a statement that runs long, the client only one whose
# answer never comes (misses/deadline.py).
CLIENT_GRACE_S = 0.5
# A 503 says when to try again, like the core's and the shed uncached reads'.
RETRY_LATER = {"Retry-After": "1"}


def _database_down(exc: BaseException) -> bool:
    return isinstance(exc, ApiError) and exc.code == "database_unavailable"


@contextmanager
def _batched() -> Iterator[None]:
    """A batched count's failures as the API answers them."""
    try:
        yield
    except BatchTimeout:
        if read_deadline.passed():
            raise read_deadline.past_deadline() from None
        raise ApiError("timeout", "the database query took too long") from None
    except BatcherFull:
        metrics.shed("batch_queue_full")
        raise ApiError(
            "unavailable", "too many count misses waiting for the database", RETRY_LATER
        ) from None


def connection_kwargs(settings: Settings) -> dict[str, Any]:
    """How every gateway connection to PostgreSQL is opened, pooled or not."""
    return {
        # Reads only, one statement each: autocommit saves BEGIN/COMMIT round trips.
        "autocommit": True,
        "connect_timeout": settings.db_connect_timeout_s,
        "options": f"-c statement_timeout={settings.db_statement_timeout_ms}",
        "application_name": APPLICATION_NAME,
        # A partition (no RST, no FIN) would otherwise leave a read, and
        # the miss batcher behind it, waiting on a dead socket for as
        # long as the kernel's defaults allow: hours.
        "keepalives": 1,
        "keepalives_idle": settings.db_keepalives_idle_s,
        "keepalives_interval": settings.db_keepalives_interval_s,
        "keepalives_count": settings.db_keepalives_count,
        "tcp_user_timeout": settings.db_tcp_user_timeout_ms,
    }


class Database:
    def __init__(self, settings: Settings):
        kwargs = connection_kwargs(settings)
        self.pool = ConnectionPool(
            conninfo=settings.database_url,
            min_size=settings.db_pool_min,
            max_size=settings.db_pool_max,
            timeout=settings.db_pool_timeout_ms / 1000,
            name="aside-gateway",
            open=False,
            kwargs=kwargs,
        )
        self._conninfo = settings.database_url
        # The lab's nopool arm only: production keeps no way to open one.
        self._unpooled_kwargs = (
            {**kwargs, "application_name": UNPOOLED_APPLICATION_NAME} if settings.is_lab else None
        )
        # wait=False: the gateway starts (and /readyz reports) even while PostgreSQL is down.
        self.pool.open(wait=False)
        # True from a read that found PostgreSQL unreachable until one succeeds:
        # meanwhile reads wait DOWN_POOL_WAIT_S, not DB_POOL_TIMEOUT_MS, for a
        # connection (the pool reconnects in the background), so an outage costs
        # each miss a fast 503 instead of a pool wait, and a miss queued behind
        # another (a batch, a lease handed over by another worker) does not wait
        # out a second one.
        self._down = False
        self.breaker = Breaker(settings.db_breaker_ms / 1000)
        self._connect_errors_seen = 0
        self._max_size = settings.db_pool_max
        self._count_queries = metrics.DB_QUERIES.labels("count_by_email")
        self._batch_queries = metrics.DB_QUERIES.labels("count_batch")
        self._user_queries = metrics.DB_QUERIES.labels("user_by_id")
        self._track_queries = metrics.DB_QUERIES.labels("track_by_id")
        # A batch may queue behind one running batch and its pause: each batch takes
        # at most a pool wait plus a statement timeout (a lost connection's retry aside).
        batch_wait_s = 2 * (settings.db_pool_timeout_ms + settings.db_statement_timeout_ms) / 1000
        self._refresh_duty = settings.cache_expiry_refresh_duty_percent / 100
        self._statement_timeout_s = settings.db_statement_timeout_ms / 1000
        self._watchdog = StatementWatchdog(self._statement_timeout_s + CLIENT_GRACE_S)
        self._indexed = False
        self._index_looked_at = -INDEX_LOOK_S
        cpu_share = CpuShare()
        self.count_batcher: MissBatcher[str, int] = MissBatcher(
            self.count_many,
            0,
            max_batch=settings.miss_batch_max,
            max_in_flight=settings.miss_batches_in_flight,
            wait_s=batch_wait_s + MAX_PAUSE_S + 1,
            duty=settings.miss_batch_duty_percent / 100,
            busy=lambda: cpu_share() >= BUSY_CPU_SHARE,
            fail_pending=_database_down,
            name="aside-count-batcher",
            max_pending=settings.miss_batch_max_pending,
        )

    def _run(
        self,
        work: Callable[[psycopg.Connection[Any]], Any],
        timeout: float | None,
        guarded: bool = True,
    ) -> Any:
        """`work` on a pooled connection. `guarded`: a read the breaker may refuse
        (not the readiness probe's, which must see PostgreSQL itself)."""
        if guarded and not self.breaker.allow():
            metrics.shed("db_breaker_open")
            raise ApiError(
                "database_unavailable", "the database failed a read just now", RETRY_LATER
            )
        try:
            return self._run_allowed(work, timeout)
        except ApiError as exc:
            if exc.code != "database_unavailable":
                self.breaker.record_success()  # PostgreSQL answered (statement_timeout)
            raise
        except BaseException:
            self.breaker.return_probe()
            raise

    def _run_allowed(
        self, work: Callable[[psycopg.Connection[Any]], Any], timeout: float | None
    ) -> Any:
        # One retry for a lost connection (PostgreSQL restarted, backend killed):
        # reads are idempotent, and the pool drops the broken connections first.
        if timeout is None and self._down:
            timeout = DOWN_POOL_WAIT_S
        for attempt in (1, 2):
            cut = None
            # A cached read's miss keeps to its own deadline (misses/read_deadline.py).
            wait = read_deadline.within(self.pool.timeout if timeout is None else timeout)
            statement_s = read_deadline.within(self._watchdog.limit_s)
            if not wait or not statement_s:
                raise read_deadline.past_deadline()
            try:
                with (
                    self._connection(wait) as conn,
                    self._watchdog.watch(conn, statement_s) as cut,
                ):
                    result = work(conn)
                self._note_up()
                return result
            except PoolTimeout:
                self._note_down()
                if read_deadline.passed():
                    raise read_deadline.past_deadline() from None
                raise ApiError(
                    "database_unavailable",
                    "no database connection became available in time",
                    RETRY_LATER,
                ) from None
            except pg_errors.QueryCanceled:
                raise ApiError("timeout", "the database query took too long") from None
            except (psycopg.OperationalError, psycopg.InterfaceError):
                if cut is not None and cut.cut:
                    if statement_s < self._watchdog.limit_s:
                        raise read_deadline.past_deadline() from None  # no verdict on it
                    # The server took the statement and went silent: as unreachable
                    # (no second wait; the batcher fails the misses queued behind it).
                    self._mark_down()
                    raise ApiError(
                        "database_unavailable", "the database did not answer in time", RETRY_LATER
                    ) from None
                if attempt == 2:
                    self._mark_down()
                    raise ApiError(
                        "database_unavailable", "the database is unreachable", RETRY_LATER
                    ) from None
                self.pool.check()
        raise AssertionError("unreachable")

    @contextmanager
    def _connection(self, timeout: float) -> Iterator[psycopg.Connection[Any]]:
        conn = self._getconn(timeout)
        try:
            yield conn
        finally:
            self.pool.putconn(conn)

    def _getconn(self, timeout: float) -> psycopg.Connection[Any]:
        """A pooled connection within `timeout`. A wait (no idle connection) ends
        early once the pool has failed to open a connection since the last good
        query: PostgreSQL refuses, and waiting out the pool would only delay the
        503. A worker whose idle connections all broke (PostgreSQL restarted) thus
        learns it is down within a slice or two, not a pool timeout; this is what
        kept a miss handed from one worker's lease to another's from costing two
        pool timeouts."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = max(deadline - time.monotonic(), 0.0)
            if self.pool.get_stats().get("pool_available", 0) > 0:
                return self.pool.getconn(timeout=remaining)
            try:
                return self.pool.getconn(timeout=min(RECONNECT_SLICE_S, remaining))
            except PoolTimeout:
                if remaining <= RECONNECT_SLICE_S or self._pool_failing():
                    raise

    def _connect_errors(self) -> int:
        return self.pool.get_stats().get("connections_errors", 0)

    def _pool_failing(self) -> bool:
        """The pool failed to open a connection since the last good query."""
        return self._connect_errors() > self._connect_errors_seen

    def _note_up(self) -> None:
        self._down = False
        self.breaker.record_success()
        self._connect_errors_seen = self._connect_errors()

    def _mark_down(self) -> None:
        """PostgreSQL found unreachable or silent: short pool waits, and the
        breaker open for DB_BREAKER_MS."""
        self._down = True
        self.breaker.trip()

    def _note_down(self) -> None:
        """After a pool wait ran out: PostgreSQL is down if the pool failed to
        connect since we last looked (a pool that is merely busy is not down)."""
        errors = self._connect_errors()
        if errors > self._connect_errors_seen:
            self._mark_down()
        self._connect_errors_seen = errors

    def _fetchone(
        self,
        sql: str,
        params: tuple[Any, ...],
        timeout: float | None = None,
        pooled: bool = True,
        guarded: bool = True,
    ) -> Any:
        if not pooled:
            return self._fetchone_unpooled(sql, params)
        return self._run(lambda conn: conn.execute(sql, params).fetchone(), timeout, guarded)

    def _fetchone_unpooled(self, sql: str, params: tuple[Any, ...]) -> Any:
        """One query over a connection of its own, closed right after: every
        read pays the connect (TCP, a new backend process, SCRAM authentication)
        that the pool pays once. Its callers bound how many run at once."""
        if self._unpooled_kwargs is None:
            raise ApiError("lab_disabled", "reads without the pool are only for the lab profile")
        metrics.DB_UNPOOLED_CONNECTIONS.inc()
        try:
            with psycopg.connect(self._conninfo, **self._unpooled_kwargs) as conn:
                return conn.execute(sql, params).fetchone()
        except pg_errors.QueryCanceled:
            raise ApiError("timeout", "the database query took too long") from None
        except (psycopg.OperationalError, psycopg.InterfaceError):
            raise ApiError(
                "database_unavailable", "the database is unreachable", RETRY_LATER
            ) from None

    def count_by_email(
        self,
        email: str,
        coalesce: bool = False,
        gone: Callable[[], bool] | None = None,
        pooled: bool = True,
    ) -> int:
        """Users with exactly this email. `coalesce`: read it in this worker's
        next batch (cache fills); otherwise one query of its own (cache=off),
        over a connection of its own when not `pooled` (cache=nopool, lab).
        `gone`: whether the client left, so a batched read not started yet is
        withdrawn."""
        if coalesce:
            with _batched():
                return self.count_batcher.get(email, gone, read_deadline.remaining())
        self._count_queries.inc()
        row = self._fetchone(COUNT_BY_EMAIL_SQL, (email,), pooled=pooled)
        return int(row[0])

    def counts_by_email(self, emails: Sequence[str]) -> dict[str, int]:
        """The counts of several emails, sharing one batch of the count batcher."""
        with _batched():
            return self.count_batcher.get_many(emails)

    def refresh_counts(self, emails: Sequence[str]) -> dict[str, int]:
        """Counts that nobody waits for (swr's refreshes): in one batch when the
        email index makes them cheap or readers' misses are being read anyway
        (the refresh shares their scan), else in one paced pass over the table."""
        now = time.monotonic()
        if now - self._index_looked_at >= INDEX_LOOK_S:
            self._indexed = self.has_email_index(self._statement_timeout_s)
            self._index_looked_at = now
        if self._indexed or self.count_batcher.reading():
            return self.counts_by_email(emails)
        return self.counts_paced(emails, self._refresh_duty)

    def counts_paced(self, emails: Sequence[str], duty: float) -> dict[str, int]:
        """The count of each of `emails` (0 for none) from one pass over `users` in slices of pages,
        each slice followed by a rest that holds the pass to `duty` of a core.
        Not one snapshot: a write in between invalidates the counts it changed,
        and their stores under the leases taken before the pass then fail."""
        self._batch_queries.inc()  # a pass reads the table once, as a batch does
        metrics.MISS_BATCH_SIZE.observe(len(emails))
        pages = int(self._fetchone(TABLE_PAGES_SQL, ())[0])
        wanted = list(emails)
        counts = dict.fromkeys(wanted, 0)  # an email no row has counts 0, as in a batch
        start, size = 0, SLICE_PAGES_FIRST
        while start <= pages:
            end = start + size if start + size <= pages else LAST_PAGE
            params = (f"({start},0)", f"({end},0)", wanted)
            began = time.monotonic()
            rows = self._run(lambda conn, p=params: _serial(conn, COUNT_SLICE_SQL, p), None)
            took = time.monotonic() - began
            for email, count in rows:
                counts[email] += int(count)
            start = end
            size = min(
                max(int(size * SLICE_TARGET_S / max(took, 1e-4)), SLICE_PAGES_MIN), SLICE_PAGES_MAX
            )
            if start <= pages:
                time.sleep(took * (1 / duty - 1))  # pacing the pass, the point of it
        return counts

    def count_many(self, emails: list[str]) -> dict[str, int]:
        """Counts of several emails in one query (absent ones are left out): one batch
        of the count batcher, run in its thread."""
        metrics.MISS_BATCH_SIZE.observe(len(emails))
        if len(emails) == 1:  # the plain query: no array, no GROUP BY
            self._count_queries.inc()
            rows = self._run(lambda conn: _serial(conn, COUNT_BY_EMAIL_SQL, (emails[0],)), None)
            return {emails[0]: int(rows[0][0])}
        self._batch_queries.inc()
        rows = self._run(lambda conn: _serial(conn, COUNT_MANY_SQL, (emails,)), None)
        return {email: int(count) for email, count in rows}

    def user_by_id(self, user_id: int, pooled: bool = True) -> UserRow | None:
        self._user_queries.inc()
        return self._fetchone(USER_BY_ID_SQL, (user_id,), pooled=pooled)

    def track_by_id(self, track_id: int) -> TrackRow | None:
        self._track_queries.inc()
        return self._fetchone(TRACK_BY_ID_SQL, (track_id,))

    def ping(self, timeout_s: float) -> None:
        """Raise ApiError unless PostgreSQL answers within about timeout_s."""
        self._fetchone("SELECT 1", (), timeout=timeout_s, guarded=False)

    def has_email_index(self, timeout_s: float) -> bool:
        """Whether `users` has a valid, whole-table B-tree index led by email: what
        keeps a count miss from scanning the table (ApiError if unreachable)."""
        row = self._fetchone(EMAIL_INDEX_SQL, (), timeout=timeout_s, guarded=False)
        return bool(row and row[0])

    def sample_gauges(self) -> None:
        stats = self.pool.get_stats()
        metrics.DB_POOL_SIZE.set(stats.get("pool_size", 0))
        metrics.DB_POOL_AVAILABLE.set(stats.get("pool_available", 0))
        metrics.DB_POOL_WAITING.set(stats.get("requests_waiting", 0))
        metrics.DB_POOL_MAX.set(self._max_size)
        metrics.DB_BREAKER_OPEN.set(1 if self.breaker.is_open else 0)

    def close(self) -> None:
        self.count_batcher.close()
        self.pool.close(timeout=1.0)


# An index a count by email can use: on users, valid, not partial, its first
# column email itself (not an expression), B-tree (equality on text).
EMAIL_INDEX_SQL = """
SELECT EXISTS (
    SELECT 1
    FROM pg_index i
    JOIN pg_class c ON c.oid = i.indexrelid
    JOIN pg_am am ON am.oid = c.relam
    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
    WHERE i.indrelid = to_regclass('users') AND i.indisvalid AND i.indpred IS NULL
      AND a.attname = 'email' AND am.amname = 'btree'
)
"""


def _serial(conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...]) -> list[Any]:
    """Run one batch in one backend process. The batcher's duty cycle meters the
    wall time of its queries, which is their CPU time only for a serial scan; and
    on 2 cores parallel workers would only take CPU from the gateway."""
    with conn.transaction():
        conn.execute("SET LOCAL max_parallel_workers_per_gather = 0")
        return conn.execute(sql, params, prepare=False).fetchall()
