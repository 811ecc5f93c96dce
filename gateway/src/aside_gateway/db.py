"""PostgreSQL reads through one psycopg connection pool per worker.

Three timeouts keep a sick database from hanging a request: libpq's
connect_timeout, the server-side statement_timeout, and the pool's wait for a
free connection. A refused or lost connection and a pool wait that times out
answer 503 database_unavailable; a statement cut by statement_timeout answers
504 timeout. The gateway only reads: writes belong to the core.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

from aside_gateway import metrics
from aside_gateway.config import Settings
from aside_gateway.errors import ApiError

COUNT_BY_EMAIL_SQL = "SELECT count(*) FROM users WHERE email = %s"
USER_BY_ID_SQL = "SELECT id, username, email, created_at FROM users WHERE id = %s"

UserRow = tuple[int, str, str, datetime]


class Database:
    def __init__(self, settings: Settings):
        self.pool = ConnectionPool(
            conninfo=settings.database_url,
            min_size=settings.db_pool_min,
            max_size=settings.db_pool_max,
            timeout=settings.db_pool_timeout_ms / 1000,
            name="aside-gateway",
            open=False,
            kwargs={
                # Reads only, one statement each: autocommit saves BEGIN/COMMIT round trips.
                "autocommit": True,
                "connect_timeout": settings.db_connect_timeout_s,
                "options": f"-c statement_timeout={settings.db_statement_timeout_ms}",
                "application_name": "aside-gateway",
            },
        )
        # wait=False: the gateway starts (and /readyz reports) even while PostgreSQL is down.
        self.pool.open(wait=False)
        self._max_size = settings.db_pool_max
        self._count_queries = metrics.DB_QUERIES.labels("count_by_email")
        self._user_queries = metrics.DB_QUERIES.labels("user_by_id")

    def _fetchone(self, sql: str, params: tuple[Any, ...], timeout: float | None = None) -> Any:
        # One retry for a lost connection (PostgreSQL restarted, backend killed):
        # reads are idempotent, and the pool drops the broken connections first.
        for attempt in (1, 2):
            try:
                with self.pool.connection(timeout=timeout) as conn:
                    return conn.execute(sql, params).fetchone()
            except PoolTimeout:
                raise ApiError(
                    "database_unavailable", "no database connection became available in time"
                ) from None
            except pg_errors.QueryCanceled:
                raise ApiError("timeout", "the database query took too long") from None
            except (psycopg.OperationalError, psycopg.InterfaceError):
                if attempt == 2:
                    raise ApiError("database_unavailable", "the database is unreachable") from None
                self.pool.check()
        raise AssertionError("unreachable")

    def count_by_email(self, email: str) -> int:
        self._count_queries.inc()
        row = self._fetchone(COUNT_BY_EMAIL_SQL, (email,))
        return int(row[0])

    def user_by_id(self, user_id: int) -> UserRow | None:
        self._user_queries.inc()
        return self._fetchone(USER_BY_ID_SQL, (user_id,))

    def ping(self, timeout_s: float) -> None:
        """Raise ApiError unless PostgreSQL answers within about timeout_s."""
        self._fetchone("SELECT 1", (), timeout=timeout_s)

    def sample_gauges(self) -> None:
        stats = self.pool.get_stats()
        metrics.DB_POOL_SIZE.set(stats.get("pool_size", 0))
        metrics.DB_POOL_AVAILABLE.set(stats.get("pool_available", 0))
        metrics.DB_POOL_WAITING.set(stats.get("requests_waiting", 0))
        metrics.DB_POOL_MAX.set(self._max_size)

    def close(self) -> None:
        self.pool.close(timeout=1.0)
