"""A step's network distance: the toxics on every hop, the core routed through them, hop times."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from aside_bench.plan import steps as plan
from aside_bench.plan.steps import Step
from aside_bench.records.steprecord import StepRecord
from aside_bench.stack import distance as distances
from aside_bench.stack.config import Settings
from aside_bench.stack.prepare import StackError
from aside_bench.stack.services import ServiceControl
from aside_bench.stack.toxiproxy import Proxies, Toxiproxy, ToxiproxyError, proxied_urls

# Round trips a hop is timed for beside a step's load (stack/distance.py measure).
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
        return dict(self.urls.gateway) if plan.arm_distance(arm) is not None else {}

    def before(self, step: Step, record: StepRecord) -> None:
        """The step's distance on every hop, the core routed for it (or direct again)."""
        name = plan.arm_distance(step.arm)
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
        if plan.arm_distance(step.arm) is None:
            yield
            return
        found: dict[str, dict[str, float] | str] = {}

        def measure() -> None:
            try:
                times = distances.measure(
                    self.proxies,
                    self.settings.database_url,
                    self.settings.redis_url,
                    samples=HOP_SAMPLES,
                )
                found.update(
                    {
                        hop: {"median_ms": one.median_ms, "p95_ms": one.p95_ms}
                        for hop, one in times.hops.items()
                    }
                )
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
