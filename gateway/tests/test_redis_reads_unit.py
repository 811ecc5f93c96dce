"""LoopReads against a fake transport (pure logic: no Redis).

The fake records what is written and lets the test feed replies as Redis
would send them: in order, cut anywhere, too many, or not at all before the
connection dies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import hiredis
import pytest
from aside_gateway.backends import redis_reads
from aside_gateway.backends.redis_reads import Handover, LoopReads, ReadsBusy
from aside_gateway.config.settings import ConfigError, load_settings
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.protocol: asyncio.Protocol | None = None
        self.writes: list[bytes] = []
        self.closing = False

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol  # type: ignore[assignment]

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.protocol  # type: ignore[return-value]

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            protocol = self.protocol
            if protocol is not None:
                asyncio.get_running_loop().call_soon(protocol.connection_lost, None)

    def feed(self, data: bytes) -> None:
        assert self.protocol is not None
        self.protocol.data_received(data)

    def die(self, exc: Exception | None = None) -> None:
        assert self.protocol is not None
        self.closing = True
        self.protocol.connection_lost(exc or ConnectionResetError("reset by peer"))

    def commands(self) -> list[list[bytes]]:
        """Every command written so far, parsed back."""
        reader = hiredis.Reader()
        reader.feed(b"".join(self.writes))
        found = []
        while (command := reader.gets()) is not False:
            found.append(command)
        return found


class Opener:
    """Hands out fake transports; `gate` holds a connect until set."""

    def __init__(self) -> None:
        self.transports: list[FakeTransport] = []
        self.gate: asyncio.Event | None = None
        self.error: Exception | None = None

    async def __call__(self) -> Handover:
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        transport = FakeTransport()
        self.transports.append(transport)
        return Handover(transport)


def bulk(value: bytes | None) -> bytes:
    if value is None:
        return b"$-1\r\n"
    return b"$%d\r\n%s\r\n" % (len(value), value)


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


async def settle() -> None:
    """Let the loop run the callbacks and tasks already due (a few turns)."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_gets_of_one_iteration_are_written_in_one_write_and_answered_in_order():
    async def scenario() -> None:
        opener = Opener()
        reads = LoopReads(opener, timeout_s=5, connections=1)
        waiters = [reads.get(f"k{i}") for i in range(5)]
        await settle()
        (transport,) = opener.transports
        assert len(transport.writes) == 1
        assert transport.commands() == [[b"GET", f"k{i}".encode()] for i in range(5)]
        transport.feed(b"".join(bulk(b"v%d" % i) for i in range(5)))
        assert [await w for w in waiters] == [b"v%d" % i for i in range(5)]
        await reads.close()

    run(scenario)


def test_a_reply_cut_anywhere_waits_for_its_rest():
    async def scenario() -> None:
        opener = Opener()
        reads = LoopReads(opener, timeout_s=5, connections=1)
        first, second, third = reads.get("a"), reads.get("b"), reads.get("c")
        await settle()
        stream = bulk(b"alpha") + bulk(None) + bulk(b"gamma" * 100)
        transport = opener.transports[0]
        for cut in (3, 9, 12, 40):  # inside a length, a value, a CRLF, the next reply
            transport.feed(stream[:cut])
            stream = stream[cut:]
        assert await first == b"alpha" and await second is None
        assert not third.done()
        transport.feed(stream)
        assert await third == b"gamma" * 100
        await reads.close()

    run(scenario)


def test_a_get_past_its_deadline_times_out_and_its_late_reply_is_dropped():
    async def scenario() -> None:
        opener = Opener()
        reads = LoopReads(opener, timeout_s=0.05, connections=1)
        late = reads.get("slow")
        await settle()
        started = asyncio.get_running_loop().time()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(late, 2)
        assert asyncio.get_running_loop().time() - started < 1  # the sweep's, not wait_for's
        nxt = reads.get("next")
        await settle()
        transport = opener.transports[0]
        transport.feed(bulk(b"slow's value"))  # the late reply
        assert not nxt.done()  # never handed to the next GET
        transport.feed(bulk(b"next's value"))
        assert await nxt == b"next's value"
        await reads.close()

    run(scenario)


def test_a_reply_no_get_was_owed_fails_the_connection():
    async def scenario() -> None:
        opener = Opener()
        reads = LoopReads(opener, timeout_s=5, connections=1)
        one = reads.get("one")
        await settle()
        transport = opener.transports[0]
        transport.feed(bulk(b"1") + bulk(b"extra"))
        assert await one == b"1"
        assert transport.closing and reads.connections == 0
        again = reads.get("again")  # a fresh connection, not the one that lied
        await settle()
        assert len(opener.transports) == 2
        opener.transports[1].feed(bulk(b"2"))
        assert await again == b"2"
        await reads.close()

    run(scenario)


def test_a_reply_that_does_not_parse_fails_every_get_owed():
    async def scenario() -> None:
        opener = Opener()
        reads = LoopReads(opener, timeout_s=5, connections=1)
        waiters = [reads.get("a"), reads.get("b")]
        await settle()
        opener.transports[0].feed(b"!garbage\r\n")
        for waiter in waiters:
            with pytest.raises(RedisConnectionError):
                await waiter
        await reads.close()

    run(scenario)


def test_a_connection_that_dies_mid_batch_fails_every_get_it_owed():
    async def scenario() -> None:
        opener = Opener()
        reads = LoopReads(opener, timeout_s=5, connections=1)
        waiters = [reads.get(f"k{i}") for i in range(4)]
        await settle()
        transport = opener.transports[0]
        transport.feed(bulk(b"v0") + bulk(b"v1")[:3])  # one whole reply, one cut
        transport.die()
        assert await waiters[0] == b"v0"
        for waiter in waiters[1:]:
            with pytest.raises(RedisConnectionError):
                await waiter
        assert reads.connections == 0
        again = reads.get("k1")
        await settle()
        assert len(opener.transports) == 2
        opener.transports[1].feed(bulk(b"fresh"))
        assert await again == b"fresh"
        await reads.close()

    run(scenario)


def test_a_failed_connect_fails_the_gets_waiting_for_it():
    async def scenario() -> None:
        opener = Opener()
        opener.error = RedisConnectionError("refused")
        reads = LoopReads(opener, timeout_s=5, connections=2)
        waiter = reads.get("k")
        with pytest.raises(RedisConnectionError):
            await waiter
        assert reads.connections == 0
        await reads.close()

    run(scenario)


def test_gets_waiting_for_a_connect_time_out_at_their_deadline():
    async def scenario() -> None:
        opener = Opener()
        opener.gate = asyncio.Event()
        reads = LoopReads(opener, timeout_s=0.05, connections=1)
        waiter = reads.get("k")
        started = asyncio.get_running_loop().time()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(waiter, 2)
        assert asyncio.get_running_loop().time() - started < 1  # the sweep's, not wait_for's
        opener.gate.set()
        await settle()
        nxt = reads.get("n")
        await settle()
        transport = opener.transports[0]
        assert transport.commands() == [[b"GET", b"k"], [b"GET", b"n"]]
        transport.feed(bulk(b"k's") + bulk(b"n's"))
        assert await nxt == b"n's"
        await reads.close()

    run(scenario)


def test_a_redis_error_reply_fails_its_own_get_only():
    async def scenario() -> None:
        opener = Opener()
        reads = LoopReads(opener, timeout_s=5, connections=1)
        wrong, right = reads.get("a hash"), reads.get("a string")
        await settle()
        opener.transports[0].feed(b"-WRONGTYPE not a string\r\n" + bulk(b"ok"))
        with pytest.raises(ResponseError):
            await wrong
        assert await right == b"ok"
        await reads.close()

    run(scenario)


def test_a_cancelled_get_leaves_its_reply_to_nobody():
    async def scenario() -> None:
        opener = Opener()
        reads = LoopReads(opener, timeout_s=5, connections=1)
        gone = asyncio.ensure_future(reads.get("gone"))
        await settle()
        gone.cancel()
        kept = reads.get("kept")
        await settle()
        opener.transports[0].feed(bulk(b"gone's") + bulk(b"kept's"))
        assert await kept == b"kept's"
        await reads.close()

    run(scenario)


def test_a_second_connection_opens_while_the_first_owes_replies_and_no_more():
    async def scenario() -> None:
        opener = Opener()
        reads = LoopReads(opener, timeout_s=5, connections=2)
        first = reads.get("a")
        await settle()
        second = reads.get("b")  # the first owes a reply: another connection opens
        await settle()
        third = reads.get("c")
        await settle()
        assert len(opener.transports) == 2 and reads.connections == 2
        one, two = opener.transports
        assert one.commands() == [[b"GET", b"a"], [b"GET", b"b"]]
        assert two.commands() == [[b"GET", b"c"]]
        for _ in range(3):
            reads.get("x")
            await settle()
        assert len(opener.transports) == 2  # the bound
        two.feed(bulk(b"C"))
        one.feed(bulk(b"A") + bulk(b"B"))
        assert (await first, await second, await third) == (b"A", b"B", b"C")
        await reads.close()

    run(scenario)


def test_past_the_replies_a_connection_may_owe_a_get_is_refused_without_a_verdict(monkeypatch):
    monkeypatch.setattr(redis_reads, "MAX_OWED", 2)

    async def scenario() -> None:
        opener = Opener()
        reads = LoopReads(opener, timeout_s=5, connections=1)
        reads.get("a")
        reads.get("b")
        with pytest.raises(ReadsBusy):
            reads.get("c")
        assert issubclass(ReadsBusy, TimeoutError)  # the hot path: no verdict on Redis
        await reads.close()

    run(scenario)


@pytest.mark.parametrize(
    ("name", "value"), [("REDIS_READS", "fast"), ("REDIS_READ_CONNECTIONS", "0")]
)
def test_a_bad_read_setting_is_one_line_naming_the_variable(name, value):
    env = {
        "DATABASE_URL": "postgresql://a@h/d",
        "CORE_URL": "http://c",
        "ASIDE_PROFILE": "lab",
        "REDIS_URL": "redis://127.0.0.1:6379/0",
        name: value,
    }
    with pytest.raises(ConfigError) as raised:
        load_settings(env)
    assert str(raised.value).startswith(name) and "\n" not in str(raised.value)


def test_the_lean_reads_are_the_default():
    settings = load_settings(
        {
            "DATABASE_URL": "postgresql://a@h/d",
            "CORE_URL": "http://c",
            "ASIDE_PROFILE": "lab",
            "REDIS_URL": "redis://127.0.0.1:6379/0",
        }
    )
    assert (settings.redis_reads, settings.redis_read_connections) == ("lean", 2)
    assert isinstance(redis_reads.loop_reads(settings), LoopReads)
