"""The step loop: each step's preparation, load, figures, point and progress line."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from aside_bench.load import run as load
from aside_bench.load.run import LoadRun
from aside_bench.load.summary import Summary, SummaryError
from aside_bench.plan import scenarios
from aside_bench.plan import steps as plan
from aside_bench.plan.arms import L1_ARMS, REDIS_READS, base_arm, cache_param
from aside_bench.plan.shape import LoadShape
from aside_bench.plan.steps import Step
from aside_bench.records import runfile
from aside_bench.records.documents import DriverRun, RunParams, StepProbe
from aside_bench.records.results import StepResult
from aside_bench.records.runfile import RunRecord
from aside_bench.records.steprecord import StepRecord
from aside_bench.stack import prepare
from aside_bench.stack.config import Settings
from aside_bench.stack.distance import Distance
from aside_bench.stack.influxpoints import BENCH_SPOOL, SPOOL_DIR, InfluxPoints, write_or_spool
from aside_bench.stack.machine import describe
from aside_bench.stack.prepare import StackError
from aside_bench.stack.seeddata import SeedData, remove_bench_users
from aside_bench.stack.services import ServiceControl
from aside_bench.stack.sources import Influx, Prometheus, SourceError
from aside_bench.sweep.collect import GATEWAY_JOB, collect, step_line
from aside_bench.sweep.distances import DistanceControl
from aside_bench.sweep.invalidation_lag_floor import FloorProbe
from aside_bench.sweep.progress import clock, not_written, quick_line
from aside_bench.sweep.stepprobe import GatewayProbe
from aside_bench.sweep.warmtiers import wait_l1_empty, warm_l1

EXIT_INTERRUPTED = 130
SCRAPE_WAIT_S = 15.0  # Prometheus scrapes every 2 s; a scrape may be late under load
KEY_TRACE_FILE = "keys.trace.gz"  # a step's recorded keys, in its own folder of the run's


# A step's driver run from its step and pool (step_run, or the cost's variants).
RunBuilder = Callable[[Step, int], LoadRun]


class StepFailed(RuntimeError):
    """The load driver exited with an error that is not ours to retry."""


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
    distances: dict[str, Distance] = field(default_factory=dict)  # by plan.arm_distance name


class Runner:
    def __init__(self, settings: Settings, options: Options, seed: SeedData, run: RunRecord):
        self.settings = settings
        self.options = options
        self.seed = seed
        self.run = run
        self.influx = Influx(settings.influx_base, settings.influx_db)
        self.prom = Prometheus(settings.prometheus_url)
        self.current: load.DriverProcess | None = None
        self.interrupted = False
        self.started = time.monotonic()
        self.step_seconds: list[float] = []
        self.summaries = 0  # summary files written so far (each its own name)
        self.gateway_settings: dict[str, str] = {}  # what the gateway was restarted with
        self.distances = DistanceControl(settings, options.distances)
        # Redis's own bound, read before a memory arm first changes it, given back at the end.
        self.stack_bound: prepare.MemoryBound | None = None
        # The iterations a warm step passes over: its cold step's (the driver's SKIP).
        self.skip = 0
        self.probe = GatewayProbe(settings)
        # What each gateway worker holds before it answers 503, read again after a restart.
        self.connections_per_worker: int | None = None
        self.connection_bound_read = False
        if self.probe.problem:
            run.probe_warning = self.probe.problem
            print(f"warning: {self.probe.problem}", flush=True)

    @property
    def max_pool(self) -> int:
        """--max-pool, below what one gateway worker holds (the /metrics readers need one)."""
        if not self.connection_bound_read:
            self.connections_per_worker = self.probe.connections_per_worker()
            self.connection_bound_read = True
        return plan.pool_cap(self.options.max_pool, self.connections_per_worker)

    def read_emails(self) -> list[str]:
        return self.seed.read_emails(self.options.shape.cold_sample)

    def _refill(self, step: Step) -> bool:
        """Whether a warm step refills: the ceiling's only when a key would lapse (decision 020)."""
        margin_s = step.duration_s + TTL_MARGIN_S
        return step.scenario != "ceiling" or prepare.expires_within(self.settings, margin_s)

    @staticmethod
    def _warn(record: StepRecord, error: StackError) -> None:
        record.warning = str(error)
        print(f"  warning: {error}; running the step anyway", flush=True)

    def _gateway_for(self, arm: str, record: StepRecord) -> None:
        """Restart the gateway when `arm` needs other settings than the last step's."""
        wanted = {**self.distances.gateway_env(arm), **plan.gateway_env(arm)}
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
        memory = plan.arm_memory(step.arm)
        wanted = None if memory is None else prepare.MemoryBound(memory, self.options.cache_policy)
        if step.phase != "cold" or (wanted is None and self.stack_bound is None):
            if wanted is not None:
                record.cache_memory = asdict(wanted)
            return
        if self.stack_bound is None:
            self.stack_bound = prepare.read_bound(self.settings)
        bound = wanted or self.stack_bound
        prepare.apply_bound(self.settings, bound)
        record.cache_memory = asdict(bound)

    def _continues_cold(self, step: Step) -> bool:
        """A warm step right after its own cold step (not the hot set) goes on with its stream."""
        shape = self.options.shape
        hotset = shape.dist == "hotset" and shape.trace is None
        if hotset or step.phase != "warm" or len(self.run.steps) < 2:
            return False
        before = self.run.steps[-2]
        same = (before.arm, before.rate, before.repeat) == (step.arm, step.rate, step.repeat)
        return before.completed and before.phase == "cold" and same

    def _prepare(self, step: Step, record: StepRecord) -> None:
        self.distances.before(step, record)
        self._gateway_for(step.arm, record)
        self._bound_for(step, record)
        self.skip = 0
        try:
            waited = prepare.wait_until_quiet(self.settings, self.options.recover_timeout_s)
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
        elif step.phase == "warm" and (own_prep := own.hooks.prepare if own else None):
            warmed = record.warm = own_prep(self.settings, self.options.data_dir, step)
            record.prep = warmed.pop("prep")
        elif step.phase == "cold":
            prepare.flush_cache(self.settings)
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
            warmed = prepare.warm_cache(
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

    def _on_sigint(self, _signum: int, _frame: FrameType | None) -> None:
        self.interrupted = True
        if self.current is not None and self.current.process is not None:
            print("\ninterrupted: stopping the load driver (it writes what it measured)...")
            self.current.interrupt()
        else:
            raise KeyboardInterrupt

    def install_signal_handler(self) -> None:
        signal.signal(signal.SIGINT, self._on_sigint)

    def run_load(self, run: LoadRun, record: StepRecord) -> int:
        """The driver for one step or probe; its instants, exit, CPU and summary into `record`."""
        self.summaries += 1
        summary_path = self.options.out_dir / f"summary-{self.summaries:03d}.json"
        run = replace(run, summary_path=summary_path)
        try:
            return self._run_driver(run, record)
        finally:
            try:
                summary = Summary.read(summary_path)
            except SummaryError as error:
                record.summary_error = str(error)
                summary = Summary({})
            record.summary = summary.step_figures(run.scenario)
            if summary.cpu_s is not None and record.driver is not None:
                # The driver's own account (getrusage): /proc's ticks round a short step's down.
                record.driver["cpu_s"] = summary.cpu_s
            self._key_trace(run, summary, record)
            if "influx" in summary.data:
                record.influx = InfluxPoints.of(summary.data["influx"]).as_record()
            summary_path.unlink(missing_ok=True)

    def _key_trace(self, run: LoadRun, summary: Summary, record: StepRecord) -> None:
        """The step's recorded keys (file, lines written and lost) into its record."""
        found = summary.key_trace
        if run.key_trace_path is None or found is None or not run.key_trace_path.exists():
            return
        record.key_trace = run.key_trace_path.relative_to(self.options.out_dir).as_posix()
        record.key_trace_lines, record.key_trace_lost = found.lines, found.lost

    def _run_driver(self, run: LoadRun, record: StepRecord) -> int:
        log_path = self.options.out_dir / "load.log"
        self.current = load.new_driver(self.settings, run, log_path)
        record.start = time.time()
        try:
            code = self.current.run_measured(load.deadline_s(run))
        finally:
            record.end = time.time()
            record.driver_exit = self.current.returncode
            record.driver = DriverRun(
                cpu_s=self.current.cpu_seconds, cpu_limit_cores=self.options.driver_cpu_limit
            )
            self.current = None
        return code

    def _step_dir(self, step: Step) -> Path:
        """The step's own folder in the run's (the step's number, arm, phase, rate)."""
        index = len(self.run.steps)
        folder = self.options.out_dir / f"step-{index:03d}-{step.arm}-{step.phase}-{step.rate}"
        if step.repeat > 1:
            folder = folder.with_name(f"{folder.name}-r{step.repeat}")
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _step_run(self, step: Step, pool: int) -> LoadRun:
        options, index = self.options, len(self.run.steps)
        samples = options.out_dir / f"samples-{index:03d}-{step.arm}-{step.rate}.jsonl"
        keyed = load.keeps_key_trace(step, options.shape)
        run = load.step_run(
            step,
            options.run_id,
            options.shape,
            pool,
            options.data_dir,
            self.max_pool,
            live=options.live,
            samples_path=samples if options.samples_file else None,
            key_trace_path=self._step_dir(step) / KEY_TRACE_FILE if keyed else None,
        )
        if self.skip:
            run = replace(run, extra={**run.extra, "SKIP": str(self.skip)})
        return run

    def healthz_run(self, step: Step, pool: int, url: str, **more: Any) -> LoadRun:
        """The driver's healthz scenario against `url`, tagged as `step`."""
        return LoadRun.of(
            step,
            scenario="healthz",
            run_id=self.options.run_id,
            pool=pool,
            timeout_s=self.options.shape.timeout_s,
            data_dir=self.options.data_dir,
            base_url=url,
            **more,
        )

    def _floor(self, step: Step) -> FloorProbe | None:
        """A mixed step's writes publish invalidations: time them beside the workers."""
        if step.scenario != "mixed":
            return None
        floor = FloorProbe(self.options.out_dir / "lag-floor.json")
        floor.start()
        return floor

    def run_step(self, step: Step, build: RunBuilder | None = None) -> StepResult | None:
        record = StepRecord.of(step)
        self.run.steps.append(record)
        self._prepare(step, record)
        # After the preparation: it may have restarted the gateway.
        pool = record.pool = plan.pool_for(step.rate, self.max_pool)
        # The cache counters at the start must include everything the preparation did.
        self.prom.wait_for_scrape_after(GATEWAY_JOB, time.time(), SCRAPE_WAIT_S)
        record.prom_start = time.time()
        run = (build or self._step_run)(step, pool)
        record.driver_scenario = run.scenario
        record.samples = None if run.samples_path is None else run.samples_path.name
        floor = self._floor(step)
        probe = record.probe = StepProbe(start=self.probe.reading())
        redis_start = self._redis_reading(step)
        counter = None if redis_start is None else prepare.KeyCounter(self.settings).start()
        try:
            with self.distances.measured(step, record):
                code = self.run_load(run, record)
        finally:
            # Right after the driver's last request: the memory the step left and its CPU.
            probe["end"] = self.probe.reading(memory=True)
            redis_end = self._redis_reading(step)
            if redis_start is not None and redis_end is not None:
                record.redis = {"start": redis_start, "end": redis_end}
            if counter is not None and record.redis is not None:
                record.redis["keys_each_second"] = counter.stop()
            if floor is not None:
                probe["floor"] = floor.stop()
                if floor.problem:
                    print(f"  invalidation lag floor: {floor.problem}")
        if self.interrupted:
            record.interrupted = True
            return None
        if code != 0:
            raise StepFailed(
                f"the load driver exited with {code} on {step.label} @ {step.rate}/s; "
                f"see {self.options.out_dir / 'load.log'}"
            )
        record.prom_end = self.prom.wait_for_scrape_after(
            GATEWAY_JOB, record.end or time.time(), SCRAPE_WAIT_S
        )
        record.completed = True
        results = collect(self.prom, [record])
        if not results:
            return None
        line = step_line(self.options.run_id, results[0], record)
        kept = write_or_spool(self.influx, [line], self.options.out_dir / SPOOL_DIR / BENCH_SPOOL)
        record.influx = (InfluxPoints.of(record.influx) + kept).as_record()
        return results[0]

    def _redis_reading(self, step: Step) -> dict[str, int] | None:
        """The Redis tier's figures for a step read through it; None when unread."""
        if cache_param(step.arm) not in REDIS_READS:
            return None
        try:
            return asdict(prepare.redis_reading(self.settings))
        except StackError as error:
            print(f"  warning: {error}", flush=True)
            return None

    def step_with_progress(
        self, step: Step, head: str, remaining: int | None, build: RunBuilder | None = None
    ) -> StepResult | None:
        """Run a step between two progress lines: the announcement, then its quick result."""
        print(f"{head} ...", flush=True)
        began = time.monotonic()
        result = self.run_step(step, build)
        runfile.save_run(self.run, self.options.out_dir)
        if self.interrupted:
            return None
        self.step_seconds.append(time.monotonic() - began)
        prep = self.run.steps[-1].prep
        line = quick_line(result) if result else "no samples"
        note = InfluxPoints.of(self.run.steps[-1].influx).note()
        line += f"  {note} ({SPOOL_DIR}/)" if note else ""
        tail = f"elapsed {clock(time.monotonic() - self.started)}"
        if remaining is not None:
            mean = sum(self.step_seconds) / len(self.step_seconds)
            tail += f", ETA {clock(mean * remaining)}"
        print(f"{head}  {line}" + (f"  ({prep})" if prep else "") + f"  | {tail}", flush=True)
        return result

    def run_steps(self, steps: list[Step]) -> None:
        total = len(steps)
        width = len(str(total))
        repeats = max(step.repeat for step in steps)
        for index, step in enumerate(steps, start=1):
            head = f"[{index:>{width}}/{total}] {step.scenario} {step.label:<14} @ {step.rate:>5}/s"
            if repeats > 1:
                head += f" run {step.repeat}/{repeats}"
            self.step_with_progress(step, head, total - index)
            if self.interrupted:
                return

    def cleanup(self) -> None:
        """Give back the gateway's settings, Redis's bound and the hops; remove mixed users."""
        self.distances.restore()
        if self.stack_bound is not None:
            try:
                prepare.apply_bound(self.settings, self.stack_bound)
                self.stack_bound = None
            except StackError as error:
                print(f"warning: could not give Redis its maxmemory back: {error}", file=sys.stderr)
        if self.gateway_settings:
            try:
                ServiceControl(self.settings).restart("gateway", {})
                self.gateway_settings = {}
            except StackError as error:
                print(f"warning: could not restart the gateway: {error}", file=sys.stderr)
        if not any(s.scenario == "mixed" for s in self.run.steps):
            return
        try:
            with prepare.connect(self.settings) as conn:
                if remove_bench_users(conn):
                    prepare.flush_cache(self.settings)
        except StackError as error:
            print(f"warning: could not remove the mixed step's users: {error}", file=sys.stderr)

    def results(self) -> list[StepResult]:
        return collect(self.prom, self.run.steps)


def new_run(
    kind: str, run_id: str, params: RunParams, seed: SeedData, settings: Settings
) -> RunRecord:
    created = datetime.now(UTC).isoformat(timespec="seconds")
    urls = {
        "gateway_url": settings.gateway_url,
        "influxdb_url": settings.influx_url,
        "prometheus_url": settings.prometheus_url,
    }
    return RunRecord(run_id, kind, created, params, describe(), seed.meta, urls)


def finish(
    runner: Runner, writer: Callable[[RunRecord, list[StepResult], Path], Any]
) -> list[StepResult]:
    runner.run.interrupted = runner.interrupted
    runner.run.finished = datetime.now(UTC).isoformat(timespec="seconds")
    runner.cleanup()
    runfile.save_run(runner.run, runner.options.out_dir)
    try:
        results = runner.results()
    except SourceError as error:
        print(f"aside-bench: could not read the results back: {error}", file=sys.stderr)
        not_written(runner.run, runner.options.out_dir)
        return []
    tables = writer(runner.run, results, runner.options.out_dir)
    print()
    for table in tables:
        print(table.markdown())
    print(f"report: {runner.options.out_dir}/")
    not_written(runner.run, runner.options.out_dir)
    return results
