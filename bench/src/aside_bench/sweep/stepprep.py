"""A step's preparation: the gateway's settings, Redis's bound, a quiet stack, and
the cache flushed, filled or left as the step before left it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from aside_bench.plan import scenarios
from aside_bench.plan.shape import LoadShape
from aside_bench.plan.steps import (
    L1_ARMS,
    Step,
    arm_distance,
    arm_memory,
    base_arm,
    cache_param,
    gateway_env,
)
from aside_bench.records.runfile import RunRecord
from aside_bench.records.steprecord import StepRecord
from aside_bench.stack import distance as distances
from aside_bench.stack.config import Settings
from aside_bench.stack.distance import Distance
from aside_bench.stack.prepare import (
    MemoryBound,
    StackError,
    apply_bound,
    expires_within,
    flush_cache,
    read_bound,
    wait_until_quiet,
    warm_cache,
)
from aside_bench.stack.seeddata import SeedData
from aside_bench.stack.services import ServiceControl
from aside_bench.stack.toxiproxy import Proxies, Toxiproxy, ToxiproxyError, proxied_urls
from aside_bench.sweep.warmtiers import wait_l1_empty, warm_l1

# A ceiling step refills the cache unless every key outlives the step by this much.
TTL_MARGIN_S = 10


@dataclass
class Options:
    """A sweep's or a ceiling's options, as the command line gave them."""

    run_id: str
    out_dir: Path
    data_dir: Path
    shape: LoadShape
    max_pool: int
    recover_timeout_s: float
    driver_cpu_limit: float | None = None  # cores; above it a step is load generator saturated
    live: bool = False  # the driver's line a second on the terminal while a step runs
    samples_file: bool = False  # every request of every step into the run folder
    cache_policy: str = "allkeys-lru"  # Redis's eviction policy under a memory arm's bound
    # The distances the arms run at (plan/steps.py arm_distance), by name.
    distances: dict[str, Distance] = field(default_factory=dict)


class StepPreparation:
    """The runner's part that prepares a step; its state is the runner's."""

    settings: Settings
    options: Options
    seed: SeedData
    run: RunRecord
    gateway_settings: dict[str, str]
    distances: DistanceControl
    stack_bound: MemoryBound | None
    skip: int
    connection_bound_read: bool

    def read_emails(self) -> list[str]:
        return self.seed.read_emails(self.options.shape.cold_sample)

    def _refill(self, step: Step) -> bool:
        """Whether a warm step refills: the ceiling's only when a key would lapse during it
        (docs/decisions/020-a-ceiling-step-refills-a-cache-that-would-lapse.md)."""
        margin_s = step.duration_s + TTL_MARGIN_S
        return step.scenario != "ceiling" or expires_within(self.settings, margin_s)

    @staticmethod
    def _warn(record: StepRecord, error: StackError) -> None:
        record.warning = str(error)
        print(f"  warning: {error}; running the step anyway", flush=True)

    def _gateway_for(self, arm: str, record: StepRecord) -> None:
        """Restart the gateway when `arm` needs other settings than the last step's."""
        wanted = {**self.distances.gateway_env(arm), **gateway_env(arm)}
        if wanted == self.gateway_settings:
            return
        control = ServiceControl(self.settings)
        control.verify(("gateway",))
        control.restart("gateway", wanted)
        self.gateway_settings = wanted
        self.connection_bound_read = False
        record.gateway_restarted_with = wanted

    def _bound_for(self, step: Step, record: StepRecord) -> None:
        """Before an arm's cold step: Redis bounded as the arm says, or as the stack had it."""
        memory = arm_memory(step.arm)
        if step.phase != "cold" or (memory is None and self.stack_bound is None):
            if memory is not None:
                record.cache_memory = asdict(MemoryBound(memory, self.options.cache_policy))
            return
        if self.stack_bound is None:
            self.stack_bound = read_bound(self.settings)
        bound = (
            self.stack_bound if memory is None else MemoryBound(memory, self.options.cache_policy)
        )
        apply_bound(self.settings, bound)
        record.cache_memory = asdict(bound)

    def _continues_cold(self, step: Step) -> bool:
        """A warm step right after its own cold step (not the hot set) goes on with its stream."""
        shape = self.options.shape
        hotset = shape.dist == "hotset" and shape.trace is None
        if hotset or step.phase != "warm" or len(self.run.steps) < 2:
            return False
        before = self.run.steps[-2]
        return bool(
            before.completed
            and before.phase == "cold"
            and before.arm == step.arm
            and before.rate == step.rate
            and before.repeat == step.repeat
        )

    def _prepare(self, step: Step, record: StepRecord) -> None:
        self.distances.before(step, record)
        self._gateway_for(step.arm, record)
        self._bound_for(step, record)
        self.skip = 0
        try:
            waited = wait_until_quiet(self.settings, self.options.recover_timeout_s)
            record.quiet_wait_s = round(waited, 2)
        except StackError as error:
            self._warn(record, error)
        in_process = base_arm(step.arm) in L1_ARMS
        own = scenarios.scenario_of(step.scenario)  # a scenario's own warm step (tracks')
        if self._continues_cold(step):
            before = self.run.steps[-2]
            self.skip = int(before.rate) * int(before.duration_s)
            record.skip = self.skip
            record.prep = f"continues the cold step's stream over its cache (skip {self.skip})"
        elif step.phase == "warm" and (prepare := own.hooks.prepare if own else None):
            warmed = record.warm = prepare(self.settings, self.options.data_dir, step)
            record.prep = warmed.pop("prep")
        elif step.phase == "cold":
            flush_cache(self.settings)
            record.prep = "cache flushed"
            if in_process:
                try:
                    waited = wait_l1_empty(self.settings)
                    record.prep += f", L1 empty after {waited:.1f} s"
                except StackError as error:
                    self._warn(record, error)
        elif step.phase == "warm" and in_process:
            self._warm_l1(step, record)
        elif step.phase == "warm":
            warmed = warm_cache(
                self.settings, self.read_emails(), flush=self._refill(step), mode="l2"
            )
            record.prep = (
                f"cache warmed: {warmed['keys']} keys in {warmed['fill_s']} s, "
                f"{warmed['hit_share_after']:.0%} hits on a re-read"
            )
            record.warm = warmed

    def _warm_l1(self, step: Step, record: StepRecord) -> None:
        """Every warm step fills L1 again (its entries outlive no step); Redis as _refill says."""
        mode = cache_param(step.arm) or "l1"
        warmed = warm_l1(self.settings, self.read_emails(), mode, flush=self._refill(step))
        record.prep = (
            f"L1 warmed: {warmed['keys']} keys, {warmed['passes']} passes in "
            f"{warmed['fill_s']} s, {warmed['hit_share_after']:.0%} L1 hits in the last"
        )
        record.warm = warmed
        if not warmed["reached"]:
            record.warning = (
                f"L1 hit share stayed at {warmed['hit_share_after']:.0%} after "
                f"{warmed['passes']} passes"
            )


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
        return dict(self.urls.gateway) if arm_distance(arm) is not None else {}

    def before(self, step: Step, record: StepRecord) -> None:
        """The step's distance on every hop, the core routed for it (or direct again)."""
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
        found: dict[str, dict[str, float] | str] = {}

        def measure() -> None:
            try:
                times = distances.measure(self.proxies, self.settings.database_url,
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
