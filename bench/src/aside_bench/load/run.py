"""The one layer that starts the load driver (bench/driver, `aside-load`) and
reads what it wrote: a run's variables, the process (its log, Ctrl-C, its CPU
time, the wait for its first request); its JSON summary is read by summary.py.

Every kind of run goes through here: the sweep's and the ceiling's steps, the
calibration's probes, the fault suite, the soak, create-rate and hardening."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from aside_bench.load.samples import SamplesError, sample_lines
from aside_bench.plan import scenarios
from aside_bench.plan.shape import LoadShape
from aside_bench.plan.steps import BARE_ARM, Step
from aside_bench.stack import procs
from aside_bench.stack.config import Settings
from aside_bench.stack.prepare import StackError

# How often the wait for the driver's end reads its CPU time.
POLL_S = 0.1
# A step's driver may start up and write its summary for this long beyond its
# load and the request timeout before it counts as hung.
START_AND_FLUSH_S = 30
# How often the wait for the first request reads the samples file.
SAMPLES_POLL_S = 0.05

T = TypeVar("T")


@dataclass(frozen=True)
class LoadRun:
    """One driver process: its scenario (what an iteration does), the tags its
    points carry, its rate, pool and duration, and where its outputs go."""

    scenario: str  # the driver's: read, bare, healthz, compute, interference, mixed, tracks, chaos
    run_id: str
    arm: str
    phase: str
    rate: int
    duration_s: int
    pool: int
    timeout_s: int
    data_dir: Path
    repeat: int = 1
    extra: dict[str, str] = field(default_factory=dict)
    base_url: str | None = None  # the gateway unless given
    summary_path: Path | None = None
    samples_path: Path | None = None
    key_trace_path: Path | None = None  # every read's key, in order (gzip when .gz)
    influx: bool = True  # per-second points into InfluxDB
    live: bool = False  # a line per second on the terminal

    def variables(self, settings: Settings) -> dict[str, str]:
        found = {
            "BASE_URL": self.base_url or settings.gateway_url,
            "SCENARIO": self.scenario,
            "RUN_ID": self.run_id,
            "ARM": self.arm,
            "PHASE": self.phase,
            "REPEAT": str(self.repeat),
            "RATE": str(self.rate),
            "DURATION": f"{self.duration_s}s",
            "POOL": str(self.pool),
            "TIMEOUT_S": str(self.timeout_s),
            "DATA_DIR": str(self.data_dir.resolve()),
            "LIVE": "1" if self.live else "0",
            **self.extra,
        }
        if self.influx:
            found["INFLUX_URL"] = settings.influx_url
        if self.summary_path is not None:
            found["SUMMARY_PATH"] = str(self.summary_path)
        if self.samples_path is not None:
            found["SAMPLES_PATH"] = str(self.samples_path)
        if self.key_trace_path is not None:
            found["KEY_TRACE_PATH"] = str(self.key_trace_path)
        return found


def deadline_s(run: LoadRun) -> float:
    """How long a driver may run: its load, the last requests' timeout and
    START_AND_FLUSH_S."""
    return run.duration_s + run.timeout_s + START_AND_FLUSH_S


def driver_env(settings: Settings, run: LoadRun) -> dict[str, str]:
    """The driver's whole environment: this process's, without any variable
    of the driver's own a shell may carry, then the run's."""
    mine = run.variables(settings)
    inherited = {k: v for k, v in os.environ.items() if k not in DRIVER_VARIABLES}
    return {**inherited, **mine}


# Every variable the driver reads (bench/driver/README.md): none may leak in
# from the shell that started the bench.
DRIVER_VARIABLES = frozenset(
    {
        "BASE_URL", "SCENARIO", "RUN_ID", "ARM", "PHASE", "REPEAT", "RATE", "DURATION",
        "POOL", "CONNS", "START_AT", "LATE_MS", "TIMEOUT_S", "SEED", "SKIP", "DATA_DIR",
        "SUMMARY_PATH", "INFLUX_SPOOL",
        "SAMPLES_PATH", "INFLUX_URL", "LIVE", "CACHE", "HOT_SHARE", "COLD_SAMPLE", "DIST", "ALPHA",
        "KEYS", "COMPUTE_BODY",
        "COMPUTE_EXPECT", "COMPUTE_HASH_PATTERN", "READ_RATE", "READ_CACHE", "READ_POOL",
        "WRITE_SHARE", "STALE_PER_MIN", "STALE_READS_AFTER", "ARM_QUERY", "SIZE_BOUNDS",
        "USER_PREFIX", "USER_SHARE", "ID_SAMPLE", "NO_REUSE", "ENGINE", "SHARDS", "SHARD",
        "TRACE", "TRACE_SPEED", "KEY_TRACE_PATH",
    }
)  # fmt: skip


# ---- the sweep's and the ceiling's steps ----------------------------------------------
def driver_scenario(step: Step) -> str:
    """What the driver sends for a step: the ceiling reads as `read` (its
    reference, BARE_ARM, as `bare`), the calibration and /healthz arm as `healthz`."""
    if step.scenario == "ceiling":
        return {"healthz": "healthz", BARE_ARM: "bare"}.get(step.arm, "read")
    return step.scenario


def keeps_key_trace(step: Step, shape: LoadShape) -> bool:
    """A step records its keys (KEY_TRACE_PATH) when it reads by key from the
    key space or from a trace; the hot set's steps keep none."""
    name = driver_scenario(step)
    found = scenarios.scenario_of(name)
    keyed = name == "bare" or (found is not None and (found.dist or found.trace))
    return keyed and (shape.dist != "hotset" or shape.trace is not None)


def _scenario_variables(step: Step, shape: LoadShape, max_pool: int) -> dict[str, str]:
    """The variables only the step's scenario reads (the ceiling's reads and
    their reference, `bare`: the read's)."""
    name = driver_scenario(step)
    found = scenarios.scenario_of("read" if name == "bare" else name)
    return {} if found is None else found.variables(step, shape, max_pool)


def step_run(
    step: Step,
    run_id: str,
    shape: LoadShape,
    pool: int,
    data_dir: Path,
    max_pool: int = 1000,
    live: bool = False,
    samples_path: Path | None = None,
    key_trace_path: Path | None = None,
) -> LoadRun:
    """The driver for one step; `pool` is the step's own, `max_pool` caps any
    other scenario's (the interference reads')."""
    return LoadRun(
        scenario=driver_scenario(step),
        run_id=run_id,
        arm=step.arm,
        phase=step.phase,
        rate=step.rate,
        duration_s=step.duration_s,
        pool=pool,
        timeout_s=shape.timeout_s,
        data_dir=data_dir,
        repeat=step.repeat,
        extra=_scenario_variables(step, shape, max_pool),
        samples_path=samples_path,
        key_trace_path=key_trace_path,
        live=live,
    )


# ---- the process ----------------------------------------------------------------------
class DriverProcess:
    """The driver in its own process group, so a terminal's Ctrl-C reaches it
    only through us: one SIGINT, which it answers by ending its schedule and
    writing its summary. Its output goes to `log_path` after a line with the
    command; with `live` its stderr (the line a second) stays on the terminal."""

    def __init__(
        self, command: list[str], log_path: Path, env: dict[str, str], live: bool = False
    ) -> None:
        self.command = command
        self.log_path = log_path
        self.env = env
        self.live = live
        self.process: subprocess.Popen[bytes] | None = None
        # utime + stime of the driver at its exit (read from /proc before it is reaped)
        self.cpu_ticks: int | None = None

    def start(self) -> DriverProcess:
        with self.log_path.open("ab") as log:
            shown = {k: v for k, v in self.env.items() if k in DRIVER_VARIABLES}
            line = " ".join(f"{k}={v}" for k, v in sorted(shown.items()))
            log.write(f"$ {line} {' '.join(self.command)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=None if self.live else subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self.env,
            )
        return self

    def run_measured(self, deadline_s: float) -> int:
        """Start the driver, wait for it to end and keep its CPU time
        (`cpu_seconds`). Past `deadline_s` it is stopped and StackError raised."""
        self.start()
        assert self.process is not None
        pid, began = self.process.pid, time.monotonic()
        while not self._exited(pid):
            if time.monotonic() - began > deadline_s:
                self.stop()
                raise StackError(
                    f"the load driver did not finish within {deadline_s:.0f} s; see {self.log_path}"
                )
            time.sleep(POLL_S)  # the polling pace
        return self.process.wait()

    def _exited(self, pid: int) -> bool:
        """True once the driver has exited; its CPU time is read first, and once
        more while it is a zombie (exited, not yet reaped), when it is final."""
        ticks = procs.cpu_ticks(pid)
        if ticks is not None:
            self.cpu_ticks = ticks
        try:
            exited = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # already reaped (Ctrl-C's poll): keep the last reading
            return True
        if exited is None:
            return False
        ticks = procs.cpu_ticks(pid)
        if ticks is not None:
            self.cpu_ticks = ticks
        return True

    @property
    def cpu_seconds(self) -> float | None:
        return None if self.cpu_ticks is None else self.cpu_ticks / procs.clock_ticks_per_s()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.returncode

    def wait(self, timeout_s: float | None = None) -> int:
        """The driver's exit code; past `timeout_s` it is killed and StackError raised."""
        assert self.process is not None, "the load driver was not started"
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.stop()
            raise StackError(
                f"the load driver did not finish within {timeout_s:.0f} s; see {self.log_path}"
            ) from None

    def interrupt(self) -> None:
        if self.running:
            assert self.process is not None
            self.process.send_signal(signal.SIGINT)

    def stop(self) -> None:
        """Kill the driver (its summary is not wanted any more)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def first_sample(
        self, probe: Callable[[], T | None], where: str, deadline_s: float, interval_s: float
    ) -> T:
        """What `probe` finds once the driver's first request has reached its
        output (`where`, for the error), polled every `interval_s`; the driver
        exiting first is StackError, and so is nothing within `deadline_s`."""
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            found = probe()
            if found is not None:
                return found
            if not self.running:
                raise StackError(
                    f"the load driver exited with {self.returncode}; see {self.log_path}"
                )
            time.sleep(interval_s)  # the polling pace
        self.stop()
        raise StackError(
            f"the load driver wrote no request to {where} within {deadline_s:.0f} s; "
            f"see {self.log_path}"
        )

    def first_request(self, samples: Path, deadline_s: float) -> dict[str, Any]:
        """The first request line of the driver's samples file (not a drop)."""
        offset, read = 0, 0

        def probe() -> dict[str, Any] | None:
            nonlocal offset, read
            if not samples.exists():
                return None
            with samples.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            # Whole lines only: the driver may be half-way through the last one.
            complete = chunk[: chunk.rfind(b"\n") + 1]
            offset += len(complete)
            lines = complete.decode().splitlines()
            try:
                for _, one in sample_lines(lines, str(samples), first=read + 1):
                    if not one.get("dropped"):
                        return one
            except SamplesError as error:
                raise StackError(str(error)) from None
            read += len(lines)
            return None

        return self.first_sample(probe, samples.name, deadline_s, SAMPLES_POLL_S)


def new_driver(settings: Settings, run: LoadRun, log_path: Path) -> DriverProcess:
    """The driver for `run`, not started yet; its output goes to `log_path`."""
    return DriverProcess([str(settings.driver_bin)], log_path, driver_env(settings, run), run.live)
