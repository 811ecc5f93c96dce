"""The hostile client, a process of its own so its CPU is its own (`python -m
aside_bench_hardening.hostile HOST PORT SECONDS [PARTS]`): what it got, as one JSON line."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import TypedDict

# Pipelining, slow heads, forged X-Forwarded-For misses and /readyz loops, run at once.
PARTS = ("pipeline", "slow", "forged", "readyz")
PIPELINE_BATCH = 2000
SLOW_HEADS = 64
READYZ_LOOPS = 64
FORGED_LOOPS = 4
CONNECT_TIMEOUT_S = 5.0
PIPELINED = b"GET /healthz HTTP/1.1\r\nHost: aside\r\n\r\n"
READYZ = b"GET /readyz HTTP/1.1\r\nHost: aside\r\n\r\n"
SLOW_HEAD = (
    b"GET /api/v1/users/count?email=slow%40hostile.invalid HTTP/1.1\r\nHost: aside\r\nX-Slow: "
)


class HostileRecord(TypedDict):
    """What the hostile client got: its JSON line, and report.json's figures."""

    seconds: float
    parts: list[str]
    cpu_share: float | None  # the process's CPU time over its wall time (1.0: one core)
    pipelined_sent: int
    pipelined_answered: int
    pipelined_connections: int  # opened again after the server closed one
    slow_heads_opened: int
    slow_heads_closed_by_server: int
    readyz: dict[str, int]  # by status
    forged: dict[str, int]  # by status
    errors: dict[str, int]  # by what went wrong


def new_record(seconds: float, parts: list[str]) -> HostileRecord:
    """Every count at 0."""
    return HostileRecord(
        seconds=seconds,
        parts=parts,
        cpu_share=None,
        pipelined_sent=0,
        pipelined_answered=0,
        pipelined_connections=0,
        slow_heads_opened=0,
        slow_heads_closed_by_server=0,
        readyz={},
        forged={},
        errors={},
    )


def _tally(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


async def _open(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT_S)


async def _pipeline(host: str, port: int, end: float, figures: HostileRecord) -> None:
    """Write batches of heads as fast as the socket takes them; count the status lines read."""
    while time.monotonic() < end:
        try:
            reader, writer = await _open(host, port)
        except (OSError, TimeoutError) as exc:
            _tally(figures["errors"], f"pipeline connect: {type(exc).__name__}")
            await asyncio.sleep(0.1)
            continue
        figures["pipelined_connections"] += 1

        async def read(reader: asyncio.StreamReader = reader) -> None:
            tail = b""
            while data := await reader.read(1 << 16):
                chunk = tail + data
                figures["pipelined_answered"] += chunk.count(b"HTTP/1.1 ")
                tail = chunk[-8:]
                figures["pipelined_answered"] -= tail.count(b"HTTP/1.1 ")

        reading = asyncio.ensure_future(read())
        try:
            while time.monotonic() < end and not reading.done():
                writer.write(PIPELINED * PIPELINE_BATCH)
                figures["pipelined_sent"] += PIPELINE_BATCH
                await asyncio.wait_for(writer.drain(), max(0.01, end - time.monotonic()))
        except (OSError, TimeoutError) as exc:
            _tally(figures["errors"], f"pipeline write: {type(exc).__name__}")
        finally:
            writer.close()
            reading.cancel()


async def _slow_head(host: str, port: int, end: float, figures: HostileRecord) -> None:
    """A head that never ends; opened again each time the server closes it."""
    while time.monotonic() < end:
        try:
            reader, writer = await _open(host, port)
        except (OSError, TimeoutError) as exc:
            _tally(figures["errors"], f"slow head connect: {type(exc).__name__}")
            await asyncio.sleep(0.1)
            continue
        try:
            writer.write(SLOW_HEAD)
            figures["slow_heads_opened"] += 1
            await asyncio.wait_for(reader.read(), max(0.01, end - time.monotonic()))
            figures["slow_heads_closed_by_server"] += 1
        except TimeoutError:
            return  # the end came with the head still open
        except OSError as exc:
            _tally(figures["errors"], f"slow head: {type(exc).__name__}")
            await asyncio.sleep(0.1)
        finally:
            writer.close()


async def _loop(
    host: str, port: int, end: float, head: bytes | None, figures: HostileRecord
) -> None:
    """Requests one after another on one keep-alive connection, counted by status; `head`
    None: a miss with a fresh X-Forwarded-For each time, counted apart."""
    counts = figures["forged"] if head is None else figures["readyz"]
    n = 0
    while time.monotonic() < end:
        try:
            reader, writer = await _open(host, port)
            while time.monotonic() < end:
                n += 1
                writer.write(head or _forged(n))
                status_line = await asyncio.wait_for(reader.readline(), 10)
                if not status_line:
                    break
                _tally(counts, str(int(status_line.split()[1])))
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
            writer.close()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
            _tally(figures["errors"], f"loop: {type(exc).__name__}")
            await asyncio.sleep(0.05)


def _forged(n: int) -> bytes:
    """A miss that claims to come from another address each time."""
    return (
        b"GET /api/v1/users/count?email=forged%d%%40hostile.invalid HTTP/1.1\r\n"
        b"Host: aside\r\nX-Forwarded-For: 198.51.%d.%d\r\n\r\n" % (n, n // 250 % 250, n % 250)
    )


def parse_parts(text: str | None) -> tuple[str, ...]:
    """`pipeline,slow` -> ("pipeline", "slow"); None, "" or "all": every part."""
    if not text or text.strip() == "all":
        return PARTS
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in PARTS]
    if unknown or not names:
        raise ValueError(
            f"unknown hostile part {unknown[0] if unknown else text!r}; "
            f"choose from {','.join(PARTS)} or all"
        )
    return tuple(dict.fromkeys(names))


async def hostile(host: str, port: int, seconds: float, parts: tuple[str, ...]) -> HostileRecord:
    figures = new_record(seconds, list(parts))
    end = time.monotonic() + seconds
    tasks = []
    if "pipeline" in parts:
        tasks.append(_pipeline(host, port, end, figures))
    if "slow" in parts:
        tasks += [_slow_head(host, port, end, figures) for _ in range(SLOW_HEADS)]
    for part, head, count in (("readyz", READYZ, READYZ_LOOPS), ("forged", None, FORGED_LOOPS)):
        if part in parts:
            tasks += [_loop(host, port, end, head, figures) for _ in range(count)]
    await asyncio.wait_for(asyncio.gather(*tasks), seconds + 20)
    return figures


def main(argv: list[str]) -> int:
    host, port, seconds = argv[0], int(argv[1]), float(argv[2])
    parts = parse_parts(argv[3] if len(argv) > 3 else None)
    wall, cpu = time.monotonic(), time.process_time()
    figures = asyncio.run(hostile(host, port, seconds, parts))
    figures["cpu_share"] = round((time.process_time() - cpu) / (time.monotonic() - wall), 3)
    print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
