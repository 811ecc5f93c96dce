"""The CPU a Redis GET costs the event loop: the hot path's GET
(front/hot_path.EarlyGetClient, breaker included) against a real Redis, with
REDIS_READS=client (redis-py's asyncio client, a timeout per GET) and
REDIS_READS=lean (backends/redis_reads.py), on uvloop as under gunicorn.

    /tmp/heavy .venv/bin/python gateway/benchmarks/bench_redis_get.py \\
        [--gets 20000] [--repeats 5] [--concurrency "1 32"] [--reads "client lean"] [--profile]

REDIS_URL names the server (the test stack's: `source /tmp/teststack-env.sh`).
`concurrency` tasks each GET in turn from a hot set of 1,000 keys, 200-byte
values, written first. The figure is this process's CPU time (user + system,
so the socket's system calls are in it, Redis's own work is not) per GET;
each repeat's, then min/median/max. `--profile` prints cProfile's top
functions of one more repeat of each (slower: the figure is not comparable).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import tempfile
import time
from dataclasses import dataclass, replace

os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="bench-redis-get-"))

import redis
import uvloop
from aside_gateway.backends.breaker import CircuitBreaker
from aside_gateway.config.settings import Settings, load_settings
from aside_gateway.front.hot_path import EarlyGetClient

KEYS = [f"aside:bench:get:{i}" for i in range(1000)]
VALUE = b"x" * 200
WARMUP = 2000


@dataclass(frozen=True)
class Figure:
    reads: str
    concurrency: int
    cpu_us: list[float]
    per_s: list[float]


def _settings(url: str, reads: str) -> Settings:
    base = load_settings(
        {
            "DATABASE_URL": "postgresql://a@h/d",
            "CORE_URL": "http://c",
            "REDIS_URL": url,
            "ASIDE_PROFILE": "lab",
        }
    )
    return replace(base, redis_reads=reads)


async def _gets(client: EarlyGetClient, concurrency: int, gets: int) -> None:
    per_task = gets // concurrency

    async def one(offset: int) -> None:
        for i in range(per_task):
            early = await client.get(KEYS[(offset + i) % len(KEYS)])
            if early is None or early.value != VALUE:
                raise RuntimeError(f"GET answered {early!r}")

    await asyncio.gather(*(one(t * 37) for t in range(concurrency)))


async def _measure(
    settings: Settings, concurrency: int, gets: int, repeats: int, profile: bool
) -> Figure:
    client = EarlyGetClient(settings, CircuitBreaker(1.0))
    await _gets(client, concurrency, WARMUP)
    cpu_us, per_s = [], []
    for _ in range(repeats):
        cpu, wall = time.process_time(), time.perf_counter()
        await _gets(client, concurrency, gets)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        cpu_us.append(cpu / gets * 1e6)
        per_s.append(gets / wall)
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        await _gets(client, concurrency, gets)
        profiler.disable()
        print(f"--- profile: REDIS_READS={settings.redis_reads}, concurrency {concurrency}")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(14)
    await client._redis().close()
    return Figure(settings.redis_reads, concurrency, cpu_us, per_s)


def _line(figure: Figure) -> str:
    cpu = sorted(figure.cpu_us)
    return (
        f"| {figure.reads} | {figure.concurrency} | {statistics.median(cpu):.1f} "
        f"({cpu[0]:.1f}-{cpu[-1]:.1f}) | {statistics.median(figure.per_s):,.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gets", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--concurrency", default="1 32")
    parser.add_argument("--reads", default="client lean")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    url = os.environ["REDIS_URL"]
    setup = redis.Redis.from_url(url)
    setup.mset(dict.fromkeys(KEYS, VALUE))
    setup.close()
    print("| REDIS_READS | concurrency | CPU µs per GET, median (min-max) | GETs/s, median |")
    print("|---|---|---|---|")
    for reads in args.reads.split():
        for concurrency in (int(c) for c in args.concurrency.split()):
            settings = _settings(url, reads)
            figure = uvloop.run(
                _measure(settings, concurrency, args.gets, args.repeats, args.profile)
            )
            print(_line(figure), flush=True)


if __name__ == "__main__":
    main()
