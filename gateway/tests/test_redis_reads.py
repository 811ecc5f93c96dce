"""The event loop's batched GET (backends/redis_reads.py) against real Redis
servers: the test stack's, and a throwaway redis-server of its own (on a free
port, stopped afterwards) that a test may put to sleep (DEBUG SLEEP) or kill
without touching anything else; on Sentinel, the master it names."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from aside_gateway.backends import redis_reads
from aside_gateway.backends.breaker import CircuitBreaker
from aside_gateway.config.settings import Settings, load_settings
from aside_gateway.front.hot_path import EarlyGetClient
from gateway_helpers import free_port, wait_until
from redis.exceptions import ConnectionError as RedisConnectionError
from test_sentinel import MASTER, sentinel  # noqa: F401 - the Sentinel fixture

PASSWORD = "loop-reads-test-password"


def _settings(url: str, **overrides: str) -> Settings:
    env = {
        "DATABASE_URL": "postgresql://a@h/d",
        "CORE_URL": "http://c",
        "ASIDE_PROFILE": "lab",
        "REDIS_URL": url,
    }
    env.update(overrides)
    return load_settings(env)


class Server:
    """A throwaway redis-server with a password, DEBUG allowed."""

    def __init__(self, tmp: Path):
        self.port = free_port()
        self.url = f"redis://:{PASSWORD}@127.0.0.1:{self.port}/3"
        self._tmp = tmp
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        server = shutil.which("redis-server") or "redis-server"
        self._proc = subprocess.Popen(
            [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self._tmp), "--requirepass", PASSWORD,
             "--enable-debug-command", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until(self._answers, 10, "the throwaway redis-server")

    def _answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=5, socket_connect_timeout=1)

    def kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(timeout=10)
            self._proc = None

    def sleep_in_thread(self, seconds: float) -> threading.Thread:
        """DEBUG SLEEP from a connection of its own: the server answers nobody meanwhile."""

        def sleep() -> None:
            with contextlib.suppress(redis.RedisError):  # the test may kill the server
                self.client().execute_command("DEBUG", "SLEEP", seconds)

        thread = threading.Thread(target=sleep, daemon=True)
        thread.start()
        return thread


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path)
    srv.start()
    try:
        yield srv
    finally:
        srv.kill()


def test_concurrent_gets_of_many_keys_each_get_their_own_value():
    url = os.environ["REDIS_URL"]
    keys = [f"aside:test:loopreads:{i}" for i in range(300)]
    setup = redis.Redis.from_url(url)
    setup.mset({key: f"value of {key}".encode() * (1 + i % 40) for i, key in enumerate(keys)})
    setup.delete(keys[7])  # one missing key among them

    async def read() -> tuple[list[bytes | None], int]:
        reads = redis_reads.loop_reads(_settings(url, REDIS_READ_CONNECTIONS="2"))
        assert isinstance(reads, redis_reads.LoopReads)
        try:
            values: list[bytes | None] = []
            for _ in range(3):  # batches on one connection, then on two
                values = await asyncio.gather(*(reads.get(key) for key in keys))
            return values, reads.connections
        finally:
            await reads.close()

    try:
        values, connections = asyncio.run(read())
        expected = [f"value of {key}".encode() * (1 + i % 40) for i, key in enumerate(keys)]
        expected[7] = None
        assert values == expected
        assert connections <= 2
    finally:
        setup.delete(*keys)
        setup.close()


def test_a_get_past_its_deadline_is_no_verdict_and_its_late_reply_goes_to_nobody(server):
    server.client().mset({"first": b"first's value", "second": b"second's value"})
    settings = _settings(server.url, REDIS_TIMEOUT_MS="150", REDIS_READ_CONNECTIONS="1")
    breaker = CircuitBreaker(10.0)

    async def scenario() -> tuple[object, object, bool]:
        client = EarlyGetClient(settings, breaker)
        try:
            assert (await client.get("first")).value == b"first's value"  # connected
            sleeper = server.sleep_in_thread(0.4)
            await asyncio.sleep(0.05)  # the server asleep (a wait for a server, not a sync)
            first = await client.get("first")  # its reply comes after the deadline
            opened = breaker.is_open
            sleeper.join(5)
            second = await client.get("second")  # on the connection first's reply came by
            return first, second, opened
        finally:
            await client._redis().close()

    first, second, opened = asyncio.run(scenario())
    assert first is None  # the deadline: no answer, Flask asks again
    assert not opened  # and no verdict on Redis
    assert second is not None and second.value == b"second's value"


def test_a_late_reply_is_never_matched_to_the_get_after_it(server):
    """The deadline passes for `first` while the server sleeps; `second` is
    asked after that, on the same connection, with time to spare: the first
    reply to arrive is first's, and must not be handed to second."""
    server.client().mset({"first": b"first's value", "second": b"second's value"})
    settings = _settings(server.url, REDIS_TIMEOUT_MS="300", REDIS_READ_CONNECTIONS="1")

    async def scenario() -> bytes | None:
        reads = redis_reads.loop_reads(settings)
        try:
            assert await reads.get("first") == b"first's value"
            sleeper = server.sleep_in_thread(0.45)
            await asyncio.sleep(0.05)
            with pytest.raises(TimeoutError):
                await reads.get("first")  # times out at 0.35 s, the server wakes at 0.45 s
            value = await reads.get("second")  # asked at about 0.35 s, due by 0.65 s
            sleeper.join(5)
            return value
        finally:
            await reads.close()

    assert asyncio.run(scenario()) == b"second's value"


def test_a_server_gone_mid_batch_fails_every_owed_get_and_the_next_get_reconnects(server):
    server.client().mset({f"k{i}": b"v%d" % i for i in range(20)})
    settings = _settings(server.url, REDIS_TIMEOUT_MS="5000", REDIS_READ_CONNECTIONS="1")
    breaker = CircuitBreaker(10.0)

    async def scenario() -> list[object]:
        client = EarlyGetClient(settings, breaker)
        assert (await client.get("k0")).value == b"v0"
        server.sleep_in_thread(2)
        await asyncio.sleep(0.05)
        owed = [asyncio.ensure_future(client.get(f"k{i}")) for i in range(20)]
        await asyncio.sleep(0.1)  # written, owed a reply by a sleeping server
        server.kill()
        results = await asyncio.wait_for(asyncio.gather(*owed), 2)
        await client._redis().close()
        return results

    results = asyncio.run(scenario())
    # Each is a failed read (the breaker is Flask's to open: l2.Cache), none a value.
    assert all(r is not None and r.failed and r.value is None for r in results)

    server.start()
    server.client().set("k3", b"back")

    async def after() -> object:
        client = EarlyGetClient(settings, CircuitBreaker(10.0))
        try:
            return await client.get("k3")
        finally:
            await client._redis().close()

    assert asyncio.run(after()).value == b"back"


def test_a_refused_connect_is_a_failed_read_and_a_later_one_connects(server):
    settings = _settings(server.url, REDIS_CONNECT_TIMEOUT_MS="500")
    server.kill()

    async def refused() -> None:
        reads = redis_reads.loop_reads(settings)
        try:
            with pytest.raises(RedisConnectionError):
                await reads.get("k")
        finally:
            await reads.close()

    asyncio.run(refused())


def test_the_lean_reads_find_the_master_through_the_sentinel(sentinel):  # noqa: F811
    url, master_port = sentinel
    master = redis.Redis(port=master_port, password="sentinel-test-password")
    master.set("aside:test:sentinel:lean", b"from the master")
    settings = _settings(url, REDIS_MODE="sentinel", REDIS_SENTINEL_MASTER=MASTER)

    async def read() -> list[bytes | None]:
        reads = redis_reads.loop_reads(settings)
        assert isinstance(reads, redis_reads.LoopReads)
        try:
            return await asyncio.gather(*(reads.get("aside:test:sentinel:lean") for _ in range(10)))
        finally:
            await reads.close()

    assert asyncio.run(read()) == [b"from the master"] * 10
    master.close()


def test_a_cluster_or_reads_client_keeps_redis_pys_client():
    url = os.environ["REDIS_URL"]
    settings = _settings(url, REDIS_READS="client")
    assert isinstance(redis_reads.loop_reads(settings), redis_reads.ClientReads)
    cluster = dataclasses.replace(settings, redis_reads="lean", redis_mode="cluster")
    assert isinstance(redis_reads.loop_reads(cluster), redis_reads.ClientReads)


class _Relayed:
    """One client connection through the proxy, and its connection to Redis."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter):
        self.client = client
        self.upstream = upstream
        self.silent = False
        self.closed_by_client = False


class SilencingProxy:
    """A TCP relay to a real Redis that can fall silent on the connections it
    holds: it reads what they send and answers nothing, without a reset (a
    server gone behind a blackholed path). Connections made after that are
    relayed as before (the path to the server that took over)."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.held: list[_Relayed] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        relayed = _Relayed(writer, up_writer)
        self.held.append(relayed)
        back = asyncio.ensure_future(self._back(up_reader, relayed))
        self._tasks.add(back)
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if not relayed.silent:
                    up_writer.write(data)
        relayed.closed_by_client = True
        back.cancel()
        up_writer.close()
        writer.close()

    async def _back(self, up_reader: asyncio.StreamReader, relayed: _Relayed) -> None:
        with contextlib.suppress(OSError):
            while data := await up_reader.read(65536):
                if not relayed.silent:
                    relayed.client.write(data)

    def silence(self) -> list[_Relayed]:
        """Every connection held now answers nothing more; returns them."""
        held, self.held = self.held, []
        for relayed in held:
            relayed.silent = True
        return held

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        for relayed in self.held:
            relayed.client.close()
            relayed.upstream.close()


def test_a_silent_connection_is_closed_and_reads_go_on_by_another_within_a_second():
    """Redis falls silent behind its connection (no reset) and more GETs than
    it may owe are asked for: within a second the reads are served again by a
    new connection, and the silent one is closed by the gateway."""
    url = os.environ["REDIS_URL"]
    real = redis.Redis.from_url(url)
    real.set("aside:test:silent", b"still served")
    parsed = redis.connection.parse_url(url)

    async def scenario() -> tuple[float, list[_Relayed]]:
        proxy = SilencingProxy(int(parsed.get("port", 6379)))
        await proxy.start()
        password = parsed.get("password") or ""
        proxied = f"redis://:{password}@127.0.0.1:{proxy.port}/{parsed.get('db', 0)}"
        settings = _settings(proxied, REDIS_TIMEOUT_MS="200", REDIS_READ_CONNECTIONS="1")
        reads = redis_reads.loop_reads(settings)
        try:
            await asyncio.gather(*(reads.get("aside:test:silent") for _ in range(50)))
            silenced = proxy.silence()
            assert len(silenced) == 1
            owed: list[asyncio.Future[bytes | None]] = []
            refused = 0
            for _ in range(2):  # a batch per loop iteration: more than it may owe
                for _ in range(redis_reads.MAX_OWED):
                    try:
                        owed.append(reads.get("aside:test:silent"))
                    except redis_reads.ReadsBusy:
                        refused += 1
                await asyncio.sleep(0)  # the loop's next iteration starts another batch
            assert refused and len(owed) == redis_reads.MAX_OWED
            results = await asyncio.gather(*owed, return_exceptions=True)
            # Past the deadline on the silent ones; the value on a connection opened since.
            kinds = {type(r).__name__ if isinstance(r, BaseException) else repr(r) for r in results}
            assert kinds <= {"TimeoutError", "b'still served'"}, kinds
            loop = asyncio.get_running_loop()
            start = loop.time()
            value: object = None
            while loop.time() - start < 5:
                try:
                    value = await reads.get("aside:test:silent")
                    break
                except TimeoutError as exc:  # ReadsBusy, or a deadline on the silent one
                    value = exc
                    await asyncio.sleep(0.02)
            assert value == b"still served", value
            served_after = loop.time() - start
            deadline = loop.time() + 2
            while not all(r.closed_by_client for r in silenced) and loop.time() < deadline:
                await asyncio.sleep(0.01)
            return served_after, silenced
        finally:
            await reads.close()
            await proxy.close()

    try:
        served_after, silenced = asyncio.run(scenario())
        assert served_after < 1.0, served_after
        assert all(r.closed_by_client for r in silenced)
    finally:
        real.delete("aside:test:silent")
        real.close()


def test_the_lean_reads_connections_carry_tcp_keepalive_and_user_timeout():
    settings = _settings(
        os.environ["REDIS_URL"], REDIS_KEEPALIVE_IDLE_S="7", REDIS_TCP_USER_TIMEOUT_MS="9000"
    )

    async def options() -> tuple[int, int, int, int, int]:
        handover = await redis_reads.opener(settings)()
        sock = handover.transport.get_extra_info("socket")
        try:
            return (
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
            )
        finally:
            handover.transport.close()

    assert asyncio.run(options()) == (1, 7, 2, 3, 9000)
