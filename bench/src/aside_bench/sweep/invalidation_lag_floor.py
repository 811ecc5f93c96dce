"""The invalidation lag's floor: the same messages at a subscriber doing nothing else.

`python -m aside_bench.sweep.invalidation_lag_floor OUT` writes its figures on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TypedDict

import redis

from aside_bench.records.documents import FloorFigures
from aside_bench.records.tierstats import nearest_rank
from aside_bench.sweep.warmtiers import INVALIDATION_CHANNEL

READY_LINE = "subscribed"
START_DEADLINE_S = 10.0
STOP_DEADLINE_S = 10.0
POLL_S = 0.2


class Invalidation(TypedDict, total=False):
    """contracts/cache.json's invalidation message; only its publish time is read here."""

    published_us: int


def published_ms(message: Invalidation) -> float | None:
    """The core's publish time in unix ms, from its µs field."""
    micros = message.get("published_us")
    return micros / 1000 if isinstance(micros, int) and not isinstance(micros, bool) else None


def figures(lags_ms: list[float]) -> FloorFigures:
    """count, p50, p99 and max of the lags (ms); quantiles None without samples."""
    return FloorFigures(
        count=len(lags_ms),
        p50_ms=nearest_rank(lags_ms, 50),
        p99_ms=nearest_rank(lags_ms, 99),
        max_ms=max(lags_ms, default=None),
    )


def listen(client: redis.Redis, out: Path) -> None:
    """Time every message until SIGTERM, then write the figures to `out`."""
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    pubsub = client.pubsub()
    pubsub.subscribe(INVALIDATION_CHANNEL)
    lags: list[float] = []
    ready = False
    while not stopping.is_set():
        message = pubsub.get_message(timeout=POLL_S)
        received = time.time() * 1000
        if message is None:
            continue
        if message["type"] == "subscribe" and not ready:
            print(READY_LINE, flush=True)
            ready = True
        elif message["type"] == "message":
            try:
                sent = published_ms(json.loads(message["data"]))
            except (ValueError, TypeError):
                sent = None
            if sent is not None:
                lags.append(max(received - sent, 0.0))
    out.write_text(json.dumps(figures(lags)))


class FloorProbe:
    """The floor subscriber as a child process around one step; it never raises."""

    def __init__(self, out: Path):
        self.out = out
        self.problem: str | None = None
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.out.unlink(missing_ok=True)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "aside_bench.sweep.invalidation_lag_floor", str(self.out)],
                stdout=subprocess.PIPE,
                text=True,
                env=os.environ.copy(),
            )
        except OSError as error:
            self.problem = f"the floor subscriber did not start: {error}"
            return
        if not self._ready():
            self.problem = "the floor subscriber was not subscribed within its deadline"
            self._kill()

    def _ready(self) -> bool:
        assert self._proc is not None and self._proc.stdout is not None
        deadline = time.monotonic() + START_DEADLINE_S
        os.set_blocking(self._proc.stdout.fileno(), False)
        while time.monotonic() < deadline and self._proc.poll() is None:
            line = self._proc.stdout.readline()
            if line.strip() == READY_LINE:
                return True
            time.sleep(0.02)
        return False

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def stop(self) -> FloorFigures | None:
        """The step's floor figures, or None (see `problem`)."""
        proc = self._proc
        if proc is None:
            return None
        proc.terminate()
        try:
            proc.wait(timeout=STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.problem = "the floor subscriber did not stop within its deadline"
            self._kill()
            return None
        self._proc = None
        try:
            return json.loads(self.out.read_text())
        except (OSError, ValueError) as error:
            self.problem = f"the floor subscriber left no figures: {error}"
            return None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m aside_bench.sweep.invalidation_lag_floor OUT (REDIS_URL set)")
        return 2
    client = redis.Redis.from_url(os.environ["REDIS_URL"], socket_connect_timeout=5)
    listen(client, Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
