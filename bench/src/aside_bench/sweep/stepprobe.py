"""Readings right before and after a step's load, kept as its "probe" in run.json."""

from __future__ import annotations

import time

import requests

from aside_bench.records.documents import ProbeReading
from aside_bench.stack import procs
from aside_bench.stack.config import Settings
from aside_bench.stack.gateway_metrics import connection_bound, scrape, step_counters
from aside_bench.stack.prepare import StackError
from aside_bench.stack.services import ServiceControl

# Services whose CPU a step's cost counts beside the gateway's.
COSTED_SERVICES = ("postgres", "redis")
# Read beside them, never priced: the lab's proxy (report/distances.py states it).
MEASURED_SERVICES = (*COSTED_SERVICES, "toxiproxy")


class GatewayProbe:
    """The readings; without the stack's pids only the gateway's counters are read."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.control: ServiceControl | None = None
        self.problem: str | None = None
        try:
            control = ServiceControl(settings)
            control.verify(("gateway", "redis"))
            self.control = control
        except StackError as error:
            self.problem = f"no CPU or memory figures: {error}"

    def _pid(self, service: str) -> int | None:
        if self.control is None:
            return None
        try:
            return self.control.pid(service)
        except StackError:
            return None

    def cpu_ticks(self, service: str, ppids: dict[int, int] | None = None) -> int | None:
        """The CPU ticks of a service's process tree; None without its pid."""
        pid = self._pid(service)
        return None if pid is None else procs.tree_cpu_ticks(pid, ppids)

    def connections_per_worker(self) -> int | None:
        """What each gateway worker holds before it answers 503; None when unread."""
        try:
            return connection_bound(self.settings)
        except (StackError, requests.RequestException, ValueError):
            return None

    def loops_run_queue(self, ppids: dict[int, int] | None = None) -> procs.RunQueue | None:
        """The gateway workers' event loops' run-queue wait; None without its pid."""
        pid = self._pid("gateway")
        return None if pid is None else procs.run_queue(procs.children(pid, ppids))

    def reading(self, memory: bool = False) -> ProbeReading:
        """One reading; `memory` adds the resident memory (taken at a step's end)."""
        ppids = procs.parents()
        found = ProbeReading(
            t=time.time(),
            clk_tck=procs.clock_ticks_per_s(),
            # Every core's busy, total and stolen ticks: the machine's share and the host's.
            machine_ticks=procs.machine_ticks(),
            cpu_ticks=self.cpu_ticks("gateway", ppids),
            # The cost of a step beside the gateway's: the database's and the cache's.
            service_cpu_ticks={
                service: self.cpu_ticks(service, ppids) for service in MEASURED_SERVICES
            },
        )
        try:
            found |= step_counters(scrape(self.settings))
        except (StackError, requests.RequestException, ValueError) as error:
            found["error"] = f"gateway /metrics: {error}"
        if memory:
            for service in ("gateway", "redis"):
                pid = self._pid(service)
                sample = None if pid is None else procs.sample_tree(pid, ppids)
                found[f"{service}_rss_kib"] = None if sample is None else sample.rss_kib
        return found
