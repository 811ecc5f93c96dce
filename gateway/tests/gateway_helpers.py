"""Helpers shared by the gateway tests (a uniquely named module: the suite runs
with --import-mode=importlib beside other suites, so `conftest` is not importable)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
import requests
from aside_gateway.contracts import cache_keys
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
CONTRACTS = REPO / "contracts"
VENV_BIN = Path(sys.executable).parent
TEST_DB = "aside_test_gateway"
TEST_REDIS_DB = 1
COUNT_SQL_TEXT = "SELECT count(*) FROM users WHERE email = $1"
USER_SQL_TEXT = "SELECT id, username, email, created_at FROM users WHERE id = $1"
START_DEADLINE_S = 30
# The production gateways' bearer token (WRITE_TOKEN): a test value, not a secret.
WRITE_TOKEN = "test-write-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {WRITE_TOKEN}"}
# The production core's credential (CORE_TOKEN), which only the gateway sends.
CORE_TOKEN = "test-core-token-0123456789abcdef"
# The lab's header naming the gateway worker (its pid) that answered.
WORKER_HEADER = "X-Aside-Worker"
# How many workers the per-worker coherence tests' gateways run: 2, or what
# ASIDE_TEST_GATEWAY_WORKERS says (the suites are run with 2 and with 4).
WORKERS = int(os.environ.get("ASIDE_TEST_GATEWAY_WORKERS", "2"))
# Fresh connections land on the workers as the kernel hands them out: every
# worker is seen well within this on a busy machine.
EVERY_WORKER_DEADLINE_S = 15


def contract(name: str) -> Any:
    return json.loads((CONTRACTS / name).read_text())


def with_path(url: str, path: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cached(rdb: Any, key: str) -> bytes | None:
    """The value Redis holds under `key`, out of its expiry envelope if it has
    one (cache.json `expiry`: the default mode, swr, stores one)."""
    stored = rdb.get(key)
    if stored is None:
        return None
    envelope = cache_keys.unwrap(stored)
    return stored if envelope is None else envelope.value


def fresh_for(rdb: Any, key: str) -> float:
    """Seconds `key`'s value stays fresh: its envelope's logical expiry, or
    Redis's TTL for a bare value (an envelope outlives its expiry in Redis)."""
    envelope = cache_keys.unwrap(rdb.get(key) or b"")
    if envelope is None:
        return float(rdb.ttl(key))
    return (envelope.expires_ms - time.time() * 1000) / 1000


def unique_email(tag: str = "t") -> str:
    return f"{tag}-{uuid.uuid4().hex[:12]}@example.com"


def unique_username(tag: str = "u") -> str:
    return f"{tag}_{uuid.uuid4().hex[:16]}"


def wait_until(predicate: Callable[[], Any], deadline_s: float, what: str, step_s: float = 0.05):
    """Poll `predicate` until it returns something truthy; fail after the deadline."""
    deadline = time.monotonic() + deadline_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {deadline_s}s waiting for {what}")
        time.sleep(step_s)


def reads_waiting_on_a_lock(conn: Any) -> int:
    """The gateway's PostgreSQL backends now waiting for a lock (pg_stat_activity)."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'aside-gateway' "
        "AND wait_event_type = 'Lock'"
    ).fetchone()
    return int(row[0])


def scrape(base_url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """All samples of /metrics as {(name, labels): value}."""
    text = requests.get(base_url + "/metrics", timeout=5).text
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def sample(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


# ---- every worker ---------------------------------------------------------------


def worker_of(response: requests.Response) -> int:
    """The pid of the gateway worker that answered (the lab's header)."""
    return int(response.headers[WORKER_HEADER])


def every_worker(
    ask: Callable[[], requests.Response],
    workers: int,
    what: str,
    accept: Callable[[requests.Response], bool] = lambda _: True,
    deadline_s: float = EVERY_WORKER_DEADLINE_S,
) -> dict[int, requests.Response]:
    """Call `ask` (each call on a new connection) until each of the gateway's
    `workers` workers has given an answer `accept` takes; each worker's first
    such answer, by pid. More workers than `workers` fails: a test must know
    how many it has to reach."""
    answers: dict[int, requests.Response] = {}

    def all_seen() -> bool:
        response = ask()
        if accept(response):
            answers.setdefault(worker_of(response), response)
        assert len(answers) <= workers, f"more workers than {workers}: {sorted(answers)}"
        return len(answers) == workers

    wait_until(all_seen, deadline_s, f"{what} from each of {workers} workers", step_s=0.0)
    return answers


# ---- processes -----------------------------------------------------------------


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log_path: Path
    url: str
    extra: dict[str, Any] = field(default_factory=dict)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def send(self, sig: int = signal.SIGINT) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def wait(self) -> None:
        try:
            self.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=5)

    def stop(self, sig: int = signal.SIGINT) -> None:
        self.send(sig)
        self.wait()


def stop_all(procs: list[Proc], sig: int = signal.SIGINT) -> None:
    """Signal every process first, then wait: they shut down in parallel."""
    for proc in procs:
        proc.send(sig)
    for proc in procs:
        proc.wait()


def start_process(name: str, cmd: list[str], env: dict[str, str], log_path: Path, url: str) -> Proc:
    log_file = log_path.open("wb")
    popen = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
    )
    log_file.close()
    return Proc(name, popen, log_path, url)


def wait_ready(proc: Proc, path: str) -> None:
    def ready() -> bool:
        if proc.popen.poll() is not None:
            pytest.fail(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log()}")
        try:
            return requests.get(proc.url + path, timeout=1).status_code == 200
        except requests.RequestException:
            return False

    wait_until(ready, START_DEADLINE_S, f"{proc.name} at {proc.url}{path}", step_s=0.1)


class TcpProxy:
    """Forwards loopback connections to `target`; `cut()` closes every connection
    and makes new ones close at once, as a partition (or a stopped server) would
    for this one client; `resume()` lets connections through again."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self._cut = False
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._serve, name="tcp-proxy", daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            for conn in self._conns:
                _close(conn)
            self._conns.clear()

    def resume(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self.cut()
        _close(self._listener)

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def _track(self, conn: socket.socket) -> bool:
        with self._lock:
            if self._cut:
                return False
            self._conns.add(conn)
            return True

    def _forward(self, client: socket.socket) -> None:
        if not self._track(client):
            _close(client)
            return
        try:
            server = socket.create_connection(self.target, timeout=5)
        except OSError:
            _close(client)
            return
        server.settimeout(None)
        if not self._track(server):
            _close(client)
            _close(server)
            return
        threading.Thread(target=_pipe, args=(server, client), daemon=True).start()
        _pipe(client, server)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    _close(src)
    _close(dst)


def _close(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
    conn.close()


# ---- a read held at its fill (the lab test hooks) -----------------------------------

HOLD_DEADLINE_S = 15


class Read:
    """A GET in a thread of its own; `response` once it answered."""

    def __init__(self, url: str, email: str, headers: dict[str, str] | None = None):
        self.response: requests.Response | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(url, email, headers or {}))
        self.thread.start()

    def _run(self, url: str, email: str, headers: dict[str, str]) -> None:
        try:
            self.response = requests.get(
                url + "/api/v1/users/count", params={"email": email}, headers=headers, timeout=30
            )
        except BaseException as exc:  # the test inspects it
            self.error = exc

    def result(self) -> requests.Response:
        self.thread.join(HOLD_DEADLINE_S + 5)
        assert not self.thread.is_alive(), "no answer"
        assert self.error is None, self.error
        assert self.response is not None
        return self.response


def start_held(url: str, email: str, hold: str, rdb: redis.Redis) -> Read:
    """A read of `email` that pauses after its database read, before its store."""
    read = Read(url, email, {"X-Test-Hold": hold})
    assert rdb.blpop([f"aside:test:{hold}:reached"], timeout=HOLD_DEADLINE_S), "never held"
    return read


def release(rdb: redis.Redis, hold: str) -> None:
    rdb.rpush(f"aside:test:{hold}:release", "go")


# ---- a flood of random tolerances -------------------------------------------------


@dataclass(frozen=True)
class Flood:
    """A hostile client of GET /api/v1/tracks/<id>?simplify=T: `threads`
    connections, each asking a new random tolerance (or `tolerance`) of a random
    track as soon as its last answer came, for at most `seconds` and `max_requests`."""

    base_url: str
    track_ids: tuple[int, ...]
    threads: int
    seconds: float
    max_requests: int
    # Every request asks this tolerance instead of a random one: after the first
    # of each track, hits only (the reference flood: the same client, no misses).
    tolerance: str | None = None


def random_tolerance(rng: Any) -> str:
    """A plain decimal from 0.000001 to 0.01 of at most 16 characters (contracts/tracks.json)."""
    return f"{rng.randint(1_000_000, 10_000_000_000) / 10**12:.14f}"[:16].rstrip("0")


def _flood_connection(flood: Flood, seed: int, deadline: float, stop: Any, statuses: Any) -> None:
    import random

    rng = random.Random(seed)
    session = requests.Session()
    while not stop.is_set() and time.monotonic() < deadline:
        with statuses.get_lock():
            if sum(statuses) >= flood.max_requests:
                return
        url = f"{flood.base_url}/api/v1/tracks/{rng.choice(flood.track_ids)}"
        try:
            asked = flood.tolerance or random_tolerance(rng)
            status = session.get(url, params={"simplify": asked}, timeout=30)
            code = status.status_code
        except requests.RequestException:
            code = 0  # no answer at all: counted apart from every status
        with statuses.get_lock():
            statuses[min(code, 599)] += 1


def run_flood(flood: Flood, stop: Any, statuses: Any) -> None:
    """The flood's process: its threads share one GIL, as one client does.
    `statuses[code]` counts the answers by status (0: no answer)."""
    deadline = time.monotonic() + flood.seconds
    threads = [
        threading.Thread(target=_flood_connection, args=(flood, seed, deadline, stop, statuses))
        for seed in range(flood.threads)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
