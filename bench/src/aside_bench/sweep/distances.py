"""The network distances a sweep's arms run at (`cache~same-zone`): before the
first such step the core, and with each restart the gateway, go through the
proxies (stack/toxiproxy.py); before each step the hops carry its distance's
latency; beside its load each hop's round trip is measured through the same
path; at the run's end no toxic is left and the core is direct again."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aside_bench.plan.steps import Step, arm_distance
from aside_bench.records.steprecord import StepRecord
from aside_bench.stack import distance as distances
from aside_bench.stack import hoptimes
from aside_bench.stack.config import Settings
from aside_bench.stack.prepare import StackError
from aside_bench.stack.services import ServiceControl
from aside_bench.stack.toxiproxy import Proxies, Toxiproxy, ToxiproxyError, proxied_urls

# Round trips a hop is timed for beside a step's load (stack/hoptimes.py).
HOP_SAMPLES = 20


class DistanceControl:
    def __init__(self, settings: Settings, asked: dict[str, distances.Distance]):
        self.settings = settings
        self.asked = asked
        self.proxies = Proxies.from_env()
        self.urls = proxied_urls(
            self.proxies, settings.database_url, settings.redis_url, settings.core_url
        )
        self.api: Toxiproxy | None = None
        self.current: str | None = None
        self.core_routed = False

    def gateway_env(self, arm: str) -> dict[str, str]:
        """The gateway's URLs through the proxies for an arm at a distance."""
        return dict(self.urls.gateway) if arm_distance(arm) is not None else {}

    def before(self, step: Step, record: StepRecord) -> None:
        """The step's distance on every hop, the core routed through the proxies
        for it; a direct arm after one at a distance gets the core direct again."""
        name = arm_distance(step.arm)
        if name is None:
            if self.core_routed:
                ServiceControl(self.settings).restart("core", {})
                self.core_routed = False
            return
        if self.api is None:
            self.api = Toxiproxy(self.proxies)
            self.api.require_hops()
            self.api.clear()
        if not self.core_routed:
            ServiceControl(self.settings).restart("core", self.urls.core)
            self.core_routed = True
        if name != self.current:
            distances.apply(self.api, self.asked[name])
            self.current = name
        record.distance = name

    @contextmanager
    def measured(self, step: Step, record: StepRecord) -> Iterator[None]:
        """Each hop's round trip timed while the step's load runs, into its record."""
        if arm_distance(step.arm) is None:
            yield
            return
        found: dict[str, Any] = {}

        def measure() -> None:
            try:
                times = hoptimes.measure(self.proxies, self.settings.database_url,
                                         self.settings.redis_url, samples=HOP_SAMPLES)  # fmt: skip
                found.update({hop: {"median_ms": one.median_ms, "p95_ms": one.p95_ms}
                              for hop, one in times.hops.items()})  # fmt: skip
            except Exception as error:  # a probe's failure is the step's note, not its end
                found["error"] = str(error)

        probe = threading.Thread(target=measure, name="hop-times", daemon=True)
        probe.start()
        try:
            yield
        finally:
            probe.join(timeout=step.duration_s + 30)
            record.hops = found

    def restore(self) -> None:
        """No toxic left, and the core on its direct URLs again."""
        if self.api is None:
            return
        try:
            self.api.clear()
            if self.core_routed:
                ServiceControl(self.settings).restart("core", {})
                self.core_routed = False
        except (StackError, ToxiproxyError) as error:
            print(f"warning: could not take the core off the proxies: {error}")
        finally:
            self.api.close()
            self.api = None
            self.current = None
