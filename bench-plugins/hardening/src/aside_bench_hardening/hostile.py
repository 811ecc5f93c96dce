"""The hostile client: one process of its own (`python -m
aside_bench_hardening.hostile HOST PORT SECONDS`), bounded in time, that
at once pipelines requests as fast as it can on one connection while reading
the replies, holds slow heads open, sends misses under a rotating
X-Forwarded-For, and loops on /readyz; it prints what it got as one JSON line."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

PIPELINE_BATCH = 2000
SLOW_HEADS = 64
READYZ_LOOPS = 64
FORGED_LOOPS = 4
CONNECT_TIMEOUT_S = 5.0
PIPELINED = b"GET /healthz HTTP/1.1\r\nHost: aside\r\n\r\n"
SLOW_HEAD = (
    b"GET /api/v1/users/count?email=slow%40hostile.invalid HTTP/1.1\r\nHost: aside\r\nX-Slow: "
)


@dataclass
class HostileFigures:
    seconds: float
    pipelined_sent: int = 0
    pipelined_answered: int = 0
    pipelined_connections: int = 0  # opened again after the server closed one
    slow_heads_opened: int = 0
    slow_heads_closed_by_server: int = 0
    readyz: Counter[int] = field(default_factory=Counter)
    forged: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, object]:
        found = asdict(self)
        found["readyz"] = {str(k): v for k, v in self.readyz.items()}
        found["forged"] = {str(k): v for k, v in self.forged.items()}
        found["errors"] = dict(self.errors)
        return found


async def _open(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT_S)


async def _pipeline(host: str, port: int, end: float, figures: HostileFigures) -> None:
    """Write batches of heads as fast as the socket takes them; count the status lines read."""
    while time.monotonic() < end:
        try:
            reader, writer = await _open(host, port)
        except (OSError, TimeoutError) as exc:
            figures.errors[f"pipeline connect: {type(exc).__name__}"] += 1
            await asyncio.sleep(0.1)
            continue
        figures.pipelined_connections += 1

        async def read(reader: asyncio.StreamReader = reader) -> None:
            tail = b""
            while data := await reader.read(1 << 16):
                chunk = tail + data
                figures.pipelined_answered += chunk.count(b"HTTP/1.1 ")
                tail = chunk[-8:]
                figures.pipelined_answered -= tail.count(b"HTTP/1.1 ")

        reading = asyncio.ensure_future(read())
        try:
            while time.monotonic() < end and not reading.done():
                writer.write(PIPELINED * PIPELINE_BATCH)
                figures.pipelined_sent += PIPELINE_BATCH
                await asyncio.wait_for(writer.drain(), max(0.01, end - time.monotonic()))
        except (OSError, TimeoutError) as exc:
            figures.errors[f"pipeline write: {type(exc).__name__}"] += 1
        finally:
            writer.close()
            reading.cancel()


async def _slow_head(host: str, port: int, end: float, figures: HostileFigures) -> None:
    """A head that never ends; opened again each time the server closes it."""
    while time.monotonic() < end:
        try:
            reader, writer = await _open(host, port)
            writer.write(SLOW_HEAD)
            figures.slow_heads_opened += 1
            await asyncio.wait_for(reader.read(), max(0.01, end - time.monotonic()))
            figures.slow_heads_closed_by_server += 1
            writer.close()
        except TimeoutError:
            writer.close()
            return
        except OSError as exc:
            figures.errors[f"slow head: {type(exc).__name__}"] += 1
            await asyncio.sleep(0.1)


async def _loop(
    host: str,
    port: int,
    end: float,
    head: bytes | None,
    counts: Counter[int],
    figures: HostileFigures,
) -> None:
    """Requests one after another on one keep-alive connection; `head` None:
    a miss with a fresh X-Forwarded-For each time."""
    n = 0
    while time.monotonic() < end:
        try:
            reader, writer = await _open(host, port)
            while time.monotonic() < end:
                n += 1
                request = head or (
                    b"GET /api/v1/users/count?email=forged%d%%40hostile.invalid HTTP/1.1\r\n"
                    b"Host: aside\r\nX-Forwarded-For: 198.51.%d.%d\r\n\r\n"
                    % (n, n // 250 % 250, n % 250)
                )
                writer.write(request)
                status_line = await asyncio.wait_for(reader.readline(), 10)
                if not status_line:
                    break
                counts[int(status_line.split()[1])] += 1
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
            writer.close()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
            figures.errors[f"loop: {type(exc).__name__}"] += 1
            await asyncio.sleep(0.05)


async def hostile(host: str, port: int, seconds: float) -> HostileFigures:
    figures = HostileFigures(seconds)
    end = time.monotonic() + seconds
    readyz = b"GET /readyz HTTP/1.1\r\nHost: aside\r\n\r\n"
    tasks = [_pipeline(host, port, end, figures)]
    tasks += [_slow_head(host, port, end, figures) for _ in range(SLOW_HEADS)]
    tasks += [_loop(host, port, end, readyz, figures.readyz, figures) for _ in range(READYZ_LOOPS)]
    tasks += [_loop(host, port, end, None, figures.forged, figures) for _ in range(FORGED_LOOPS)]
    await asyncio.wait_for(asyncio.gather(*tasks), seconds + 20)
    return figures


def main(argv: list[str]) -> int:
    host, port, seconds = argv[0], int(argv[1]), float(argv[2])
    figures = asyncio.run(hostile(host, port, seconds))
    print(json.dumps(figures.as_dict()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
