"""A step's preparation before its load: the gateway restarted with the
settings its arm needs, Redis bounded as a memory arm says (or given back its
own bound), the stack let go quiet, and the cache flushed, filled or left as
the step before left it, per tier and phase. The runner (runner.py) takes
these as the first part of each step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aside_bench.plan import scenarios
from aside_bench.plan.shape import LoadShape
from aside_bench.plan.steps import L1_ARMS, Step, arm_memory, base_arm, cache_param, gateway_env
from aside_bench.records.runfile import RunRecord
from aside_bench.records.steprecord import StepRecord
from aside_bench.stack import cachememory
from aside_bench.stack.cachememory import MemoryBound
from aside_bench.stack.config import Settings
from aside_bench.stack.distance import Distance
from aside_bench.stack.prepare import (
    StackError,
    expires_within,
    flush_cache,
    wait_until_quiet,
    warm_cache,
)
from aside_bench.stack.seeddata import SeedData
from aside_bench.stack.services import ServiceControl
from aside_bench.sweep.distances import DistanceControl
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
    """The runner's part that prepares a step; its state (the gateway's last
    settings, Redis's own bound, the skip into a cold step's stream) is the
    runner's (runner.Runner.__init__)."""

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
        """A sweep's warm steps all start from a fresh fill. The ceiling's steps
        only top up what expired (a full refill costs a scan per key), unless a
        key would lapse during the step, which sends its reads to full scans
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
        """Before an arm's cold step: Redis bounded as the arm says (a memory
        arm) or as the stack had it (any other arm, after a memory arm)."""
        memory = arm_memory(step.arm)
        if step.phase != "cold" or (memory is None and self.stack_bound is None):
            if memory is not None:
                record.cache_memory = asdict(MemoryBound(memory, self.options.cache_policy))
            return
        if self.stack_bound is None:
            self.stack_bound = cachememory.read_bound(self.settings)
        bound = (
            self.stack_bound if memory is None else MemoryBound(memory, self.options.cache_policy)
        )
        cachememory.apply_bound(self.settings, bound)
        record.cache_memory = asdict(bound)

    def _continues_cold(self, step: Step) -> bool:
        """A warm step of a popularity workload (or a trace) right after its own
        cold step goes on with that step's stream over the cache it left (no refill):
        the steady state after a warm-up of the same workload."""
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
        if self._continues_cold(step):
            before = self.run.steps[-2]
            self.skip = int(before.rate) * int(before.duration_s)
            record.skip = self.skip
            record.prep = f"continues the cold step's stream over its cache (skip {self.skip})"
        elif step.phase == "warm" and (prepare := _own_preparation(step)) is not None:
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
        """L1 entries outlive no step (CACHE_L1_TTL_SECONDS, 30 s by default), so
        every warm step fills L1 again; hybrid's Redis is refilled as the cache
        arm's is (the ceiling only when a key would lapse during the step)."""
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


def _own_preparation(step: Step) -> Callable[..., dict[str, Any]] | None:
    """A scenario's own preparation of a warm step (tracks warms its values)."""
    found = scenarios.scenario_of(step.scenario)
    return None if found is None else found.hooks.prepare
