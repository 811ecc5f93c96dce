"""A client-side deadline for a PostgreSQL statement.

statement_timeout is the server's: it bounds a statement the server runs, not
a reply that never comes back. A path that goes silent (the server's answers
lost, no RST, no FIN, and keepalives answered by whatever sits in between)
would leave a read waiting on its socket for as long as it stays silent. The
watchdog shuts the socket of a statement past its deadline: the wait then ends
as a lost connection, which the pool discards, and the caller answers in time.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# How often the watchdog looks: a late statement is cut within this of its deadline.
CHECK_S = 0.05


class Cut:
    """One watched statement: `cut` is set when the watchdog shut its socket."""

    __slots__ = ("conn", "cut", "due")

    def __init__(self, conn: Any, due: float):
        self.conn = conn
        self.due = due
        self.cut = False


class StatementWatchdog:
    """One thread a process, started by the first `watch` (after gunicorn's fork)."""

    def __init__(self, limit_s: float):
        self.limit_s = limit_s
        self._lock = threading.Lock()
        self._watched: set[Cut] = set()
        self._thread: threading.Thread | None = None

    @contextmanager
    def watch(self, conn: Any, limit_s: float | None = None) -> Iterator[Cut]:
        """Watch `conn` for `limit_s` (default: the watchdog's own limit)."""
        entry = Cut(conn, time.monotonic() + (self.limit_s if limit_s is None else limit_s))
        with self._lock:
            self._watched.add(entry)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="aside-db-deadline", daemon=True
                )
                self._thread.start()
        try:
            yield entry
        finally:
            with self._lock:
                self._watched.discard(entry)

    def _loop(self) -> None:
        while True:
            time.sleep(CHECK_S)
            now = time.monotonic()
            with self._lock:
                late = [entry for entry in self._watched if entry.due <= now]
                for entry in late:
                    self._watched.discard(entry)
                    entry.cut = True
            for entry in late:
                _shut(entry.conn)


def _shut(conn: Any) -> None:
    """Shut the connection's socket both ways (a duplicate of its descriptor, so
    libpq's own stays open until psycopg closes it)."""
    try:
        duplicate = socket.socket(fileno=os.dup(conn.fileno()))
    except (OSError, ValueError, AttributeError):
        return  # already closed
    try:
        duplicate.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        duplicate.close()
