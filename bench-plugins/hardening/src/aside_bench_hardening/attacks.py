"""The attacks sent from the bench's own process: slow request heads and a cold flood."""

from __future__ import annotations

import asyncio
import resource
import selectors
import socket
import time
from collections import Counter
from dataclasses import dataclass, field

import aiohttp
from aside_bench.stack.prepare import StackError

# The head stops inside a header: the server has a request line and waits for more.
PARTIAL_HEAD = (
    b"GET /api/v1/users/count?email=slow%40hardening.invalid HTTP/1.1\r\nHost: aside\r\nX-Slow: "
)
CONNECT_TIMEOUT_S = 5.0
# Descriptors the bench needs besides the slow sockets (the driver's pipes, logs, clients).
SPARE_FDS = 256
# Opened in bursts of this many, answers read between: a close is seen when it happens.
OPEN_BURST = 50
# The partial heads go out once no full worker's 503 has come for this long (slow_heads).
ANSWERS_QUIET_S = 0.2
ANSWERS_MAX_WAIT_S = 2.0


@dataclass
class SlowSocket:
    opened_at: float | None = None  # connect() returned
    error: str | None = None  # why it could not be opened
    status: int | None = None  # the status line of an answer, if one came
    closed_at: float | None = None  # the server closed it
    reset: bool = False  # ... with a reset rather than an end of file

    @property
    def close_s(self) -> float | None:
        if self.opened_at is None or self.closed_at is None:
            return None
        return self.closed_at - self.opened_at

    def as_dict(self) -> dict[str, object]:
        return {
            "opened_at": self.opened_at,
            "error": self.error,
            "status": self.status,
            "close_s": None if self.close_s is None else round(self.close_s, 4),
            "reset": self.reset,
        }


def raise_nofile(needed: int) -> int:
    """The soft RLIMIT_NOFILE raised to `needed`, returned; StackError past the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            raise StackError(
                f"{needed} open files are needed but the hard limit is {hard}; "
                "raise it (ulimit -Hn) or ask for fewer --sockets"
            )
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
        soft = needed
    return soft


class _Watch:
    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self.open: dict[socket.socket, SlowSocket] = {}

    def connect(self, address: tuple[str, int], record: SlowSocket) -> None:
        try:
            sock = socket.create_connection(address, timeout=CONNECT_TIMEOUT_S)
        except OSError as error:
            record.error = type(error).__name__
            return
        record.opened_at = time.time()
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ)
        self.open[sock] = record

    def poll(self, timeout_s: float) -> int:
        events = self.selector.select(timeout=max(timeout_s, 0))
        for key, _ in events:
            self._read(key.fileobj)  # type: ignore[arg-type]
        return len(events)

    def _read(self, sock: socket.socket) -> None:
        record = self.open[sock]
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = None  # a reset
        if not data:
            self._closed(sock, reset=data is None)
        elif record.status is None and data.startswith(b"HTTP/1."):
            try:
                record.status = int(data.split(b" ", 2)[1])
            except (IndexError, ValueError):
                record.status = 0

    def _closed(self, sock: socket.socket, reset: bool) -> None:
        record = self.open.pop(sock)
        record.closed_at = time.time()
        record.reset = reset
        self.selector.unregister(sock)
        sock.close()

    def send_heads(self) -> None:
        for sock in list(self.open):
            try:
                sock.send(PARTIAL_HEAD)
            except OSError:
                self._closed(sock, reset=True)

    def close_all(self) -> None:
        for sock in self.open:
            sock.close()
        self.open.clear()
        self.selector.close()


def slow_heads(address: tuple[str, int], count: int, wait_s: float) -> list[SlowSocket]:
    """`count` connections each sent a partial head, then up to `wait_s` for the server to close
    them. The heads wait out full workers' 503s: sent first, they would turn one into a reset."""
    raise_nofile(count + SPARE_FDS)
    records = [SlowSocket() for _ in range(count)]
    watch = _Watch()
    try:
        for start in range(0, count, OPEN_BURST):
            for record in records[start : start + OPEN_BURST]:
                watch.connect(address, record)
            watch.poll(0)
        last_opened = quiet_since = time.monotonic()
        while time.monotonic() - last_opened < ANSWERS_MAX_WAIT_S:
            if watch.poll(0.05):
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= ANSWERS_QUIET_S:
                break
        watch.send_heads()
        deadline = last_opened + wait_s
        while watch.open and time.monotonic() < deadline:
            watch.poll(min(0.5, deadline - time.monotonic()))
    finally:
        watch.close_all()
    return records


# ---- the cold flood -------------------------------------------------------------------
@dataclass
class FloodResult:
    started: float
    ended: float = 0.0
    duration_s: float = 0.0
    sent: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)  # "200", "503", "timeout", ...
    cut: bool = False  # the deadline came before every email was sent


def cold_flood(
    count_url: str, emails: list[str], concurrency: int, timeout_s: float, deadline_s: float
) -> FloodResult:
    """Each email read once from `concurrency` clients; none sent after `deadline_s`."""
    result = FloodResult(started=time.time())
    stop_at = time.monotonic() + deadline_s
    pending = iter(emails)  # one iterator shared by every client: each email is sent once
    outcomes: Counter[str] = Counter()

    async def client(session: aiohttp.ClientSession) -> None:
        for email in pending:
            if time.monotonic() >= stop_at:
                result.cut = True
                return
            result.sent += 1
            outcomes[await _read_once(session, count_url, email)] += 1

    async def flood() -> None:
        connector = aiohttp.TCPConnector(limit=concurrency)
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            await asyncio.gather(*(client(session) for _ in range(concurrency)))

    asyncio.run(flood())
    result.ended = time.time()
    result.duration_s = round(result.ended - result.started, 3)
    result.outcomes = dict(sorted(outcomes.items()))
    return result


async def _read_once(session: aiohttp.ClientSession, url: str, email: str) -> str:
    """The status, or what went wrong; a timeout closes the connection: the client is gone."""
    try:
        async with session.get(url, params={"email": email}) as response:
            await response.read()
            return str(response.status)
    except TimeoutError:
        return "timeout"
    except aiohttp.ClientError as error:
        return type(error).__name__
