"""The faults under load: a service killed or stopped, or a hop poisoned, then brought back."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import requests
from aside_bench.load.run import DriverProcess, LoadRun, deadline_s, new_driver
from aside_bench.stack import redisclient
from aside_bench.stack.config import Settings
from aside_bench.stack.prepare import StackError, wait_for
from aside_bench.stack.services import ServiceControl
from aside_bench.stack.toxiproxy import Toxiproxy
from aside_bench_suite.samples import first_request

from aside_bench_chaos import gray

READY_DEADLINE_S = 60.0
LOAD_START_DEADLINE_S = 60.0


@contextmanager
def under_load(
    settings: Settings, run: LoadRun, log: Path, events: dict[str, float]
) -> Iterator[DriverProcess]:
    """The driver's load from its first request (`load_start`) to its end (`load_end`):
    it runs its course whatever the block did; then a failed driver is an error."""
    load = new_driver(settings, run, log).start()
    events["load_start"] = float(first_request(load, run.samples_path, LOAD_START_DEADLINE_S)["t"])
    try:
        yield load
    finally:
        code = load.wait(deadline_s(run))
        events["load_end"] = time.time()
    if code != 0:
        raise StackError(f"the load driver exited with {code} in case {run.phase}; see {log}")


def kill(control: ServiceControl, service: str) -> int:
    """SIGKILL the recorded process of `service`; its pid."""
    pid = control.pid(service)
    os.kill(pid, signal.SIGKILL)
    return pid


class Faults:
    def __init__(self, settings: Settings, control: ServiceControl, api: Toxiproxy | None = None):
        self.settings, self.control, self.api = settings, control, api  # api: the gray cases

    def _proxies(self, case: str) -> Toxiproxy:
        if self.api is None:
            raise StackError(f"case {case} needs the proxies: run it through run_chaos")
        return self.api

    def _ready(self, service: str) -> bool:
        if service == "redis":
            with redisclient.connect(self.settings, socket_timeout=0.5, connect_timeout=0.5) as db:
                return bool(db.ping())
        if service == "core":
            url = f"{self.control.stack.core_url}/readyz"
            return requests.get(url, timeout=0.5).status_code == 200
        with psycopg.connect(self.settings.database_url, connect_timeout=1) as conn:  # postgres
            conn.execute("SELECT 1")
        return True

    def inject(self, case: str, events: dict[str, float], notes: dict[str, object]) -> None:
        before = set(self.control.gateway_workers()) if case == "worker" else set()
        events["fault"] = time.time()
        if case in gray.GRAY_CASES:
            gray.poison(self._proxies(case), gray.GRAY_CASES[case], on=True)
            notes["toxics"] = {k: v for k, v in self._proxies(case).toxics().items() if v}
        elif case in ("redis", "core"):
            notes["killed_pid"] = kill(self.control, case)
        elif case == "postgres":
            self.control.stop("postgres")
            events["stopped"] = time.time()
        elif case == "worker":
            # One gunicorn worker, a child of the recorded master.
            workers = self.control.gateway_workers()
            if not workers:
                raise StackError("the gateway has no worker to kill")
            os.kill(killed := workers[0], signal.SIGKILL)
            notes["killed_pid"] = killed
            notes["workers_before"] = sorted(before)

            def replaced() -> bool:
                now = set(self.control.gateway_workers())
                return len(now) >= len(before) and killed not in now

            at = wait_for(replaced, READY_DEADLINE_S)
            if at is not None:
                events["replaced"] = at
                notes["workers_after"] = sorted(self.control.gateway_workers())

    def restore(self, case: str, events: dict[str, float], notes: dict[str, object]) -> None:
        if case == "worker":
            return  # gunicorn's master does it
        events["restore"] = time.time()
        if case in gray.GRAY_CASES:
            gray.poison(self._proxies(case), gray.GRAY_CASES[case], on=False)
            events["ready"] = events["restored"] = time.time()
            return
        # `infra/stack.sh up SERVICE` in the background while its readiness is polled.
        process = subprocess.Popen(
            ["bash", str(self.control.script), "up", case],
            env=self.control.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        at = wait_for(lambda: self._ready(case), READY_DEADLINE_S)
        output, _ = process.communicate(timeout=READY_DEADLINE_S)
        events["restored"] = time.time()
        if at is None or process.returncode != 0:
            raise StackError(f"infra/stack.sh up {case} failed: {output.strip()[-500:]}")
        events["ready"] = at
        notes["restarted_pid"] = self.control.pid(case)
