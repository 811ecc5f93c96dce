"""The event loop's Redis GET: batched on a few connections, replies matched in order.

`loop_reads(settings)` returns what the hot path awaits for a GET
(front/hot_path.EarlyGetClient): with REDIS_READS=lean (the default) on a
standalone server or Sentinel's master, a `LoopReads`; on a Redis Cluster, or
with REDIS_READS=client, redis-py's asyncio client under one `asyncio.timeout`
per GET (`ClientReads`, the path before LoopReads).

`LoopReads`, per worker and event loop:

* the GETs asked for in one iteration of the loop are written together, in
  one `transport.write`, on one connection (a `_Pipe`) at the loop's next
  turn: Redis answers them in the order they were written, and the pipe hands
  each reply to the oldest GET still owed one;
* at most REDIS_READ_CONNECTIONS connections; a batch goes to the ready one
  owing the fewest replies, and another is opened (up to the bound) when that
  one still owes some, so a large value delays the GETs behind it on one
  connection only; each owes at most MAX_OWED replies;
* redis-py makes each connection (connect with REDIS_CONNECT_TIMEOUT_MS,
  AUTH, SELECT; on Sentinel the master is asked for first), then hands its
  transport over: hiredis packs the commands (each key's GET packed once and
  remembered) and parses the replies;
* a GET has a deadline, REDIS_TIMEOUT_MS from the iteration that asked for it,
  kept without a timer per GET: one sweep, armed at the oldest batch's
  deadline, fails every GET past its own with TimeoutError (no verdict on
  Redis: docs/decisions/002-an-event-loop-deadline-is-not-a-redis-failure.md).
  Its reply, when it comes, is matched to it all the same, and dropped;
* a connection that has sent nothing since a GET past its deadline was
  written is silent (a server gone without a reset, a blackholed path): the
  sweep fails every GET it owes with TimeoutError (still no verdict) and
  closes it, so the next GET opens another (on Sentinel, to the master named
  then) instead of being refused as busy behind replies that never come.
  A loop merely running late reads what arrived before its sweep runs (the
  loop handles I/O before timers), so it does not close a live connection.
  TCP keepalive and TCP_USER_TIMEOUT (REDIS_KEEPALIVE_*,
  REDIS_TCP_USER_TIMEOUT_MS, as PostgreSQL's in misses/db.py) close an idle
  dead one too;
* a connection lost, or a reply that does not parse or that no GET is owed,
  fails every GET the connection owed with ConnectionError (a failed read: the
  breaker sees it) and closes it; the next GET opens another.

Why these parts and not a client: docs/decisions/063-the-event-loops-redis-get-batched.md.
"""

from __future__ import annotations

import asyncio
import functools
import socket
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import hiredis
import redis.asyncio
import redis.asyncio.sentinel
from redis.asyncio.connection import Connection, parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, ResponseError

from aside_gateway.backends import redis_clients
from aside_gateway.config.settings import (
    REDIS_CLUSTER,
    REDIS_READS_CLIENT,
    REDIS_SENTINEL,
    Settings,
)

# Replies a connection may owe at once; past it on every connection a GET is
# refused at once (ReadsBusy, no verdict), as a pool without a free connection was.
MAX_OWED = 512
# The sweep runs at most this often: a GET fails between its deadline and this later.
SWEEP_MIN_S = 0.005
# GET commands packed once per key, the most recent kept (the hot set's keys repeat).
PACKED_KEYS = 4096

_INCOMPLETE = object()  # hiredis: no whole reply in the buffer yet


class ReadsBusy(TimeoutError):
    """Every connection owes MAX_OWED replies: no GET is sent (no verdict)."""


class Reads(Protocol):
    """The hot path's GET: the value, None for no key, TimeoutError past the
    deadline (no verdict), a Redis error or OSError for a failed read."""

    def get(self, key: str) -> Awaitable[bytes | None]: ...

    async def close(self) -> None: ...


@functools.lru_cache(maxsize=PACKED_KEYS)
def packed_get(key: str) -> bytes:
    return hiredis.pack_command((b"GET", key))


@dataclass(frozen=True, slots=True)
class Handover:
    """A connection made and set up (AUTH, SELECT), for a `_Pipe` to take over:
    its transport, and what must live as long as it (redis-py's stream writer,
    which closes the transport when collected)."""

    transport: asyncio.Transport
    owner: object = None


Opener = Callable[[], Awaitable[Handover]]


class _Pipe(asyncio.Protocol):
    """One connection: what it is to write, and the GETs owed a reply, oldest first."""

    def __init__(self, on_close: Callable[[_Pipe], None]):
        self.transport: asyncio.Transport | None = None
        self._owner: object = None
        self.owed: deque[asyncio.Future[bytes | None]] = deque()
        self.out: list[bytes] = []
        self.closed = False
        # The loop's time of the last data Redis sent, or of the attach.
        self.heard = 0.0
        self._on_close = on_close
        self._parser = hiredis.Reader(
            protocolError=InvalidResponse, replyError=ResponseError, notEnoughData=_INCOMPLETE
        )

    @property
    def ready(self) -> bool:
        return self.transport is not None

    def attach(self, handover: Handover) -> None:
        """Take over a connection redis-py made and set up; write what waited for it."""
        transport = self.transport = handover.transport
        self._owner = handover.owner
        transport.set_protocol(self)
        self.heard = asyncio.get_running_loop().time()
        self.flush()

    def flush(self) -> None:
        if self.transport is not None and self.out:
            self.transport.write(b"".join(self.out))
            self.out.clear()

    def data_received(self, data: bytes) -> None:
        self.heard = asyncio.get_running_loop().time()
        parser = self._parser
        parser.feed(data)
        owed = self.owed
        while True:
            try:
                reply = parser.gets()
            except InvalidResponse as exc:
                return self.fail(RedisConnectionError(f"Redis reply did not parse: {exc}"))
            if reply is _INCOMPLETE:
                return None
            if not owed:
                return self.fail(RedisConnectionError("Redis sent a reply no GET was owed"))
            waiter = owed.popleft()
            if waiter.done():  # past its deadline, or its request went away: dropped
                continue
            if isinstance(reply, ResponseError):
                waiter.set_exception(reply)
            else:
                waiter.set_result(reply)

    def eof_received(self) -> bool:
        return False  # close: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(RedisConnectionError(f"Redis connection lost: {exc or 'closed by the server'}"))

    def fail(self, exc: BaseException) -> None:
        """Fail every GET owed a reply with `exc` and close: none is ever matched later."""
        if not self.closed:
            self.closed = True
            self._on_close(self)
        self.out.clear()
        owed, self.owed = self.owed, deque()
        for waiter in owed:
            if not waiter.done():
                waiter.set_exception(_copy(exc))
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


def _copy(exc: BaseException) -> BaseException:
    """One exception object per waiter (each gets its own traceback)."""
    try:
        return type(exc)(*exc.args)
    except Exception:
        return RedisConnectionError(str(exc))


@dataclass(frozen=True, slots=True)
class _Batch:
    """The GETs of one loop iteration, written together on one connection."""

    deadline: float
    start: float
    waiters: list[asyncio.Future[bytes | None]]
    pipe: _Pipe


class LoopReads:
    """Batched GETs on at most `connections` connections of one event loop."""

    def __init__(self, opener: Opener, timeout_s: float, connections: int):
        self._opener = opener
        self._timeout_s = timeout_s
        self._max_pipes = connections
        self._pipes: list[_Pipe] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        # The batch this iteration of the loop is adding to, flushed at its next turn.
        self._pipe: _Pipe | None = None
        self._batch: list[asyncio.Future[bytes | None]] = []
        # A _Batch per batch written, oldest first; one sweep timer at a time.
        self._deadlines: deque[_Batch] = deque()
        self._sweep: asyncio.TimerHandle | None = None
        self._connecting: set[asyncio.Task[None]] = set()

    def get(self, key: str) -> asyncio.Future[bytes | None]:
        """GET `key`, written with the others of this loop iteration."""
        pipe = self._pipe
        if pipe is None or pipe.closed:
            pipe = self._start_batch()
        elif len(pipe.owed) >= MAX_OWED:
            raise ReadsBusy("every Redis connection owes its most replies")
        waiter = self._loop.create_future()  # type: ignore[union-attr]
        self._batch.append(waiter)
        pipe.owed.append(waiter)
        pipe.out.append(packed_get(key))
        return waiter

    def _start_batch(self) -> _Pipe:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        pipe = self._choose()
        self._pipe = pipe
        self._batch = []
        start = loop.time()
        deadline = start + self._timeout_s
        self._deadlines.append(_Batch(deadline, start, self._batch, pipe))
        if self._sweep is None:
            self._sweep = loop.call_at(deadline, self._expire)
        loop.call_soon(self._flush, pipe)
        return pipe

    def _flush(self, pipe: _Pipe) -> None:
        if self._pipe is pipe:
            self._pipe = None
        pipe.flush()

    def _choose(self) -> _Pipe:
        """The ready connection owing the fewest replies (one connecting if none
        is ready), opening another when that one still owes some."""
        best: _Pipe | None = None
        connecting: _Pipe | None = None
        for pipe in self._pipes:
            if not pipe.ready:
                connecting = pipe
            elif best is None or len(pipe.owed) < len(best.owed):
                best = pipe
        if best is not None and len(best.owed) < MAX_OWED:
            if best.owed and connecting is None and len(self._pipes) < self._max_pipes:
                self._open()
            return best
        if connecting is not None and len(connecting.owed) < MAX_OWED:
            return connecting
        if len(self._pipes) < self._max_pipes:
            return self._open()
        raise ReadsBusy("every Redis connection owes its most replies")

    def _open(self) -> _Pipe:
        pipe = _Pipe(self._forget)
        self._pipes.append(pipe)
        task = asyncio.get_running_loop().create_task(self._connect(pipe))
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)
        return pipe

    async def _connect(self, pipe: _Pipe) -> None:
        try:
            handover = await self._opener()
        except asyncio.CancelledError:
            pipe.fail(RedisConnectionError("Redis reads closed while connecting"))
            raise
        except Exception as exc:  # the GETs waiting for it fail with the connect's error
            pipe.fail(exc)
            return
        if pipe.closed:
            handover.transport.close()
            return
        pipe.attach(handover)

    def _forget(self, pipe: _Pipe) -> None:
        if pipe in self._pipes:
            self._pipes.remove(pipe)
        if self._pipe is pipe:
            self._pipe = None

    def _expire(self) -> None:
        """Fail the GETs past their deadline; arm the next sweep."""
        loop = self._loop
        assert loop is not None
        now = loop.time()
        deadlines = self._deadlines
        while deadlines and deadlines[0].deadline <= now:
            batch = deadlines.popleft()
            unanswered = [waiter for waiter in batch.waiters if not waiter.done()]
            pipe = batch.pipe
            if unanswered and not pipe.closed and pipe.ready and pipe.heard <= batch.start:
                pipe.fail(TimeoutError("Redis connection silent past a GET's deadline"))
            for waiter in unanswered:
                if not waiter.done():
                    waiter.set_exception(TimeoutError("Redis GET past its deadline"))
        self._sweep = None
        if deadlines:
            self._sweep = loop.call_at(max(deadlines[0].deadline, now + SWEEP_MIN_S), self._expire)

    @property
    def connections(self) -> int:
        return len(self._pipes)

    async def close(self) -> None:
        for task in list(self._connecting):
            task.cancel()
        for pipe in list(self._pipes):
            pipe.fail(RedisConnectionError("Redis reads closed"))
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None


class ClientReads:
    """redis-py's asyncio client, one `asyncio.timeout` per GET (a cluster, or
    REDIS_READS=client)."""

    def __init__(self, client: redis_clients.AsyncClient, timeout_s: float):
        self._client = client
        self._timeout_s = timeout_s

    async def get(self, key: str) -> bytes | None:
        async with asyncio.timeout(self._timeout_s):
            return await self._client.get(key)

    async def close(self) -> None:
        await self._client.aclose()


def keepalive_options(settings: Settings) -> dict[int, int]:
    """TCP keepalive and TCP_USER_TIMEOUT, set by redis-py on each connection's socket."""
    options = {
        socket.TCP_KEEPIDLE: settings.redis_keepalive_idle_s,
        socket.TCP_KEEPINTVL: settings.redis_keepalive_interval_s,
        socket.TCP_KEEPCNT: settings.redis_keepalive_count,
    }
    if settings.redis_tcp_user_timeout_ms:  # 0: the system's default
        options[socket.TCP_USER_TIMEOUT] = settings.redis_tcp_user_timeout_ms
    return options


def _connection_kwargs(settings: Settings) -> tuple[type[Connection], dict[str, Any]]:
    """redis-py's connection class and arguments for REDIS_URL's server: RESP2, no
    retry, no CLIENT SETINFO, the connect timeout for the handshake's replies too,
    TCP keepalive and user timeout."""
    kwargs: dict[str, Any] = dict(parse_url(settings.redis_url))
    connection_class = kwargs.pop("connection_class", Connection)
    connect_timeout = settings.redis_connect_timeout_ms / 1000
    kwargs.update(
        socket_connect_timeout=connect_timeout,
        socket_timeout=connect_timeout,
        protocol=2,
        retry=None,
        driver_info=None,
        health_check_interval=0,
    )
    if not issubclass(connection_class, redis.asyncio.UnixDomainSocketConnection):
        kwargs.update(socket_keepalive=True, socket_keepalive_options=keepalive_options(settings))
    return connection_class, kwargs


async def _hand_over(connection: Connection) -> Handover:
    """Connect, AUTH and SELECT with redis-py, then take the socket's transport
    from it (redis-py forgets it: the connection object is done)."""
    await connection.connect()
    writer = connection._writer  # the one transport redis-py opened
    connection._writer = connection._reader = None
    if writer is None:
        raise RedisConnectionError("redis-py connected without a stream")
    return Handover(writer.transport, writer)  # type: ignore[arg-type]


def opener(settings: Settings) -> Opener:
    """How LoopReads opens a connection: to REDIS_URL's server, or on Sentinel to
    the master it names at that moment (asked again on every connect)."""
    connection_class, kwargs = _connection_kwargs(settings)
    if settings.redis_mode != REDIS_SENTINEL:

        async def direct() -> Handover:
            return await _hand_over(connection_class(**kwargs))

        return direct
    address, master = redis_clients.sentinel_target(settings)
    kwargs.pop("host", None)
    kwargs.pop("port", None)
    kwargs.pop("username", None)
    kwargs.pop("password", None)
    kwargs.update(master)
    connect_timeout = settings.redis_connect_timeout_ms / 1000
    sentinels: list[redis.asyncio.sentinel.Sentinel] = []

    async def via_sentinel() -> Handover:
        if not sentinels:  # made in the worker's loop, on first use
            sentinels.append(
                redis.asyncio.sentinel.Sentinel(
                    [address],
                    sentinel_kwargs={
                        "socket_connect_timeout": connect_timeout,
                        "socket_timeout": connect_timeout,
                    },
                )
            )
        host, port = await sentinels[0].discover_master(settings.redis_sentinel_master)
        return await _hand_over(connection_class(host=host, port=port, **kwargs))

    return via_sentinel


def loop_reads(settings: Settings) -> Reads:
    """The hot path's GET for `settings` (see the module's docstring)."""
    timeout_s = settings.redis_timeout_ms / 1000
    if settings.redis_mode == REDIS_CLUSTER or settings.redis_reads == REDIS_READS_CLIENT:
        client = redis_clients.async_client(
            settings,
            connect_timeout=settings.redis_connect_timeout_ms / 1000,
            max_connections=settings.redis_pool_max,
        )
        return ClientReads(client, timeout_s)
    return LoopReads(opener(settings), timeout_s, settings.redis_read_connections)
